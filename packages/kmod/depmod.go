// Package kmod writes the module indexes of a kernel, byte for byte as
// Debian bookworm's kmod 30 `depmod -b ROOT VERSION` writes them, without
// running any program: modules.dep and modules.dep.bin, modules.alias(.bin),
// modules.symbols(.bin), modules.builtin.bin, modules.builtin.alias.bin,
// modules.softdep and modules.devname.
//
// It reads the image through an fs.FS whose root is the image's root: the
// modules under lib/modules/VERSION (.ko, .ko.xz, .ko.zst), modules.order,
// modules.builtin and modules.builtin.modinfo beside them, and the depmod.d
// configuration (search, override, external, exclude) of the image. Like
// Debian's postinst it works without a System.map: the kernel's own symbols
// are unknown, and a module that needs only those depends on nothing.
//
// Where kmod's output depends on its own data structures (the order of its
// hash tables, the order of its topological sort, the order of equal
// values in its tries), this package reproduces them. What it cannot
// reproduce is the one place kmod depends on the file system: of two modules
// of the same name and the same priority, kmod keeps the one readdir(3)
// returns first, this package the first in byte order of the path.
package kmod

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/stamp-dev/stamp/rootfs"
)

// moduleExts are the file name endings of modules that Debian's kmod 30
// (+ZSTD +XZ -ZLIB) takes for modules.
var moduleExts = []string{".ko", ".ko.xz", ".ko.zst"}

// Options adjust a run; the zero value is the image's own `depmod VERSION`
// (kmod's `depmod -b ROOT VERSION` with the image's depmod.d).
type Options struct {
	// ConfigDirs replace DefaultConfigDirs (image paths, directories or
	// files), as depmod's -C does.
	ConfigDirs []string
	// Warnf receives what kmod prints as warnings and errors, one line a
	// call without the newline; nil drops them.
	Warnf func(format string, args ...any)
	// Verbosef receives what depmod -v prints; nil drops it.
	Verbosef func(format string, args ...any)
	// WarnDups warns of duplicate index values, as depmod -w does.
	WarnDups bool
	// Workers read modules in parallel; 0 means GOMAXPROCS.
	Workers int
	// MaxModuleSize bounds what a compressed module may decompress to;
	// 0 means DefaultMaxModuleSize.
	MaxModuleSize int64
}

// Index is one file depmod writes into the module directory.
type Index struct {
	Name string
	Data []byte
}

// CycleError is depmod's failure when modules depend on each other in a
// circle: kmod then writes no index at all.
type CycleError struct {
	// Cycles name each cycle's modules, the first again at the end.
	Cycles [][]string
	// Modules is how many modules are in cycles.
	Modules int
}

func (e *CycleError) Error() string {
	var b strings.Builder
	for _, c := range e.Cycles {
		fmt.Fprintf(&b, "Cycle detected: %s\n", strings.Join(c, " -> "))
	}
	fmt.Fprintf(&b, "Found %d modules in dependency cycles!", e.Modules)
	return b.String()
}

// ValidVersion is depmod's test of its version argument: it must start
// with two numbers and a dot between them.
func ValidVersion(v string) bool {
	i := 0
	num := func() bool {
		for i < len(v) && isSpace(v[i]) {
			i++
		}
		if i < len(v) && (v[i] == '+' || v[i] == '-') {
			i++
		}
		start := i
		for i < len(v) && v[i] >= '0' && v[i] <= '9' {
			i++
		}
		return i > start
	}
	if !num() || i >= len(v) || v[i] != '.' {
		return false
	}
	i++
	return num()
}

func isSpace(c byte) bool { return c == ' ' || (c >= '\t' && c <= '\r') }

// module is kmod's struct mod.
type module struct {
	name string
	// path is the module's image path (kmod's absolute path without the
	// -b root); rel is it relative to the module directory, empty for one
	// outside it (an external directory).
	path, rel string
	// order is relpath cut to the module's name plus ".ko": how
	// modules.order names it.
	order string
	// sortIdx places the module by modules.order; idx is its place in
	// the module order (an index value's priority), depSortIdx in the
	// topological sort.
	sortIdx, idx, depSortIdx int
	// users counts the modules that need this one, deps are the modules
	// it needs, in the order it first needs them.
	users int
	deps  []*module
	data  moduleData
	// depLine is its modules.dep line without the newline.
	depLine string
}

