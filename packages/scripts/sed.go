package scripts

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"
)

// sedAddr is one address: a line number (0 only as GNU's 0,/RE/), the
// last line ($) or a regular expression.
type sedAddr struct {
	line int
	last bool
	re   *regexp.Regexp
}

func (a *sedAddr) match(line string, n int, last bool) bool {
	switch {
	case a.re != nil:
		return a.re.MatchString(line)
	case a.last:
		return last
	}
	return n == a.line
}

// sedCmd is one command with its addresses.
type sedCmd struct {
	a1, a2 *sedAddr
	negate bool
	op     byte // s d p q a i c =
	// s
	re     *regexp.Regexp
	repl   string
	global bool
	nth    int
	print  bool
	text   string // a i c
	// range state
	active bool
}

// cmdSed is sed as maintainer scripts use it: addresses (N, $, /RE/,
// ranges, GNU's 0,/RE/, !), the s, d, p, q, a, i, c and = commands, -n,
// -e, -E and -i, on stdin or files of the tree. Anything else (blocks,
// hold space) is unhandled.
func cmdSed(r *run, hc interp.HandlerContext, args []string) error {
	var scripts, files []string
	quiet, inPlace, ere := false, false, false
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--quiet" || a == "--silent":
			quiet = true
		case a == "--in-place":
			inPlace = true
		case a == "--regexp-extended":
			ere = true
		case a == "--expression" && i+1 < len(args):
			scripts = append(scripts, args[i+1])
			i++
		case strings.HasPrefix(a, "--expression="):
			scripts = append(scripts, strings.TrimPrefix(a, "--expression="))
		case strings.HasPrefix(a, "-") && len(a) > 1 && !strings.HasPrefix(a, "--"):
			for j := 1; j < len(a); j++ {
				switch a[j] {
				case 'n':
					quiet = true
				case 'i':
					if j != len(a)-1 {
						return r.unhandled(fmt.Sprintf("sed option %s (a backup suffix)", a))
					}
					inPlace = true
				case 'E', 'r':
					ere = true
				case 'e':
					if j != len(a)-1 || i+1 >= len(args) {
						return r.unhandled(fmt.Sprintf("sed option %s", a))
					}
					scripts = append(scripts, args[i+1])
					i++
				default:
					return r.unhandled(fmt.Sprintf("sed option %s", a))
				}
			}
		case strings.HasPrefix(a, "--"):
			return r.unhandled(fmt.Sprintf("sed option %s", a))
		case len(scripts) == 0:
			scripts = append(scripts, a)
		default:
			files = append(files, a)
		}
	}
	cmds, err := parseSed(strings.Join(scripts, "\n"), ere)
	if err != nil {
		return r.unhandled(fmt.Sprintf("sed script %q (%v)", strings.Join(scripts, "; "), err))
	}
	if inPlace {
		if len(files) == 0 {
			fmt.Fprintln(hc.Stderr, "sed: no input files")
			return exit(1)
		}
		for _, f := range files {
			p := r.treePath(hc.Dir, f)
			b, err := r.readFile(p)
			if err != nil {
				fmt.Fprintf(hc.Stderr, "sed: can't read %s: No such file or directory\n", f)
				return exit(2)
			}
			var out strings.Builder
			runSed(cmds, string(b), quiet, &out, hc)
			if err := r.writeFile(p, []byte(out.String()), 0o644); err != nil {
				return err
			}
			for _, c := range cmds {
				c.active = false
			}
		}
		return nil
	}
	var in []byte
	if len(files) == 0 {
		in, _ = r.inputs(hc, "sed", nil, false)
	} else {
		for _, f := range files {
			b, err := r.readFile(r.treePath(hc.Dir, f))
			if err != nil && f != "-" {
				fmt.Fprintf(hc.Stderr, "sed: can't read %s: No such file or directory\n", f)
				return exit(2)
			}
			in = append(in, b...)
		}
	}
	var out strings.Builder
	runSed(cmds, string(in), quiet, &out, hc)
	_, err = fmt.Fprint(hc.Stdout, out.String())
	return err
}

