package scripts

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/rootfs"
)

// cmdNoService stands for a policy-rc.d that forbids starting services, as
// in any image build: deb-systemd-invoke and invoke-rc.d do nothing.
func cmdNoService(r *run, _ interp.HandlerContext, args []string) error {
	r.logf("%s %s: not running %s (services are not started in an image build)", r.s.Package, r.s.Name, strings.Join(args, " "))
	return nil
}

func cmdCommandV(r *run, hc interp.HandlerContext, args []string) error {
	code := 0
	for _, a := range args[1:] {
		if p, ok := r.lookPath(a); ok {
			fmt.Fprintln(hc.Stdout, p)
		} else {
			code = 1
		}
	}
	return exit(code)
}

func cmdWhich(r *run, hc interp.HandlerContext, args []string) error {
	code := 0
	for _, a := range args[1:] {
		if strings.HasPrefix(a, "-") {
			continue
		}
		if p, ok := r.lookPath(a); ok && !builtins[a] {
			fmt.Fprintln(hc.Stdout, p)
		} else {
			code = 1
		}
	}
	return exit(code)
}

func cmdSystemctl(r *run, hc interp.HandlerContext, args []string) error {
	var verb string
	var units []string
	for _, a := range args[1:] {
		switch {
		case strings.HasPrefix(a, "-"):
		case verb == "":
			verb = a
		default:
			units = append(units, a)
		}
	}
	switch verb {
	case "daemon-reload", "daemon-reexec", "start", "stop", "restart", "try-restart", "reload",
		"reload-or-restart", "try-reload-or-restart", "condrestart", "reset-failed":
		return nil
	case "is-active", "is-failed":
		return exit(3)
	case "is-system-running":
		fmt.Fprintln(hc.Stdout, "offline")
		return exit(1)
	case "enable", "disable", "mask", "unmask", "preset", "reenable":
		if r.env.Systemctl == nil {
			break
		}
		if err := r.env.Systemctl(r.ctx, verb, units); err != nil {
			return fmt.Errorf("%s %s: systemctl %s: %w", r.s.Package, r.s.Name, verb, err)
		}
		return nil
	}
	return r.unhandledCommand(args)
}

func cmdDpkg(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) < 2 {
		return r.unhandled("dpkg without arguments")
	}
	switch args[1] {
	case "--compare-versions":
		if len(args) != 5 {
			return exit(2)
		}
		ok, err := compareVersions(args[2], args[3], args[4])
		if err != nil {
			fmt.Fprintln(hc.Stderr, "dpkg:", err)
			return exit(2)
		}
		if ok {
			return nil
		}
		return exit(1)
	case "--print-architecture":
		fmt.Fprintln(hc.Stdout, r.env.Arch)
		return nil
	case "-L", "--listfiles", "-s", "--status":
		return r.dpkgQuery(hc, args[1], args[2:])
	case "-S", "--search":
		return r.dpkgSearch(hc, args[2:])
	case "-l", "--list":
		return r.dpkgList(hc, args[2:])
	case "--assert-support-predepends", "--assert-working-epoch", "--assert-long-filenames",
		"--assert-multi-conrep", "--assert-multi-arch", "--assert-versioned-provides",
		"--assert-protected-field":
		return nil
	}
	return r.unhandledCommand(args)
}

// compareVersions is dpkg --compare-versions, with the -nl operators that
// take an empty version as later than any other.
func compareVersions(a, op, b string) (bool, error) {
	nl := strings.HasSuffix(op, "-nl")
	op = strings.TrimSuffix(op, "-nl")
	var c int
	switch {
	case a == "" && b == "":
		c = 0
	case a == "":
		c = -1
		if nl {
			c = 1
		}
	case b == "":
		c = 1
		if nl {
			c = -1
		}
	default:
		for _, v := range []string{a, b} {
			if _, err := deb.ParseVersion(v); err != nil {
				return false, err
			}
		}
		c = deb.CompareVersions(a, b)
	}
	switch op {
	case "lt", "<<", "<":
		return c < 0, nil
	case "le", "<=":
		return c <= 0, nil
	case "eq", "=":
		return c == 0, nil
	case "ne":
		return c != 0, nil
	case "ge", ">=":
		return c >= 0, nil
	case "gt", ">>", ">":
		return c > 0, nil
	}
	return false, fmt.Errorf("unknown operator %q", op)
}

