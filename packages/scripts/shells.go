package scripts

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs"
)

// cmdIschroot answers that the script runs in a chroot, which is what an
// image build is to a maintainer script: nothing of the image is running,
// so there is no service to restart (libc6's postinst asks).
func cmdIschroot(*run, interp.HandlerContext, []string) error { return nil }

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
