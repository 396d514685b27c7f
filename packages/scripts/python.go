package scripts

import (
	"bytes"
	"context"
	"fmt"
	"path"
	"regexp"
	"runtime"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/sandbox"
)

// Byte-compiling Python modules: py3compile (python3's helper every
// python3-* postinst calls), py3clean, and python3.X's own postinsts,
// which run py_compile.py on the standard library.
//
// A .pyc holds the code object marshalled by the very interpreter that
// will load it, so only the image's python writes it byte for byte: it
// runs in the sandbox (Env.runProgram), chrooted into the tree mounted
// read-only, and compiles each file with py_compile, naming it by its path
// in the image (dfile), under SOURCE_DATE_EPOCH, so each .pyc is checked by
// the hash of its source (CHECKED_HASH) and holds no time; PYTHONHASHSEED=0
// keeps the order of set constants from depending on a random seed. The
// .pyc files, written to the run's output directory, are then put into the
// tree where the real tools write them, with the mode py_compile gives
// (the source's, plus owner write, under the umask).

// pyCompileJob is one .py to compile: its path in the image and the
// .pyc to write.
type pyCompileJob struct {
	src, pyc string
}

var pyVersionRE = regexp.MustCompile(`^python(3\.\d+)$`)

// pySupported reads the supported versions from python3's
// debian_defaults, keeping those whose interpreter the tree has.
func (r *run) pySupported() []string {
	b, err := r.readFile("/usr/share/python3/debian_defaults")
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range lines(b) {
		k, v, ok := strings.Cut(l, "=")
		if !ok || strings.TrimSpace(k) != "supported-versions" {
			continue
		}
		for _, s := range strings.Split(v, ",") {
			if m := pyVersionRE.FindStringSubmatch(strings.TrimSpace(s)); m != nil && r.executable("/usr/bin/python"+m[1]) {
				out = append(out, m[1])
			}
		}
	}
	return out
}

// pycPath is importlib's cache_from_source for CPython X.Y.
func pycPath(src, version string, optimize bool) string {
	dir, name := path.Split(src)
	tag := "cpython-" + strings.ReplaceAll(version, ".", "")
	opt := ""
	if optimize {
		opt = ".opt-1"
	}
	return dir + "__pycache__/" + strings.TrimSuffix(name, ".py") + "." + tag + opt + ".pyc"
}

var publicDirRE = regexp.MustCompile(`^.*?/usr/lib/python(\d(?:.\d+)?)/(site|dist)-packages`)

// cmdPy3compile is py3compile: -p PKG compiles the package's public
// modules (dist-packages of python3 or of a supported version) for every
// supported version, -p PKG DIR... its private modules under DIR for the
// default version, DIR... every .py under DIR. /usr/share/python3/bcep
// exclusions and -X are unhandled: no package of the node's uses them.
func cmdPy3compile(r *run, hc interp.HandlerContext, args []string) error {
	o, err := parsePy3compileArgs(r, args)
	if err != nil {
		return err
	}
	versions := r.pySupported()
	if len(versions) == 0 {
		fmt.Fprintln(hc.Stderr, "E: py3compile: Requested versions are not installed")
		return exit(3)
	}
	files, err := r.py3compileFiles(hc, o)
	if err != nil {
		return err
	}
	excludes, err := r.pyExcludes(versions)
	if err != nil {
		return err
	}
	byVersion := r.py3compileJobs(o, files, versions, excludes)
	for _, v := range versions {
		if jobs := byVersion[v]; len(jobs) > 0 {
			if err := r.pyCompile(hc, v, o.optimize, jobs); err != nil {
				return err
			}
		}
	}
	return nil
}

// py3compileArgs is a py3compile command line.
type py3compileArgs struct {
	pkg             string
	dirs            []string
	optimize, force bool
}