// cmdMaintscriptHelper is dpkg-maintscript-helper. Every command acts only
// on upgrades from older versions; on a fresh install (preinst install,
// postinst configure with no old version) it does nothing.
func cmdMaintscriptHelper(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) >= 2 && args[1] == "supports" {
		return nil
	}
	var script []string
	for i, a := range args {
		if a == "--" {
			script = args[i+1:]
			break
		}
	}
	fresh := len(script) == 0 || (script[0] == "install" || script[0] == "configure") && (len(script) < 2 || script[1] == "")
	if fresh {
		return nil
	}
	return r.unhandledCommand(args)
}

// cmdUpdateRcd is init-system-helpers' update-rc.d without insserv: remove
// drops the rc links, defaults (and defaults-disabled) make S01/K01 links
// from the script's LSB header; the systemd half only reloads a running
// systemd, which an image build has not.
func cmdUpdateRcd(r *run, hc interp.HandlerContext, args []string) error {
	var rest []string
	for _, a := range args[1:] {
		if a != "-f" {
			rest = append(rest, a)
		}
	}
	if len(rest) < 2 {
		return exit(1)
	}
	if r.exists("/sbin/insserv") || r.exists("/usr/sbin/insserv") || r.exists("/sbin/openrc") {
		return r.unhandled(fmt.Sprintf("command %q with insserv or openrc in the tree", strings.Join(args, " ")))
	}
	name, action := rest[0], rest[1]
	links := func() []string {
		var out []string
		for _, lvl := range []string{"0", "1", "2", "3", "4", "5", "6", "S"} {
			dir := "/etc/rc" + lvl + ".d"
			for _, c := range r.env.Tree.Children(dir) {
				if len(c) > 3 && (c[0] == 'S' || c[0] == 'K') && isDigit(c[1]) && isDigit(c[2]) && c[3:] == name {
					out = append(out, dir+"/"+c)
				}
			}
		}
		return out
	}
	switch action {
	case "remove":
		for _, l := range links() {
			if err := r.env.Tree.Remove(l); err != nil {
				return err
			}
		}
		return nil
	case "defaults", "defaults-disabled":
		if len(links()) > 0 {
			return nil
		}
		b, err := r.readFile("/etc/init.d/" + name)
		if err != nil {
			fmt.Fprintf(hc.Stderr, "update-rc.d: error: unable to read /etc/init.d/%s\n", name)
			return exit(1)
		}
		start, stop := lsbLevels(string(b))
		kind := "S"
		if action == "defaults-disabled" {
			kind = "K"
		}
		for _, set := range []struct {
			kind   string
			levels []string
		}{{kind, start}, {"K", stop}} {
			for _, lvl := range set.levels {
				l := "/etc/rc" + lvl + ".d/" + set.kind + "01" + name
				if _, err := r.env.Tree.Lookup(l, false); err == nil {
					continue
				}
				if err := r.symlink("../init.d/"+name, l); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return r.unhandledCommand(args)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// lsbLevels reads Default-Start and Default-Stop from an init script's
// LSB header, as update-rc.d's parse_def_start_stop does.
func lsbLevels(script string) (start, stop []string) {
	in := false
	for _, l := range strings.Split(script, "\n") {
		switch {
		case strings.TrimRight(l, " \t") == "### BEGIN INIT INFO":
			in = true
		case strings.TrimRight(l, " \t") == "### END INIT INFO":
			return start, stop
		case in && strings.HasPrefix(l, "# Default-Start:"):
			start = strings.Fields(strings.TrimPrefix(l, "# Default-Start:"))
		case in && strings.HasPrefix(l, "# Default-Stop:"):
			stop = strings.Fields(strings.TrimPrefix(l, "# Default-Stop:"))
		}
	}
	return start, stop
}

func cmdUname(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) == 1 || len(args) == 2 && (args[1] == "-s" || args[1] == "--kernel-name") {
		fmt.Fprintln(hc.Stdout, "Linux")
		return nil
	}
	if len(args) == 2 && (args[1] == "-m" || args[1] == "--machine") {
		m := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[r.env.Arch]
		if m == "" {
			m = r.env.Arch
		}
		fmt.Fprintln(hc.Stdout, m)
		return nil
	}
	if len(args) == 2 && (args[1] == "-r" || args[1] == "--kernel-release") {
		// The build host's kernel says nothing about the image's: answer
		// with the newest kernel the tree has modules for, or bookworm's.
		fmt.Fprintln(hc.Stdout, r.kernelRelease())
		return nil
	}
	return r.unhandledCommand(args)
}

// defaultKernel is what uname -r says when the tree has no kernel modules.
const defaultKernel = "6.1.0"

func (r *run) kernelRelease() string {
	best := ""
	for _, d := range []string{"/lib/modules", "/usr/lib/modules"} {
		e, err := r.env.Tree.Lookup(d, true)
		if err != nil || e.Type != rootfs.TypeDir {
			continue
		}
		for _, c := range r.env.Tree.Children(e.Path) {
			if best == "" || deb.CompareVersions(c, best) > 0 {
				best = c
			}
		}
	}
	if best == "" {
		return defaultKernel
	}
	return best
}

// splitFlags separates flags from operands; "--" ends the flags.
func splitFlags(args []string) (flags map[string]bool, ops []string) {
	flags = map[string]bool{}
	done := false
	for _, a := range args {
		switch {
		case done || !strings.HasPrefix(a, "-") || a == "-":
			ops = append(ops, a)
		case a == "--":
			done = true
		case strings.HasPrefix(a, "--"):
			flags[a] = true
		default:
			for _, c := range a[1:] {
				flags["-"+string(c)] = true
			}
		}
	}
	return flags, ops
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
		b, err := r.readFile(r.treePath(f))
		if err != nil {
			fmt.Fprintf(hc.Stderr, "cat: %s: %v\n", f, err)
			code = 1
			continue
		}
		hc.Stdout.Write(b)
	}
	return exit(code)
}

func cmdRm(r *run, hc interp.HandlerContext, args []string) error {
	flags, ops := splitFlags(args[1:])
	code := 0
	for _, f := range ops {
		p := r.treePath(f)
		e, err := r.env.Tree.Lookup(p, false)
		if err != nil {
			if !flags["-f"] && !flags["--force"] {
				fmt.Fprintf(hc.Stderr, "rm: cannot remove '%s': No such file or directory\n", f)
				code = 1
			}
			continue
		}
		if e.Type == rootfs.TypeDir && !flags["-r"] && !flags["-R"] && !flags["--recursive"] {
			fmt.Fprintf(hc.Stderr, "rm: cannot remove '%s': Is a directory\n", f)
			code = 1
			continue
		}
		if err := r.env.Tree.Remove(e.Path); err != nil {
			return err
		}
	}
	return exit(code)
}

func cmdRmdir(r *run, hc interp.HandlerContext, args []string) error {
	flags, ops := splitFlags(args[1:])
	code := 0
	for _, f := range ops {
		e, err := r.env.Tree.Lookup(r.treePath(f), false)
		if err != nil || e.Type != rootfs.TypeDir {
			fmt.Fprintf(hc.Stderr, "rmdir: failed to remove '%s'\n", f)
			code = 1
			continue
		}
		if len(r.env.Tree.Children(e.Path)) > 0 {
			if !flags["--ignore-fail-on-non-empty"] {
				fmt.Fprintf(hc.Stderr, "rmdir: failed to remove '%s': Directory not empty\n", f)
				code = 1
			}
			continue
		}
		if err := r.env.Tree.Remove(e.Path); err != nil {
			return err
		}
	}
	return exit(code)
}

func cmdMkdir(r *run, hc interp.HandlerContext, args []string) error {
	var mode *uint32
	var rest []string
	for i := 1; i < len(args); i++ {
		if (args[i] == "-m" || args[i] == "--mode") && i+1 < len(args) {
			m, err := strconv.ParseUint(args[i+1], 8, 32)
			if err != nil {
				return r.unhandled(fmt.Sprintf("mkdir mode %q", args[i+1]))
			}
			mm := uint32(m)
			mode = &mm
			i++
			continue
		}
		rest = append(rest, args[i])
	}
	flags, ops := splitFlags(rest)
	code := 0
	for _, f := range ops {
		p := r.treePath(f)
		if e, err := r.env.Tree.Lookup(p, true); err == nil {
			if !flags["-p"] && !flags["--parents"] || e.Type != rootfs.TypeDir {
				fmt.Fprintf(hc.Stderr, "mkdir: cannot create directory '%s': File exists\n", f)
				code = 1
			}
			continue
		}
		if !flags["-p"] && !flags["--parents"] {
			if _, err := r.env.Tree.Lookup(path.Dir(p), true); err != nil {
				fmt.Fprintf(hc.Stderr, "mkdir: cannot create directory '%s': No such file or directory\n", f)
				code = 1
				continue
			}
		}
		if err := r.mkdirAll(p); err != nil {
			return err
		}
		if mode != nil {
			rp, _ := r.env.Tree.Resolve(p, true)
			if err := r.env.Tree.Update(rp, func(in *rootfs.Inode) { in.Perm = *mode }); err != nil {
				return err
			}
		}
	}
	return exit(code)
}

func cmdLn(r *run, hc interp.HandlerContext, args []string) error {
	flags, ops := splitFlags(args[1:])
	if !flags["-s"] && !flags["--symbolic"] || len(ops) != 2 {
		return r.unhandledCommand(args)
	}
	target, link := ops[0], r.treePath(ops[1])
	if e, err := r.env.Tree.Lookup(link, true); err == nil && e.Type == rootfs.TypeDir && !flags["-n"] && !flags["-T"] {
		link = path.Join(e.Path, path.Base(target))
	}
	if _, err := r.env.Tree.Lookup(link, false); err == nil && !flags["-f"] && !flags["--force"] {
		fmt.Fprintf(hc.Stderr, "ln: failed to create symbolic link '%s': File exists\n", ops[1])
		return exit(1)
	}
	return r.symlink(target, link)
}

func cmdChmod(r *run, hc interp.HandlerContext, args []string) error {
	var ops []string
	for _, a := range args[1:] {
		// A symbolic mode such as -x looks like a flag.
		if a == "-R" || a == "--recursive" || a == "-v" || a == "-f" || a == "-c" {
			if a == "-R" || a == "--recursive" {
				return r.unhandledCommand(args)
			}
			continue
		}
		ops = append(ops, a)
	}
	if len(ops) < 2 {
		return exit(1)
	}
	for _, f := range ops[1:] {
		e, err := r.env.Tree.Lookup(r.treePath(f), true)
		if err != nil {
			fmt.Fprintf(hc.Stderr, "chmod: cannot access '%s'\n", f)
			return exit(1)
		}
		m, ok := applyMode(ops[0], e.Perm, e.Type == rootfs.TypeDir)
		if !ok {
			return r.unhandled(fmt.Sprintf("chmod mode %q", ops[0]))
		}
		if err := r.env.Tree.Update(e.Path, func(in *rootfs.Inode) { in.Perm = m }); err != nil {
			return err
		}
	}
	return nil
}

// applyMode applies an octal or symbolic chmod mode ("755", "+x",
// "u+rw,go-w", "a=r") to perm, with umask 022 for a mode without a "who".
func applyMode(spec string, perm uint32, dir bool) (uint32, bool) {
	if n, err := strconv.ParseUint(spec, 8, 32); err == nil {
		return uint32(n), true
	}
	for _, clause := range strings.Split(spec, ",") {
		i := 0
		var who uint32
		for i < len(clause) && strings.IndexByte("ugoa", clause[i]) >= 0 {
			who |= map[byte]uint32{'u': 0o4700, 'g': 0o2070, 'o': 0o1007, 'a': 0o7777}[clause[i]]
			i++
		}
		umask := uint32(0)
		if who == 0 {
			who, umask = 0o7777, 0o022
		}
		if i >= len(clause) {
			return 0, false
		}
		for i < len(clause) {
			op := clause[i]
			if op != '+' && op != '-' && op != '=' {
				return 0, false
			}
			i++
			var bits uint32
			for i < len(clause) && strings.IndexByte("rwxXst", clause[i]) >= 0 {
				switch clause[i] {
				case 'r':
					bits |= 0o444
				case 'w':
					bits |= 0o222
				case 'x':
					bits |= 0o111
				case 'X':
					if dir || perm&0o111 != 0 {
						bits |= 0o111
					}
				case 's':
					bits |= 0o6000
				case 't':
					bits |= 0o1000
				}
				i++
			}
			bits &= who &^ umask
			switch op {
			case '+':
				perm |= bits
			case '-':
				perm &^= bits
			case '=':
				perm = perm&^(who&0o7777) | bits
			}
		}
	}
	return perm, true
}

func cmdChown(r *run, hc interp.HandlerContext, args []string) error {
	_, ops := splitFlags(args[1:])
	if len(ops) < 2 {
		return exit(1)
	}
	spec := ops[0]
	if path.Base(args[0]) == "chgrp" {
		spec = ":" + spec
	}
	u, g, _ := strings.Cut(strings.Replace(spec, ".", ":", 1), ":")
	var uid, gid *uint32
	if u != "" {
		id, ok := r.accountID("/etc/passwd", u)
		if !ok {
			fmt.Fprintf(hc.Stderr, "chown: invalid user: '%s'\n", spec)
			return exit(1)
		}
		uid = &id
	}
	if g != "" {
		id, ok := r.accountID("/etc/group", g)
		if !ok {
			fmt.Fprintf(hc.Stderr, "chown: invalid group: '%s'\n", spec)
			return exit(1)
		}
		gid = &id
	}
	for _, f := range ops[1:] {
		e, err := r.env.Tree.Lookup(r.treePath(f), true)
		if err != nil {
			fmt.Fprintf(hc.Stderr, "chown: cannot access '%s'\n", f)
			return exit(1)
		}
		if err := r.env.Tree.Update(e.Path, func(in *rootfs.Inode) {
			if uid != nil {
				in.UID = *uid
			}
			if gid != nil {
				in.GID = *gid
			}
		}); err != nil {
			return err
		}
	}
	return nil
}

func cmdTouch(r *run, hc interp.HandlerContext, args []string) error {
	_, ops := splitFlags(args[1:])
	for _, f := range ops {
		p := r.treePath(f)
		if _, err := r.env.Tree.Lookup(p, true); err == nil {
			continue
		}
		// touch creates with 0666 under the umask (libpam-modules'
		// opasswd is made under umask 066).
		if err := r.writeFile(p, nil, 0o666&^r.umask); err != nil {
			return err
		}
	}
	return nil
}

func cmdReadlink(r *run, hc interp.HandlerContext, args []string) error {
	flags, ops := splitFlags(args[1:])
	if len(ops) != 1 {
		return exit(1)
	}
	p := r.treePath(ops[0])
	if flags["-f"] || flags["-e"] || flags["-m"] || flags["--canonicalize"] {
		rp, err := r.env.Tree.Resolve(p, true)
		if err != nil {
			return exit(1)
		}
		if flags["-e"] {
			if _, err := r.env.Tree.Lookup(rp, false); err != nil {
				return exit(1)
			}
		}
		fmt.Fprintln(hc.Stdout, rp)
		return nil
	}
	e, err := r.env.Tree.Lookup(p, false)
	if err != nil || e.Type != rootfs.TypeSymlink {
		return exit(1)
	}
	fmt.Fprintln(hc.Stdout, e.Target)
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
	fmt.Fprintln(hc.Stdout, path.Dir(args[1]))
	return nil
}

// accountID looks a name (or number) up in the tree's passwd or group.
func (r *run) accountID(db, name string) (uint32, bool) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), true
	}
	f := r.lookupAccount(db, name)
	if len(f) < 3 {
		return 0, false
	}
	n, err := strconv.ParseUint(f[2], 10, 32)
	return uint32(n), err == nil
}