// runSed runs the commands over text, as sed does line by line.
func runSed(cmds []*sedCmd, text string, quiet bool, out *strings.Builder, hc interp.HandlerContext) {
	if text == "" {
		return
	}
	noEOL := !strings.HasSuffix(text, "\n")
	ls := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for i, line := range ls {
		n, last := i+1, i == len(ls)-1
		eol := "\n"
		if last && noEOL {
			eol = ""
		}
		var appended, inserted []string
		deleted, quit := false, false
	cmds:
		for _, c := range cmds {
			if !c.selects(line, n, last) {
				continue
			}
			switch c.op {
			case 's':
				var ok bool
				line, ok = c.subst(line)
				if ok && c.print {
					out.WriteString(line + "\n")
				}
			case 'd':
				deleted = true
				break cmds
			case 'p':
				out.WriteString(line + "\n")
			case 'q':
				quit = true
				break cmds
			case 'a':
				appended = append(appended, c.text)
			case 'i':
				inserted = append(inserted, c.text)
			case 'c':
				if c.a2 == nil || !c.active {
					inserted = append(inserted, c.text)
				}
				deleted = true
				break cmds
			case '=':
				fmt.Fprintf(out, "%d\n", n)
			}
		}
		for _, t := range inserted {
			out.WriteString(t + "\n")
		}
		if !deleted && !quiet {
			out.WriteString(line)
			if len(appended) > 0 {
				out.WriteString("\n")
			} else {
				out.WriteString(eol)
			}
		}
		for _, t := range appended {
			// GNU's "$a\" with no text only ends the last line.
			if t != "" {
				out.WriteString(t + "\n")
			}
		}
		if quit {
			return
		}
	}
}

// selects reports whether the command applies to this line, keeping a
// range's state.
func (c *sedCmd) selects(line string, n int, last bool) bool {
	sel := true
	switch {
	case c.a1 == nil:
	case c.a2 == nil:
		sel = c.a1.match(line, n, last)
	case c.active:
		if c.a2.re != nil {
			if c.a2.re.MatchString(line) {
				c.active = false
			}
		} else if c.a2.last {
			c.active = !last
		} else if n >= c.a2.line {
			c.active = false
		}
	default:
		start := c.a1.match(line, n, last)
		if c.a1.re == nil && !c.a1.last && c.a1.line == 0 {
			// 0,/RE/: the range is open from the first line, and RE may
			// end it on that very line.
			start = n == 1
			if start && c.a2.re != nil && c.a2.re.MatchString(line) {
				return !c.negate
			}
		}
		sel = start
		if start {
			switch {
			case c.a2.re != nil:
				c.active = true
			case c.a2.last:
				c.active = !last
			default:
				c.active = c.a2.line > n
			}
		}
	}
	return sel != c.negate
}

// subst applies an s command.
func (c *sedCmd) subst(line string) (string, bool) {
	ms := c.re.FindAllStringSubmatchIndex(line, -1)
	if len(ms) == 0 {
		return line, false
	}
	target := max(c.nth, 1)
	var b strings.Builder
	prev, replaced := 0, false
	for k, m := range ms {
		if k+1 < target || replaced && !c.global {
			continue
		}
		b.WriteString(line[prev:m[0]])
		b.Write(c.re.ExpandString(nil, c.repl, line, m))
		prev, replaced = m[1], true
	}
	if !replaced {
		return line, false
	}
	b.WriteString(line[prev:])
	return b.String(), true
}

// sedParser reads a sed script: s from i on.
type sedParser struct {
	s   string
	i   int
	ere bool
}

// parseSed reads a sed script: commands separated by newlines or ;.
func parseSed(s string, ere bool) ([]*sedCmd, error) {
	var cmds []*sedCmd
	p := &sedParser{s: s, ere: ere}
	for p.i < len(s) {
		for p.i < len(s) && strings.IndexByte(" \t\n;", s[p.i]) >= 0 {
			p.i++
		}
		if p.i >= len(s) {
			break
		}
		c, err := p.command()
		if err != nil {
			return nil, err
		}
		cmds = append(cmds, c)
	}
	return cmds, nil
}

