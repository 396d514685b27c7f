package scripts

import (
	"bytes"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"mvdan.cc/sh/v3/interp"
)

// The text utilities maintainer scripts use (coreutils' cat, cmp, head,
// wc, sort, uniq, tr, seq, date, basename, dirname and expr; grep; awk),
// the parts of them the scripts use: an option or program they do not
// know is unhandled rather than guessed at.

// inputs reads the named files from the tree ("-" or none: stdin), as one
// stream. A missing file is reported on stderr as the tool would.
func (r *run) inputs(hc interp.HandlerContext, tool string, files []string, quiet bool) ([]byte, bool) {
	if len(files) == 0 {
		b, _ := io.ReadAll(hc.Stdin)
		return b, true
	}
	var out []byte
	ok := true
	for _, f := range files {
		if f == "-" {
			b, _ := io.ReadAll(hc.Stdin)
			out = append(out, b...)
			continue
		}
		b, err := r.readFile(r.treePath(hc.Dir, f))
		if err != nil {
			if !quiet {
				fmt.Fprintf(hc.Stderr, "%s: %s: No such file or directory\n", tool, f)
			}
			ok = false
			continue
		}
		out = append(out, b...)
	}
	return out, ok
}

// lines splits text into lines without their newlines; a missing final
// newline still ends a line.
func lines(b []byte) []string {
	s := string(b)
	if s == "" {
		return nil
	}
	s = strings.TrimSuffix(s, "\n")
	return strings.Split(s, "\n")
}

func cmdCat(r *run, hc interp.HandlerContext, args []string) error {
	_, ops := splitFlags(args[1:])
	if len(ops) == 0 {
		_, err := io.Copy(hc.Stdout, hc.Stdin)
		return err
	}
	code := 0
	for _, f := range ops {
		if f == "-" {
			io.Copy(hc.Stdout, hc.Stdin)
			continue
		}
		b, err := r.readFile(r.treePath(hc.Dir, f))
		if err != nil {
			fmt.Fprintf(hc.Stderr, "cat: %s: %v\n", f, err)
			code = 1
			continue
		}
		hc.Stdout.Write(b)
	}
	return exit(code)
}

// cmdGrep is grep, egrep and fgrep: -q -s -v -x -F -E -c -i, patterns as
// the first operand or with -e.
func cmdGrep(r *run, hc interp.HandlerContext, args []string) error {
	o, err := parseGrepArgs(r, args)
	if err != nil {
		return err
	}
	if !o.havePattern {
		return exit(2)
	}
	res, err := o.compile(r)
	if err != nil {
		return err
	}
	in, ok := r.inputs(hc, "grep", o.ops, o.silent)
	n := 0
	for _, l := range lines(in) {
		m := false
		for _, re := range res {
			if re.MatchString(l) {
				m = true
				break
			}
		}
		if m == o.invert {
			continue
		}
		n++
		if o.quiet {
			return nil
		}
		if !o.count {
			fmt.Fprintln(hc.Stdout, l)
		}
	}
	if o.count {
		fmt.Fprintln(hc.Stdout, n)
	}
	switch {
	case n > 0 && (ok || o.quiet):
		return nil
	case !ok:
		return exit(2)
	}
	return exit(1)
}

// grepArgs is a grep command line.
type grepArgs struct {
	ext, fixed, quiet, silent, invert, whole, count, icase bool
	patterns, ops                                          []string
	havePattern                                            bool
}

func parseGrepArgs(r *run, args []string) (*grepArgs, error) {
	o := &grepArgs{ext: path.Base(args[0]) == "egrep", fixed: path.Base(args[0]) == "fgrep"}
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			o.ops = append(o.ops, args[i+1:]...)
			break
		}
		if a == "-e" && i+1 < len(args) {
			o.patterns = append(o.patterns, args[i+1])
			o.havePattern = true
			i++
			continue
		}
		if len(a) > 1 && a[0] == '-' && !strings.HasPrefix(a, "--") {
			for _, c := range a[1:] {
				if err := o.shortFlag(r, c); err != nil {
					return nil, err
				}
			}
			continue
		}
		if strings.HasPrefix(a, "--") {
			switch a {
			case "--quiet", "--silent":
				o.quiet = true
			case "--no-messages":
				o.silent = true
			default:
				return nil, r.unhandled(fmt.Sprintf("grep option %s", a))
			}
			continue
		}
		if !o.havePattern {
			o.patterns = append(o.patterns, strings.Split(a, "\n")...)
			o.havePattern = true
			continue
		}
		o.ops = append(o.ops, a)
	}
	return o, nil
}

