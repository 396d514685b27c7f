// Package verify proves a recipe reproducible: it builds it twice under a
// varied environment (another user, umask, time zone, locale, GOMAXPROCS,
// reversed directory reads, work directory) and compares every output, or
// rebuilds it once and compares with an earlier build's SHA256SUMS.
package verify

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/formats/readback"
	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

// nobody is the uid and gid the second build of verify runs as when verify
// is started as root.
const nobody = 65534

// Options configure Recipe.
type Options struct {
	// OutputDir receives both builds (a/ and b/); when empty a temporary
	// directory is used and removed afterwards, unless the builds differ.
	OutputDir string
	// CacheDir is the first build's cache ("" for the default); the second
	// reads the same blobs.
	CacheDir string
	// Offline makes the first build use only the cache, as the second
	// always does.
	Offline bool
	// KeepWork keeps a temporary OutputDir even when the builds agree.
	KeepWork bool
	// Log receives verify's messages and the builds'.
	Log logrus.FieldLogger
	// Build makes each build. Recipe decides where and in what environment;
	// Build runs it, in a process of its own (see RunChild) so that umask,
	// uid, time zone and the rest can differ from the caller's.
	Build BuildFunc
	// Reach are the paths Build needs besides the recipe and the output
	// directory (the binary it runs): when the second build runs as nobody,
	// each must be within that user's reach.
	Reach []string
	// SameUser runs the second build as the caller even when that is root.
	SameUser bool
	// Against is an earlier build's SHA256SUMS: build once, as the caller
	// (the earlier build ran elsewhere), and compare with it.
	Against string
}

// BuildFunc makes one of verify's builds.
type BuildFunc func(ctx context.Context, req BuildRequest) error

// BuildRequest is one of verify's builds: the recipe at Recipe built into
// OutputDir, in the environment Run describes. Everything else about the
// build (lock, epoch, registries) is the BuildFunc's own, the same for both.
type BuildRequest struct {
	Run    BuildRun
	Recipe string // absolute
	// Set are the recipe's parameter values as NAME=VALUE, so that neither
	// build reads a default from its own environment.
	Set []string
	// OutputDir, WorkDir and CacheDir are this build's own.
	OutputDir, WorkDir, CacheDir string
	// Offline: the second build must not need the network.
	Offline bool
	// ReverseReaddir reads host directories in reverse order.
	ReverseReaddir bool
	// NoCache is always set: a build taken from the other's cache records
	// would prove nothing.
	NoCache bool
	// Log is verify's, for the build's messages.
	Log logrus.FieldLogger
}

// BuildRun describes the environment one build of verify ran in.
type BuildRun struct {
	Name                              string // "a", "b"
	UID                               int
	Umask, TZ, Lang, GOMAXPROCS, Work string
	ReverseReaddir                    bool
	Output                            string
}

func (b BuildRun) String() string {
	order := "sorted"
	if b.ReverseReaddir {
		order = "reversed"
	}
	return fmt.Sprintf("build %s: uid %d, umask %s, TZ=%s, LANG=%s, GOMAXPROCS=%s, readdir %s, work dir %s (%d bytes)",
		b.Name, b.UID, b.Umask, b.TZ, b.Lang, b.GOMAXPROCS, order, b.Work, len(b.Work))
}

// OutputCheck is the comparison of one output between two builds.
type OutputCheck = readback.OutputCheck

// Result is what Recipe found.
type Result struct {
	Dir     string // where the builds are; "" when removed
	Builds  []BuildRun
	Outputs []OutputCheck
	// BuilderChanges lists how the stamp build that made an earlier
	// SHA256SUMS differs from this one (Against only).
	BuilderChanges []string
}

// OK reports whether every output matched.
func (r *Result) OK() bool {
	for i := range r.Outputs {
		if !r.Outputs[i].Match() {
			return false
		}
	}
	return len(r.Outputs) > 0
}

// Mismatches counts the outputs that differ.
func (r *Result) Mismatches() int {
	n := 0
	for i := range r.Outputs {
		if !r.Outputs[i].Match() {
			n++
		}
	}
	return n
}