// command reads one command with its addresses.
func (p *sedParser) command() (*sedCmd, error) {
	s := p.s
	c := &sedCmd{}
	if err := p.addresses(c); err != nil {
		return nil, err
	}
	p.skip()
	if p.i < len(s) && s[p.i] == '!' {
		c.negate = true
		p.i++
		p.skip()
	}
	if p.i >= len(s) {
		return nil, fmt.Errorf("missing command")
	}
	c.op = s[p.i]
	p.i++
	switch c.op {
	case 's':
		if err := p.subst(c); err != nil {
			return nil, err
		}
	case 'd', 'p', 'q', '=':
	case 'a', 'i', 'c':
		p.text(c)
	default:
		return nil, fmt.Errorf("command %q", string(c.op))
	}
	p.skip()
	if p.i < len(s) && s[p.i] != ';' && s[p.i] != '\n' && s[p.i] != '}' {
		return nil, fmt.Errorf("extra characters after command")
	}
	return c, nil
}

// addresses reads none, one or two addresses.
func (p *sedParser) addresses(c *sedCmd) error {
	var err error
	if c.a1, err = p.addr(); err != nil {
		return err
	}
	if c.a1 != nil && p.i < len(p.s) && p.s[p.i] == ',' {
		p.i++
		if c.a2, err = p.addr(); err != nil {
			return err
		}
		if c.a2 == nil {
			return fmt.Errorf("missing second address")
		}
	}
	if c.a1 != nil && c.a2 == nil && c.a1.line == 0 && c.a1.re == nil && !c.a1.last {
		return fmt.Errorf("invalid usage of line address 0")
	}
	return nil
}

// subst reads an s command's pattern, replacement and flags.
func (p *sedParser) subst(c *sedCmd) error {
	s := p.s
	if p.i >= len(s) {
		return fmt.Errorf("unterminated s command")
	}
	d := s[p.i]
	p.i++
	re, err := p.delimited(d)
	if err != nil {
		return err
	}
	repl, err := p.delimited(d)
	if err != nil {
		return err
	}
	if c.re, err = p.compile(re); err != nil {
		return err
	}
	c.repl = replToGo(repl)
	for p.i < len(s) && strings.IndexByte("gpI0123456789", s[p.i]) >= 0 {
		switch f := s[p.i]; {
		case f == 'g':
			c.global = true
		case f == 'p':
			c.print = true
		case f == 'I':
			c.re = regexp.MustCompile("(?i)" + c.re.String())
		default:
			c.nth = c.nth*10 + int(f-'0')
		}
		p.i++
	}
	return nil
}

// text reads the text of a, i and c: GNU's one-line form ("a text",
// "a\text") and the POSIX form with the text on the next line.
func (p *sedParser) text(c *sedCmd) {
	s := p.s
	p.skip()
	if p.i < len(s) && s[p.i] == '\\' {
		p.i++
		if p.i < len(s) && s[p.i] == '\n' {
			p.i++
		}
	}
	j := strings.IndexByte(s[p.i:], '\n')
	if j < 0 {
		j = len(s) - p.i
	}
	c.text = s[p.i : p.i+j]
	p.i += j
}

func (p *sedParser) compile(re string) (*regexp.Regexp, error) {
	if !p.ere {
		re = breToGo(re)
	}
	return regexp.Compile(re)
}

func (p *sedParser) skip() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// delimited reads up to the unescaped delimiter d, keeping other
// escapes; i ends after the delimiter.
func (p *sedParser) delimited(d byte) (string, error) {
	s := p.s
	var b strings.Builder
	for ; p.i < len(s); p.i++ {
		switch {
		case s[p.i] == '\\' && p.i+1 < len(s) && s[p.i+1] == d:
			b.WriteByte(d)
			p.i++
		case s[p.i] == '\\' && p.i+1 < len(s):
			b.WriteByte('\\')
			b.WriteByte(s[p.i+1])
			p.i++
		case s[p.i] == d:
			p.i++
			return b.String(), nil
		default:
			b.WriteByte(s[p.i])
		}
	}
	return "", fmt.Errorf("unterminated %q", string(d))
}