func (o *grepArgs) shortFlag(r *run, c rune) error {
	switch c {
	case 'q':
		o.quiet = true
	case 's':
		o.silent = true
	case 'v':
		o.invert = true
	case 'x':
		o.whole = true
	case 'F':
		o.fixed = true
	case 'E':
		o.ext = true
	case 'c':
		o.count = true
	case 'i':
		o.icase = true
	default:
		return r.unhandled(fmt.Sprintf("grep option -%c", c))
	}
	return nil
}

// compile makes the patterns Go regular expressions, as -F, -E (or
// egrep), -x and -i say.
func (o *grepArgs) compile(r *run) ([]*regexp.Regexp, error) {
	var res []*regexp.Regexp
	for _, p := range o.patterns {
		var expr string
		switch {
		case o.fixed:
			expr = regexp.QuoteMeta(p)
		case o.ext:
			expr = p
		default:
			expr = breToGo(p)
		}
		if o.whole {
			expr = "^(?:" + expr + ")$"
		}
		if o.icase {
			expr = "(?i)" + expr
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, r.unhandled(fmt.Sprintf("grep pattern %q (%v)", p, err))
		}
		res = append(res, re)
	}
	return res, nil
}

// trSet expands a tr operand: escapes, ranges and the classes scripts use.
func trSet(s string) ([]byte, bool) {
	var out []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case strings.HasPrefix(s[i:], "[:upper:]"):
			for x := byte('A'); x <= 'Z'; x++ {
				out = append(out, x)
			}
			i += len("[:upper:]") - 1
			continue
		case strings.HasPrefix(s[i:], "[:lower:]"):
			for x := byte('a'); x <= 'z'; x++ {
				out = append(out, x)
			}
			i += len("[:lower:]") - 1
			continue
		case strings.HasPrefix(s[i:], "[:space:]"):
			out = append(out, ' ', '\t', '\n', '\v', '\f', '\r')
			i += len("[:space:]") - 1
			continue
		case strings.HasPrefix(s[i:], "[:"):
			return nil, false
		case c == '\\' && i+1 < len(s):
			i++
			switch s[i] {
			case 'n':
				c = '\n'
			case 't':
				c = '\t'
			case 'r':
				c = '\r'
			case '\\':
				c = '\\'
			default:
				c = s[i]
			}
		}
		if i+2 < len(s) && s[i+1] == '-' {
			for x := int(c); x <= int(s[i+2]); x++ {
				out = append(out, byte(x))
			}
			i += 2
			continue
		}
		out = append(out, c)
	}
	return out, true
}

// cmdTr translates (tr SET1 SET2) or deletes (tr -d SET1) bytes of stdin.
func cmdTr(r *run, hc interp.HandlerContext, args []string) error {
	del := false
	var ops []string
	for _, a := range args[1:] {
		switch {
		case a == "-d":
			del = true
		case strings.HasPrefix(a, "-") && len(a) > 1:
			return r.unhandled(fmt.Sprintf("tr option %s", a))
		default:
			ops = append(ops, a)
		}
	}
	if del && len(ops) != 1 || !del && len(ops) != 2 {
		return r.unhandledCommand(args)
	}
	set1, ok1 := trSet(ops[0])
	var set2 []byte
	ok2 := true
	if !del {
		set2, ok2 = trSet(ops[1])
	}
	if !ok1 || !ok2 || !del && len(set2) == 0 {
		return r.unhandledCommand(args)
	}
	var m [256]int
	for i := range m {
		m[i] = i
	}
	for i, c := range set1 {
		if del {
			m[c] = -1
		} else {
			m[c] = int(set2[min(i, len(set2)-1)])
		}
	}
	in, _ := io.ReadAll(hc.Stdin)
	out := make([]byte, 0, len(in))
	for _, c := range in {
		if m[c] >= 0 {
			out = append(out, byte(m[c]))
		}
	}
	_, err := hc.Stdout.Write(out)
	return err
}

// cmdSort sorts lines in byte order (the scripts' C.UTF-8 locale), with
// -u and -r.
func cmdSort(r *run, hc interp.HandlerContext, args []string) error {
	var uniq, rev bool
	var ops []string
	for _, a := range args[1:] {
		switch a {
		case "-u", "--unique":
			uniq = true
		case "-r", "--reverse":
			rev = true
		case "-ur", "-ru":
			uniq, rev = true, true
		default:
			if strings.HasPrefix(a, "-") && a != "-" {
				return r.unhandled(fmt.Sprintf("sort option %s", a))
			}
			ops = append(ops, a)
		}
	}
	in, ok := r.inputs(hc, "sort", ops, false)
	if !ok {
		return exit(2)
	}
	ls := lines(in)
	sort.Strings(ls)
	if rev {
		slices.Reverse(ls)
	}
	var prev *string
	for i := range ls {
		if uniq && prev != nil && *prev == ls[i] {
			continue
		}
		prev = &ls[i]
		fmt.Fprintln(hc.Stdout, ls[i])
	}
	return nil
}

