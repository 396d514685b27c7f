package scripts

import (
	"bytes"
	"cmp"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/dpkg"
	"github.com/stamp-dev/stamp/rootfs"
)

// The dpkg database queries scripts make (dpkg -L, dpkg -s, dpkg-query
// -W) and dpkg-statoverride, answered from the tree's own database. The
// package being configured is there already: the debs layer writes its
// .list before any postinst runs.

// statusOf returns the status paragraph of pkg (a name, or name:arch).
func (r *run) statusOf(pkg string) *deb.Paragraph {
	name, _, _ := strings.Cut(pkg, ":")
	b, err := r.readFile(dpkg.StatusPath)
	if err != nil {
		return nil
	}
	ps, err := deb.ParseControl(bytes.NewReader(b))
	if err != nil {
		return nil
	}
	for _, p := range ps {
		if p.Get("Package") == name {
			return p
		}
	}
	return nil
}

// listOf returns the .list of pkg, or nil when it has none.
func (r *run) listOf(pkg string) ([]byte, bool) {
	name, arch, _ := strings.Cut(pkg, ":")
	cands := []string{name + ".list", name + ":" + r.env.Arch + ".list"}
	if arch != "" {
		cands = []string{name + ":" + arch + ".list", name + ".list"}
	}
	for _, c := range cands {
		if b, err := r.readFile(dpkg.InfoDir + "/" + c); err == nil {
			return b, true
		}
	}
	return nil, false
}

// dpkgQuery answers dpkg -L and dpkg -s.
func (r *run) dpkgQuery(hc interp.HandlerContext, op string, pkgs []string) error {
	code := 0
	for _, p := range pkgs {
		switch op {
		case "-L", "--listfiles":
			b, ok := r.listOf(p)
			if !ok {
				fmt.Fprintf(hc.Stderr, "dpkg-query: package '%s' is not installed\n", p)
				code = 1
				continue
			}
			hc.Stdout.Write(b)
		case "-s", "--status":
			st := r.statusOf(p)
			if st == nil {
				fmt.Fprintf(hc.Stderr, "dpkg-query: package '%s' is not installed and no information is available\n", p)
				code = 1
				continue
			}
			fmt.Fprint(hc.Stdout, st.String())
		}
	}
	return exit(code)
}

// dpkgSearch answers dpkg-query -S for absolute paths and globs of them:
// the packages whose .list holds each, as "pkg1, pkg2: path".
func (r *run) dpkgSearch(hc interp.HandlerContext, pats []string) error {
	if len(pats) == 0 {
		return r.unhandled("dpkg-query -S without a pattern")
	}
	owners := map[string][]string{}
	var paths []string
	for _, f := range r.env.Tree.Children(dpkg.InfoDir) {
		pkg, ok := strings.CutSuffix(f, ".list")
		if !ok {
			continue
		}
		b, err := r.readFile(dpkg.InfoDir + "/" + f)
		if err != nil {
			return err
		}
		for _, l := range strings.Split(string(b), "\n") {
			if l == "" {
				continue
			}
			if owners[l] == nil {
				paths = append(paths, l)
			}
			owners[l] = append(owners[l], pkg)
		}
	}
	slices.Sort(paths)
	code := 0
	for _, pat := range pats {
		if !strings.HasPrefix(pat, "/") {
			return r.unhandled(fmt.Sprintf("dpkg-query -S %s (not an absolute path)", pat))
		}
		found := false
		for _, p := range paths {
			if p == pat || strings.ContainsAny(pat, "*?[") && rootfs.Match(pat, p) {
				fmt.Fprintf(hc.Stdout, "%s: %s\n", strings.Join(owners[p], ", "), p)
				found = true
			}
		}
		if !found {
			fmt.Fprintf(hc.Stderr, "dpkg-query: no path found matching pattern %s\n", pat)
			code = 1
		}
	}
	return exit(code)
}

// cmdDpkgQuery is dpkg-query -W with a -f format of ${field} references
// (${db:Status-Want}, ${db:Status-Status}, ${db:Status-Abbrev} included),
// -L and -s.
func cmdDpkgQuery(r *run, hc interp.HandlerContext, args []string) error {
	format := "${binary:Package}\t${Version}\n"
	show := false
	var pkgs []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-W" || a == "--show":
			show = true
		case a == "-L" || a == "--listfiles" || a == "-s" || a == "--status":
			return r.dpkgQuery(hc, a, args[i+1:])
		case a == "-S" || a == "--search":
			return r.dpkgSearch(hc, args[i+1:])
		case a == "-l" || a == "--list":
			return r.dpkgList(hc, args[i+1:])
		case a == "-f" && i+1 < len(args):
			format = args[i+1]
			i++
		case strings.HasPrefix(a, "-f="), strings.HasPrefix(a, "--showformat="):
			_, format, _ = strings.Cut(a, "=")
		case strings.HasPrefix(a, "-"):
			return r.unhandled(fmt.Sprintf("dpkg-query option %s", a))
		default:
			pkgs = append(pkgs, a)
		}
	}
	if !show || len(pkgs) == 0 {
		return r.unhandledCommand(args)
	}
	code := 0
	for _, p := range pkgs {
		st := r.statusOf(p)
		if st == nil {
			fmt.Fprintf(hc.Stderr, "dpkg-query: no packages found matching %s\n", p)
			code = 1
			continue
		}
		status := strings.Fields(st.Get("Status"))
		for len(status) < 3 {
			status = append(status, "")
		}
		out := dcVar.ReplaceAllStringFunc(unescapeFormat(format), func(m string) string {
			f := m[2 : len(m)-1]
			switch f {
			case "db:Status-Want":
				return status[0]
			case "db:Status-Eflag":
				return status[1]
			case "db:Status-Status":
				return status[2]
			case "binary:Package", "Package":
				return st.Get("Package")
			}
			return st.Get(f)
		})
		fmt.Fprint(hc.Stdout, out)
	}
	return exit(code)
}

