package scripts

import (
	"fmt"
	"path"
	"regexp"
	"slices"
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
		return r.unhandledCommand(args)
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
				return r.unhandledCommand(args, "another root")
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

// cmdAddShell is debianutils' add-shell: each shell, then its path with
// the directory's links resolved (realpath -m), is appended to
// /etc/shells unless a line already matches it (grep "^SHELL$"), and the
// file keeps its mode and owner.
func cmdAddShell(r *run, hc interp.HandlerContext, args []string) error {
	return r.editShells(hc, args, false, func(lines []string, shell string) []string {
		if !slices.ContainsFunc(lines, shellMatcher(shell)) {
			lines = append(lines, shell)
		}
		return lines
	})
}

// cmdRemoveShell is debianutils' remove-shell: the lines matching each
// shell, and its path with the directory's links resolved, go.
func cmdRemoveShell(r *run, hc interp.HandlerContext, args []string) error {
	return r.editShells(hc, args, true, func(lines []string, shell string) []string {
		return slices.DeleteFunc(lines, shellMatcher(shell))
	})
}

// editShells applies edit to /etc/shells for each shell named and its
// resolved twin, in that order, as add-shell and remove-shell loop;
// rewrite says the tool rewrites every line (remove-shell's grep -v ends
// each with a newline), where add-shell only appends.
func (r *run) editShells(hc interp.HandlerContext, args []string, rewrite bool, edit func([]string, string) []string) error {
	const file = "/etc/shells"
	if len(args) < 2 {
		fmt.Fprintf(hc.Stderr, "usage: %s shellname [shellname ...]\n", args[0])
		return exit(1)
	}
	e, err := r.env.Tree.Lookup(file, true)
	if err != nil {
		fmt.Fprintf(hc.Stderr, "cat: %s: No such file or directory\n", file)
		return exit(1)
	}
	b, err := r.readFile(file)
	if err != nil {
		return err
	}
	// The lines as the scripts' tools see them: a last line without its
	// newline gets the next one appended to it, as echo >> does.
	text := string(b)
	for _, shell := range args[1:] {
		for _, j := range []string{shell, r.realShell(shell)} {
			lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
			if text == "" {
				lines = nil
			}
			out := edit(slices.Clone(lines), j)
			if rewrite {
				text = string(joinLines(out))
				continue
			}
			if slices.Equal(out, lines) {
				continue
			}
			if len(out) > len(lines) && text != "" && !strings.HasSuffix(text, "\n") {
				text += j + "\n"
				continue
			}
			text = string(joinLines(out))
		}
	}
	uid, gid, perm := e.UID, e.GID, e.Perm
	if err := r.writeFile(file, []byte(text), perm); err != nil {
		return err
	}
	return r.setOwnerMode(file, uid, gid, perm)
}

// realShell is "$(dirname "$(realpath -m "$i")")/$(basename "$i")": the
// shell's path with every link on it resolved in the tree, missing parts
// taken as they are, then its own name again.
func (r *run) realShell(shell string) string {
	p := path.Clean("/" + shell)
	resolved := p
	var rest []string
	for q := p; ; q = path.Dir(q) {
		if rp, err := r.env.Tree.Resolve(q, true); err == nil {
			resolved = path.Join(append([]string{rp}, rest...)...)
			break
		}
		if q == "/" {
			break
		}
		rest = append([]string{path.Base(q)}, rest...)
	}
	return path.Join(path.Dir(resolved), path.Base(shell))
}

// shellMatcher is grep "^SHELL$" on a line: the shell read as a basic
// regular expression, which for a path means "." matches any character.
func shellMatcher(shell string) func(string) bool {
	var re strings.Builder
	for _, c := range shell {
		switch c {
		case '+', '?', '(', ')', '{', '}', '|':
			re.WriteString("\\" + string(c))
		default:
			re.WriteRune(c)
		}
	}
	m, err := regexp.Compile("^" + re.String() + "$")
	if err != nil {
		return func(l string) bool { return l == shell }
	}
	return m.MatchString
}
