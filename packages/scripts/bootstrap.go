package scripts

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs"
)

// cmdIschroot answers that the script runs in a chroot, which is what an
// image build is to a maintainer script: nothing of the image is running,
// so there is no service to restart (libc6's postinst asks).
func cmdIschroot(*run, interp.HandlerContext, []string) error { return nil }

// cmdShadowconfig is passwd's shadowconfig on, as its postinst runs it on
// a first install: pwconv and grpconv move the passwords of /etc/passwd
// and /etc/group into /etc/shadow and /etc/gshadow (new records aged from
// the build's epoch, with login.defs' PASS_* limits), then the shadow
// files become root:shadow 0640. pwck and grpck only read, and so are not
// run. The backups shadow-utils keeps (passwd-, group-) are not made.
func cmdShadowconfig(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) != 2 || args[1] != "on" {
		return r.unhandled(fmt.Sprintf("command %q", strings.Join(args, " ")))
	}
	defs := r.loginDefs()
	lastchg := ""
	if days := r.env.Epoch.Unix() / 86400; days > 0 {
		lastchg = strconv.FormatInt(days, 10)
	}
	if err := r.shadowConvert("/etc/passwd", "/etc/shadow", func(f []string) []string {
		return []string{f[0], f[1], lastchg, defs["PASS_MIN_DAYS"], defs["PASS_MAX_DAYS"], defs["PASS_WARN_AGE"], "", "", ""}
	}); err != nil {
		return err
	}
	if err := r.shadowConvert("/etc/group", "/etc/gshadow", func(f []string) []string {
		members := ""
		if len(f) > 3 {
			members = f[3]
		}
		return []string{f[0], f[1], "", members}
	}); err != nil {
		return err
	}
	var shadowGID uint32
	if b, err := r.readFile("/etc/group"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Split(l, ":"); len(f) > 2 && f[0] == "shadow" {
				if id, err := strconv.ParseUint(f[2], 10, 32); err == nil {
					shadowGID = uint32(id)
				}
			}
		}
	}
	for _, o := range []struct {
		path string
		perm uint32
		gid  uint32
	}{{"/etc/passwd", 0o644, 0}, {"/etc/group", 0o644, 0}, {"/etc/shadow", 0o640, shadowGID}, {"/etc/gshadow", 0o640, shadowGID}} {
		if err := r.setOwnerMode(o.path, 0, o.gid, o.perm); err != nil {
			return err
		}
	}
	return nil
}

// shadowConvert is pwconv (or grpconv): every record of db whose password
// is not "x" gets it moved into shadow, a record for each name shadow
// lacks is appended as record makes it, and shadow records of names db
// does not have go.
func (r *run) shadowConvert(db, shadow string, record func(f []string) []string) error {
	b, err := r.readFile(db)
	if err != nil {
		return fmt.Errorf("%s: %w", db, err)
	}
	sb, _ := r.readFile(shadow)
	dbLines := splitLines(b)
	shLines := splitLines(sb)
	names := map[string]bool{}
	index := map[string]int{}
	for i, l := range shLines {
		if f := strings.Split(l, ":"); len(f) > 1 {
			index[f[0]] = i
		}
	}
	for i, l := range dbLines {
		f := strings.Split(l, ":")
		if len(f) < 3 || l[0] == '+' || l[0] == '-' || l[0] == '#' {
			continue
		}
		names[f[0]] = true
		j, ok := index[f[0]]
		switch {
		case !ok:
			shLines = append(shLines, strings.Join(record(f), ":"))
		case f[1] != "x":
			sf := strings.Split(shLines[j], ":")
			sf[1] = f[1]
			shLines[j] = strings.Join(sf, ":")
		}
		f[1] = "x"
		dbLines[i] = strings.Join(f, ":")
	}
	kept := shLines[:0]
	for _, l := range shLines {
		if f := strings.Split(l, ":"); len(f) > 1 && !names[f[0]] {
			continue
		}
		kept = append(kept, l)
	}
	if err := r.writeFile(db, joinLines(dbLines), 0o644); err != nil {
		return err
	}
	return r.writeFile(shadow, joinLines(kept), 0o640)
}

