package ldcache

import (
	"bytes"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
)

// maxIncludeDepth bounds include nesting. ldconfig itself has no bound and
// recurses until it runs out of file descriptors or stack.
const maxIncludeDepth = 64

// isSpace is C isspace in the C locale.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// isBlank is C isblank.
func isBlank(c byte) bool { return c == ' ' || c == '\t' }

// readConf returns the content of a configuration file, or ok=false when
// ldconfig could not read it (missing, dangling, a directory...), which it
// skips with at most a warning.
func (b *builder) readConf(name string) ([]byte, bool, error) {
	rp, err := b.t.Resolve(name, true)
	if err != nil {
		return nil, false, nil
	}
	e := b.t.Get(rp)
	if e == nil || e.Type != rootfs.TypeRegular {
		return nil, false, nil
	}
	f, err := b.t.Open(rp)
	if err != nil {
		return nil, false, fmt.Errorf("ldcache: %s: %w", name, err)
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, false, fmt.Errorf("ldcache: %s: %w", name, err)
	}
	return data, true, nil
}

// parseConf is ldconfig's parse_conf.
func (b *builder) parseConf(filename string, depth int) error {
	if depth > maxIncludeDepth {
		return fmt.Errorf("ldcache: %s: include nesting deeper than %d", filename, maxIncludeDepth)
	}
	data, ok, err := b.readConf(filename)
	if err != nil || !ok {
		return err
	}
	for len(data) > 0 {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		// C string handling stops at a NUL.
		if i := bytes.IndexByte(line, 0); i >= 0 {
			line = line[:i]
		}
		if i := bytes.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		cp := string(line)
		for len(cp) > 0 && isSpace(cp[0]) {
			cp = cp[1:]
		}
		if cp == "" {
			continue
		}
		if strings.HasPrefix(cp, "include") && len(cp) > 7 && isBlank(cp[7]) {
			for _, word := range strings.FieldsFunc(cp[8:], func(r rune) bool { return r == ' ' || r == '\t' }) {
				if err := b.parseConfInclude(filename, word, depth); err != nil {
					return err
				}
			}
			continue
		}
		if len(cp) > 5 && strings.EqualFold(cp[:5], "hwcap") && isBlank(cp[5]) {
			continue // "hwcap directive ignored"
		}
		b.addDir(cp)
	}
	return nil
}

// parseConfInclude is ldconfig's parse_conf_include: the pattern is relative
// to the including file's directory, globbed, and the matches read in order.
func (b *builder) parseConfInclude(config, pattern string, depth int) error {
	if pattern[0] != '/' && strings.Contains(config, "/") {
		pattern = dirname(config) + "/" + pattern
	}
	for _, m := range b.glob(pattern) {
		if err := b.parseConf(m, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// dirname is dirname(3) for a file name (no trailing slash): unlike
// path.Dir it does not clean the path, so ".." still follows symlinks.
func dirname(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "."
	}
	j := i
	for j > 0 && p[j-1] == '/' {
		j--
	}
	if j == 0 {
		if i == 1 {
			return "//"
		}
		return "/"
	}
	return p[:j]
}

// glob is glob(3) with no flags over the tree: components with wildcards are
// matched against directory listings (a leading dot only explicitly), the
// others taken as they are; the results are sorted as the C locale does.
func (b *builder) glob(pattern string) []string {
	if !hasMeta(pattern) {
		// Whether it exists does not matter: a missing file is skipped
		// silently by parse_conf as well.
		return []string{unescape(pattern)}
	}
	prefix := ""
	rest := pattern
	if strings.HasPrefix(rest, "/") {
		i := 0
		for i < len(rest) && rest[i] == '/' {
			i++
		}
		prefix, rest = rest[:i], rest[i:]
	}
	comps := strings.Split(rest, "/")
	cur := []string{prefix}
	for ci, comp := range comps {
		last := ci == len(comps)-1
		var next []string
		for _, dir := range cur {
			join := func(name string) string {
				if dir == "" || strings.HasSuffix(dir, "/") {
					return dir + name
				}
				return dir + "/" + name
			}
			if comp == "" {
				// "a//b" or a trailing slash: keep the separator.
				next = append(next, join(""))
				continue
			}
			if !hasMeta(comp) {
				p := join(unescape(comp))
				if last || b.isDir(p) {
					next = append(next, p)
				}
				continue
			}
			lookDir := dir
			if lookDir == "" {
				lookDir = "."
			}
			names, ok := b.listDir(lookDir)
			if !ok {
				continue
			}
			for _, name := range append([]string{".", ".."}, names...) {
				if !fnmatch(comp, name) {
					continue
				}
				p := join(name)
				if last || b.isDir(p) {
					next = append(next, p)
				}
			}
		}
		cur = next
	}
	sort.Strings(cur)
	return cur
}

func (b *builder) isDir(p string) bool {
	e, err := b.t.Lookup(p, true)
	return err == nil && e.Type == rootfs.TypeDir
}

// listDir returns the names in the directory p (symlinks followed), or
// ok=false if it is not one.
func (b *builder) listDir(p string) ([]string, bool) {
	rp, err := b.t.Resolve(p, true)
	if err != nil {
		return nil, false
	}
	e := b.t.Get(rp)
	if e == nil || e.Type != rootfs.TypeDir {
		return nil, false
	}
	return b.t.Children(rp), true
}

func hasMeta(s string) bool {
	return strings.ContainsAny(s, "*?[")
}

func unescape(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var sb strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		sb.WriteByte(s[i])
	}
	return sb.String()
}

// fnmatch is fnmatch(3) with FNM_PERIOD for one name. Bracket expressions
// take "!" or "^" for negation; character classes are not supported (such a
// pattern matches nothing).
func fnmatch(pattern, name string) bool {
	if strings.HasPrefix(name, ".") && !strings.HasPrefix(pattern, ".") && !strings.HasPrefix(pattern, "\\.") {
		return false
	}
	if strings.Contains(pattern, "[!") {
		pattern = strings.ReplaceAll(pattern, "[!", "[^")
	}
	ok, err := path.Match(pattern, name)
	return err == nil && ok
}