// shown is how the indexes name a module: relative to the module
// directory, else by its full path.
func (m *module) shown() string {
	if m.rel != "" {
		return m.rel
	}
	return m.path
}

type depmod struct {
	fsys    fs.FS
	cfg     *config
	dirname string // "/lib/modules/VERSION"
	opts    Options
	byName  map[string]*module
	byOrder map[string]*module
	modules []*module
	// symbols are the exported symbols by name, with the module that
	// exports each (the last one in module order).
	symbols map[string]*module
}

// Depmod computes the indexes of the kernel version whose modules are under
// lib/modules/version of the image fsys, in the order kmod writes them.
func Depmod(ctx context.Context, fsys fs.FS, version string, opts Options) ([]Index, error) {
	if !ValidVersion(version) || strings.Contains(version, "/") {
		return nil, fmt.Errorf("depmod: bad version %q", version)
	}
	d := &depmod{fsys: fsys, dirname: "/lib/modules/" + version, opts: opts,
		byName: map[string]*module{}, byOrder: map[string]*module{}}
	if d.opts.Warnf == nil {
		d.opts.Warnf = func(string, ...any) {}
	}
	dirs := opts.ConfigDirs
	if dirs == nil {
		dirs = DefaultConfigDirs
	}
	d.cfg = loadConfig(fsys, dirs, version, d.opts.Warnf)
	if err := d.search(ctx); err != nil {
		return nil, err
	}
	d.buildArray()
	d.sortByOrder()
	if err := d.load(ctx); err != nil {
		return nil, err
	}
	d.loadDependencies()
	if err := d.calculateDependencies(); err != nil {
		return nil, err
	}
	return d.output()
}

// search finds the modules of the module directory and of the external
// directories, keeping one per name as kmod's priorities say.
func (d *depmod) search(ctx context.Context) error {
	fi, err := fs.Stat(d.fsys, fsPath(d.dirname))
	if err != nil {
		return fmt.Errorf("depmod: could not open directory %s: %w", d.dirname, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("depmod: could not open directory %s: not a directory", d.dirname)
	}
	if err := d.searchDir(ctx, d.dirname+"/", []fs.FileInfo{fi}); err != nil {
		return err
	}
	// kmod walks the external directories newest line first.
	for _, ext := range d.cfg.externals {
		fi, err := fs.Stat(d.fsys, fsPath(ext))
		if err != nil || !fi.IsDir() {
			continue
		}
		base := ext
		if !path.IsAbs(base) {
			// Relative to the working directory, "/" under dpkg.
			base = "/" + base
		}
		if err := d.searchDir(ctx, base+"/", []fs.FileInfo{fi}); err != nil {
			return err
		}
	}
	return nil
}

// searchDir walks the directory whose path (ending in "/") is dir.
// ancestors are the directories walked into, so that a symlink back to one
// of them is not followed round.
func (d *depmod) searchDir(ctx context.Context, dir string, ancestors []fs.FileInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ents, err := fs.ReadDir(d.fsys, fsPath(dir))
	if err != nil {
		d.opts.Warnf("could not open directory %s: %v", strings.TrimSuffix(dir, "/"), err)
		return nil
	}
	for _, de := range ents {
		name := de.Name()
		if d.cfg.excluded(name) {
			continue
		}
		p := dir + name
		isDir := de.IsDir()
		var fi fs.FileInfo
		switch {
		case de.Type().IsRegular():
		case isDir:
			if fi, err = de.Info(); err != nil {
				d.opts.Warnf("fstatat(%s): %v", p, err)
				continue
			}
		default:
			if fi, err = fs.Stat(d.fsys, fsPath(p)); err != nil {
				d.opts.Warnf("fstatat(%s): %v", p, err)
				continue
			}
			switch {
			case fi.Mode().IsRegular():
			case fi.IsDir():
				isDir = true
			default:
				d.opts.Warnf("unsupported file type %s: %o", p, unixType(fi.Mode()))
				continue
			}
		}
		if isDir {
			if slices.ContainsFunc(ancestors, func(a fs.FileInfo) bool { return sameDir(a, fi) }) {
				d.opts.Warnf("%s: a symlink to a directory it is in; not followed", p)
				continue
			}
			if err := d.searchDir(ctx, p+"/", append(ancestors, fi)); err != nil {
				return err
			}
			continue
		}
		d.searchFile(dir, name)
	}
	return nil
}

// unixType is the S_IFMT bits of a file type kmod does not read.
func unixType(m fs.FileMode) uint32 {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return syscall.S_IFIFO
	case m&fs.ModeSocket != 0:
		return syscall.S_IFSOCK
	case m&fs.ModeCharDevice != 0:
		return syscall.S_IFCHR
	case m&fs.ModeDevice != 0:
		return syscall.S_IFBLK
	}
	return 0
}

