package kmod

import (
	"bytes"
	"fmt"
	"io/fs"
	"runtime"
	"strings"
	"sync"
)

// outputs are the files depmod writes, in its order, each made by one
// function of the computed modules.
var outputs = []struct {
	name string
	make func(*depmod) ([]byte, error)
}{
	{"modules.dep", (*depmod).outputDeps},
	{"modules.dep.bin", (*depmod).outputDepsBin},
	{"modules.alias", (*depmod).outputAliases},
	{"modules.alias.bin", (*depmod).outputAliasesBin},
	{"modules.softdep", (*depmod).outputSoftdeps},
	{"modules.symbols", (*depmod).outputSymbols},
	{"modules.symbols.bin", (*depmod).outputSymbolsBin},
	{"modules.builtin.bin", (*depmod).outputBuiltinBin},
	{"modules.builtin.alias.bin", (*depmod).outputBuiltinAliasBin},
	{"modules.devname", (*depmod).outputDevname},
}

// output makes every file, each on its own goroutine. Their warnings are
// given in the order of the files, as kmod, which writes them one by one,
// gives them.
func (d *depmod) output() ([]Index, error) {
	var wg sync.WaitGroup
	for _, part := range split(d.modules, runtime.GOMAXPROCS(0)) {
		wg.Go(func() {
			for _, m := range part {
				m.depLine = depLine(m)
			}
		})
	}
	wg.Wait()
	out := make([]Index, len(outputs))
	errs := make([]error, len(outputs))
	warnings := make([][]string, len(outputs))
	for i, o := range outputs {
		wg.Go(func() {
			own := *d
			own.opts.Warnf = func(format string, args ...any) {
				warnings[i] = append(warnings[i], fmt.Sprintf(format, args...))
			}
			out[i].Name = o.name
			out[i].Data, errs[i] = o.make(&own)
		})
	}
	wg.Wait()
	for i, err := range errs {
		for _, w := range warnings[i] {
			d.opts.Warnf("%s", w)
		}
		if err != nil {
			return nil, fmt.Errorf("depmod: %s: %w", outputs[i].name, err)
		}
	}
	return out, nil
}

// split cuts s into at most n parts of about the same length.
func split[T any](s []T, n int) [][]T {
	var out [][]T
	for n = max(1, n); len(s) > 0; n-- {
		k := (len(s) + n - 1) / n
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

// info calls fn with the value of every .modinfo entry of m whose key is
// key, in the module's order.
func (m *module) info(key string, fn func(value string)) {
	for _, kv := range m.data.info {
		if kv.key == key {
			fn(kv.value)
		}
	}
}

// depLine is m's line of modules.dep, without the newline.
func depLine(m *module) string {
	var b strings.Builder
	b.WriteString(m.shown())
	b.WriteByte(':')
	for _, dep := range allDependencies(m) {
		b.WriteByte(' ')
		b.WriteString(dep.shown())
	}
	return b.String()
}

func (d *depmod) outputDeps() ([]byte, error) {
	var b bytes.Buffer
	for _, m := range d.modules {
		b.WriteString(m.depLine)
		b.WriteByte('\n')
	}
	return b.Bytes(), nil
}

func (d *depmod) outputDepsBin() ([]byte, error) {
	var x index
	dups := d.dupWarner("duplicate module deps:\n%[2]s")
	for _, m := range d.modules {
		dups(m.name, m.depLine)
		x.add(m.name, m.depLine, uint32(m.idx), m.path)
	}
	return x.write()
}

func (d *depmod) outputAliases() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Aliases extracted from modules themselves.\n")
	for _, m := range d.modules {
		m.info("alias", func(v string) { fmt.Fprintf(&b, "alias %s %s\n", v, m.name) })
	}
	return b.Bytes(), nil
}

func (d *depmod) outputAliasesBin() ([]byte, error) {
	var x index
	dups := d.dupWarner("duplicate module alias:\n%s %s")
	for _, m := range d.modules {
		m.info("alias", func(v string) {
			alias, ok := aliasNormalize(v)
			if !ok {
				d.opts.Warnf("Unmatched bracket in %s", v)
				return
			}
			dups(alias, m.name)
			x.add(alias, m.name, uint32(m.idx), m.path)
		})
	}
	return x.write()
}

func (d *depmod) outputSoftdeps() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Soft dependencies extracted from modules themselves.\n")
	for _, m := range d.modules {
		m.info("softdep", func(v string) { fmt.Fprintf(&b, "softdep %s %s\n", m.name, v) })
	}
	return b.Bytes(), nil
}

