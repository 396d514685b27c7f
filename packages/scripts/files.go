package scripts

import (
	"bytes"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
	"mvdan.cc/sh/v3/interp"
)

// The file utilities maintainer scripts use (coreutils' rm, rmdir,
// mkdir, ln, chmod, chown, chgrp, touch, readlink, mv, cp, install,
// mktemp, stat and ls; findutils' find; libcap's getcap), working on the
// tree through its index: an option they do not know is unhandled rather
// than guessed at.

func cmdRm(r *run, hc interp.HandlerContext, args []string) error {
	flags, ops := splitFlags(args[1:])
	code := 0
	for _, f := range ops {
		p := r.treePath(hc.Dir, f)
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
		e, err := r.env.Tree.Lookup(r.treePath(hc.Dir, f), false)
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
		p := r.treePath(hc.Dir, f)
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
	target, link := ops[0], r.treePath(hc.Dir, ops[1])
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
		e, err := r.env.Tree.Lookup(r.treePath(hc.Dir, f), true)
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
		e, err := r.env.Tree.Lookup(r.treePath(hc.Dir, f), true)
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
		p := r.treePath(hc.Dir, f)
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
	p := r.treePath(hc.Dir, ops[0])
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
	src, err := r.env.Tree.Lookup(r.treePath(hc.Dir, ops[0]), false)
	if err != nil {
		fmt.Fprintf(hc.Stderr, "mv: cannot stat '%s': No such file or directory\n", ops[0])
		return exit(1)
	}
	if src.Type != rootfs.TypeRegular && src.Type != rootfs.TypeSymlink {
		return r.unhandledCommand(args, fmt.Sprintf("a %s", src.Type))
	}
	dst := r.treePath(hc.Dir, ops[1])
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
	src, err := r.env.Tree.Lookup(r.treePath(hc.Dir, ops[0]), deref)
	if err != nil {
		fmt.Fprintf(hc.Stderr, "cp: cannot stat '%s': No such file or directory\n", ops[0])
		return exit(1)
	}
	if src.Type == rootfs.TypeDir {
		return r.unhandledCommand(args, "a directory")
	}
	dst := r.treePath(hc.Dir, ops[1])
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
	if src := r.treePath(hc.Dir, ops[0]); src != "/dev/null" {
		b, err := r.readFile(src)
		if err != nil {
			fmt.Fprintf(hc.Stderr, "install: cannot stat '%s': No such file or directory\n", ops[0])
			return exit(1)
		}
		data = b
	}
	dst := r.treePath(hc.Dir, ops[1])
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
		p := r.treePath(hc.Dir, name)
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
		walk(root, r.treePath(hc.Dir, root), 0)
	}
	return exit(code)
}

// cmdStat answers stat -c FORMAT for paths in the tree. %d and %i are the
// same made-up device and inode numbers whatever the build, so a script
// comparing / with /proc/1/root concludes, rightly, that it runs in a
// chroot: /proc is not there.
func cmdStat(r *run, hc interp.HandlerContext, args []string) error {
	follow := false
	format := ""
	var files []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-L" || a == "--dereference":
			follow = true
		case a == "-c" || a == "--format":
			if i+1 < len(args) {
				format = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--format="):
			format = strings.TrimPrefix(a, "--format=")
		case strings.HasPrefix(a, "-") && strings.HasSuffix(a, "c") && len(a) > 2:
			// Combined short flags, as in -Lc.
			for _, c := range a[1 : len(a)-1] {
				if c != 'L' {
					return r.unhandled(fmt.Sprintf("stat option %q", a))
				}
				follow = true
			}
			if i+1 < len(args) {
				format = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "-"):
			return r.unhandled(fmt.Sprintf("stat option %q", a))
		default:
			files = append(files, a)
		}
	}
	if format == "" || len(files) == 0 {
		return r.unhandledCommand(args)
	}
	status := 0
	for _, f := range files {
		e, err := r.env.Tree.Lookup(r.treePath(hc.Dir, f), follow)
		if err != nil {
			fmt.Fprintf(hc.Stderr, "stat: cannot statx '%s': No such file or directory\n", f)
			status = 1
			continue
		}
		out, err := statFormat(format, f, e)
		if err != nil {
			return r.unhandled(fmt.Sprintf("stat format %q", format))
		}
		fmt.Fprintln(hc.Stdout, out)
	}
	if status != 0 {
		return exit(status)
	}
	return nil
}

func statFormat(format, name string, e *rootfs.Entry) (string, error) {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'd':
			b.WriteString("2049")
		case 'i':
			b.WriteString(strconv.FormatUint(uint64(inodeNumber(e.Path)), 10))
		case 'a':
			b.WriteString(strconv.FormatUint(uint64(e.Perm), 8))
		case 'u':
			b.WriteString(strconv.FormatUint(uint64(e.UID), 10))
		case 'g':
			b.WriteString(strconv.FormatUint(uint64(e.GID), 10))
		case 's':
			b.WriteString(strconv.FormatInt(e.Size, 10))
		case 'n':
			b.WriteString(name)
		case '%':
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("unknown directive %%%c", format[i])
		}
	}
	return b.String(), nil
}

// inodeNumber is a stable stand-in for a path's inode number.
func inodeNumber(p string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(p); i++ {
		h = (h ^ uint32(p[i])) * 16777619
	}
	return h | 1
}

// cmdGetcap prints the file capabilities of files; only "no capabilities"
// is answered offline, a file that has some is unhandled rather than
// decoded by guesswork.
func cmdGetcap(r *run, hc interp.HandlerContext, args []string) error {
	for _, f := range args[1:] {
		if strings.HasPrefix(f, "-") {
			return r.unhandled(fmt.Sprintf("getcap option %s", f))
		}
		e, err := r.env.Tree.Lookup(r.treePath(hc.Dir, f), true)
		if err != nil {
			fmt.Fprintf(hc.Stderr, "Failed to get capabilities of file '%s' (No such file or directory)\n", f)
			continue
		}
		if _, ok := e.Xattrs["security.capability"]; ok {
			return r.unhandledCommand(args, "the file has capabilities")
		}
	}
	return nil
}

// cmdLs answers whether paths exist (ls -L, ls -d), printing their names.
func cmdLs(r *run, hc interp.HandlerContext, args []string) error {
	flags, ops := splitFlags(args[1:])
	for f := range flags {
		if f != "-L" && f != "-d" {
			return r.unhandled(fmt.Sprintf("ls option %s", f))
		}
	}
	code := 0
	for _, f := range ops {
		e, err := r.env.Tree.Lookup(r.treePath(hc.Dir, f), flags["-L"])
		if err != nil {
			fmt.Fprintf(hc.Stderr, "ls: cannot access '%s': No such file or directory\n", f)
			code = 2
			continue
		}
		if e.Type == rootfs.TypeDir && !flags["-d"] {
			return r.unhandledCommand(args, "listing a directory")
		}
		fmt.Fprintln(hc.Stdout, f)
	}
	return exit(code)
}

// setOwnerMode gives the file at p an owner and mode, as chown and chmod.
func (r *run) setOwnerMode(p string, uid, gid, perm uint32) error {
	e, err := r.env.Tree.Lookup(p, true)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return r.env.Tree.Update(e.Path, func(in *rootfs.Inode) { in.UID, in.GID, in.Perm = uid, gid, perm })
}