// lookupAccount returns the fields of the record named name, or nil.
func (r *run) lookupAccount(db, name string) []string {
	return r.findAccount(db, func(f []string) bool { return f[0] == name })
}

// accountName is the name of id in the tree's passwd or group, or the
// number when it has none.
func (r *run) accountName(db string, id uint32) string {
	n := strconv.FormatUint(uint64(id), 10)
	if f := r.findAccount(db, func(f []string) bool { return f[2] == n }); f != nil {
		return f[0]
	}
	return n
}

// findAccount returns the fields of the first record of db that match.
func (r *run) findAccount(db string, match func(f []string) bool) []string {
	b, err := r.readFile(db)
	if err != nil {
		return nil
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Split(l, ":"); len(f) > 2 && match(f) {
			return f
		}
	}
	return nil
}

func cmdGetent(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) < 3 {
		return r.unhandledCommand(args)
	}
	db := map[string]string{"passwd": "/etc/passwd", "group": "/etc/group", "shadow": "/etc/shadow", "gshadow": "/etc/gshadow"}[args[1]]
	if db == "" {
		return r.unhandledCommand(args)
	}
	code := 0
	for _, k := range args[2:] {
		b, err := r.readFile(db)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		found := false
		for _, l := range strings.Split(string(b), "\n") {
			f := strings.Split(l, ":")
			if len(f) > 2 && (f[0] == k || f[2] == k) {
				fmt.Fprintln(hc.Stdout, l)
				found = true
				break
			}
		}
		if !found {
			code = 2
		}
	}
	return exit(code)
}