func parsePy3compileArgs(r *run, args []string) (*py3compileArgs, error) {
	o := &py3compileArgs{}
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-p" || a == "--package":
			if i+1 >= len(args) {
				return nil, exit(2)
			}
			o.pkg = args[i+1]
			i++
		case strings.HasPrefix(a, "--package="):
			o.pkg = strings.TrimPrefix(a, "--package=")
		case a == "-q" || a == "--quiet" || a == "-v" || a == "--verbose":
		case a == "-f" || a == "--force":
			o.force = true
		case a == "-O":
			o.optimize = true
		case strings.HasPrefix(a, "-"):
			return nil, r.unhandled(fmt.Sprintf("py3compile option %s", a))
		default:
			o.dirs = append(o.dirs, a)
		}
	}
	return o, nil
}

// py3compileFiles lists the .py files to compile: the package's, or those
// of the files and directories named.
func (r *run) py3compileFiles(hc interp.HandlerContext, o *py3compileArgs) ([]string, error) {
	var files []string
	switch {
	case o.pkg != "":
		list, ok := r.listOf(o.pkg)
		if !ok {
			fmt.Fprintf(hc.Stderr, "Exception: cannot get content of %s\n", o.pkg)
			return nil, exit(1)
		}
		for _, l := range lines(list) {
			if strings.HasSuffix(l, ".py") {
				files = append(files, l)
			}
		}
	case len(o.dirs) > 0:
		for _, d := range o.dirs {
			e, err := r.env.Tree.Lookup(r.treePath(hc.Dir, d), true)
			if err != nil {
				continue
			}
			if e.Type == rootfs.TypeRegular && strings.HasSuffix(d, ".py") {
				files = append(files, r.treePath(hc.Dir, d))
				continue
			}
			for _, p := range r.env.Tree.Paths() {
				if strings.HasPrefix(p, e.Path+"/") && strings.HasSuffix(p, ".py") {
					if fe := r.env.Tree.Get(p); fe != nil && fe.Type == rootfs.TypeRegular {
						files = append(files, p)
					}
				}
			}
		}
	default:
		fmt.Fprintln(hc.Stderr, "Usage: py3compile [-V [X.Y][-][A.B]] DIR_OR_FILE [-X REGEXPR]")
		return nil, exit(1)
	}
	return files, nil
}