// sameDir tells whether two directories found by the walk are one.
func sameDir(a, b fs.FileInfo) bool {
	if a == nil || b == nil {
		return false
	}
	if ea, ok := a.Sys().(*rootfs.Entry); ok {
		eb, ok := b.Sys().(*rootfs.Entry)
		return ok && ea.Path == eb.Path
	}
	return os.SameFile(a, b)
}

// modname is path_to_modname: the file name up to its first dot, dashes
// made underscores.
func modname(base string) string {
	if i := strings.IndexByte(base, '.'); i >= 0 {
		base = base[:i]
	}
	return strings.ReplaceAll(base, "-", "_")
}

// searchFile is depmod_modules_search_file for the file name in dir.
func (d *depmod) searchFile(dir, name string) {
	if !isModuleName(name) {
		return
	}
	p := dir + name
	mn := modname(name)
	if old := d.byName[mn]; old != nil {
		if d.higherPriority(old, len(dir), len(mn), p) {
			return
		}
		delete(d.byName, old.name)
		if old.order != "" {
			delete(d.byOrder, old.order)
		}
	}
	m := &module{name: mn, path: p, sortIdx: 1}
	if strings.HasPrefix(p, d.dirname+"/") {
		m.rel = p[len(d.dirname)+1:]
		// relpath's directory, a slash and as many bytes of the file name
		// as the module's name has, plus ".ko".
		n := strings.LastIndexByte(m.rel, '/') + 1 + len(mn) + len(".ko")
		m.order = m.rel[:min(n, len(m.rel))]
		if other := d.byOrder[m.order]; other != nil {
			d.opts.Warnf("could not add module %s: %s is already taken", p, m.order)
			return
		}
		d.byOrder[m.order] = m
	}
	d.byName[mn] = m
}

// higherPriority is depmod_module_is_higher_priority: whether old, already
// found, wins over the file newpath of the same module name. baselen is the
// length of newpath's directory with its slash, namelen the module name's.
func (d *depmod) higherPriority(old *module, baselen, namelen int, newpath string) bool {
	cfg := d.cfg
	newlen := baselen + namelen
	oldlen := strings.LastIndexByte(old.path, '/') + 1 + len(old.name)
	dn := len(d.dirname)
	var relNew, relOld string
	hasNew, hasOld := false, false
	if strings.HasPrefix(newpath, d.dirname) && newlen >= dn+1 {
		relNew, hasNew = newpath[dn+1:newlen], true
	}
	if strings.HasPrefix(old.path, d.dirname) && oldlen >= dn+1 {
		relOld, hasOld = old.path[dn+1:oldlen], true
	}
	for _, ov := range cfg.overrides {
		if hasNew && relNew == ov {
			return false
		}
		if hasOld && relOld == ov {
			return true
		}
	}
	under := func(p string, plen int, prefix string) bool {
		return plen > len(prefix) && p[len(prefix)] == '/' && p[:len(prefix)] == prefix
	}
	bprio, oldprio, newprio := -1, -1, -1
	for i, k := 0, 0; k < len(cfg.searches); i, k = i+1, k+1 {
		se := cfg.searches[k]
		switch {
		case se.kind == searchIsBuiltin:
			bprio = i
		case se.kind == searchIsExternal:
			for _, ext := range cfg.externals {
				if under(newpath, newlen, ext) {
					newprio = i
				}
				if under(old.path, oldlen, ext) {
					oldprio = i
				}
				i++
			}
		case hasNew && len(relNew) > len(se.path) && relNew[len(se.path)] == '/' && relNew[:len(se.path)] == se.path:
			newprio = i
		case hasOld && len(relOld) > len(se.path) && relOld[len(se.path)] == '/' && relOld[:len(se.path)] == se.path:
			oldprio = i
		}
	}
	if newprio < 0 {
		newprio = bprio
	}
	if oldprio < 0 {
		oldprio = bprio
	}
	return newprio <= oldprio
}