// cmdID is id: scripts run as root, as under dpkg; a user operand is
// looked up in the tree's passwd.
func cmdID(r *run, hc interp.HandlerContext, args []string) error {
	flags, ops := splitFlags(args[1:])
	if len(ops) > 1 {
		return r.unhandledCommand(args)
	}
	uid, gid, user := "0", "0", r.accountName("/etc/passwd", 0)
	if len(ops) == 1 {
		f := r.lookupAccount("/etc/passwd", ops[0])
		if len(f) < 4 {
			fmt.Fprintf(hc.Stderr, "id: '%s': no such user\n", ops[0])
			return exit(1)
		}
		uid, gid, user = f[2], f[3], f[0]
	}
	name := flags["-n"] || flags["--name"]
	switch {
	case flags["-u"] || flags["--user"]:
		if name {
			fmt.Fprintln(hc.Stdout, user)
		} else {
			fmt.Fprintln(hc.Stdout, uid)
		}
	case flags["-g"] || flags["--group"]:
		if name {
			n, _ := strconv.ParseUint(gid, 10, 32)
			fmt.Fprintln(hc.Stdout, r.accountName("/etc/group", uint32(n)))
		} else {
			fmt.Fprintln(hc.Stdout, gid)
		}
	case len(flags) == 0 && len(ops) == 0:
		g := r.accountName("/etc/group", 0)
		fmt.Fprintf(hc.Stdout, "uid=0(%s) gid=0(%s) groups=0(%s)\n", user, g, g)
	default:
		return r.unhandledCommand(args)
	}
	return nil
}