// symbolOrder is the exported symbols as kmod's table of symbols lists
// them.
func (d *depmod) symbolOrder() []string {
	names := make([]string, 0, len(d.symbols))
	for s := range d.symbols {
		names = append(names, s)
	}
	hashOrder(names, func(s string) string { return s }, symbolBuckets)
	return names
}

func (d *depmod) outputSymbols() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("# Aliases for symbols, used by symbol_request().\n")
	for _, s := range d.symbolOrder() {
		fmt.Fprintf(&b, "alias symbol:%s %s\n", s, d.symbols[s].name)
	}
	return b.Bytes(), nil
}

func (d *depmod) outputSymbolsBin() ([]byte, error) {
	var x index
	for _, s := range d.symbolOrder() {
		m := d.symbols[s]
		x.add("symbol:"+s, m.name, uint32(m.idx), m.path)
	}
	return x.write()
}

// readBeside reads a file of the module directory; ok is false, with a
// warning, when there is none, and kmod then writes an empty index.
func (d *depmod) readBeside(name string) ([]byte, bool) {
	b, err := fs.ReadFile(d.fsys, fsPath(d.dirname+"/"+name))
	if err != nil {
		d.opts.Warnf("could not open %s at %s: %v", name, d.dirname, err)
		return nil, false
	}
	return b, true
}

// outputBuiltinBin indexes the module names of modules.builtin, one a line.
func (d *depmod) outputBuiltinBin() ([]byte, error) {
	b, ok := d.readBeside("modules.builtin")
	if !ok {
		return []byte{}, nil
	}
	var x index
	prev, have := "", false
	for _, l := range fgetsChunks(b) {
		if l == "" || !isAlpha(l[0]) {
			d.opts.Warnf("Invalid modules.builtin line: %s", l)
			continue
		}
		base := l[strings.LastIndexByte(l, '/')+1:]
		if base != "" {
			prev, have = truncate(modname(base), pathMax-1), true
		}
		// An empty file name leaves kmod's buffer as the line before left it.
		if have {
			x.add(prev, "", 0, d.dirname+"/modules.builtin")
		}
	}
	return x.write()
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func truncate(s string, n int) string { return s[:min(len(s), n)] }

// outputBuiltinAliasBin indexes the aliases of modules.builtin.modinfo,
// whose entries are "module.key=value" each ended by a NUL, reading it as
// kmod's flush_stream_to does.
func (d *depmod) outputBuiltinAliasBin() ([]byte, error) {
	b, ok := d.readBeside("modules.builtin.modinfo")
	if !ok {
		return []byte{}, nil
	}
	var x index
	s := &charStream{b: b, warnf: d.opts.Warnf}
	for !s.eof {
		modname, ok := s.readTo('.')
		if !ok || modname == "" {
			continue
		}
		key, _ := s.readTo('=')
		if key != "alias" {
			s.skipTo(0)
			continue
		}
		value, ok := s.readTo(0)
		if !ok || value == "" {
			continue
		}
		alias, ok := aliasNormalize(value)
		if !ok {
			d.opts.Warnf("Unmatched bracket in %s", value)
			continue
		}
		x.add(alias, modname, 0, d.dirname+"/modules.builtin.modinfo")
	}
	return x.write()
}

// charStream reads bytes as getc does, remembering end of file.
type charStream struct {
	b     []byte
	pos   int
	eof   bool
	warnf func(string, ...any)
}

func (s *charStream) getc() int {
	if s.pos >= len(s.b) {
		s.eof = true
		return -1
	}
	c := s.b[s.pos]
	s.pos++
	return int(c)
}

// readTo is flush_stream_to with a PATH_MAX buffer: the bytes up to end, a
// NUL or the end of the file; ok only when end ended them.
func (s *charStream) readTo(end byte) (string, bool) {
	var buf []byte
	c := s.getc()
	for c != -1 && c != int(end) && c != 0 && len(buf) < pathMax {
		buf = append(buf, byte(c))
		c = s.getc()
	}
	n := len(buf)
	if n == pathMax {
		// ENOSPC, as kmod prints it.
		s.warnf("Could not flush stream: %d. Partial content: %s", 28, buf)
		n--
	}
	if c != int(end) {
		return "", false
	}
	return string(buf[:n]), true
}

// skipTo is flush_stream: past the next end or NUL.
func (s *charStream) skipTo(end byte) {
	for c := s.getc(); c != -1 && c != int(end) && c != 0; c = s.getc() {
	}
}

// aliasNormalize is kmod's alias_normalize: dashes become underscores
// outside brackets; an unmatched bracket refuses the alias. It stops where
// kmod's PATH_MAX buffer ends.
func aliasNormalize(alias string) (string, bool) {
	alias = truncate(alias, pathMax-1)
	b := []byte(alias)
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '-':
			b[i] = '_'
		case ']':
			return "", false
		case '[':
			j := strings.IndexByte(alias[i:], ']')
			if j < 0 {
				return "", false
			}
			i += j
		}
	}
	return string(b), true
}

