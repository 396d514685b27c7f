package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp"
	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// Builds run in this process: the conductor is a library, keeps no state
// outside the Options it is handed, and takes the cache's shared lock for
// itself while it runs. A child process would buy isolation from a crash,
// which the state directory already covers (the build runs again, or is
// failed after maxAttempts), at the price of a fork and exec and a log to
// parse per build. Memory a build took is handed back to the system when
// it ends.

// submit queues the build of l for the token, or joins the one running for
// the same ID, or answers from the cache. The status code says which: 200
// for a build that is done and still in the cache, 202 for one queued or
// running.
func (s *Server) submit(l *loaded, token string, asked map[string]string) (*build, int, *httpError) {
	old := s.find(l.id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.builds[l.id]; b != nil {
		old = b
	}
	if old != nil {
		switch old.state() {
		case stateQueued, stateRunning:
			s.metrics.requests.WithLabelValues("joined").Inc()
			return old, http.StatusAccepted, nil
		case stateDone:
			if s.stillServed(old) {
				s.metrics.requests.WithLabelValues("cached").Inc()
				s.metrics.cacheHits.Inc()
				return old, http.StatusOK, nil
			}
		}
	}
	if s.perToken[token] >= s.o.MaxPerToken {
		s.metrics.requests.WithLabelValues("rejected").Inc()
		return nil, 0, s.busy(fmt.Sprintf("this token has %d builds queued or running; at most %d", s.perToken[token], s.o.MaxPerToken))
	}
	b := newBuild(Status{ID: l.id, Recipe: l.rel, Params: l.rec.ParamValues(), State: stateQueued, Created: time.Now().UTC()}, token)
	b.req, b.asked = l, cloneMap(asked)
	select {
	case s.queue <- b:
	default:
		s.metrics.requests.WithLabelValues("rejected").Inc()
		return nil, 0, s.busy(fmt.Sprintf("%d builds are running and %d waiting, the most this server takes", s.o.MaxBuilds, s.o.Queue))
	}
	if old != nil {
		s.finished.remove(old)
	}
	s.builds[l.id] = b
	s.perToken[token]++
	s.metrics.requests.WithLabelValues("queued").Inc()
	s.save(b)
	s.mark(b.id)
	return b, http.StatusAccepted, nil
}

// busy is 429 with a Retry-After of about when a place will be free: the
// average build's time, times the builds ahead over those running at once.
func (s *Server) busy(why string) *httpError {
	e := failf(http.StatusTooManyRequests, "", "%s; retry later", why)
	avg := s.durations
	if avg <= 0 {
		avg = 10 * time.Second
	}
	wait := avg * time.Duration(len(s.queue)+1) / time.Duration(s.o.MaxBuilds)
	e.retryAfter = max(1, min(int(wait.Seconds()+0.5), 600))
	return e
}

// find is the build with the ID, from memory, the state directory or, when
// neither knows it, the cache (another server's state, or none kept); nil
// when none of them does.
func (s *Server) find(id string) *build {
	s.mu.Lock()
	b := s.builds[id]
	if b != nil && b.elem != nil {
		s.finished.use(b)
	}
	s.mu.Unlock()
	if b != nil {
		return b
	}
	b = s.fromDisk(id)
	if b == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if have := s.builds[id]; have != nil {
		return have
	}
	s.keepFinished(b)
	return b
}

// fromDisk reads a build back from the state directory or the cache.
func (s *Server) fromDisk(id string) *build {
	sv, err := s.loadSaved(id)
	if err != nil {
		s.log.WithError(err).WithField("build", id).Warn("ignoring the saved state")
	}
	if sv != nil {
		if sv.State == stateQueued || sv.State == stateRunning {
			// Not in memory, so not queued in this run: its marker was
			// lost (a full disk). It is failed, never half served.
			sv.State = stateFailed
			sv.Error = &APIError{Message: "the build was interrupted; POST it again"}
		}
		b := newBuild(sv.Status, sv.Token)
		b.asked = sv.Asked
		return b
	}
	r, err := s.reader.Record(recordKind, key(id))
	if err != nil || r == nil {
		return nil
	}
	var d recordData
	json.Unmarshal(r.Data, &d)
	b := newBuild(Status{ID: id, Recipe: d.Recipe, Params: d.Params, State: stateDone, Outputs: outputsOf(id, r.Blobs)}, "")
	b.touched = time.Now()
	return b
}

// keepFinished keeps a finished build in memory, letting the least recently
// used go beyond finishedInMemory; s.mu is held.
func (s *Server) keepFinished(b *build) {
	s.builds[b.id] = b
	s.finished.use(b)
	for s.finished.len() > finishedInMemory {
		old := s.finished.oldest()
		s.finished.remove(old)
		delete(s.builds, old.id)
	}
}

// stillServed tells whether the cache still holds a finished build's files,
// and tells the cache it was used, so a prune keeps it; a build whose files
// are gone becomes pruned.
func (s *Server) stillServed(b *build) bool {
	r, err := s.reader.Record(recordKind, key(b.id))
	if err == nil && r != nil {
		b.mu.Lock()
		b.touched = time.Now()
		b.mu.Unlock()
		return true
	}
	s.pruned(b, err)
	return false
}

// pruned notes that a finished build's files are no longer in the cache.
func (s *Server) pruned(b *build, why error) {
	b.mu.Lock()
	if b.st.State != stateDone {
		b.mu.Unlock()
		return
	}
	b.st.State = statePruned
	b.st.Error = &APIError{Message: "the build's files are no longer in the cache (pruned or damaged); POST it again to build it again"}
	b.changed()
	b.mu.Unlock()
	s.log.WithField("build", b.id).WithError(why).Info("build's files are gone from the cache")
	s.save(b)
}

// recordData is what a serve record says of its request.
type recordData struct {
	Recipe string            `json:"recipe"`
	Params map[string]string `json:"params,omitempty"`
}

// run runs one build taken from the queue and reports how it ended. A build
// stopped by the server's shutdown is left as it is, to run again at the
// next start.
func (s *Server) run(ctx context.Context, b *build) {
	start := time.Now()
	s.metrics.running.Inc()
	defer s.metrics.running.Dec()
	var outs []OutputFile
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				s.log.WithField("build", b.id).Errorf("build panicked: %v\n%s", r, debug.Stack())
				err = fmt.Errorf("internal error: %v", r)
			}
		}()
		outs, err = s.build(ctx, b)
	}()
	if ctx.Err() != nil {
		return
	}
	s.finish(b, outs, err, time.Since(start))
	// What the build held is handed back now, not when the collector gets
	// round to it: an idle server stays small.
	debug.FreeOSMemory()
}