// Write prints the result: the digests when everything matched, else for
// each differing output its format, first differing byte and the paths and
// fields that differ.
func (r *Result) Write(w io.Writer) {
	for _, b := range r.Builds {
		fmt.Fprintln(w, "#", b)
	}
	if len(r.BuilderChanges) > 0 {
		fmt.Fprintln(w, "# the earlier build came from a different stamp build; compressed bytes may legitimately differ:")
		for _, c := range r.BuilderChanges {
			fmt.Fprintln(w, "#   ", c)
		}
	}
	for i := range r.Outputs {
		r.Outputs[i].Write(w)
	}
	if r.OK() {
		fmt.Fprintf(w, "# all %d outputs are identical\n", len(r.Outputs))
	} else if r.Dir != "" {
		fmt.Fprintf(w, "# builds kept in %s\n", r.Dir)
	}
}

// Recipe builds the recipe twice, the second time under a varied
// environment, and compares every output; with Against it builds once and
// compares with an earlier build's SHA256SUMS. A build that fails is an
// error; outputs that differ are not: they are in the result.
func Recipe(ctx context.Context, rec *recipes.Recipe, o Options) (res *Result, err error) {
	log := o.log()
	if o.Build == nil {
		return nil, &recipes.UsageError{Msg: "verify: nothing to run the builds with"}
	}
	recipePath, err := filepath.Abs(rec.Path)
	if err != nil {
		return nil, err
	}
	asNobody := os.Geteuid() == 0 && !o.SameUser && o.Against == ""
	dir := o.OutputDir
	temp := dir == ""
	if temp {
		if dir, err = os.MkdirTemp("", "stamp-verify-"); err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	res = &Result{Dir: dir}
	defer func() {
		if temp && (err != nil || res == nil || res.OK()) && !o.KeepWork {
			os.RemoveAll(dir)
			if res != nil {
				res.Dir = ""
			}
		}
	}()
	if asNobody {
		if err := os.Chmod(dir, 0o755); err != nil {
			return nil, err
		}
		for _, p := range append([]string{dir, recipePath}, o.Reach...) {
			if err := reachableByOthers(p); err != nil {
				return nil, &recipes.UsageError{Msg: fmt.Sprintf("verify: the second build runs as uid %d, which cannot reach %s: %v (make it readable, or pass --same-user)", nobody, p, err)}
			}
		}
	}
	cacheDir := o.CacheDir
	if cacheDir == "" {
		if cacheDir, err = cache.DefaultDir(os.Getenv); err != nil {
			return nil, err
		}
	}
	runA := BuildRun{Name: "a", UID: os.Geteuid(), Umask: "022", TZ: "UTC", Lang: "C.UTF-8", GOMAXPROCS: "2",
		Work: filepath.Join(dir, "wa"), Output: filepath.Join(dir, "a")}
	runB := BuildRun{Name: "b", UID: os.Geteuid(), Umask: "077", TZ: "Asia/Kathmandu", Lang: "de_DE.UTF-8", GOMAXPROCS: "1",
		ReverseReaddir: true,
		Work:           filepath.Join(dir, "work-of-build-b-with-a-longer-path", "and-one-more-level"),
		Output:         filepath.Join(dir, "b")}
	if asNobody {
		runB.UID = nobody
	}
	if err := o.prepareFor(runA, false); err != nil {
		return res, err
	}
	if err := o.build(ctx, rec, runA, recipePath, cacheDir, o.Offline); err != nil {
		return res, err
	}
	res.Builds = append(res.Builds, runA)
	if o.Against != "" {
		// One rebuild, as the caller, so that it can fill an empty cache:
		// the earlier build was made elsewhere, which is the variation.
		res.Outputs, res.BuilderChanges, err = readback.CompareAgainst(ctx, o.Against, runA.Output)
		return res, err
	}
	cacheB := cacheDir
	if asNobody && reachableByOthers(filepath.Join(cacheDir, "blobs")) != nil {
		// The caller's cache (often under /root) is out of nobody's reach:
		// give it hard links to the same blobs in a directory it can read.
		cacheB = filepath.Join(dir, "cache-b")
		log.Infof("uid %d cannot read the cache %s; linking its blobs into %s", nobody, cacheDir, cacheB)
		if err := linkTree(filepath.Join(cacheDir, "blobs"), filepath.Join(cacheB, "blobs")); err != nil {
			return res, fmt.Errorf("verify: preparing a cache for uid %d: %w", nobody, err)
		}
	}
	if err := o.prepareFor(runB, asNobody); err != nil {
		return res, err
	}
	// Build a has filled the cache; b must not need the network.
	if err := o.build(ctx, rec, runB, recipePath, cacheB, true); err != nil {
		return res, err
	}
	res.Builds = append(res.Builds, runB)
	res.Outputs, err = readback.CompareBuilds(ctx, runA.Output, runB.Output)
	return res, err
}

// prepareFor makes the directories of a build writable by its user.
func (o *Options) prepareFor(b BuildRun, asNobody bool) error {
	for _, d := range []string{b.Output, b.Work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		if !asNobody {
			continue
		}
		// Every directory between the verify dir and d belongs to nobody,
		// so the build can create and remove what it needs.
		for p := d; p != filepath.Dir(b.Output) && p != "/" && p != "."; p = filepath.Dir(p) {
			if err := os.Chown(p, nobody, nobody); err != nil {
				return fmt.Errorf("verify: %w", err)
			}
		}
	}
	return nil
}

// build asks o.Build for the build b describes.
func (o *Options) build(ctx context.Context, rec *recipes.Recipe, b BuildRun, recipePath, cacheDir string, offline bool) error {
	o.log().Infof("verify: %s", b)
	return o.Build(ctx, BuildRequest{Run: b, Recipe: recipePath, Set: rec.SetArgs(),
		OutputDir: b.Output, WorkDir: b.Work, CacheDir: cacheDir, Offline: offline,
		ReverseReaddir: b.ReverseReaddir, NoCache: true, Log: o.log()})
}

// RunChild runs the command argv (a build) as a child process in the
// environment b describes: its umask, uid, TZ, LANG and GOMAXPROCS, and
// nothing else of the caller's but a proxy and CAs; dir is its working
// directory. The child's messages go to log at debug level; when it fails,
// the error holds the last of them.
func RunChild(ctx context.Context, log logrus.FieldLogger, b BuildRun, dir string, argv []string) error {
	if len(argv) == 0 {
		return &recipes.UsageError{Msg: "verify: no command for build " + b.Name}
	}
	args := append([]string{"-c", `umask ` + b.Umask + `; exec "$0" "$@"`}, argv...)
	cmd := exec.CommandContext(ctx, "/bin/sh", args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + layers.HookPath, "HOME=/nonexistent", "TZ=" + b.TZ, "LANG=" + b.Lang, "LC_ALL=" + b.Lang,
		"GOMAXPROCS=" + b.GOMAXPROCS}
	// The first build may download; it needs the caller's proxy and CAs.
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy", "SSL_CERT_FILE", "SSL_CERT_DIR"} {
		if v, ok := os.LookupEnv(k); ok {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	if b.UID != os.Geteuid() {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(b.UID), Gid: uint32(b.UID), Groups: []uint32{}}}
	}
	var tail tailBuffer
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("verify: build %s: %w", b.Name, err)
	}
	sc := bufio.NewScanner(stderr)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		tail.add(sc.Text())
		log.WithField("build", b.Name).Debug(sc.Text())
	}
	io.Copy(io.Discard, stderr)
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("verify: build %s failed (%v); its last messages:\n%s", b.Name, err, tail.String())
	}
	return nil
}