// addr reads an address ($, a line number, /RE/ or \cREc), or nil.
func (p *sedParser) addr() (*sedAddr, error) {
	s := p.s
	switch {
	case p.i < len(s) && s[p.i] == '$':
		p.i++
		return &sedAddr{last: true}, nil
	case p.i < len(s) && s[p.i] >= '0' && s[p.i] <= '9':
		j := p.i
		for p.i < len(s) && s[p.i] >= '0' && s[p.i] <= '9' {
			p.i++
		}
		n, _ := strconv.Atoi(s[j:p.i])
		return &sedAddr{line: n}, nil
	case p.i < len(s) && (s[p.i] == '/' || s[p.i] == '\\' && p.i+1 < len(s)):
		d := byte('/')
		if s[p.i] == '\\' {
			p.i++
			d = s[p.i]
		}
		p.i++
		re, err := p.delimited(d)
		if err != nil {
			return nil, err
		}
		c, err := p.compile(re)
		if err != nil {
			return nil, err
		}
		return &sedAddr{re: c}, nil
	}
	return nil, nil
}

// breToGo converts a POSIX basic regular expression: \( \) \{ \} \+ \?
// are operators, bare ( ) { } + ? | are literal.
func breToGo(bre string) string {
	var b strings.Builder
	inBracket := false
	for i := 0; i < len(bre); i++ {
		c := bre[i]
		if inBracket {
			// Inside a bracket expression a backslash is literal.
			switch {
			case c == '[' && i+1 < len(bre) && (bre[i+1] == ':' || bre[i+1] == '.' || bre[i+1] == '='):
				end := strings.Index(bre[i+2:], string(bre[i+1])+"]")
				if end >= 0 {
					b.WriteString(bre[i : i+2+end+2])
					i += 2 + end + 1
					continue
				}
				b.WriteString(`\[`)
			case c == ']':
				inBracket = false
				b.WriteByte(c)
			case c == '\\':
				b.WriteString(`\\`)
			default:
				b.WriteByte(c)
			}
			continue
		}
		if c == '\\' && i+1 < len(bre) {
			n := bre[i+1]
			i++
			switch n {
			case '(', ')', '{', '}', '+', '?', '|':
				b.WriteByte(n)
			case 'n':
				b.WriteString(`\n`)
			case 't':
				b.WriteString(`\t`)
			default:
				b.WriteByte('\\')
				b.WriteByte(n)
			}
			continue
		}
		switch c {
		case '[':
			inBracket = true
			b.WriteByte(c)
			if i+1 < len(bre) && bre[i+1] == '^' {
				b.WriteByte('^')
				i++
			}
			if i+1 < len(bre) && bre[i+1] == ']' {
				b.WriteString(`\]`)
				i++
			}
		case '(', ')', '{', '}', '+', '?', '|':
			b.WriteByte('\\')
			b.WriteByte(c)
		case '*':
			// A leading * (or one after \( or ^) is literal.
			s := b.String()
			if s == "" || strings.HasSuffix(s, "(") || s == "^" {
				b.WriteString(`\*`)
			} else {
				b.WriteByte(c)
			}
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// replToGo converts a sed replacement: \N and & refer to groups, \& and
// \\ are literal.
func replToGo(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			b.WriteString("${" + string(s[i+1]) + "}")
			i++
		case c == '\\' && i+1 < len(s):
			switch s[i+1] {
			case 'n':
				b.WriteByte('\n')
			case 't':
				b.WriteByte('\t')
			case '$':
				b.WriteString("$$")
			default:
				b.WriteByte(s[i+1])
			}
			i++
		case c == '&':
			b.WriteString("${0}")
		case c == '$':
			b.WriteString("$$")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
