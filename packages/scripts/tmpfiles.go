package scripts

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs"
)

// cmdSystemdTmpfiles is systemd-tmpfiles --create CONFIG... as a package's
// postinst runs it on a system that is not booted: the named tmpfiles.d
// files (an /etc one overriding /run's and /usr/lib's) are read and their
// create and adjust lines applied to the tree, as the image's
// systemd-tmpfiles would apply them in a chroot of it: boot-only lines
// (!) and credential lines (^) are skipped, and a line naming a path the
// tree does not have adjusts nothing.
//
// udev's static-nodes-permissions.conf only adjusts device nodes under
// /dev. In the image /dev is a devtmpfs mounted at boot, where
// systemd-tmpfiles-setup-dev applies the same lines to the kernel's
// nodes; the tree's /dev (a chroot's too) has none of those nodes, so
// offline the lines change nothing, which is what the real run does.
//
// File attributes (h, chattr +C on journal directories) are not part of
// a tree; ACL lines (a, a+) are written as the system.posix_acl_* xattrs
// the kernel keeps.
func cmdSystemdTmpfiles(r *run, hc interp.HandlerContext, args []string) error {
	create := false
	var names []string
	for _, a := range args[1:] {
		switch {
		case a == "--create":
			create = true
		case strings.HasPrefix(a, "--root="):
			if v := strings.TrimPrefix(a, "--root="); v != "" && v != "/" {
				return r.unhandledCommand(args)
			}
		case strings.HasPrefix(a, "-"):
			return r.unhandled(fmt.Sprintf("systemd-tmpfiles option %s", a))
		default:
			names = append(names, a)
		}
	}
	if !create || len(names) == 0 {
		return r.unhandledCommand(args)
	}
	code := 0
	for _, n := range names {
		var body []byte
		found := false
		for _, d := range []string{"/etc/tmpfiles.d/", "/run/tmpfiles.d/", "/usr/local/lib/tmpfiles.d/", "/usr/lib/tmpfiles.d/", "/lib/tmpfiles.d/"} {
			if b, err := r.readFile(d + path.Base(n)); err == nil {
				body, found = b, true
				break
			}
		}
		if strings.Contains(n, "/") {
			b, err := r.readFile(r.treePath(hc.Dir, n))
			body, found = b, err == nil
		}
		if !found {
			fmt.Fprintf(hc.Stderr, "Failed to find configuration file '%s'\n", n)
			code = 1
			continue
		}
		for i, l := range lines(body) {
			if err := r.tmpfilesLine(hc, strings.TrimSpace(l)); err != nil {
				var ue *UnhandledError
				if ok := asUnhandled(err, &ue); ok {
					return err
				}
				fmt.Fprintf(hc.Stderr, "%s:%d: %v\n", n, i+1, err)
				code = 1
			}
		}
	}
	return exit(code)
}

func asUnhandled(err error, ue **UnhandledError) bool {
	u, ok := err.(*UnhandledError)
	if ok {
		*ue = u
	}
	return ok
}

// tmpfilesFields splits a line as systemd does: whitespace-separated
// fields, the last one (the argument) taking the rest, quotes removed.
func tmpfilesFields(l string) []string {
	var out []string
	for len(out) < 6 {
		l = strings.TrimLeft(l, " \t")
		if l == "" {
			break
		}
		if l[0] == '"' {
			if j := strings.IndexByte(l[1:], '"'); j >= 0 {
				out = append(out, l[1:1+j])
				l = l[j+2:]
				continue
			}
		}
		j := strings.IndexAny(l, " \t")
		if j < 0 {
			j = len(l)
		}
		out = append(out, l[:j])
		l = l[j:]
	}
	if rest := strings.TrimSpace(l); rest != "" {
		out = append(out, strings.Trim(rest, `"`))
	}
	return out
}

func (r *run) tmpfilesSpecifiers(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case '%':
			b.WriteByte('%')
		case 'm':
			id, err := r.readFile("/etc/machine-id")
			if err != nil || len(strings.TrimSpace(string(id))) != 32 {
				return "", false
			}
			b.WriteString(strings.TrimSpace(string(id)))
		case 'H', 'l':
			h, _ := r.readFile("/etc/hostname")
			b.WriteString(strings.TrimSpace(string(h)))
		case 'v':
			b.WriteString(r.kernelRelease())
		case 't':
			b.WriteString("/run")
		case 'S':
			b.WriteString("/var/lib")
		case 'C':
			b.WriteString("/var/cache")
		case 'L':
			b.WriteString("/var/log")
		case 'T':
			b.WriteString("/tmp")
		case 'V':
			b.WriteString("/var/tmp")
		case 'h':
			b.WriteString("/root")
		case 'u', 'g':
			b.WriteString("root")
		case 'U', 'G':
			b.WriteString("0")
		default:
			return "", false
		}
	}
	return b.String(), true
}