// cmdUniq drops repeated adjacent lines of stdin; -c counts them as
// coreutils prints counts.
func cmdUniq(r *run, hc interp.HandlerContext, args []string) error {
	count := false
	for _, a := range args[1:] {
		if a != "-c" && a != "--count" {
			return r.unhandledCommand(args)
		}
		count = true
	}
	in, _ := io.ReadAll(hc.Stdin)
	ls := lines(in)
	for i := 0; i < len(ls); {
		j := i + 1
		for j < len(ls) && ls[j] == ls[i] {
			j++
		}
		if count {
			fmt.Fprintf(hc.Stdout, "%7d %s\n", j-i, ls[i])
		} else {
			fmt.Fprintln(hc.Stdout, ls[i])
		}
		i = j
	}
	return nil
}

// cmdCmp compares two files of the tree: status 0 when equal, 1 when they
// differ, 2 when one cannot be read.
func cmdCmp(r *run, hc interp.HandlerContext, args []string) error {
	flags, ops := splitFlags(args[1:])
	silent := flags["-s"] || flags["--silent"] || flags["--quiet"]
	if len(ops) != 2 {
		return r.unhandledCommand(args)
	}
	var data [2][]byte
	for i, f := range ops {
		b, err := r.readFile(r.treePath(hc.Dir, f))
		if err != nil {
			if !silent {
				fmt.Fprintf(hc.Stderr, "cmp: %s: No such file or directory\n", f)
			}
			return exit(2)
		}
		data[i] = b
	}
	if bytes.Equal(data[0], data[1]) {
		return nil
	}
	if !silent {
		fmt.Fprintf(hc.Stdout, "%s %s differ\n", ops[0], ops[1])
	}
	return exit(1)
}

// cmdHead prints the first lines (-n N, -N) of its input.
func cmdHead(r *run, hc interp.HandlerContext, args []string) error {
	n := 10
	var ops []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-n" && i+1 < len(args):
			v, err := strconv.Atoi(args[i+1])
			if err != nil {
				return r.unhandled(fmt.Sprintf("head -n %s", args[i+1]))
			}
			n = v
			i++
		case len(a) > 1 && a[0] == '-' && isDigits(a[1:]):
			n, _ = strconv.Atoi(a[1:])
		case strings.HasPrefix(a, "-") && a != "-":
			return r.unhandled(fmt.Sprintf("head option %s", a))
		default:
			ops = append(ops, a)
		}
	}
	in, ok := r.inputs(hc, "head", ops, false)
	for i, l := range lines(in) {
		if i >= n {
			break
		}
		fmt.Fprintln(hc.Stdout, l)
	}
	if !ok {
		return exit(1)
	}
	return nil
}

// cmdWc counts lines (-l) of its input.
func cmdWc(r *run, hc interp.HandlerContext, args []string) error {
	flags, ops := splitFlags(args[1:])
	if !flags["-l"] || len(flags) != 1 {
		return r.unhandledCommand(args)
	}
	in, ok := r.inputs(hc, "wc", ops, false)
	if !ok {
		return exit(1)
	}
	n := bytes.Count(in, []byte("\n"))
	if len(ops) == 1 {
		fmt.Fprintf(hc.Stdout, "%d %s\n", n, ops[0])
	} else {
		fmt.Fprintln(hc.Stdout, n)
	}
	return nil
}

// cmdSeq prints FIRST [INCREMENT] LAST.
func cmdSeq(r *run, hc interp.HandlerContext, args []string) error {
	var nums []int
	for _, a := range args[1:] {
		n, err := strconv.Atoi(a)
		if err != nil {
			return r.unhandledCommand(args)
		}
		nums = append(nums, n)
	}
	first, inc, last := 1, 1, 0
	switch len(nums) {
	case 1:
		last = nums[0]
	case 2:
		first, last = nums[0], nums[1]
	case 3:
		first, inc, last = nums[0], nums[1], nums[2]
	default:
		return r.unhandledCommand(args)
	}
	if inc == 0 {
		return exit(1)
	}
	for i := first; inc > 0 && i <= last || inc < 0 && i >= last; i += inc {
		fmt.Fprintln(hc.Stdout, i)
	}
	return nil
}