// py3compileJobs sorts the files into the versions that compile them:
// a package's private modules (directories named with -p) for the default
// version only, its public ones for the versions their directory names,
// files and directories named alone for every version; a .pyc that is
// current stays unless -f.
func (r *run) py3compileJobs(o *py3compileArgs, files, versions []string, excludes []pyExclude) map[string][]pyCompileJob {
	byVersion := map[string][]pyCompileJob{}
	add := func(f string, vs []string) {
		for _, v := range vs {
			if excluded(excludes, f, v) {
				continue
			}
			pyc := pycPath(f, v, o.optimize)
			if !o.force && !r.env.pyc.pending(pyc) {
				if b, err := r.readFile(pyc); err == nil && len(b) >= 4 && r.pycCurrent(f, b) {
					continue
				}
			}
			byVersion[v] = append(byVersion[v], pyCompileJob{src: f, pyc: pyc})
		}
	}
	switch {
	case o.pkg != "" && len(o.dirs) > 0:
		// Private modules: the default version only.
		for _, d := range o.dirs {
			for _, f := range files {
				if strings.HasPrefix(f, d) {
					add(f, versions[:1])
				}
			}
		}
	case o.pkg != "":
		for _, f := range files {
			m := publicDirRE.FindStringSubmatch(f)
			if m == nil {
				continue
			}
			switch {
			case m[1] == "3":
				add(f, versions)
			case len(m[1]) > 1 && contains(versions, m[1]):
				add(f, []string{m[1]})
			}
		}
	default:
		for _, f := range files {
			add(f, versions)
		}
	}
	return byVersion
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// pyExclude is one line of /usr/share/python3/bcep: files py3compile
// leaves alone for some versions.
type pyExclude struct {
	typ      string // dir, file or re
	versions []string
	dir      string
	re       *regexp.Regexp
}

// pyExcludes reads /usr/share/python3/bcep as py3compile does; a line
// whose version range holds no installed version is dropped.
func (r *run) pyExcludes(supported []string) ([]pyExclude, error) {
	d, err := r.env.Tree.Lookup("/usr/share/python3/bcep", true)
	if err != nil || d.Type != rootfs.TypeDir {
		return nil, nil
	}
	var out []pyExclude
	for _, name := range r.env.Tree.Children(d.Path) {
		if strings.HasPrefix(name, ".") {
			continue
		}
		b, err := r.readFile(d.Path + "/" + name)
		if err != nil {
			continue
		}
		for _, l := range lines(b) {
			if strings.HasPrefix(l, "#") || l == "" {
				continue
			}
			f := strings.SplitN(l, "|", 4)
			if len(f) < 3 {
				return nil, r.unhandled(fmt.Sprintf("py3compile exclusion %q in %s", l, name))
			}
			pattern := ".*"
			if len(f) == 4 {
				pattern = f[3]
			}
			x := pyExclude{typ: f[0], dir: f[2], versions: versionsIn(f[1], supported)}
			if x.typ != "file" {
				x.dir = strings.TrimRight(x.dir, "/") + "/"
			}
			if len(x.versions) == 0 {
				continue
			}
			if x.re, err = regexp.Compile("^(?:" + pattern + ")"); err != nil {
				continue // py3compile skips an invalid pattern with a warning
			}
			out = append(out, x)
		}
	}
	return out, nil
}

// versionsIn is debpython's range (3.1, 3.1-, -3.6, 3.1-3.6: the upper
// bound excluded) applied to the supported versions.
func versionsIn(vrange string, supported []string) []string {
	lo, hi, isRange := strings.Cut(vrange, "-")
	var out []string
	for _, v := range supported {
		switch {
		case !isRange && vrange != "" && pyVersionCmp(v, vrange) != 0:
		case isRange && lo != "" && pyVersionCmp(v, lo) < 0:
		case isRange && hi != "" && pyVersionCmp(v, hi) >= 0:
		default:
			out = append(out, v)
		}
	}
	return out
}

func pyVersionCmp(a, b string) int {
	am, an, _ := strings.Cut(a, ".")
	bm, bn, _ := strings.Cut(b, ".")
	if c := compareNumeric(am, bm); c != 0 {
		return c
	}
	return compareNumeric(an, bn)
}

// excluded is py3compile's filter_files for one file and version.
func excluded(xs []pyExclude, f, version string) bool {
	for _, x := range xs {
		if !strings.HasPrefix(f, x.dir) || !contains(x.versions, version) {
			continue
		}
		switch x.typ {
		case "dir":
			return true
		case "file":
			if f == x.dir {
				return true
			}
		case "re":
			if x.re.MatchString(f) || x.re.MatchString(f[len(x.dir):]) {
				return true
			}
		}
	}
	return false
}

// pycCurrent is py3compile's up-to-date check: the .pyc's header is the
// timestamp form (flags 0) holding the source's mtime.
func (r *run) pycCurrent(src string, pyc []byte) bool {
	e, err := r.env.Tree.Lookup(src, true)
	if err != nil || len(pyc) < 12 {
		return false
	}
	flags := uint32(pyc[4]) | uint32(pyc[5])<<8 | uint32(pyc[6])<<16 | uint32(pyc[7])<<24
	mt := uint32(pyc[8]) | uint32(pyc[9])<<8 | uint32(pyc[10])<<16 | uint32(pyc[11])<<24
	return flags == 0 && mt == uint32(e.MTime.Unix())
}

// cmdPy3clean is py3clean -p PKG: the .pyc files of the package's
// modules go, and __pycache__ directories left empty.
func cmdPy3clean(r *run, hc interp.HandlerContext, args []string) error {
	var pkg string
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-p" || a == "--package":
			if i+1 >= len(args) {
				return exit(2)
			}
			pkg = args[i+1]
			i++
		case a == "-q" || a == "--quiet" || a == "-v" || a == "--verbose":
		default:
			return r.unhandledCommand(args)
		}
	}
	if pkg == "" {
		return r.unhandledCommand(args)
	}
	if err := r.env.settlePython(r.ctx); err != nil {
		return err
	}
	list, ok := r.listOf(pkg)
	if !ok {
		return nil
	}
	dirs := map[string]bool{}
	for _, f := range lines(list) {
		if !strings.HasSuffix(f, ".py") {
			continue
		}
		dir, name := path.Split(f)
		cache := dir + "__pycache__"
		ce, err := r.env.Tree.Lookup(cache, true)
		if err != nil || ce.Type != rootfs.TypeDir {
			continue
		}
		stem := strings.TrimSuffix(name, ".py") + "."
		for _, c := range r.env.Tree.Children(ce.Path) {
			if strings.HasPrefix(c, stem) && strings.HasSuffix(c, ".pyc") && !strings.Contains(c[len(stem):len(c)-4], ".py") {
				if err := r.env.Tree.Remove(ce.Path + "/" + c); err != nil {
					return err
				}
			}
		}
		dirs[ce.Path] = true
	}
	for d := range dirs {
		if len(r.env.Tree.Children(d)) == 0 {
			if err := r.env.Tree.Remove(d); err != nil {
				return err
			}
		}
	}
	return nil
}