// tmpfilesItem is one line of a tmpfiles.d file, parsed.
type tmpfilesItem struct {
	line, typ, path, arg string
	// plus is the + modifier: replace what is there.
	plus bool
	// onCreateOnly (:) adjusts mode and owner only of what the line
	// creates; masked (~) keeps only the mode bits the file has.
	onCreateOnly, masked bool
	mode, uid, gid       *uint32
}

// tmpfilesLine applies one line as systemd-tmpfiles --create does.
func (r *run) tmpfilesLine(hc interp.HandlerContext, l string) error {
	it, err := r.parseTmpfilesLine(l)
	if it == nil || err != nil {
		return err
	}
	switch it.typ {
	case "d", "D", "v", "q", "Q":
		return r.tmpfilesDir(it)
	case "e":
		return r.tmpfilesAdjust(it, it.path, false, 0)
	case "f", "w":
		return r.tmpfilesFile(it)
	case "L":
		return r.tmpfilesLink(it)
	case "z", "Z":
		return r.tmpfilesAdjustTree(it)
	case "h", "H":
		if _, err := r.env.Tree.Lookup(it.path, false); err == nil {
			r.logf("%s %s: systemd-tmpfiles: file attributes %s of %s are not kept in a tree", r.s.Package, r.s.Name, it.arg, it.path)
		}
		return nil
	case "a", "A":
		if it.typ == "A" {
			return r.unhandled(fmt.Sprintf("systemd-tmpfiles recursive ACL line %q", l))
		}
		e, err := r.env.Tree.Lookup(it.path, false)
		if err != nil {
			return nil
		}
		return r.applyACL(e, it.arg, it.plus)
	case "C":
		return r.tmpfilesCopy(it)
	}
	return r.unhandled(fmt.Sprintf("systemd-tmpfiles line %q", l))
}

// parseTmpfilesLine reads a line's fields; nil for a line --create skips
// (a comment, boot-only, cleaning or removal).
func (r *run) parseTmpfilesLine(l string) (*tmpfilesItem, error) {
	if l == "" || strings.HasPrefix(l, "#") {
		return nil, nil
	}
	f := tmpfilesFields(l)
	for len(f) < 7 {
		f = append(f, "-")
	}
	typ, mods := f[0][:1], f[0][1:]
	if strings.Contains(mods, "!") || strings.Contains(mods, "^") {
		return nil, nil // boot-only, or from a credential the build has none of
	}
	switch typ {
	case "x", "X", "r", "R":
		return nil, nil // cleaning and removal, not --create
	}
	it := &tmpfilesItem{line: l, typ: typ, plus: strings.Contains(mods, "+"), arg: f[6]}
	p, ok := r.tmpfilesSpecifiers(f[1])
	if !ok {
		return nil, fmt.Errorf("unknown specifier in %q", f[1])
	}
	it.path = p
	if it.arg == "-" {
		it.arg = ""
	}
	it.onCreateOnly = strings.HasPrefix(f[2], ":")
	modeS := strings.TrimPrefix(strings.TrimPrefix(f[2], ":"), "~")
	it.masked = strings.HasPrefix(strings.TrimPrefix(f[2], ":"), "~")
	if modeS != "-" {
		m, err := strconv.ParseUint(modeS, 8, 32)
		if err != nil {
			return nil, fmt.Errorf("bad mode %q", f[2])
		}
		mm := uint32(m)
		it.mode = &mm
	}
	var err error
	if it.uid, err = r.tmpfilesID(f[3], "/etc/passwd"); err != nil {
		return nil, err
	}
	if it.gid, err = r.tmpfilesID(f[4], "/etc/group"); err != nil {
		return nil, err
	}
	return it, nil
}

// tmpfilesID is a user or group field: nil for "-".
func (r *run) tmpfilesID(field, db string) (*uint32, error) {
	field = strings.TrimPrefix(field, ":")
	if field == "-" {
		return nil, nil
	}
	v, ok := r.accountID(db, field)
	if !ok {
		return nil, fmt.Errorf("unknown user or group %q", field)
	}
	return &v, nil
}