// buildArray lists the modules in the order of kmod's table of modules by
// name.
func (d *depmod) buildArray() {
	d.modules = make([]*module, 0, len(d.byName))
	for _, m := range d.byName {
		d.modules = append(d.modules, m)
	}
	hashOrder(d.modules, func(m *module) string { return m.name }, moduleBuckets)
	for i, m := range d.modules {
		m.idx = i
	}
}

// sortByOrder is depmod_modules_sort: the modules modules.order names come
// first, in its order (a name listed twice counts where it is listed last),
// the rest after them in the order they had. A modules.order whose last line
// has no newline, or that has a line longer than kmod's buffer, is not used.
func (d *depmod) sortByOrder() {
	b, err := fs.ReadFile(d.fsys, fsPath(d.dirname+"/modules.order"))
	if err != nil {
		return
	}
	chunks := fgetsChunks(b)
	for _, c := range chunks {
		if c != "" && c[len(c)-1] != '\n' {
			d.opts.Warnf("%s/modules.order corrupted line misses '\\n'", d.dirname)
			return
		}
	}
	total := len(chunks) + 1
	for i, c := range chunks {
		if c == "" {
			continue
		}
		if m := d.byOrder[c[:len(c)-1]]; m != nil {
			m.sortIdx = i + 1 - total
		}
	}
	slices.SortStableFunc(d.modules, func(a, b *module) int { return a.sortIdx - b.sortIdx })
	for i, m := range d.modules {
		m.idx = i
	}
}

// pathMax is the size of kmod's line buffers.
const pathMax = 4096

// fgetsChunks splits b as fgets(buf, PATH_MAX) reads it: lines with their
// newline, a longer line in pieces of PATH_MAX-1 bytes, each cut at its
// first NUL as C's string functions see it.
func fgetsChunks(b []byte) []string {
	var out []string
	for len(b) > 0 {
		n := bytes.IndexByte(b, '\n') + 1
		if n == 0 || n > pathMax-1 {
			n = min(len(b), pathMax-1)
		}
		out = append(out, cString(b[:n]))
		b = b[n:]
	}
	return out
}

// load reads every module, on every core, and then their exported symbols
// in module order (the last module exporting a name owns it).
func (d *depmod) load(ctx context.Context) error {
	workers := d.opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	workers = max(1, min(workers, len(d.modules)))
	next := make(chan *module)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			limit := d.opts.MaxModuleSize
			if limit <= 0 {
				limit = DefaultMaxModuleSize
			}
			r := newReader(d.fsys, limit)
			defer r.close()
			for m := range next {
				m.data = r.read(fsPath(m.path))
			}
		}()
	}
	var err error
	for _, m := range d.modules {
		if err = ctx.Err(); err != nil {
			break
		}
		next <- m
	}
	close(next)
	wg.Wait()
	if err != nil {
		return err
	}
	d.symbols = map[string]*module{}
	for _, m := range d.modules {
		if isKmodErr(m.data.exportsErr) {
			d.opts.Warnf("failed to load symbols from %s: %v", m.path, m.data.exportsErr)
		}
		for _, s := range m.data.exports {
			if s != "" {
				d.symbols[s] = m
			}
		}
	}
	return nil
}

// findSymbol is depmod_symbol_find without a symbol prefix: ".foo" is foo,
// as on PPC64.
func (d *depmod) findSymbol(name string) *module {
	return d.symbols[strings.TrimPrefix(name, ".")]
}

