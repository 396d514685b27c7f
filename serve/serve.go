// Package serve is stamp serve: an HTTP service that builds the recipes of
// one directory on request, through the conductor as the CLI does, and
// serves their outputs from the build cache.
//
// A build is named by its ID, the key of what decides its outputs (stamp
// itself, the recipe as decoded, its parameters, the host files it reads and
// its stamp.lock), so the same request always gives the same ID. A finished
// build is a record of kind "serve" in the cache naming every file it made
// as a blob; the server's own state beside the cache (the serve/ directory)
// says what was asked, what happened and the build's log. It keeps nothing
// else, so replicas sharing a registry cache build a request once and serve
// the same bytes.
package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp"
	"github.com/stamp-dev/stamp/layers/cache"
)

// Options configure a Server. RecipeDir and CacheDir are required.
type Options struct {
	// RecipeDir holds the recipes the server builds; a recipe outside it is
	// never built, and a path a parameter makes never leads out of it.
	RecipeDir string
	// CacheDir is the build cache (empty: the default one). Outputs are
	// served from it, and the
	// server's state lives in its serve/ directory, on the same file
	// system, so outputs enter the cache by a link.
	CacheDir string
	// CacheFrom and CacheTo share the build cache through a registry
	// repository, as stamp build's flags do.
	CacheFrom, CacheTo string
	// CacheSign is the PEM file of the ed25519 key that signs what CacheTo
	// receives; CacheTrust the public keys a record pulled from CacheFrom
	// must be signed by, as stamp build's --cache-sign and --cache-trust.
	CacheSign  string
	CacheTrust []string
	// InsecureRegistries are reached over plain HTTP.
	InsecureRegistries []string
	// Tokens are the bearer tokens that may build; nil takes no builds.
	Tokens *Tokens
	// AuthReads makes reading (recipes, builds, images) need a token too.
	AuthReads bool
	// MaxBuilds builds run at once; Queue more wait; MaxPerToken is what
	// one token may have queued or running. Zero means the defaults.
	MaxBuilds, Queue, MaxPerToken int
	// Log receives the server's structured log, each line with its request
	// or build ID.
	Log logrus.FieldLogger
	// ReadHeaderTimeout bounds how long a client may take to send its
	// request's headers; zero means DefaultReadHeaderTimeout.
	ReadHeaderTimeout time.Duration
}

// Defaults of Options.
const (
	DefaultQueue             = 32
	DefaultMaxPerToken       = 16
	DefaultReadHeaderTimeout = 5 * time.Second
)

// Limits on what a client may send or hold.
const (
	maxBody       = 64 << 10 // a POST body: a recipe name and its parameters
	maxParams     = 32
	maxParamName  = 64
	maxParamValue = 1024
	maxRecipeName = 256
	maxRecipeFile = 1 << 20
	maxLogBytes   = 8 << 20 // a build's log; what comes after is dropped, and said so
	// readTimeout bounds reading a whole request; bodies are small.
	readTimeout = 30 * time.Second
	// writeTimeout bounds writing an API answer; a download or an event
	// stream sets its own deadline.
	writeTimeout = 60 * time.Second
	idleTimeout  = 120 * time.Second
	// A download may take a minute plus its size at this many bytes a
	// second: a client slower than that loses its connection, and only it.
	minDownloadRate = 1 << 20
	maxHeaderBytes  = 16 << 10
	// maxAttempts is how many times a build interrupted by a restart is
	// started before it is reported failed: a build that takes the server
	// down with it must not do so at every start.
	maxAttempts = 2
	// finishedInMemory is how many finished builds are kept in memory; the
	// rest are read from the state directory when asked for.
	finishedInMemory = 4096
)

// Server is stamp serve. Make one with New, then Serve.
type Server struct {
	o       Options
	dir     string // RecipeDir, absolute, symlinks resolved
	state   string // the state directory, <cache>/serve
	work    string // builds' work and output directories
	reader  *cache.Cache
	self    string // the running stamp's digest
	log     logrus.FieldLogger
	metrics *metrics
	lock    *os.File // held alone for the server's life: one server per state directory

	mu       sync.Mutex
	builds   map[string]*build // every build in memory, by ID
	finished *lru              // the finished ones among them, least recently used first
	perToken map[string]int    // queued and running builds by token name
	queue    chan *build
	// durations is a moving average of build times, for Retry-After.
	durations time.Duration

	ready    atomic.Bool
	requests atomic.Uint64
}