// tmpfilesAdjust gives p the line's mode and owner (dflt for a mode the
// line leaves out, on what it created).
func (r *run) tmpfilesAdjust(it *tmpfilesItem, p string, created bool, dflt uint32) error {
	t := r.env.Tree
	e, err := t.Lookup(p, false)
	if err != nil {
		return nil
	}
	if it.onCreateOnly && !created {
		return nil
	}
	mode, uid, gid := it.mode, it.uid, it.gid
	return t.Update(e.Path, func(in *rootfs.Inode) {
		switch {
		case mode != nil && it.masked:
			// ~: keep only the bits the file has, and x for
			// directories as given.
			m := *mode & in.Perm & 0o777
			if in.Type == rootfs.TypeDir {
				m |= *mode & 0o111
			}
			in.Perm = in.Perm&^0o777 | m | *mode&0o7000
		case mode != nil:
			in.Perm = *mode
		case created:
			in.Perm = dflt
		}
		if uid != nil {
			in.UID = *uid
		}
		if gid != nil {
			in.GID = *gid
		}
	})
}

// tmpfilesDir is d, D, v, q and Q: a directory (a symlink to one will do).
func (r *run) tmpfilesDir(it *tmpfilesItem) error {
	t, p := r.env.Tree, it.path
	e, err := t.Lookup(p, false)
	ok := err == nil
	if ok && e.Type != rootfs.TypeDir {
		if e.Type == rootfs.TypeSymlink {
			if te, err := t.Lookup(p, true); err == nil && te.Type == rootfs.TypeDir {
				return nil
			}
		}
		return fmt.Errorf("%s exists and is not a directory", p)
	}
	if !ok {
		if err := r.mkdirAll(p); err != nil {
			return err
		}
	}
	return r.tmpfilesAdjust(it, p, !ok, 0o755)
}

// tmpfilesFile is f (create, or with + replace) and w (write to what is
// there).
func (r *run) tmpfilesFile(it *tmpfilesItem) error {
	t, p := r.env.Tree, it.path
	e, err := t.Lookup(p, false)
	ok := err == nil
	if it.typ == "w" {
		if !ok || e.Type != rootfs.TypeRegular {
			return nil
		}
		return r.writeFile(p, []byte(it.arg), e.Perm)
	}
	if ok && !it.plus {
		return r.tmpfilesAdjust(it, p, false, 0)
	}
	if _, err := t.Lookup(path.Dir(p), true); err != nil {
		return nil // the parent is missing: tmpfiles does not make it
	}
	if err := r.writeFile(p, []byte(it.arg), 0o644); err != nil {
		return err
	}
	return r.tmpfilesAdjust(it, p, !ok, 0o644)
}

// tmpfilesLink is L: a symlink, to the factory copy when the line names
// no target.
func (r *run) tmpfilesLink(it *tmpfilesItem) error {
	t, p, arg := r.env.Tree, it.path, it.arg
	if arg == "" {
		arg = "/usr/share/factory" + p
	}
	if e, err := t.Lookup(p, false); err == nil {
		if e.Type == rootfs.TypeSymlink && e.Target == arg || !it.plus {
			return nil
		}
		if err := t.Remove(e.Path); err != nil {
			return err
		}
	}
	if _, err := t.Lookup(path.Dir(p), true); err != nil {
		return nil
	}
	return r.symlink(arg, p)
}

// tmpfilesAdjustTree is z and Z: adjust what is there; Z also below it.
func (r *run) tmpfilesAdjustTree(it *tmpfilesItem) error {
	t := r.env.Tree
	e, err := t.Lookup(it.path, false)
	if err != nil {
		return nil
	}
	if err := r.tmpfilesAdjust(it, it.path, false, 0); err != nil {
		return err
	}
	if it.typ == "Z" && e.Type == rootfs.TypeDir {
		for _, q := range t.Paths() {
			if strings.HasPrefix(q, e.Path+"/") {
				if err := r.tmpfilesAdjust(it, q, false, 0); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// tmpfilesCopy is C: copy a file (the factory copy by default) where
// nothing is.
func (r *run) tmpfilesCopy(it *tmpfilesItem) error {
	t, p, arg := r.env.Tree, it.path, it.arg
	if _, err := t.Lookup(p, false); err == nil {
		return nil
	}
	if arg == "" {
		arg = "/usr/share/factory" + p
	}
	src, err := t.Lookup(arg, true)
	if err != nil {
		return nil // nothing to copy: tmpfiles logs it and goes on
	}
	if src.Type != rootfs.TypeRegular {
		return r.unhandled(fmt.Sprintf("systemd-tmpfiles copy line %q", it.line))
	}
	if err := r.copyEntry(src, p, true); err != nil {
		return err
	}
	return r.tmpfilesAdjust(it, p, true, src.Perm)
}