// build runs the conductor on the build's recipe, into an output directory
// of its own, and files what it made in the cache as the build's record.
func (s *Server) build(ctx context.Context, b *build) ([]OutputFile, error) {
	logFile, err := os.OpenFile(s.logPath(b.id), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("build log: %w", err)
	}
	defer logFile.Close()
	blog := s.buildLogger(b, &cappedWriter{w: logFile, left: maxLogBytes})
	b.mu.Lock()
	now := time.Now().UTC()
	b.st.State, b.st.Phase, b.st.Phases, b.st.Started, b.st.Finished, b.st.Error = stateRunning, "prepare", nil, &now, nil, nil
	b.st.Attempts++
	b.changed()
	b.mu.Unlock()
	s.save(b)
	s.metrics.started.Inc()
	l := b.req
	if l == nil {
		// Taken up after a restart: the request is loaded again, and must
		// still name the same build.
		var herr *httpError
		if l, herr = s.load(b.st.Recipe, b.asked); herr != nil {
			return nil, herr
		}
		if l.id != b.id {
			return nil, fmt.Errorf("the recipe %s or a file it reads changed since the build was asked for (it is now build %s); POST it again", b.st.Recipe, l.id)
		}
	}
	blog.WithField("recipe", l.rel).WithField("params", l.rec.ParamValues()).Info("build started")
	// The cache's shared lock is held from before the build until its
	// record is filed: a prune between the two would take blobs the
	// record is about to name.
	c, err := cache.Open(s.o.CacheDir, cache.Options{Log: blog})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	out, err := os.MkdirTemp(s.work, "out-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(out)
	_, err = stamp.Build(ctx, l.rec, stamp.Options{
		OutputDir: out, WorkDir: s.work, CacheDir: s.o.CacheDir,
		CacheFrom: s.o.CacheFrom, CacheTo: s.o.CacheTo, CacheSign: s.o.CacheSign, CacheTrust: s.o.CacheTrust,
		InsecureRegistries: s.o.InsecureRegistries, Log: blog, Progress: b.progress,
	})
	if err != nil {
		return nil, err
	}
	blobs, err := s.file(ctx, c, b, l, out)
	if err != nil {
		return nil, fmt.Errorf("filing the build in the cache: %w", err)
	}
	return outputsOf(b.id, blobs), nil
}

// file puts every file the build wrote into the cache (the outputs are
// there already, as links; SHA256SUMS, the manifest, provenance and SBOM
// join them) and files the build's record naming them all. Only then is
// anything of the build served: a build that stops before is never
// half-served.
func (s *Server) file(ctx context.Context, c *cache.Cache, b *build, l *loaded, out string) ([]cache.RecordBlob, error) {
	sums, err := readSums(filepath.Join(out, stamp.SumsFile))
	if err != nil {
		return nil, err
	}
	var blobs []cache.RecordBlob
	err = filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", p)
		}
		rel, err := filepath.Rel(out, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		sum, ok := sums[name]
		if !ok {
			if sum, _, err = hashio.File(p, true); err != nil {
				return err
			}
		}
		digest, err := c.Adopt(ctx, p, sum)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		blobs = append(blobs, cache.RecordBlob{Name: name, Digest: digest, Size: fi.Size()})
		return nil
	})
	if err != nil {
		return nil, err
	}
	data, err := json.Marshal(recordData{Recipe: l.rel, Params: l.rec.ParamValues()})
	if err != nil {
		return nil, err
	}
	r := &cache.Record{Kind: recordKind, Key: key(b.id), Subject: "serve " + l.rel, Parts: l.parts, Blobs: blobs, Data: data}
	return blobs, c.PutRecord(r)
}