// cmdDate prints the build's clock, which is the epoch: date with no
// operand, or -d of a date it printed (tzdata's postinst echoes both).
// The image's zone is not consulted; the build runs in UTC.
func cmdDate(r *run, hc interp.HandlerContext, args []string) error {
	t := r.env.Epoch.UTC()
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case (a == "-d" || a == "--date") && i+1 < len(args):
			v := args[i+1]
			i++
			if v == "" {
				// GNU date reads an empty date as today's midnight.
				t = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
				continue
			}
			p, err := time.Parse(time.UnixDate, strings.Join(strings.Fields(v), " "))
			if err != nil {
				return r.unhandled(fmt.Sprintf("date -d %q", v))
			}
			t = p.UTC()
		case a == "-u" || a == "--utc":
		default:
			return r.unhandledCommand(args)
		}
	}
	fmt.Fprintln(hc.Stdout, t.Format(time.UnixDate))
	return nil
}

func cmdBasename(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) < 2 {
		return exit(1)
	}
	b := path.Base(args[1])
	if len(args) > 2 {
		b = strings.TrimSuffix(b, args[2])
	}
	fmt.Fprintln(hc.Stdout, b)
	return nil
}

func cmdDirname(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) < 2 {
		return exit(1)
	}
	for _, a := range args[1:] {
		fmt.Fprintln(hc.Stdout, dirname(a))
	}
	return nil
}

// dirname is POSIX's: trailing slashes go before the last component does,
// and nothing is cleaned (path.Dir says a/b for a/b/ and / for /a/../b).
func dirname(s string) string {
	t := strings.TrimRight(s, "/")
	if t == "" {
		if s == "" {
			return "."
		}
		return "/"
	}
	i := strings.LastIndex(t, "/")
	if i < 0 {
		return "."
	}
	if t = strings.TrimRight(t[:i], "/"); t == "" {
		return "/"
	}
	return t
}

// cmdExpr is expr STRING : REGEXP, the one form the scripts use: the
// length of the anchored match (or the first group), status 1 when empty.
func cmdExpr(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) != 4 || args[2] != ":" {
		return r.unhandledCommand(args)
	}
	re, err := regexp.Compile("^(?:" + breToGo(args[3]) + ")")
	if err != nil {
		return r.unhandled(fmt.Sprintf("expr regexp %q", args[3]))
	}
	m := re.FindStringSubmatch(args[1])
	var out string
	switch {
	case re.NumSubexp() > 0 && m != nil:
		out = m[1]
	case re.NumSubexp() > 0:
		out = ""
	case m != nil:
		out = strconv.Itoa(len([]rune(m[0])))
	default:
		out = "0"
	}
	fmt.Fprintln(hc.Stdout, out)
	if out == "" || out == "0" {
		return exit(1)
	}
	return nil
}

// cmdAwk runs the awk programs of the packages' scripts that it knows,
// recognised by their text: a line filter printing fields
// ("/RE/ {print $N}", "{ print $1 }") and locales' search for LANG= in
// /etc/environment and /etc/default/locale. Any other program is
// unhandled.
func cmdAwk(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) < 2 {
		return exit(2)
	}
	if _, found := r.lookPath(hc.Dir, path.Base(args[0])); !found {
		// awk is no Essential package: an image may lack it.
		return r.notFound(hc, args[0])
	}
	prog := strings.TrimSpace(args[1])
	in, ok := r.inputs(hc, "awk", args[2:], false)
	if !ok {
		return exit(2)
	}
	if prog == `/^LANG=/ {gsub("\"", ""); sub("LANG=", ""); lang=$0;} END {print lang}` {
		lang := ""
		for _, l := range lines(in) {
			if strings.HasPrefix(l, "LANG=") {
				lang = strings.Replace(strings.ReplaceAll(l, `"`, ""), "LANG=", "", 1)
			}
		}
		fmt.Fprintln(hc.Stdout, lang)
		return nil
	}
	m := awkPrintField.FindStringSubmatch(prog)
	if m == nil {
		return r.unhandled(fmt.Sprintf("awk program %q", prog))
	}
	var re *regexp.Regexp
	if m[1] != "" {
		var err error
		if re, err = regexp.Compile(m[1]); err != nil {
			return r.unhandled(fmt.Sprintf("awk program %q", prog))
		}
	}
	n, _ := strconv.Atoi(m[2])
	for _, l := range lines(in) {
		if re != nil && !re.MatchString(l) {
			continue
		}
		f := strings.Fields(l)
		switch {
		case n == 0:
			fmt.Fprintln(hc.Stdout, l)
		case n <= len(f):
			fmt.Fprintln(hc.Stdout, f[n-1])
		default:
			fmt.Fprintln(hc.Stdout)
		}
	}
	return nil
}

var awkPrintField = regexp.MustCompile(`^(?:/((?:[^/\\]|\\.)*)/)?\s*\{\s*print\s+\$(\d+)\s*;?\s*\}$`)

func splitLines(b []byte) []string {
	s := strings.TrimSuffix(string(b), "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

func joinLines(ls []string) []byte {
	if len(ls) == 0 {
		return nil
	}
	return []byte(strings.Join(ls, "\n") + "\n")
}