// loadDependencies gives each module the modules whose symbols it needs,
// in the order it first needs them.
func (d *depmod) loadDependencies() {
	for _, m := range d.modules {
		for _, s := range m.data.needs {
			owner := d.findSymbol(s.name)
			if owner == nil || slices.Contains(m.deps, owner) {
				continue
			}
			m.deps = append(m.deps, owner)
			owner.users++
			if d.opts.Verbosef != nil {
				d.opts.Verbosef("%s needs \"%s\": %s", m.path, strings.TrimPrefix(s.name, "."), owner.path)
			}
		}
	}
}

// calculateDependencies is kmod's topological sort: modules no module
// needs first, taken from a stack, each module's dependencies pushed as
// their last user is taken.
func (d *depmod) calculateDependencies() error {
	users := make([]int, len(d.modules))
	var roots []int
	for i, m := range d.modules {
		users[i] = m.users
		if users[i] == 0 {
			roots = append(roots, i)
		}
	}
	sorted := 0
	for len(roots) > 0 {
		src := d.modules[roots[len(roots)-1]]
		roots = roots[:len(roots)-1]
		src.depSortIdx = sorted
		sorted++
		for _, dst := range src.deps {
			users[dst.idx]--
			if users[dst.idx] == 0 {
				roots = append(roots, dst.idx)
			}
		}
	}
	if sorted < len(d.modules) {
		return d.cycles(users)
	}
	return nil
}

// cycles reports the modules left with users after the sort: those in
// cycles, and those only modules in cycles need.
func (d *depmod) cycles(users []int) error {
	// Tarjan's strongly connected components over what is left.
	left := func(m *module) bool { return users[m.idx] > 0 }
	index := make([]int, len(d.modules))
	low := make([]int, len(d.modules))
	on := make([]bool, len(d.modules))
	for i := range index {
		index[i] = -1
	}
	var stack []*module
	counter := 0
	e := &CycleError{}
	var visit func(m *module)
	visit = func(m *module) {
		index[m.idx], low[m.idx] = counter, counter
		counter++
		stack = append(stack, m)
		on[m.idx] = true
		for _, w := range m.deps {
			if !left(w) {
				continue
			}
			if index[w.idx] < 0 {
				visit(w)
				low[m.idx] = min(low[m.idx], low[w.idx])
			} else if on[w.idx] {
				low[m.idx] = min(low[m.idx], index[w.idx])
			}
		}
		if low[m.idx] != index[m.idx] {
			return
		}
		var comp []*module
		for {
			w := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			on[w.idx] = false
			comp = append(comp, w)
			if w == m {
				break
			}
		}
		if len(comp) == 1 && !slices.Contains(m.deps, m) {
			return
		}
		e.Modules += len(comp)
		e.Cycles = append(e.Cycles, d.cycleThrough(comp))
	}
	for _, m := range d.modules {
		if left(m) && index[m.idx] < 0 {
			visit(m)
		}
	}
	return e
}

// cycleThrough names one cycle inside a strongly connected component,
// starting at its first module in module order.
func (d *depmod) cycleThrough(comp []*module) []string {
	in := map[*module]bool{}
	start := comp[0]
	for _, m := range comp {
		in[m] = true
		if m.idx < start.idx {
			start = m
		}
	}
	// Breadth-first from start back to start, inside the component.
	prev := map[*module]*module{}
	queue := []*module{start}
	for len(queue) > 0 {
		m := queue[0]
		queue = queue[1:]
		for _, w := range m.deps {
			if !in[w] {
				continue
			}
			if w == start {
				names := []string{start.name}
				for c := m; c != start; c = prev[c] {
					names = append(names, c.name)
				}
				slices.Reverse(names[1:])
				return append(names, start.name)
			}
			if _, seen := prev[w]; !seen {
				prev[w] = m
				queue = append(queue, w)
			}
		}
	}
	return []string{start.name}
}

// allDependencies is every module m needs, directly or not, in the order of
// the topological sort.
func allDependencies(m *module) []*module {
	seen := map[*module]bool{}
	var out []*module
	var walk func(*module)
	walk = func(m *module) {
		for _, dep := range m.deps {
			if !seen[dep] {
				seen[dep] = true
				out = append(out, dep)
				walk(dep)
			}
		}
	}
	walk(m)
	slices.SortFunc(out, func(a, b *module) int { return a.depSortIdx - b.depSortIdx })
	return out
}