// readSums reads SHA256SUMS: hex sum by name.
func readSums(p string) (map[string]string, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	sums := map[string]string{}
	for _, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		sum, name, ok := strings.Cut(line, "  ")
		if !ok {
			return nil, fmt.Errorf("%s: malformed line %q", p, line)
		}
		sums[name] = sum
	}
	return sums, nil
}

// finish records how a build ended.
func (s *Server) finish(b *build, outs []OutputFile, err error, took time.Duration) {
	b.mu.Lock()
	now := time.Now().UTC()
	b.st.Finished, b.st.Progress = &now, nil
	if err == nil {
		b.st.State, b.st.Phase, b.st.Outputs, b.st.Error = stateDone, "", outs, nil
	} else {
		b.st.State, b.st.Error = stateFailed, s.errorOf(err)
	}
	b.touched = now
	phases := b.st.Phases
	b.changed()
	b.mu.Unlock()
	s.save(b)
	s.unmark(b.id)
	s.mu.Lock()
	s.perToken[b.token]--
	if s.perToken[b.token] <= 0 {
		delete(s.perToken, b.token)
	}
	if s.builds[b.id] == b {
		s.keepFinished(b)
	}
	// A moving average, so Retry-After follows what builds take now.
	if s.durations == 0 {
		s.durations = took
	} else {
		s.durations = (s.durations*7 + took) / 8
	}
	s.mu.Unlock()
	log := s.log.WithField("build", b.id).WithField("seconds", took.Seconds()).WithField("phases", phases)
	result := "succeeded"
	if err != nil {
		result = "failed"
		log.WithField("error", err.Error()).Warn("build failed")
	} else {
		log.Info("build done")
	}
	s.metrics.builds.WithLabelValues(result).Inc()
	s.metrics.buildSeconds.Observe(took.Seconds())
	if err == nil && len(phases) == 0 {
		s.metrics.cacheHits.Inc()
	}
}

