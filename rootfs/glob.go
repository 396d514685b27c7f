package rootfs

import (
	"path"
	"sort"
	"strings"
)

// Match reports whether the clean absolute path p matches pattern. Each
// segment matches as path.Match does; a "**" segment matches any number of
// segments, except that a trailing "/**" needs at least one, so "/var/log/**"
// names what is under /var/log and not the directory itself.
func Match(pattern, p string) bool {
	g := compileGlob(pattern)
	return matchSegs(g.segs, splitPath(p), g.trailing)
}

// ValidPattern reports whether every segment of pattern is well formed.
func ValidPattern(pattern string) bool {
	if !strings.HasPrefix(pattern, "/") {
		return false
	}
	for _, s := range splitPath(pattern) {
		if _, err := path.Match(s, ""); err != nil {
			return false
		}
	}
	return true
}

func matchSegs(pat, segs []string, trailing bool) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			rest := pat[1:]
			if len(rest) == 0 {
				return !trailing || len(segs) > 0
			}
			for i := 0; i <= len(segs); i++ {
				if matchSegs(rest, segs[i:], trailing) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, _ := path.Match(pat[0], segs[0]); !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

// Glob returns every path in the tree matching pattern, in byte order.
// Only the paths under the pattern's leading literal segments are matched:
// they are one run of the sorted paths, found by binary search, so that
// sealing, which globs once per log file, does not read every path each
// time.
func (t *Tree) Glob(pattern string) []string {
	g := compileGlob(pattern)
	paths := t.Paths()
	if g.prefix != "" {
		paths = paths[sort.SearchStrings(paths, g.prefix):]
	}
	var out, segs []string
	for _, p := range paths {
		if !strings.HasPrefix(p, g.prefix) {
			break
		}
		if p == "/" {
			continue
		}
		segs = appendSegs(segs[:0], p)
		if matchSegs(g.segs, segs, g.trailing) {
			out = append(out, p)
		}
	}
	return out
}

// glob is a pattern split once, to match many paths.
type glob struct {
	segs     []string
	trailing bool
	// prefix is the pattern's leading segments that hold no wildcard or
	// escape, as a path ("" when the first one does): every path it
	// matches starts with it.
	prefix string
}

func compileGlob(pattern string) glob {
	g := glob{segs: splitPath(pattern), trailing: strings.HasSuffix(pattern, "/**")}
	for _, s := range g.segs {
		if strings.ContainsAny(s, `*?[\`) {
			break
		}
		g.prefix += "/" + s
	}
	return g
}

// appendSegs appends the segments of the path p to segs: its components
// without the empty and "." ones. Glob reuses one slice for every path.
func appendSegs(segs []string, p string) []string {
	for p != "" {
		i := strings.IndexByte(p, '/')
		if i < 0 {
			i = len(p)
		}
		if c := p[:i]; c != "" && c != "." {
			segs = append(segs, c)
		}
		p = p[min(i+1, len(p)):]
	}
	return segs
}

// RemoveGlob removes every entry matching pattern and returns what it removed
// (a directory's contents are not listed separately).
func (t *Tree) RemoveGlob(pattern string) ([]string, error) {
	var removed []string
	for _, p := range t.Glob(pattern) {
		if t.entries[p] == nil {
			continue // went with a directory removed before it
		}
		if err := t.remove(p); err != nil {
			return removed, err
		}
		removed = append(removed, p)
	}
	return removed, nil
}
