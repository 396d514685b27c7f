package scripts

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strings"

	"mvdan.cc/sh/v3/interp"
)

// sedSubst is one s/RE/REPLACEMENT/FLAGS command.
type sedSubst struct {
	re     *regexp.Regexp
	repl   string
	global bool
	print  bool
	// del makes the command /RE/d: a matching line is dropped.
	del bool
}

// cmdSed is the part of sed maintainer scripts use on strings: one or more
// s commands (-e or a single script), on stdin or files, -n with p. In-place
// editing and other commands are unhandled.
func cmdSed(r *run, hc interp.HandlerContext, args []string) error {
	var scripts, files []string
	quiet := false
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-n" || a == "--quiet" || a == "--silent":
			quiet = true
		case a == "-e" && i+1 < len(args):
			scripts = append(scripts, args[i+1])
			i++
		case strings.HasPrefix(a, "-") && a != "-":
			return r.unhandled(fmt.Sprintf("sed option %s", a))
		case len(scripts) == 0:
			scripts = append(scripts, a)
		default:
			files = append(files, a)
		}
	}
	var cmds []sedSubst
	for _, sc := range scripts {
		for _, part := range strings.Split(sc, ";") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			c, err := parseCommand(part)
			if err != nil {
				return r.unhandled(fmt.Sprintf("sed script %q (%v)", sc, err))
			}
			cmds = append(cmds, c)
		}
	}
	in := hc.Stdin
	if len(files) > 0 {
		var rs []io.Reader
		for _, f := range files {
			b, err := r.readFile(r.treePath(f))
			if err != nil {
				fmt.Fprintf(hc.Stderr, "sed: can't read %s: %v\n", f, err)
				return exit(2)
			}
			rs = append(rs, strings.NewReader(string(b)))
		}
		in = io.MultiReader(rs...)
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
lines:
	for sc.Scan() {
		line := sc.Text()
		for _, c := range cmds {
			if c.del {
				if c.re.MatchString(line) {
					continue lines
				}
				continue
			}
			var matched bool
			line, matched = c.apply(line)
			if matched && c.print {
				fmt.Fprintln(hc.Stdout, line)
			}
		}
		if !quiet {
			fmt.Fprintln(hc.Stdout, line)
		}
	}
	return sc.Err()
}

// apply substitutes the first match (every match with g) in line.
func (c sedSubst) apply(line string) (string, bool) {
	if c.global {
		if !c.re.MatchString(line) {
			return line, false
		}
		return c.re.ReplaceAllString(line, c.repl), true
	}
	m := c.re.FindStringSubmatchIndex(line)
	if m == nil {
		return line, false
	}
	out := c.re.ExpandString(nil, c.repl, line, m)
	return line[:m[0]] + string(out) + line[m[1]:], true
}

// parseCommand reads an s command or a /RE/d deletion.
func parseCommand(s string) (sedSubst, error) {
	if len(s) >= 3 && s[0] == '/' && strings.HasSuffix(s, "/d") && !strings.Contains(s[1:len(s)-2], "/") {
		re, err := regexp.Compile(breToGo(s[1 : len(s)-2]))
		if err != nil {
			return sedSubst{}, err
		}
		return sedSubst{re: re, del: true}, nil
	}
	return parseSubst(s)
}

// parseSubst reads s<d>RE<d>REPL<d>FLAGS with a POSIX basic regular
// expression, turned into Go's syntax.
func parseSubst(s string) (sedSubst, error) {
	var c sedSubst
	if len(s) < 4 || s[0] != 's' {
		return c, fmt.Errorf("only s and /RE/d commands are supported")
	}
	d := s[1]
	var parts []string
	var cur strings.Builder
	for i := 2; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == d:
			cur.WriteByte(d)
			i++
		case s[i] == '\\' && i+1 < len(s):
			cur.WriteByte('\\')
			cur.WriteByte(s[i+1])
			i++
		case s[i] == d:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	parts = append(parts, cur.String())
	if len(parts) != 3 {
		return c, fmt.Errorf("malformed s command")
	}
	for _, f := range parts[2] {
		switch f {
		case 'g':
			c.global = true
		case 'p':
			c.print = true
		default:
			return c, fmt.Errorf("flag %q", f)
		}
	}
	re, err := regexp.Compile(breToGo(parts[0]))
	if err != nil {
		return c, err
	}
	c.re = re
	c.repl = replToGo(parts[1])
	return c, nil
}

// breToGo converts a POSIX basic regular expression: \( \) \{ \} \+ \?
// are operators, bare ( ) { } + ? | are literal.
func breToGo(bre string) string {
	var b strings.Builder
	for i := 0; i < len(bre); i++ {
		c := bre[i]
		if c == '\\' && i+1 < len(bre) {
			n := bre[i+1]
			i++
			switch n {
			case '(', ')', '{', '}', '+', '?', '|':
				b.WriteByte(n)
			case 'n':
				b.WriteString(`\n`)
			default:
				b.WriteByte('\\')
				b.WriteByte(n)
			}
			continue
		}
		switch c {
		case '(', ')', '{', '}', '+', '?', '|':
			b.WriteByte('\\')
			b.WriteByte(c)
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
			if s[i+1] == 'n' {
				b.WriteByte('\n')
			} else if s[i+1] == '$' {
				b.WriteString("$$")
			} else {
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
