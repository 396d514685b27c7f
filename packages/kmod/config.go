package kmod

import (
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"
)

// DefaultConfigDirs are where kmod 30's depmod reads its configuration, in
// order: a file name in an earlier directory hides the same name in a later
// one. Debian's kmod 30 reads no /usr/lib/depmod.d; on a merged-/usr image
// /lib/depmod.d is that directory.
var DefaultConfigDirs = []string{"/etc/depmod.d", "/run/depmod.d", "/usr/local/lib/depmod.d", "/lib/depmod.d"}

// Search entries that are not directories.
const (
	searchBuiltin  = "built-in"
	searchExternal = "external"
)

type searchKind int

const (
	searchPath searchKind = iota
	searchIsBuiltin
	searchIsExternal
)

type search struct {
	kind searchKind
	path string
}

// config is depmod.d's configuration for one kernel version. kmod keeps
// each list with the newest line first, and its priorities depend on that
// order, so the lists here are kept the same way.
type config struct {
	kversion  string
	overrides []string // subdir/modname, as written
	searches  []search
	externals []string
	excludes  []string
}

// loadConfig reads the configuration files of dirs from the image, in the
// order kmod reads them: by file name, the first directory holding a name
// giving it.
func loadConfig(fsys fs.FS, dirs []string, kversion string, warnf func(string, ...any)) *config {
	c := &config{kversion: kversion}
	type cfgFile struct{ name, path string }
	var files []cfgFile
	add := func(name, p string) {
		i, found := slices.BinarySearchFunc(files, name, func(f cfgFile, n string) int { return strings.Compare(f.name, n) })
		if !found {
			files = slices.Insert(files, i, cfgFile{name, p})
		}
	}
	for _, d := range dirs {
		fi, err := fs.Stat(fsys, fsPath(d))
		if err != nil {
			continue
		}
		if !fi.IsDir() {
			add(path.Base(d), d)
			continue
		}
		ents, err := fs.ReadDir(fsys, fsPath(d))
		if err != nil {
			warnf("files list %s: %v", d, err)
			continue
		}
		for _, de := range ents {
			name := de.Name()
			if name[0] == '.' {
				continue
			}
			if len(name) < 6 || !strings.HasSuffix(name, ".conf") {
				warnf("All cfg files need .conf: %s/%s", d, name)
				continue
			}
			if fi, err := fs.Stat(fsys, fsPath(d+"/"+name)); err == nil && fi.IsDir() {
				warnf("Directories inside directories are not supported: %s/%s", d, name)
				continue
			}
			add(name, d+"/"+name)
		}
	}
	for _, f := range files {
		b, err := fs.ReadFile(fsys, fsPath(f.path))
		if err != nil {
			warnf("file parse %s: %v", f.path, err)
			continue
		}
		c.parse(f.path, b, warnf)
	}
	// For backward compatibility "updates" comes first when nothing says
	// where to search.
	if len(c.searches) == 0 {
		c.searches = []search{{kind: searchPath, path: "updates"}}
	}
	return c
}

// parse reads one file as cfg_file_parse does.
func (c *config) parse(name string, b []byte, warnf func(string, ...any)) {
	lines := wrappedLines(b)
	for _, l := range lines {
		if l.text == "" || l.text[0] == '#' {
			continue
		}
		f := strings.FieldsFunc(l.text, func(r rune) bool { return r == ' ' || r == '\t' })
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "search":
			for _, s := range f[1:] {
				se := search{kind: searchPath, path: s}
				switch s {
				case searchBuiltin:
					se = search{kind: searchIsBuiltin}
				case searchExternal:
					se = search{kind: searchIsExternal}
				}
				c.searches = slices.Insert(c.searches, 0, se)
			}
		case "override":
			if len(f) < 4 {
				warnf("%s:%d: ignoring bad line starting with '%s'", name, l.num, f[0])
				continue
			}
			if c.kernelMatches(f[2]) {
				c.overrides = slices.Insert(c.overrides, 0, f[3]+"/"+f[1])
			}
		case "external":
			if len(f) < 3 {
				warnf("%s:%d: ignoring bad line starting with '%s'", name, l.num, f[0])
				continue
			}
			if c.kernelMatches(f[1]) {
				c.externals = slices.Insert(c.externals, 0, f[2])
			}
		case "exclude":
			c.excludes = append(c.excludes, f[1:]...)
		case "include", "make_map_files":
			// Not implemented by kmod either.
		default:
			warnf("%s:%d: ignoring bad line starting with '%s'", name, l.num, f[0])
		}
	}
}

// kernelMatches is cfg_kernel_matches: "*", or an extended regular
// expression found anywhere in the version.
func (c *config) kernelMatches(pattern string) bool {
	if pattern == "*" {
		return true
	}
	re, err := regexp.CompilePOSIX(pattern)
	if err != nil {
		return false
	}
	return re.MatchString(c.kversion)
}

func (c *config) excluded(name string) bool {
	if name == "." || name == ".." || name == "build" || name == "source" {
		return true
	}
	return slices.Contains(c.excludes, name)
}

type line struct {
	text string
	num  int // the number of the line it ends on
}

// wrappedLines splits a configuration file as kmod's freadline_wrapped
// reads it: a backslash before a newline joins two lines, a backslash
// before anything else is dropped, and a NUL ends what C sees of a line.
func wrappedLines(b []byte) []line {
	var out []line
	var cur []byte
	num := 0
	for i := 0; i < len(b); i++ {
		c := b[i]
		switch c {
		case '\n':
			num++
			out = append(out, line{cString(cur), num})
			cur = cur[:0]
			continue
		case '\\':
			if i+1 < len(b) && b[i+1] == '\n' {
				i++
				num++
				continue
			}
			if i+1 >= len(b) {
				// getc's EOF, stored as a byte.
				cur = append(cur, 0xff)
				continue
			}
			i++
			c = b[i]
		}
		cur = append(cur, c)
	}
	if len(cur) > 0 {
		num++
		out = append(out, line{cString(cur), num})
	}
	return out
}

// fsPath turns an absolute image path into an fs.FS name.
func fsPath(p string) string {
	p = path.Clean("/" + p)
	if p == "/" {
		return "."
	}
	return p[1:]
}