// fieldRE finds the recipe field the conductor's messages start with:
// "customize.layers[0].files[1].from: ...", "outputs[2] (raw): ...".
var fieldRE = regexp.MustCompile(`^((?:base|customize|provision|seal|outputs|params)(?:\.[A-Za-z]+|\[\d+\])*)[: ]`)

// errorOf is a failed build's error as the API shows it, naming the recipe
// field at fault when the error does.
func (s *Server) errorOf(err error) *APIError {
	e := &APIError{Message: s.hide(err)}
	var ie *stamp.InputError
	var re *recipes.Error
	var he *httpError
	switch {
	case errors.As(err, &he):
		return &he.APIError
	case errors.As(err, &ie):
		e.Field = ie.Field
	case errors.As(err, &re):
		e.Field = re.Field
	default:
		if m := fieldRE.FindStringSubmatch(e.Message); m != nil {
			e.Field = m[1]
		}
	}
	return e
}

// buildLogger is a build's own logger: every line goes to its log file, and
// those of level info and above to the server's log with the build's ID.
// The conductor's lines say which phase the build is in.
func (s *Server) buildLogger(b *build, w *cappedWriter) *logrus.Logger {
	l := logrus.New()
	l.SetOutput(w)
	l.SetFormatter(&logrus.JSONFormatter{})
	l.SetLevel(logrus.DebugLevel)
	if sl, ok := s.log.(*logrus.Logger); ok && sl.GetLevel() < logrus.DebugLevel {
		l.SetLevel(logrus.InfoLevel)
	}
	l.AddHook(&buildHook{b: b, log: s.log.WithField("build", b.id)})
	return l
}

// buildHook follows a build's phases from the conductor's log, and passes
// its lines on to the server's log.
type buildHook struct {
	b   *build
	log logrus.FieldLogger
}

func (h *buildHook) Levels() []logrus.Level { return logrus.AllLevels }

func (h *buildHook) Fire(e *logrus.Entry) error {
	switch msg := e.Message; {
	case strings.HasPrefix(msg, "phase "):
		h.b.enterPhase(strings.TrimPrefix(msg, "phase "), true)
	case strings.HasPrefix(msg, "sealed "), strings.HasSuffix(msg, "no phase runs"):
		h.b.enterPhase("outputs", false)
	}
	if e.Level > logrus.InfoLevel {
		return nil
	}
	l := h.log.WithFields(e.Data)
	switch e.Level {
	case logrus.InfoLevel:
		l.Info(e.Message)
	case logrus.WarnLevel:
		l.Warn(e.Message)
	default:
		l.Error(e.Message)
	}
	return nil
}

// cappedWriter writes at most left bytes, then a line saying the rest was
// dropped: a build's log must not fill the disk.
type cappedWriter struct {
	w    *os.File
	left int64
}

func (c *cappedWriter) Write(p []byte) (int, error) {
	if c.left <= 0 {
		return len(p), nil
	}
	if int64(len(p)) > c.left {
		c.w.WriteString(`{"level":"warning","msg":"the rest of the log is dropped: it outgrew its limit"}` + "\n")
		c.left = 0
		return len(p), nil
	}
	c.left -= int64(len(p))
	c.w.Write(p)
	return len(p), nil
}