func (d *depmod) outputDevname() ([]byte, error) {
	var b bytes.Buffer
	for _, m := range d.modules {
		devname, hasDevname := "", false
		var typ byte
		var major, minor uint32
		for _, kv := range m.data.info {
			if kv.key != "alias" {
				continue
			}
			v := kv.value
			if name, ok := strings.CutPrefix(v, "devname:"); ok {
				devname, hasDevname = name, true
			} else if maj, min, ok := scanMajorMinor(v, "char-major-"); ok {
				typ, major, minor = 'c', maj, min
			} else if maj, min, ok := scanMajorMinor(v, "block-major-"); ok {
				typ, major, minor = 'b', maj, min
			}
			if typ != 0 && hasDevname {
				break
			}
		}
		if !hasDevname {
			continue
		}
		if typ == 0 {
			d.opts.Warnf("Module '%s' has devname (%s) but lacks major and minor information. Ignoring.", m.name, devname)
			continue
		}
		if b.Len() == 0 {
			b.WriteString("# Device nodes to trigger on-demand module loading.\n")
		}
		fmt.Fprintf(&b, "%s %s %c%d:%d\n", m.name, devname, typ, major, minor)
	}
	return b.Bytes(), nil
}

// scanMajorMinor is sscanf(v, PREFIX "%u-%u") == 2.
func scanMajorMinor(v, prefix string) (major, minor uint32, ok bool) {
	rest, found := strings.CutPrefix(v, prefix)
	if !found {
		return 0, 0, false
	}
	major, rest, ok = scanUint(rest)
	if !ok || rest == "" || rest[0] != '-' {
		return 0, 0, false
	}
	minor, _, ok = scanUint(rest[1:])
	return major, minor, ok
}

// scanUint is scanf's %u: blanks skipped, a sign, decimal digits, stored
// through strtoul into an unsigned int.
func scanUint(s string) (uint32, string, bool) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	neg := false
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		neg = s[i] == '-'
		i++
	}
	start := i
	var v uint64
	overflow := false
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		dv := uint64(s[i] - '0')
		if v > (^uint64(0)-dv)/10 {
			overflow = true
		}
		v = v*10 + dv
		i++
	}
	if i == start {
		return 0, s, false
	}
	switch {
	case overflow:
		v = ^uint64(0)
	case neg:
		v = -v
	}
	return uint32(v), s[i:], true
}

// dupWarner returns what depmod -w does for an index: a warning when a key
// gets the same value twice. Without -w it does nothing.
func (d *depmod) dupWarner(format string) func(key, value string) {
	if !d.opts.WarnDups {
		return func(string, string) {}
	}
	seen := map[[2]string]bool{}
	return func(key, value string) {
		k := [2]string{key, value}
		if seen[k] {
			d.opts.Warnf(format, key, value)
		}
		seen[k] = true
	}
}
