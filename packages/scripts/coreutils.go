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

	"github.com/stamp-dev/stamp/rootfs"
)

// cmdUmask is the shell's umask builtin, which the interpreter lacks: it
// prints or sets the script's mask, which the files its redirections and
// handlers create are made with.
func cmdUmask(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) == 1 {
		fmt.Fprintf(hc.Stdout, "%04o\n", r.umask)
		return nil
	}
	if len(args) != 2 || strings.HasPrefix(args[1], "-") {
		return r.unhandled(fmt.Sprintf("command %q", "umask "+strings.Join(args[1:], " ")))
	}
	m, err := strconv.ParseUint(args[1], 8, 32)
	if err != nil || m > 0o777 {
		fmt.Fprintf(hc.Stderr, "umask: %s: invalid mode\n", args[1])
		return exit(2)
	}
	r.umask = uint32(m)
	return nil
}

// The text and file utilities below are the parts of coreutils, grep and
// findutils maintainer scripts use; what they do not cover (an option
// they do not know) is unhandled rather than guessed at.

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
		b, err := r.readFile(r.treePath(f))
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

// cmdGrep is grep, egrep and fgrep: -q -s -v -x -F -E -c -i, patterns as
// the first operand or with -e.
func cmdGrep(r *run, hc interp.HandlerContext, args []string) error {
	ext := path.Base(args[0]) == "egrep"
	fixed := path.Base(args[0]) == "fgrep"
	var quiet, silent, invert, whole, count, icase bool
	var patterns, ops []string
	havePattern := false
	for i := 1; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			ops = append(ops, args[i+1:]...)
			break
		}
		if a == "-e" && i+1 < len(args) {
			patterns = append(patterns, args[i+1])
			havePattern = true
			i++
			continue
		}
		if len(a) > 1 && a[0] == '-' && !strings.HasPrefix(a, "--") {
			for _, c := range a[1:] {
				switch c {
				case 'q':
					quiet = true
				case 's':
					silent = true
				case 'v':
					invert = true
				case 'x':
					whole = true
				case 'F':
					fixed = true
				case 'E':
					ext = true
				case 'c':
					count = true
				case 'i':
					icase = true
				default:
					return r.unhandled(fmt.Sprintf("grep option -%c", c))
				}
			}
			continue
		}
		if strings.HasPrefix(a, "--") {
			switch a {
			case "--quiet", "--silent":
				quiet = true
			case "--no-messages":
				silent = true
			default:
				return r.unhandled(fmt.Sprintf("grep option %s", a))
			}
			continue
		}
		if !havePattern {
			patterns = append(patterns, strings.Split(a, "\n")...)
			havePattern = true
			continue
		}
		ops = append(ops, a)
	}
	if !havePattern {
		return exit(2)
	}
	var res []*regexp.Regexp
	for _, p := range patterns {
		var expr string
		switch {
		case fixed:
			expr = regexp.QuoteMeta(p)
		case ext:
			expr = p
		default:
			expr = breToGo(p)
		}
		if whole {
			expr = "^(?:" + expr + ")$"
		}
		if icase {
			expr = "(?i)" + expr
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return r.unhandled(fmt.Sprintf("grep pattern %q (%v)", p, err))
		}
		res = append(res, re)
	}
	in, ok := r.inputs(hc, "grep", ops, silent)
	n := 0
	for _, l := range lines(in) {
		m := false
		for _, re := range res {
			if re.MatchString(l) {
				m = true
				break
			}
		}
		if m == invert {
			continue
		}
		n++
		if quiet {
			return nil
		}
		if !count {
			fmt.Fprintln(hc.Stdout, l)
		}
	}
	if count {
		fmt.Fprintln(hc.Stdout, n)
	}
	switch {
	case n > 0 && (ok || quiet):
		return nil
	case !ok:
		return exit(2)
	}
	return exit(1)
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
		b, err := r.readFile(r.treePath(f))
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