func unescapeFormat(s string) string {
	return strings.NewReplacer(`\n`, "\n", `\t`, "\t", `\\`, `\`).Replace(s)
}

const statOverridePath = "/var/lib/dpkg/statoverride"

// cmdDpkgStatoverride is dpkg-statoverride --list, and --add (with
// --update, which applies the owner and mode to the file as well).
func cmdDpkgStatoverride(r *run, hc interp.HandlerContext, args []string) error {
	var action string
	update, force := false, false
	var ops []string
	for _, a := range args[1:] {
		switch a {
		case "--list", "--add", "--remove":
			action = a
		case "--update":
			update = true
		case "--force", "--force-all", "--force-statoverride-add":
			force = true
		case "--quiet":
		default:
			if strings.HasPrefix(a, "--") {
				return r.unhandled(fmt.Sprintf("dpkg-statoverride option %s", a))
			}
			ops = append(ops, a)
		}
	}
	b, _ := r.readFile(statOverridePath)
	entries := lines(b)
	switch action {
	case "--list":
		return statOverrideList(hc, entries, ops)
	case "--add":
		if len(ops) != 4 {
			return r.unhandledCommand(args)
		}
		return r.statOverrideAdd(hc, entries, ops, update, force)
	}
	return r.unhandledCommand(args)
}

// statOverrideList prints the overrides of paths matching ops (all, when
// none); status 1 when there is none.
func statOverrideList(hc interp.HandlerContext, entries, ops []string) error {
	found := false
	for _, l := range entries {
		f := strings.SplitN(l, " ", 4)
		if len(f) != 4 {
			continue
		}
		match := len(ops) == 0
		for _, g := range ops {
			if ok, _ := path.Match(g, f[3]); ok {
				match = true
			}
		}
		if match {
			fmt.Fprintln(hc.Stdout, l)
			found = true
		}
	}
	if !found {
		return exit(1)
	}
	return nil
}

// statOverrideAdd is --add USER GROUP MODE PATH, and with --update gives
// the file that owner and mode.
func (r *run) statOverrideAdd(hc interp.HandlerContext, entries, ops []string, update, force bool) error {
	user, group, modeS, p := ops[0], ops[1], ops[2], ops[3]
	mode, err := strconv.ParseUint(modeS, 8, 32)
	if err != nil {
		fmt.Fprintf(hc.Stderr, "dpkg-statoverride: error: illegal mode '%s'\n", modeS)
		return exit(2)
	}
	uid, ok1 := r.accountID("/etc/passwd", strings.TrimPrefix(user, "#"))
	gid, ok2 := r.accountID("/etc/group", strings.TrimPrefix(group, "#"))
	if !ok1 || !ok2 {
		fmt.Fprintf(hc.Stderr, "dpkg-statoverride: error: user or group of '%s' does not exist\n", p)
		return exit(2)
	}
	// dpkg writes the mode in octal without a leading zero, and the
	// database in its file name hash table's order.
	line := fmt.Sprintf("%s %s %o %s", user, group, mode, p)
	if i := statOverrideIndex(entries, p); i >= 0 {
		if !force {
			fmt.Fprintf(hc.Stderr, "dpkg-statoverride: error: an override for '%s' already exists; aborting\n", p)
			return exit(2)
		}
		entries[i] = line
	} else {
		entries = append(entries, line)
	}
	slices.SortStableFunc(entries, func(a, b string) int {
		pa, pb := strings.SplitN(a, " ", 4), strings.SplitN(b, " ", 4)
		return cmp.Compare(dpkgHashBin(pa[len(pa)-1]), dpkgHashBin(pb[len(pb)-1]))
	})
	if err := r.writeFile(statOverridePath, []byte(strings.Join(entries, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	if !update {
		return nil
	}
	e, err := r.env.Tree.Lookup(p, true)
	if err != nil {
		fmt.Fprintf(hc.Stderr, "dpkg-statoverride: warning: --update given but %s does not exist\n", p)
		return nil
	}
	return r.env.Tree.Update(e.Path, func(in *rootfs.Inode) {
		in.UID, in.GID = uid, gid
		in.Perm = in.Perm&^0o7777 | uint32(mode)
	})
}

// statOverrideIndex is the index of p's override in entries, or -1.
func statOverrideIndex(entries []string, p string) int {
	for i, l := range entries {
		if f := strings.SplitN(l, " ", 4); len(f) == 4 && f[3] == p {
			return i
		}
	}
	return -1
}
