package stamp

import (
	"bufio"
	"bytes"
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
	"unicode/utf8"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/formats/attest"
	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// nobody is the uid and gid the second build of verify runs as when verify
// is started as root.
const nobody = 65534

// VerifyOptions configure Verify.
type VerifyOptions struct {
	// Options are those of a build. OutputDir receives both builds (a/ and
	// b/); when empty a temporary directory is used and removed afterwards,
	// unless the builds differ.
	Options
	// Build makes each build. Verify decides where and in what environment;
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

// BuildFunc makes one of Verify's builds.
type BuildFunc func(ctx context.Context, req BuildRequest) error

// BuildRequest is one of Verify's builds: the recipe at Recipe built with
// Options, in the environment Run describes.
type BuildRequest struct {
	Run    BuildRun
	Recipe string // absolute
	// Options are the build's: OutputDir, WorkDir, CacheDir, Offline and
	// ReverseReaddir are this build's own; LockPath is absolute; Log is
	// Verify's, for the build's messages.
	Options Options
	// Set are the recipe's parameter values as NAME=VALUE, so that neither
	// build reads a default from its own environment.
	Set []string
}

// BuildRun describes the environment one build of Verify ran in.
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

// OutputCheck is the comparison of one output file between two builds.
type OutputCheck struct {
	Name             string
	Format           string // "tar", "raw", ...; "manifest", "provenance", "sbom" for the files beside them
	Compression      compress.Algorithm
	SHA256A, SHA256B string
	// Offset is the first byte at which the files differ, -1 when they do
	// not or one is missing. PlainOffset is the same in the stream Plain
	// names (the decompressed stream, a qcow2's guest disk), and Region
	// names what lies there.
	Offset, PlainOffset int64
	Plain               string
	Region              string
	// Lines are the output's SHA256SUMS lines (several for a directory).
	Lines []Sum
	// Changes are what reading both outputs back found.
	Changes []Change
	// Notes say what could not be compared and why.
	Notes []string
}

// Match reports whether both builds gave the same bytes.
func (c *OutputCheck) Match() bool { return c.SHA256A != "" && c.SHA256A == c.SHA256B }

// VerifyResult is what Verify found.
type VerifyResult struct {
	Dir     string // where the builds are; "" when removed
	Builds  []BuildRun
	Outputs []OutputCheck
	// BuilderChanges lists how the stamp build that made an earlier
	// SHA256SUMS differs from this one (Against only).
	BuilderChanges []string
}

// OK reports whether every output matched.
func (r *VerifyResult) OK() bool {
	for i := range r.Outputs {
		if !r.Outputs[i].Match() {
			return false
		}
	}
	return len(r.Outputs) > 0
}

// Mismatches counts the outputs that differ.
func (r *VerifyResult) Mismatches() int {
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
func (r *VerifyResult) Write(w io.Writer) {
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
		c := &r.Outputs[i]
		if c.Match() {
			if len(c.Lines) == 0 {
				fmt.Fprintf(w, "%s  %s\n", c.SHA256A, c.Name)
			}
			for _, l := range c.Lines {
				fmt.Fprintf(w, "%s  %s\n", l.SHA256, l.Name)
			}
			continue
		}
		what := c.Format
		if c.Compression != "" && c.Compression != compress.None {
			what += ", " + string(c.Compression)
		}
		fmt.Fprintf(w, "DIFFERS %s (%s): a %s, b %s\n", c.Name, what, orNone(c.SHA256A), orNone(c.SHA256B))
		if c.Offset >= 0 {
			fmt.Fprintf(w, "  first differing byte: offset %d", c.Offset)
			if c.PlainOffset >= 0 {
				fmt.Fprintf(w, " (offset %d in the %s)", c.PlainOffset, c.Plain)
			}
			if c.Region != "" {
				fmt.Fprintf(w, " in %s", c.Region)
			}
			fmt.Fprintln(w)
		}
		for _, ch := range c.Changes {
			fmt.Fprintf(w, "  %s\n", ch)
			if ch.Kind == Changed {
				fmt.Fprintf(w, "    path %s field %s\n", ch.Path, strings.Join(ch.FieldNames(), ","))
			}
		}
		for _, n := range c.Notes {
			fmt.Fprintf(w, "  %s\n", n)
		}
	}
	if r.OK() {
		fmt.Fprintf(w, "# all %d outputs are identical\n", len(r.Outputs))
	} else if r.Dir != "" {
		fmt.Fprintf(w, "# builds kept in %s\n", r.Dir)
	}
}

// Verify builds the recipe twice, the second time under a varied
// environment, and compares every output; with Against it builds once and
// compares with an earlier build's SHA256SUMS. A build that fails is an
// error; outputs that differ are not: they are in the result.
func Verify(ctx context.Context, rec *recipes.Recipe, o VerifyOptions) (res *VerifyResult, err error) {
	log := o.log()
	if o.Build == nil {
		return nil, &UsageError{Msg: "verify: nothing to run the builds with"}
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
	res = &VerifyResult{Dir: dir}
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
				return nil, &UsageError{Msg: fmt.Sprintf("verify: the second build runs as uid %d, which cannot reach %s: %v (make it readable, or pass --same-user)", nobody, p, err)}
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
		return res, compareAgainst(ctx, res, o.Against, runA.Output)
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
	return res, compareBuilds(ctx, res, runA.Output, runB.Output)
}

// prepareFor makes the directories of a build writable by its user.
func (o *VerifyOptions) prepareFor(b BuildRun, asNobody bool) error {
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
func (o *VerifyOptions) build(ctx context.Context, rec *recipes.Recipe, b BuildRun, recipePath, cacheDir string, offline bool) error {
	bo := o.Options
	bo.OutputDir, bo.WorkDir, bo.CacheDir, bo.Offline = b.Output, b.Work, cacheDir, offline
	bo.ReverseReaddir = b.ReverseReaddir
	bo.Log, bo.Progress = o.log(), nil
	if bo.LockPath != "" {
		lp, err := filepath.Abs(bo.LockPath)
		if err != nil {
			return err
		}
		bo.LockPath = lp
	}
	o.log().Infof("verify: %s", b)
	return o.Build(ctx, BuildRequest{Run: b, Recipe: recipePath, Options: bo, Set: rec.SetArgs()})
}

// RunChild runs the command argv (a build) as a child process in the
// environment b describes: its umask, uid, TZ, LANG and GOMAXPROCS, and
// nothing else of the caller's but a proxy and CAs; dir is its working
// directory. The child's messages go to log at debug level; when it fails,
// the error holds the last of them.
func RunChild(ctx context.Context, log logrus.FieldLogger, b BuildRun, dir string, argv []string) error {
	if len(argv) == 0 {
		return &UsageError{Msg: "verify: no command for build " + b.Name}
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

// attestationFiles are compared besides the outputs: they must be as
// reproducible as the outputs they describe.
var attestationFiles = []struct{ name, format string }{
	{ManifestFile, "manifest"}, {SBOMFile, "sbom"}, {ProvenanceFile, "provenance"},
}

// compareBuilds compares two output directories.
func compareBuilds(ctx context.Context, res *VerifyResult, a, b string) error {
	sa, err := ReadSums(filepath.Join(a, SumsFile))
	if err != nil {
		return err
	}
	sb, err := ReadSums(filepath.Join(b, SumsFile))
	if err != nil {
		return err
	}
	res.Outputs = compareSums(ctx, sa, sb, a, b)
	for _, f := range attestationFiles {
		c := OutputCheck{Name: f.name, Format: f.format, Offset: -1, PlainOffset: -1}
		pa, pb := filepath.Join(a, f.name), filepath.Join(b, f.name)
		if c.SHA256A, err = fileSHA256(pa); err != nil {
			c.Notes = append(c.Notes, err.Error())
		}
		if c.SHA256B, err = fileSHA256(pb); err != nil {
			c.Notes = append(c.Notes, err.Error())
		}
		if !c.Match() && len(c.Notes) == 0 {
			c.Offset, _ = firstDifference(pa, pb)
			if n := firstLineDifference(pa, pb); n != "" {
				c.Notes = append(c.Notes, n)
			}
		}
		res.Outputs = append(res.Outputs, c)
	}
	return nil
}

// compareSums pairs two SHA256SUMS by output and looks into every output
// whose digests differ, reading the files from dirA and dirB. The files of
// a directory output (an OCI layout) are one output: a blob's name is its
// digest, so a changed blob shows as one removed and one added.
func compareSums(ctx context.Context, sa, sb []Sum, dirA, dirB string) []OutputCheck {
	namesA, ga := groupSums(sa)
	namesB, gb := groupSums(sb)
	var out []OutputCheck
	for _, name := range namesA {
		c := OutputCheck{Name: name, Lines: ga[name], SHA256A: groupDigest(ga[name]), Offset: -1, PlainOffset: -1}
		if lb, ok := gb[name]; ok {
			c.SHA256B = groupDigest(lb)
		}
		switch {
		case c.SHA256B == "":
			c.Notes = append(c.Notes, "only the first build has it")
		case !c.Match():
			c.Notes = append(c.Notes, memberDifferences(ga[name], gb[name])...)
			explain(ctx, &c, filepath.Join(dirA, name), filepath.Join(dirB, name))
		}
		out = append(out, c)
	}
	for _, name := range namesB {
		if _, ok := ga[name]; !ok {
			out = append(out, OutputCheck{Name: name, SHA256B: groupDigest(gb[name]), Offset: -1, PlainOffset: -1,
				Notes: []string{"only the second build has it"}})
		}
	}
	return out
}

// groupSums groups sums by output: the first component of each name.
func groupSums(sums []Sum) ([]string, map[string][]Sum) {
	var names []string
	groups := map[string][]Sum{}
	for _, s := range sums {
		top, _, _ := strings.Cut(s.Name, "/")
		if _, ok := groups[top]; !ok {
			names = append(names, top)
		}
		groups[top] = append(groups[top], s)
	}
	return names, groups
}

// groupDigest is a file's own sha256, or for a directory output the sha256
// of its SHA256SUMS lines.
func groupDigest(g []Sum) string {
	if len(g) == 1 && !strings.Contains(g[0].Name, "/") {
		return g[0].SHA256
	}
	var b strings.Builder
	for _, s := range g {
		fmt.Fprintf(&b, "%s  %s\n", s.SHA256, s.Name)
	}
	return bytesSHA256([]byte(b.String()))
}

// memberDifferences names the files of a directory output that differ.
func memberDifferences(a, b []Sum) []string {
	if len(a) == 1 && !strings.Contains(a[0].Name, "/") {
		return nil
	}
	inB := map[string]string{}
	for _, s := range b {
		inB[s.Name] = s.SHA256
	}
	inA := map[string]bool{}
	var out []string
	for _, s := range a {
		inA[s.Name] = true
		switch h, ok := inB[s.Name]; {
		case !ok:
			out = append(out, s.Name+": only in the first build")
		case h != s.SHA256:
			out = append(out, s.Name+": differs")
		}
	}
	for _, s := range b {
		if !inA[s.Name] {
			out = append(out, s.Name+": only in the second build")
		}
	}
	return out
}

// explain finds where two differing outputs first differ and, by reading
// both back, which paths and fields.
func explain(ctx context.Context, c *OutputCheck, a, b string) {
	if fi, err := os.Stat(a); err == nil && !fi.IsDir() {
		if c.Offset, err = firstDifference(a, b); err != nil {
			c.Notes = append(c.Notes, err.Error())
			return
		}
	}
	ia, errA := formats.ReadEntries(ctx, a)
	ib, errB := formats.ReadEntries(ctx, b)
	if errA != nil || errB != nil {
		c.Format = "file"
		if h, _ := formats.ReadHead(a); h != nil {
			c.Compression = h.Compression
			if h.Size < 1<<20 && utf8.Valid(h.Plain) && h.Compression == compress.None {
				// A small text file beside an output (an OCI .digest).
				c.Notes = append(c.Notes, firstLineDifference(a, b))
				return
			}
		}
		for _, e := range []error{errA, errB} {
			if e != nil {
				c.Notes = append(c.Notes, "cannot read back: "+e.Error())
			}
		}
		return
	}
	c.Format, c.Compression = ia.Format, ia.Compression
	switch {
	case ia.Plain != "" && ia.Plain == ib.Plain && ia.Compression == ib.Compression:
		// Place the difference where the reader measured its regions: in
		// the decompressed stream, or in the guest disk of a qcow2.
		if off, err := firstPlainDifference(ia, ib); err == nil && off >= 0 {
			c.PlainOffset, c.Plain = off, ia.Plain
			c.Region = ia.Locate(off)
		}
	case ia.Plain == "" && c.Offset >= 0:
		c.Region = ia.Locate(c.Offset)
	}
	c.Changes = DiffImages(ia, ib, DiffOptions{})
	if len(c.Changes) == 0 {
		// Only the record differs, or nothing the entries show: say which.
		c.Changes = DiffImages(ia, ib, DiffOptions{IncludeRecord: true})
	}
	if len(c.Changes) == 0 {
		c.Notes = append(c.Notes, "both read back to the same entries and structure: the difference is in how the format lays them out")
	}
}

// firstDifference returns the offset of the first byte at which two files
// differ, -1 when they are equal. A file that is a prefix of the other
// differs at its end.
func firstDifference(a, b string) (int64, error) {
	fa, err := os.Open(a)
	if err != nil {
		return -1, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return -1, err
	}
	defer fb.Close()
	return firstStreamDifference(fa, fb)
}

func firstPlainDifference(a, b *formats.Image) (int64, error) {
	ra, err := formats.OpenPlain(a)
	if err != nil {
		return -1, err
	}
	defer ra.Close()
	rb, err := formats.OpenPlain(b)
	if err != nil {
		return -1, err
	}
	defer rb.Close()
	return firstStreamDifference(ra, rb)
}

func firstStreamDifference(a, b io.Reader) (int64, error) {
	const chunk = 1 << 20
	ba, bb := make([]byte, chunk), make([]byte, chunk)
	var off int64
	for {
		na, errA := io.ReadFull(a, ba)
		nb, errB := io.ReadFull(b, bb)
		n := min(na, nb)
		if i := mismatch(ba[:n], bb[:n]); i >= 0 {
			return off + int64(i), nil
		}
		if na != nb {
			return off + int64(n), nil
		}
		off += int64(n)
		endA := errA == io.EOF || errA == io.ErrUnexpectedEOF
		endB := errB == io.EOF || errB == io.ErrUnexpectedEOF
		if errA != nil && !endA {
			return -1, errA
		}
		if errB != nil && !endB {
			return -1, errB
		}
		if endA || endB {
			return -1, nil
		}
	}
}

func mismatch(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// firstLineDifference shows the first line at which two text files differ.
func firstLineDifference(a, b string) string {
	da, err1 := os.ReadFile(a)
	db, err2 := os.ReadFile(b)
	if err1 != nil || err2 != nil {
		return ""
	}
	la, lb := strings.Split(string(da), "\n"), strings.Split(string(db), "\n")
	for i := 0; i < len(la) || i < len(lb); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d: a %q, b %q", i+1, clip(x), clip(y))
		}
	}
	return ""
}

func clip(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// compareAgainst compares a fresh build in dir with an earlier SHA256SUMS.
// Outputs found beside the earlier sums, still matching them, are read back
// to say what differs.
func compareAgainst(ctx context.Context, res *VerifyResult, sumsPath, dir string) error {
	earlier, err := ReadSums(sumsPath)
	if err != nil {
		return err
	}
	now, err := ReadSums(filepath.Join(dir, SumsFile))
	if err != nil {
		return err
	}
	earlierDir := filepath.Dir(sumsPath)
	res.Outputs = compareSums(ctx, earlier, now, earlierDir, dir)
	for i := range res.Outputs {
		c := &res.Outputs[i]
		if c.Match() || c.SHA256A == "" || c.SHA256B == "" {
			continue
		}
		if got, err := fileSHA256(filepath.Join(earlierDir, c.Name)); err != nil || got != c.SHA256A {
			c.Changes, c.Offset, c.PlainOffset, c.Region = nil, -1, -1, ""
			c.Notes = []string{"the earlier output is not beside its SHA256SUMS, so only the digests can be compared"}
		}
	}
	old, err := attest.ReadStatement(filepath.Join(earlierDir, ProvenanceFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	cur, err := attest.ReadStatement(filepath.Join(dir, ProvenanceFile))
	if err != nil {
		return err
	}
	res.BuilderChanges = attest.DiffBuilders(old.Predicate.RunDetails.Builder, cur.Predicate.RunDetails.Builder)
	return nil
}

// Sum is one line of a SHA256SUMS file.
type Sum struct{ SHA256, Name string }

// ReadSums reads a SHA256SUMS file as sha256sum writes it.
func ReadSums(p string) ([]Sum, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var out []Sum
	for i, line := range strings.Split(strings.TrimRight(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		h, name, ok := strings.Cut(line, "  ")
		if !ok {
			// sha256sum -b writes "<hex> *name".
			h, name, ok = strings.Cut(line, " *")
		}
		if _, err := cache.ParseDigest(h); !ok || err != nil {
			return nil, fmt.Errorf("%s line %d: not a sha256sum line: %q", p, i+1, line)
		}
		out = append(out, Sum{SHA256: strings.ToLower(h), Name: name})
	}
	return out, nil
}

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
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