// copyEntry puts a copy of the file or symlink at src at dst (replacing a
// file there), keeping its mode, owner and xattrs when keep, else with the
// umask's mode and root's ownership, as cp does without -p.
func (r *run) copyEntry(src *rootfs.Entry, dst string, keep bool) error {
	h := rootfs.Header{Type: src.Type, Perm: src.Perm, Target: src.Target, MTime: r.env.Epoch, Origin: r.origin()}
	if keep {
		h.UID, h.GID, h.Xattrs = src.UID, src.GID, src.Xattrs
	} else {
		h.Perm &^= r.umask | 0o7000
		if e, err := r.env.Tree.Lookup(dst, true); err == nil && e.Type == rootfs.TypeRegular {
			// cp writes into an existing file: it keeps its mode and owner.
			h.Perm, h.UID, h.GID, h.Xattrs = e.Perm, e.UID, e.GID, e.Xattrs
		}
	}
	rp, err := r.env.Tree.Resolve(dst, src.Type != rootfs.TypeSymlink)
	if err != nil {
		return err
	}
	switch src.Type {
	case rootfs.TypeRegular:
		f, err := r.env.Tree.Open(src.Path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = r.env.Tree.Create(rp, h, f)
		return err
	case rootfs.TypeSymlink:
		_, err = r.env.Tree.Create(rp, h, nil)
		return err
	}
	return fmt.Errorf("%s: cannot copy a %s", src.Path, src.Type)
}

// cmdMv renames files and symlinks in the tree (moving them into a
// directory operand); directories are unhandled.
func cmdMv(r *run, hc interp.HandlerContext, args []string) error {
	_, ops := splitFlags(args[1:])
	if len(ops) != 2 {
		return r.unhandledCommand(args)
	}
	src, err := r.env.Tree.Lookup(r.treePath(ops[0]), false)
	if err != nil {
		fmt.Fprintf(hc.Stderr, "mv: cannot stat '%s': No such file or directory\n", ops[0])
		return exit(1)
	}
	if src.Type != rootfs.TypeRegular && src.Type != rootfs.TypeSymlink {
		return r.unhandledCommand(args, fmt.Sprintf("a %s", src.Type))
	}
	dst := r.treePath(ops[1])
	if e, err := r.env.Tree.Lookup(dst, true); err == nil && e.Type == rootfs.TypeDir {
		dst = path.Join(e.Path, path.Base(src.Path))
	}
	if rd, err := r.env.Tree.Resolve(dst, false); err == nil && rd == src.Path {
		return nil
	}
	if e, err := r.env.Tree.Lookup(dst, false); err == nil {
		if e.Type == rootfs.TypeDir {
			return r.unhandledCommand(args, "onto a directory")
		}
		if err := r.env.Tree.Remove(e.Path); err != nil {
			return err
		}
	}
	if err := r.copyEntry(src, dst, true); err != nil {
		return err
	}
	return r.env.Tree.Remove(src.Path)
}

// cmdCp copies one file or symlink; -p, -a and --preserve keep mode and
// owner. -Z (an SELinux context) has nothing to do in an image without a
// policy loaded.
func cmdCp(r *run, hc interp.HandlerContext, args []string) error {
	keep, deref := false, true
	var ops []string
	for _, a := range args[1:] {
		switch {
		case a == "--preserve" || strings.HasPrefix(a, "--preserve="):
			keep = true
		case a == "--archive":
			keep, deref = true, false
		case a == "--force":
		case strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && a != "-":
			// Short flags, alone or combined (-pZ, -dp): -Z asks for the
			// default SELinux context, which an image build has none of.
			for _, c := range a[1:] {
				switch c {
				case 'p':
					keep = true
				case 'a':
					keep, deref = true, false
				case 'd':
					deref = false
				case 'f', 'Z':
				default:
					return r.unhandled(fmt.Sprintf("cp option %s", a))
				}
			}
		case strings.HasPrefix(a, "-") && a != "-":
			return r.unhandled(fmt.Sprintf("cp option %s", a))
		default:
			ops = append(ops, a)
		}
	}
	if len(ops) != 2 {
		return r.unhandledCommand(args)
	}
	src, err := r.env.Tree.Lookup(r.treePath(ops[0]), deref)
	if err != nil {
		fmt.Fprintf(hc.Stderr, "cp: cannot stat '%s': No such file or directory\n", ops[0])
		return exit(1)
	}
	if src.Type == rootfs.TypeDir {
		return r.unhandledCommand(args, "a directory")
	}
	dst := r.treePath(ops[1])
	if ops[1] == "" {
		fmt.Fprintln(hc.Stderr, "cp: cannot create regular file '': No such file or directory")
		return exit(1)
	}
	if e, err := r.env.Tree.Lookup(dst, true); err == nil && e.Type == rootfs.TypeDir {
		dst = path.Join(e.Path, path.Base(src.Path))
	}
	return r.copyEntry(src, dst, keep)
}

// cmdInstall is install(1) for one file: -m/--mode, -o, -g; the source may
// be /dev/null, which makes an empty file, as isc-dhcp-client's postinst
// makes its AppArmor local include.
func cmdInstall(r *run, hc interp.HandlerContext, args []string) error {
	mode := uint32(0o755)
	var owner, group string
	var ops []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		val := func() (string, bool) {
			if i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		switch {
		case a == "-m" || a == "--mode":
			v, ok := val()
			m, err := strconv.ParseUint(v, 8, 32)
			if !ok || err != nil {
				return r.unhandled(fmt.Sprintf("install mode %q", v))
			}
			mode = uint32(m)
		case strings.HasPrefix(a, "--mode="):
			m, err := strconv.ParseUint(strings.TrimPrefix(a, "--mode="), 8, 32)
			if err != nil {
				return r.unhandled(fmt.Sprintf("install %s", a))
			}
			mode = uint32(m)
		case a == "-o" || a == "--owner":
			owner, _ = val()
		case a == "-g" || a == "--group":
			group, _ = val()
		case strings.HasPrefix(a, "-"):
			return r.unhandled(fmt.Sprintf("install option %s", a))
		default:
			ops = append(ops, a)
		}
	}
	if len(ops) != 2 {
		return r.unhandledCommand(args)
	}
	var data []byte
	if src := r.treePath(ops[0]); src != "/dev/null" {
		b, err := r.readFile(src)
		if err != nil {
			fmt.Fprintf(hc.Stderr, "install: cannot stat '%s': No such file or directory\n", ops[0])
			return exit(1)
		}
		data = b
	}
	dst := r.treePath(ops[1])
	if _, err := r.env.Tree.Lookup(path.Dir(dst), true); err != nil {
		fmt.Fprintf(hc.Stderr, "install: cannot create regular file '%s': No such file or directory\n", ops[1])
		return exit(1)
	}
	h := rootfs.Header{Type: rootfs.TypeRegular, Perm: mode, MTime: r.env.Epoch, Origin: r.origin()}
	for _, x := range []struct {
		name, db string
		id       *uint32
	}{{owner, "/etc/passwd", &h.UID}, {group, "/etc/group", &h.GID}} {
		if x.name == "" {
			continue
		}
		id, ok := r.accountID(x.db, x.name)
		if !ok {
			fmt.Fprintf(hc.Stderr, "install: invalid user or group '%s'\n", x.name)
			return exit(1)
		}
		*x.id = id
	}
	rp, err := r.env.Tree.Resolve(dst, true)
	if err != nil {
		return err
	}
	_, err = r.env.Tree.Create(rp, h, bytes.NewReader(data))
	return err
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

// cmdMktemp makes a file (or with -d a directory) under /tmp of the tree,
// mode 0600 (0700), named from a counter rather than at random so builds
// repeat; the scripts remove what they make.
func cmdMktemp(r *run, hc interp.HandlerContext, args []string) error {
	dir, tmpl, isDir := "/tmp", "tmp.XXXXXXXXXX", false
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-d" || a == "--directory":
			isDir = true
		case a == "-p" && i+1 < len(args):
			dir = args[i+1]
			i++
		case a == "-q" || a == "--quiet":
		case strings.HasPrefix(a, "-"):
			return r.unhandled(fmt.Sprintf("mktemp option %s", a))
		default:
			tmpl = a
		}
	}
	if !strings.Contains(tmpl, "/") {
		tmpl = strings.TrimRight(dir, "/") + "/" + tmpl
	}
	x := strings.TrimRight(tmpl, "X")
	if len(tmpl)-len(x) < 3 {
		fmt.Fprintf(hc.Stderr, "mktemp: too few X's in template '%s'\n", tmpl)
		return exit(1)
	}
	for n := 0; ; n++ {
		name := fmt.Sprintf("%s%0*d", x, len(tmpl)-len(x), n)
		p := r.treePath(name)
		if _, err := r.env.Tree.Lookup(p, false); err == nil {
			continue
		}
		var err error
		if isDir {
			if err = r.mkdirAll(p); err == nil {
				err = r.env.Tree.Update(p, func(in *rootfs.Inode) { in.Perm = 0o700 })
			}
		} else {
			if err = r.mkdirAll(path.Dir(p)); err == nil {
				_, err = r.env.Tree.Create(p, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o600, MTime: r.env.Epoch, Origin: r.origin()}, nil)
			}
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(hc.Stdout, name)
		return nil
	}
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

// cmdFind walks a directory of the tree in name order (the image's order
// is its file system's, which no script can rely on), with -type, -name,
// -print and -L.
func cmdFind(r *run, hc interp.HandlerContext, args []string) error {
	follow := false
	i := 1
	for ; i < len(args) && (args[i] == "-L" || args[i] == "-H" || args[i] == "-P"); i++ {
		follow = args[i] == "-L"
	}
	var roots []string
	for ; i < len(args) && !strings.HasPrefix(args[i], "-"); i++ {
		roots = append(roots, args[i])
	}
	if len(roots) == 0 {
		roots = []string{"."}
	}
	var typ byte
	var names []string
	// existsTest is -exec test -e {} \; (negated with !): whether the
	// path, followed, leads somewhere.
	existsTest, negateExists, negate := false, false, false
	for ; i < len(args); i++ {
		switch a := args[i]; {
		case a == "!":
			negate = true
			continue
		case a == "-exec" && i+4 < len(args) && args[i+1] == "test" && args[i+2] == "-e" && args[i+3] == "{}" && args[i+4] == ";":
			existsTest, negateExists, negate = true, negate, false
			i += 4
			continue
		case a == "-type" && i+1 < len(args) && len(args[i+1]) == 1:
			typ = args[i+1][0]
			i++
		case a == "-name" && i+1 < len(args):
			names = append(names, args[i+1])
			i++
		case a == "-print" || a == "-follow":
			follow = follow || a == "-follow"
		default:
			return r.unhandledCommand(args)
		}
		if negate {
			return r.unhandledCommand(args)
		}
	}
	code := 0
	var walk func(shown, p string, depth int)
	walk = func(shown, p string, depth int) {
		e, err := r.env.Tree.Lookup(p, follow || depth == 0)
		if err != nil {
			e, err = r.env.Tree.Lookup(p, false)
		}
		if err != nil {
			fmt.Fprintf(hc.Stderr, "find: '%s': No such file or directory\n", shown)
			code = 1
			return
		}
		ok := true
		switch typ {
		case 0:
		case 'f':
			ok = e.Type == rootfs.TypeRegular
		case 'd':
			ok = e.Type == rootfs.TypeDir
		case 'l':
			ok = e.Type == rootfs.TypeSymlink
		default:
			ok = false
		}
		for _, n := range names {
			if m, _ := path.Match(n, path.Base(shown)); !m {
				ok = false
			}
		}
		if existsTest {
			_, err := r.env.Tree.Lookup(p, true)
			if (err == nil) == negateExists {
				ok = false
			}
		}
		if ok {
			fmt.Fprintln(hc.Stdout, shown)
		}
		if e.Type == rootfs.TypeDir && depth < 64 {
			for _, c := range r.env.Tree.Children(e.Path) {
				walk(strings.TrimSuffix(shown, "/")+"/"+c, e.Path+"/"+c, depth+1)
			}
		}
	}
	for _, root := range roots {
		walk(root, r.treePath(root), 0)
	}
	return exit(code)
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
	if _, found := r.lookPath(path.Base(args[0])); !found {
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