// cmdPython runs the image's python3.X only as its own postinsts do:
// python3.X [-E] [-S] [-O] /usr/lib/python3.X/py_compile.py FILE...
func cmdPython(r *run, hc interp.HandlerContext, args []string) error {
	m := pyVersionRE.FindStringSubmatch(path.Base(args[0]))
	if m == nil {
		return r.unhandledCommand(args)
	}
	version := m[1]
	optimize := false
	i := 1
	for ; i < len(args) && strings.HasPrefix(args[i], "-"); i++ {
		switch args[i] {
		case "-E", "-S", "-s":
		case "-O":
			optimize = true
		default:
			return r.unhandledCommand(args)
		}
	}
	if i >= len(args) || r.treePath(hc.Dir, args[i]) != "/usr/lib/python"+version+"/py_compile.py" {
		return r.unhandled(fmt.Sprintf("command %q", shorten(strings.Join(args, " "))))
	}
	var jobs []pyCompileJob
	for _, f := range args[i+1:] {
		p := r.treePath(hc.Dir, f)
		jobs = append(jobs, pyCompileJob{src: p, pyc: pycPath(p, version, optimize)})
	}
	return r.pyCompile(hc, version, optimize, jobs)
}

func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// pyDriver compiles the files named in the jobs file (source, .pyc to
// write, path in the image, in threes) with py_compile, as py_compile's
// own main does with its operands, on as many processes as its second
// argument says: a package's modules are each compiled alone, so how they
// are shared out changes no byte, and the other cores are idle while the
// packages are configured. Errors are printed in the jobs' order.
const pyDriver = `import sys, os, py_compile
_a = open(sys.argv[1], encoding="utf-8").read().split("\n")
_j = [(_i // 3, _a[_i], _a[_i + 1], _a[_i + 2]) for _i in range(0, len(_a) - 2, 3)]
_w = max(1, min(int(sys.argv[2]), len(_j)))
def _compile(jobs):
    out = []
    for n, s, c, d in jobs:
        try:
            py_compile.compile(s, cfile=c, dfile=d, doraise=True)
        except py_compile.PyCompileError as x:
            out.append((n, x.msg))
    return out
_kids = []
for _k in range(1, _w):
    _p = os.fork()
    if _p == 0:
        _st = 1
        try:
            with open(sys.argv[1] + "." + str(_k), "w", encoding="utf-8") as _f:
                for _n, _m in _compile(_j[_k::_w]):
                    _f.write(str(_n) + "\0" + _m.replace("\0", "") + "\0")
            _st = 0
        finally:
            os._exit(_st)
    _kids.append((_k, _p))
_msgs = _compile(_j[0::_w])
_failed = False
for _k, _p in _kids:
    if os.waitpid(_p, 0)[1] != 0:
        _failed = True
        continue
    _b = open(sys.argv[1] + "." + str(_k), encoding="utf-8").read().split("\0")
    _msgs += [(int(_b[_i]), _b[_i + 1]) for _i in range(0, len(_b) - 1, 2)]
for _n, _m in sorted(_msgs):
    sys.stderr.write(_m + "\n")
if _failed:
    sys.stderr.write("py_compile: a worker failed\n")
sys.exit(1 if _msgs or _failed else 0)
`