// New checks the options, takes the state directory for this server alone,
// and reads back the builds a previous run left: a finished one is served
// again, an interrupted one is queued again (or reported failed after
// maxAttempts starts).
func New(o Options) (*Server, error) {
	if o.Log == nil {
		l := logrus.New()
		l.Out = discard{}
		o.Log = l
	}
	if o.MaxBuilds <= 0 {
		o.MaxBuilds = max(1, runtime.NumCPU()/2)
	}
	if o.Queue <= 0 {
		o.Queue = DefaultQueue
	}
	if o.MaxPerToken <= 0 {
		o.MaxPerToken = DefaultMaxPerToken
	}
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.RecipeDir == "" {
		return nil, errors.New("serve: the recipe directory is required")
	}
	// A key the shared cache cannot load is refused now, not at the first
	// build a client asks for.
	if err := (stamp.Options{CacheFrom: o.CacheFrom, CacheTo: o.CacheTo, CacheSign: o.CacheSign, CacheTrust: o.CacheTrust}).CheckSharedCache(); err != nil {
		return nil, fmt.Errorf("serve: %w", err)
	}
	if o.CacheDir == "" {
		d, err := cache.DefaultDir(os.Getenv)
		if err != nil {
			return nil, fmt.Errorf("serve: %w", err)
		}
		o.CacheDir = d
	}
	dir, err := realDir(o.RecipeDir)
	if err != nil {
		return nil, fmt.Errorf("serve: --recipes %s: %w", o.RecipeDir, err)
	}
	if err := os.MkdirAll(o.CacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("serve: --cache-dir %s: %w", o.CacheDir, err)
	}
	cacheDir, err := realDir(o.CacheDir)
	if err != nil {
		return nil, fmt.Errorf("serve: --cache-dir %s: %w", o.CacheDir, err)
	}
	if within(dir, cacheDir) || within(cacheDir, dir) {
		// The build ID hashes what the recipes read; a cache among them
		// would change it with every build.
		return nil, fmt.Errorf("serve: the cache %s and the recipes %s must not hold each other", cacheDir, dir)
	}
	o.CacheDir = cacheDir
	s := &Server{o: o, dir: dir, state: filepath.Join(cacheDir, "serve"), log: o.Log,
		builds: map[string]*build{}, finished: newLRU(), perToken: map[string]int{}}
	s.work = filepath.Join(s.state, "work")
	s.queue = make(chan *build, o.Queue)
	for _, d := range []string{s.state, filepath.Join(s.state, "builds"), filepath.Join(s.state, "inflight")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("serve: state %s: %w", d, err)
		}
	}
	if err := s.takeState(); err != nil {
		return nil, err
	}
	// A build killed with the server leaves its work behind; none of it is
	// anything but scratch. A hook of that build may outlive the server
	// and still write there, so it is moved aside and removed as it can be.
	s.clearWork()
	if err := os.MkdirAll(s.work, 0o700); err != nil {
		s.lock.Close()
		return nil, fmt.Errorf("serve: %s: %w", s.work, err)
	}
	// The reader never holds the cache's lock, so a prune is kept waiting
	// only by builds (and the records they file), never by downloads.
	if s.reader, err = cache.Open(cacheDir, cache.Options{Unlocked: true, Log: o.Log}); err != nil {
		s.lock.Close()
		return nil, fmt.Errorf("serve: %w", err)
	}
	exe, err := os.Executable()
	if err == nil {
		s.self, err = s.reader.HashFile(exe)
	}
	if err != nil {
		s.lock.Close()
		return nil, fmt.Errorf("serve: the running stamp's digest: %w", err)
	}
	s.metrics = newMetrics(s)
	return s, nil
}

// takeState locks the state directory for this process alone: two servers
// on one cache directory would each take the other's builds for
// interrupted ones.
func (s *Server) takeState() error {
	f, err := os.OpenFile(filepath.Join(s.state, "lock"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		return fmt.Errorf("serve: another stamp serve uses %s (%v); give each server a cache directory of its own and share through --cache-from/--cache-to", s.state, err)
	}
	s.lock = f
	return nil
}

// clearWork moves the work directory a previous run left aside, and
// removes it and any earlier one left so, in the background.
func (s *Server) clearWork() {
	if _, err := os.Lstat(s.work); err == nil {
		aside := fmt.Sprintf("%s.old-%d", s.work, time.Now().UnixNano())
		if err := os.Rename(s.work, aside); err != nil {
			s.log.WithError(err).Warn("cannot move the last run's work directory aside")
		}
	}
	old, _ := filepath.Glob(s.work + ".old-*")
	go func() {
		for _, d := range old {
			if err := os.RemoveAll(d); err != nil {
				s.log.WithError(err).WithField("dir", d).Warn("cannot remove the last run's work yet; the next start tries again")
			}
		}
	}()
}

// ListenAndServe listens on addr and serves until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve runs the builds and answers on ln until ctx ends; then it stops
// taking requests, lets those in progress finish for a while, and stops the
// builds, which the next start runs again.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	defer s.lock.Close()
	buildCtx, stopBuilds := context.WithCancel(context.WithoutCancel(ctx))
	var workers sync.WaitGroup
	for range s.o.MaxBuilds {
		workers.Go(func() {
			for {
				select {
				case <-buildCtx.Done():
					return
				case b := <-s.queue:
					s.run(buildCtx, b)
				}
			}
		})
	}
	if err := s.resume(buildCtx); err != nil {
		stopBuilds()
		workers.Wait()
		ln.Close()
		return err
	}
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: s.o.ReadHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	// What net/http has to say (a failed accept, a handler's misstep) goes
	// to the server's log too.
	if lw, ok := s.log.(interface {
		WriterLevel(logrus.Level) *io.PipeWriter
	}); ok {
		w := lw.WriterLevel(logrus.WarnLevel)
		defer w.Close()
		hs.ErrorLog = log.New(w, "", 0)
	}
	s.ready.Store(true)
	s.log.WithField("addr", ln.Addr().String()).WithField("recipes", s.dir).WithField("cache", s.o.CacheDir).
		WithField("max_builds", s.o.MaxBuilds).WithField("queue", s.o.Queue).Info("listening")
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		s.ready.Store(false)
		s.log.Info("shutting down: no new requests; the builds running now run again at the next start")
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if hs.Shutdown(shutdown) != nil {
			// Downloads still going after the grace: the clients resume
			// them (Range) from another replica or the next start.
			hs.Close()
		}
		cancel()
		err = <-done
	}
	stopBuilds()
	workers.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// realDir is dir made absolute with its symlinks resolved, and checked to
// be a directory.
func realDir(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%s is not a directory", real)
	}
	return real, nil
}

// within tells whether p is dir or below it; both are clean and absolute.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && filepath.IsLocal(rel) || rel == "."
}