// loginDefs reads the PASS_* aging defaults of /etc/login.defs, with
// shadow-utils' fallbacks (no limit: empty fields).
func (r *run) loginDefs() map[string]string {
	out := map[string]string{"PASS_MIN_DAYS": "", "PASS_MAX_DAYS": "", "PASS_WARN_AGE": ""}
	b, err := r.readFile("/etc/login.defs")
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && !strings.HasPrefix(f[0], "#") {
			if _, ok := out[f[0]]; ok {
				if n, err := strconv.ParseInt(f[1], 0, 64); err == nil && n >= 0 {
					out[f[0]] = strconv.FormatInt(n, 10)
				}
			}
		}
	}
	return out
}

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

// setOwnerMode gives the file at p an owner and mode, as chown and chmod.
func (r *run) setOwnerMode(p string, uid, gid, perm uint32) error {
	e, err := r.env.Tree.Lookup(p, true)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return r.env.Tree.Update(e.Path, func(in *rootfs.Inode) { in.UID, in.GID, in.Perm = uid, gid, perm })
}

// cmdUpdateShells is debianutils' update-shells: /etc/shells keeps its
// comments, its local additions and the shells packages declare (the
// template and shells.d, each also by its path with the directory's links
// resolved), drops the packaged shells that are gone, and adds the new
// ones; /var/lib/shells.state remembers what packages declared.
func cmdUpdateShells(r *run, hc interp.HandlerContext, args []string) error {
	for i := 1; i < len(args); i++ {
		switch args[i] {
		case "--root":
			if i+1 < len(args) && args[i+1] != "" && args[i+1] != "/" {
				return r.unhandled(fmt.Sprintf("command %q (another root)", strings.Join(args, " ")))
			}
			i++
		case "--verbose":
		default:
			return r.unhandled(fmt.Sprintf("update-shells option %s", args[i]))
		}
	}
	const (
		template = "/usr/share/debianutils/shells"
		pkgDir   = "/usr/share/debianutils/shells.d"
		state    = "/var/lib/shells.state"
		target   = "/etc/shells"
	)
	var pkgShells []string
	pkgSet, stateSet, etcSet := map[string]bool{}, map[string]bool{}, map[string]bool{}
	sources := []string{template}
	for _, n := range r.env.Tree.Children(pkgDir) {
		sources = append(sources, pkgDir+"/"+n)
	}
	for _, f := range sources {
		e, err := r.env.Tree.Lookup(f, true)
		if err != nil || e.Type != rootfs.TypeRegular {
			continue
		}
		b, err := r.readFile(f)
		if err != nil {
			return err
		}
		for _, l := range splitLines(b) {
			line, _, _ := strings.Cut(l, "#")
			if line == "" {
				continue
			}
			pkgShells = append(pkgShells, line)
			pkgSet[line] = true
			dir, base := path.Split(line)
			if real, err := r.env.Tree.Resolve(path.Clean("/"+dir), true); err == nil {
				if rs := path.Join(real, base); rs != line {
					pkgShells = append(pkgShells, rs)
					pkgSet[rs] = true
				}
			}
		}
	}
	if b, err := r.readFile(state); err == nil {
		for _, l := range splitLines(b) {
			if line, _, _ := strings.Cut(l, "#"); line != "" {
				stateSet[line] = true
			}
		}
	}
	source := target
	if _, err := r.env.Tree.Lookup(target, true); err != nil {
		source = template
	}
	src, err := r.env.Tree.Lookup(source, true)
	if err != nil {
		return fmt.Errorf("%s: %w", source, err)
	}
	b, err := r.readFile(source)
	if err != nil {
		return err
	}
	var etc, newState []string
	for _, l := range splitLines(b) {
		shell, _, _ := strings.Cut(l, "#")
		if shell == "" || pkgSet[shell] || !stateSet[shell] {
			if shell == "" || !etcSet[shell] {
				etc = append(etc, l)
				etcSet[shell] = true
			}
		}
	}
	for _, s := range pkgShells {
		newState = append(newState, s)
		if !etcSet[s] && !stateSet[s] {
			etc = append(etc, s)
		}
	}
	uid, gid, perm := src.UID, src.GID, src.Perm
	if err := r.writeFile(target, joinLines(etc), perm); err != nil {
		return err
	}
	if err := r.setOwnerMode(target, uid, gid, perm); err != nil {
		return err
	}
	return r.writeFile(state, joinLines(newState), 0o644)
}