// pyCompile asks for the jobs to be compiled by the image's python
// version. The compiles are put off (pyBatch) and run together; what a
// script sees at once is what it saw when each ran alone: an interpreter
// that is not there is not found, a build that may run no program refuses
// the command, a source that is not there is reported and passed over.
func (r *run) pyCompile(hc interp.HandlerContext, version string, optimize bool, jobs []pyCompileJob) error {
	interpPath := "/usr/bin/python" + version
	if !r.executable(interpPath) {
		return r.notFound(hc, interpPath)
	}
	if err := r.programsReady("python" + version); err != nil {
		return err
	}
	for _, j := range jobs {
		if e, err := r.env.Tree.Lookup(j.src, true); err != nil || e.Type != rootfs.TypeRegular {
			// py_compile reports a missing source and goes on.
			fmt.Fprintf(hc.Stderr, "[Errno 2] No such file or directory: '%s'\n", j.src)
			continue
		}
		r.env.pyc.add(pyPending{job: j, version: version, optimize: optimize, umask: r.umask, origin: r.origin(), s: r.s})
	}
	return nil
}

// pyBatch holds the byte-compiles asked for and not run yet. Each
// python3-* postinst asks for its own few modules; run one script at a
// time, the image's python started in the sandbox 31 times in the node's
// bootstrap, and those runs took 5-7 s with one core idle for much of it
// (most scripts compile a handful of modules). Put together they run
// once per interpreter, every core compiling.
//
// A .pyc depends only on its source and the interpreter, so the bytes are
// the same whenever the compile runs, as long as nothing the compile reads
// or writes changed in between. So the batch is settled (run, and the
// .pyc files written into the tree) before anything that could: a
// package unpacked, py3clean, another program of the image, a script that
// names .pyc files or moves or removes files (settlesFirstRE), and the
// end of the install. In the node's bootstrap that makes 7 runs of 31.
type pyBatch struct {
	jobs  []pyPending
	byPyc map[string]int
}

// pyPending is one compile asked for, with what writing its .pyc needs
// from the script that asked.
type pyPending struct {
	job      pyCompileJob
	version  string
	optimize bool
	umask    uint32
	origin   rootfs.Origin
	s        Script
}

// add files a compile; a .pyc asked for again takes the later request's
// mode and origin, as the later compile would have rewritten it.
func (b *pyBatch) add(p pyPending) {
	if b.byPyc == nil {
		b.byPyc = map[string]int{}
	}
	if i, ok := b.byPyc[p.job.pyc]; ok {
		b.jobs[i] = p
		return
	}
	b.byPyc[p.job.pyc] = len(b.jobs)
	b.jobs = append(b.jobs, p)
}

// pending says whether the .pyc at p is yet to be written.
func (b *pyBatch) pending(p string) bool {
	_, ok := b.byPyc[p]
	return ok
}

// Settle runs the byte-compiles the scripts asked for and not run yet, and
// writes their .pyc files into the tree. The caller settles before it
// changes the tree itself, and at the end of the scripts; a module that
// does not compile fails it, naming the script that asked for it.
func (e *Env) Settle(ctx context.Context) error { return e.settlePython(ctx) }

func (e *Env) settlePython(ctx context.Context) error {
	jobs := e.pyc.jobs
	if len(jobs) == 0 {
		return nil
	}
	e.pyc = pyBatch{}
	// One run per interpreter and optimization, in the order first asked.
	type group struct {
		version  string
		optimize bool
	}
	var order []group
	byGroup := map[group][]pyPending{}
	for _, p := range jobs {
		g := group{p.version, p.optimize}
		if _, ok := byGroup[g]; !ok {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], p)
	}
	for _, g := range order {
		if err := e.compileBatch(ctx, g.version, g.optimize, byGroup[g]); err != nil {
			return err
		}
	}
	return nil
}