// tailBuffer keeps the last lines of a child's messages for an error.
type tailBuffer struct{ lines []string }

func (t *tailBuffer) add(s string) {
	const keep = 20
	if len(t.lines) == keep {
		t.lines = append(t.lines[:0], t.lines[1:]...)
	}
	t.lines = append(t.lines, s)
}

func (t *tailBuffer) String() string { return strings.Join(t.lines, "\n") }

// reachableByOthers checks the permission bits that let a user with no
// relation to p's owners reach it: search on every ancestor, read on p.
func reachableByOthers(p string) error {
	abs, err := filepath.Abs(p)
	if err != nil {
		return err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o004 == 0 {
		return fmt.Errorf("%s is not readable by others (mode %04o)", abs, fi.Mode().Perm())
	}
	for d := filepath.Dir(abs); ; d = filepath.Dir(d) {
		di, err := os.Stat(d)
		if err != nil {
			return err
		}
		if di.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("directory %s is not searchable by others (mode %04o)", d, di.Mode().Perm())
		}
		if d == "/" {
			return nil
		}
	}
}

// linkTree mirrors the directories under src into dst and hard-links every
// file, copying where a link is not possible (another file system).
func linkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			return os.Chmod(target, 0o755)
		case d.Type().IsRegular():
			if err := os.Link(p, target); err == nil || errors.Is(err, fs.ErrExist) {
				return nil
			}
			return copyFile(p, target)
		}
		return nil
	})
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return rootfs.CopyToNewFile(dst, 0o644, in)
}

// log is the logger the caller handed in, or one that discards.
func (o *Options) log() logrus.FieldLogger {
	if o.Log == nil {
		l := logrus.New()
		l.SetOutput(io.Discard)
		return l
	}
	return o.Log
}