// compileBatch runs the image's python version on the jobs, in the sandbox
// (the tree read-only, the .pyc files written to the run's output
// directory), and writes the .pyc files into the tree.
func (e *Env) compileBatch(ctx context.Context, version string, optimize bool, jobs []pyPending) error {
	var staged []pyPending
	for _, p := range jobs {
		if se, err := e.Tree.Lookup(p.job.src, true); err == nil && se.Type == rootfs.TypeRegular {
			staged = append(staged, p)
		}
	}
	if len(staged) == 0 {
		return nil
	}
	prepare := func(ir *imageRun) error {
		var list strings.Builder
		for i, p := range staged {
			fmt.Fprintf(&list, "%s\n%s\n%s\n", p.job.src, ir.inside(strconv.Itoa(i)+".pyc"), p.job.src)
		}
		return ir.write("jobs", []byte(list.String()))
	}
	argv := []string{"/usr/bin/python" + version, "-S", "-s"}
	if optimize {
		argv = append(argv, "-O")
	}
	argv = append(argv, "-c", pyDriver, sandbox.OutputDir+"/jobs", strconv.Itoa(runtime.GOMAXPROCS(0)))
	env := []string{"LC_ALL=C.UTF-8", "PYTHONDONTWRITEBYTECODE=1", "PYTHONHASHSEED=0"}
	var printed bytes.Buffer
	ir, runErr := e.runProgram(ctx, staged[0].s, &printed, "python"+version, "", env, prepare, argv...)
	if ir == nil {
		return runErr
	}
	defer ir.done()
	var failed []pyPending
	for i, p := range staged {
		b, err := ir.read(strconv.Itoa(i) + ".pyc")
		if err != nil {
			failed = append(failed, p)
			continue
		}
		if err := e.writePyc(p, b); err != nil {
			return err
		}
	}
	if runErr != nil || len(failed) > 0 {
		// Named by the first script whose module did not compile; the
		// interpreter's messages say which modules and why.
		s := staged[0].s
		if len(failed) > 0 {
			s = failed[0].s
		}
		return &ScriptError{Package: s.Package, Script: s.Name, Status: 1,
			Output: strings.TrimSpace(fmt.Sprintf("python%s could not compile what it asked for:\n%s", version, printed.String()))}
	}
	if e.Logf != nil {
		// What python printed went to the script's log when each script
		// ran its own compile; it goes to the build's log now.
		if out := strings.TrimSpace(printed.String()); out != "" {
			e.Logf("python%s: %s", version, out)
		}
		e.Logf("python%s: compiled %d modules with the image's interpreter, in the sandbox", version, len(staged))
	}
	return nil
}

// writePyc puts a compiled module into the tree: __pycache__ made as
// mkdir under the umask makes it, the file with importlib's mode.
func (e *Env) writePyc(p pyPending, data []byte) error {
	t := e.Tree
	j := p.job
	se, err := t.Lookup(j.src, true)
	if err != nil {
		return err
	}
	dir := path.Dir(j.pyc)
	if _, err := t.Lookup(dir, true); err != nil {
		if _, err := t.MkdirAll(dir, rootfs.Header{Perm: 0o755, MTime: e.Epoch, Origin: p.origin}); err != nil {
			return err
		}
		rd, _ := t.Resolve(dir, true)
		if err := t.Update(rd, func(in *rootfs.Inode) { in.Perm = 0o777 &^ p.umask }); err != nil {
			return err
		}
	}
	perm := (se.Perm | 0o200) & 0o666 &^ p.umask
	if _, err := t.Lookup(j.pyc, false); err == nil {
		if err := t.Remove(j.pyc); err != nil {
			return err
		}
	}
	rp, err := t.Resolve(j.pyc, true)
	if err != nil {
		return err
	}
	_, err = t.Create(rp, rootfs.Header{Type: rootfs.TypeRegular, Perm: perm, MTime: e.Epoch, Origin: p.origin}, bytes.NewReader(data))
	return err
}
