package scripts

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs"
)

// dshInstance is where deb-systemd-helper keeps the units and its state
// for system units (the default) or, with --user, for user units.
type dshInstance struct {
	name              string // system or user
	enabled, masked   string // state directories
	config            string // where links are made
	searchDirs        []string
	systemctlUnitDirs []string // where systemctl --global finds a unit
}

var (
	dshSystem = &dshInstance{name: "system",
		enabled: "/var/lib/systemd/deb-systemd-helper-enabled", masked: "/var/lib/systemd/deb-systemd-helper-masked",
		config: "/etc/systemd/system", searchDirs: []string{"/etc/systemd/system/", "/lib/systemd/system/", "/usr/lib/systemd/system/"}}
	dshUser = &dshInstance{name: "user",
		enabled: "/var/lib/systemd/deb-systemd-user-helper-enabled", masked: "/var/lib/systemd/deb-systemd-user-helper-masked",
		config: "/etc/systemd/user", searchDirs: []string{"/etc/systemd/user/", "/lib/systemd/user/", "/usr/lib/systemd/user/"},
		systemctlUnitDirs: []string{"/etc/systemd/user/", "/usr/local/lib/systemd/user/", "/usr/lib/systemd/user/"}}
)

// cmdDebSystemdHelper reproduces init-system-helpers' deb-systemd-helper
// for system units: the links it makes (itself, or through systemctl
// preset when systemd is in the tree) and the state files it keeps, so a
// later upgrade or purge in the image behaves as on a system installed by
// dpkg. Like update-alternatives it is taken as present whether or not the
// tree has it: init-system-helpers is Essential, and scripts (ebtables'
// postinst calls it under set -e) rely on that.
func cmdDebSystemdHelper(r *run, hc interp.HandlerContext, args []string) error {
	quiet := false
	var rest []string
	r.dsh = dshSystem
	for _, a := range args[1:] {
		switch a {
		case "--quiet":
			quiet = true
		case "--system":
			r.dsh = dshSystem
		case "--user":
			r.dsh = dshUser
		default:
			rest = append(rest, a)
		}
	}
	if len(rest) == 0 {
		return nil
	}
	action, units := rest[0], rest[1:]
	purge := false
	if action == "purge" {
		action, purge = "disable", true
	}
	query := action == "is-enabled" || action == "was-enabled" || action == "debian-installed"
	rc := 0
	if query {
		rc = 1
	}
	for _, u := range units {
		sp := r.findUnit(u)
		if query {
			ok, err := r.dshQuery(hc, action, u, sp, quiet)
			if err != nil {
				return err
			}
			if ok {
				rc = 0
			}
			continue
		}
		if err := r.dshChange(hc, args, action, u, sp, purge); err != nil {
			return err
		}
	}
	if err := r.dshTidy(action); err != nil {
		return err
	}
	return exit(rc)
}

// dshQuery answers was-enabled, is-enabled and debian-installed for one
// unit.
func (r *run) dshQuery(hc interp.HandlerContext, action, u, sp string, quiet bool) (bool, error) {
	switch action {
	case "was-enabled":
		ok := true
		for _, l := range r.dshEntries(u) {
			if isLink, _, _ := r.linkState(l); !isLink {
				ok = false
			}
		}
		if !quiet {
			fmt.Fprintln(hc.Stderr, map[bool]string{true: "enabled", false: "disabled"}[ok])
		}
		return ok, nil
	case "is-enabled":
		links, err := r.linkClosure(sp, nil)
		if err != nil {
			return false, r.dshError(hc, err)
		}
		ok := true
		for _, l := range links {
			if isLink, _, _ := r.linkState(l[0]); !isLink {
				ok = false
			}
		}
		return ok, nil
	}
	// debian-installed
	return r.exists(r.dshState(u)), nil
}

// dshChange does enable, reenable, update-state, disable, mask or unmask
// for one unit.
func (r *run) dshChange(hc interp.HandlerContext, args []string, action, u, sp string, purge bool) error {
	switch action {
	case "enable":
		if err := r.dshEnable(u, sp); err != nil {
			return r.dshError(hc, err)
		}
	case "reenable":
		if err := r.dshRemoveLinks(sp, purge); err != nil {
			return err
		}
		if err := r.makeSystemdLinks(u, sp, true); err != nil {
			return r.dshError(hc, err)
		}
	case "update-state":
		// The unit's links as its [Install] section says now, recorded
		// without enabling anything.
		links, err := r.linkClosure(sp, nil)
		if err != nil {
			return r.dshError(hc, err)
		}
		var b strings.Builder
		for _, l := range links {
			b.WriteString(l[0] + "\n")
		}
		return r.writeFile(r.dshState(u), []byte(b.String()), 0o644)
	case "disable":
		return r.dshRemoveLinks(sp, purge)
	case "mask":
		return r.dshMask(sp)
	case "unmask":
		return r.dshUnmask(sp)
	default:
		return r.unhandledCommand(args)
	}
	return nil
}

// dshTidy removes the directories disable and unmask left empty.
func (r *run) dshTidy(action string) error {
	switch action {
	case "disable":
		for _, in := range []*dshInstance{dshSystem, dshUser} {
			if err := r.rmdirIfEmpty(in.enabled); err != nil {
				return err
			}
		}
		for _, in := range []*dshInstance{dshSystem, dshUser} {
			for _, c := range r.env.Tree.Children(in.config) {
				if e := r.env.Tree.Get(in.config + "/" + c); e != nil && e.Type == rootfs.TypeDir {
					if err := r.rmdirIfEmpty(in.config + "/" + c); err != nil {
						return err
					}
				}
			}
		}
	case "unmask":
		for _, in := range []*dshInstance{dshSystem, dshUser} {
			if err := r.rmdirIfEmpty(in.masked); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *run) dshError(hc interp.HandlerContext, err error) error {
	fmt.Fprintf(hc.Stderr, "deb-systemd-helper: error: %v\n", err)
	return exit(1)
}

func (r *run) dshState(unit string) string {
	return r.dsh.enabled + "/" + path.Base(unit) + ".dsh-also"
}

// findUnit is deb-systemd-helper's find_unit; a unit it cannot find is
// returned as given.
func (r *run) findUnit(u string) string {
	for _, d := range r.dsh.searchDirs {
		if e, err := r.env.Tree.Lookup(d+u, true); err == nil && e.Type == rootfs.TypeRegular {
			return d + u
		}
	}
	return u
}

func (r *run) dshEntries(unit string) []string {
	b, err := r.readFile(r.dshState(unit))
	if err != nil {
		return nil
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

var (
	reWanted  = regexp.MustCompile(`(?i)^\s*(WantedBy|RequiredBy)=(.+)$`)
	reAlso    = regexp.MustCompile(`(?i)^\s*Also=(.+)$`)
	reAlias   = regexp.MustCompile(`(?i)^\s*Alias=(.+)$`)
	reDefInst = regexp.MustCompile(`(?i)^\s*DefaultInstance=\s*(["']?)(.+?)(["']?)\s*$`)
	reQuoted  = regexp.MustCompile(`^(["'])(.*)(["'])$`)
)

func unquote(v string) string {
	if m := reQuoted.FindStringSubmatch(v); m != nil && m[1] == m[3] {
		return m[2]
	}
	return v
}

// linkClosure is get_link_closure: [link, target] pairs the unit's
// [Install] lines ask for, read line by line as deb-systemd-helper reads
// them (Also= and Alias= first, in file order, then the wants links).
func (r *run) linkClosure(servicePath string, visited []string) ([][2]string, error) {
	b, err := r.readFile(servicePath)
	if err != nil {
		return nil, fmt.Errorf("unable to read %s", servicePath)
	}
	unit := path.Base(servicePath)
	wanted := unit
	var links [][2]string
	var wantsDirs []string
	for _, line := range strings.Split(string(b), "\n") {
		if m := reWanted.FindStringSubmatch(line); m != nil {
			for _, v := range strings.Fields(m[2]) {
				d := r.dsh.config + "/" + unquote(v)
				if strings.EqualFold(m[1], "WantedBy") {
					d += ".wants"
				} else {
					d += ".requires"
				}
				wantsDirs = append(wantsDirs, d+"/")
			}
		}
		if m := reAlso.FindStringSubmatch(line); m != nil {
			for _, v := range strings.Fields(m[1]) {
				v = unquote(v)
				seen := false
				for _, x := range visited {
					seen = seen || x == v
				}
				if v != unit && !seen {
					visited = append(visited, v)
					sub, err := r.linkClosure(r.findUnit(v), visited)
					if err != nil {
						return nil, err
					}
					links = append(links, sub...)
				}
			}
		}
		if m := reAlias.FindStringSubmatch(line); m != nil {
			for _, v := range strings.Fields(m[1]) {
				if unquote(v) != unit {
					// deb-systemd-helper names the link after the whole
					// value, as its Perl does ($1).
					links = append(links, [2]string{r.dsh.config + "/" + m[1], servicePath})
				}
			}
		}
		if m := reDefInst.FindStringSubmatch(line); m != nil {
			if i := strings.Index(unit, "@."); i >= 0 {
				wanted = unit[:i+1] + m[2] + unit[i+1:]
			}
		}
	}
	for _, d := range wantsDirs {
		links = append(links, [2]string{d + wanted, servicePath})
	}
	return links, nil
}

func (r *run) dshEnable(unit, servicePath string) error {
	hasSystemctl := r.executable("/bin/systemctl") || r.executable("/usr/bin/systemctl")
	if !hasSystemctl {
		return r.makeSystemdLinks(unit, servicePath, true)
	}
	create := false
	if r.exists(r.dshState(unit)) {
		links, err := r.linkClosure(servicePath, nil)
		if err != nil {
			return err
		}
		for _, l := range links {
			if isLink, _, _ := r.linkState(l[0]); isLink {
				create = true
			}
		}
	} else if r.dsh == dshUser {
		if err := r.presetUser(unit); err != nil {
			return err
		}
	} else {
		if r.env.Systemctl == nil {
			return r.unhandled("systemctl preset " + unit)
		}
		if err := r.env.Systemctl(r.ctx, "preset", []string{unit}); err != nil {
			return fmt.Errorf("systemctl preset failed on %s: %w", unit, err)
		}
	}
	return r.makeSystemdLinks(unit, servicePath, create)
}

func (r *run) executable(p string) bool {
	e, err := r.env.Tree.Lookup(p, true)
	return err == nil && e.Type == rootfs.TypeRegular && e.Perm&0o111 != 0
}

// makeSystemdLinks is make_systemd_links: record each link in the unit's
// .dsh-also file, and unless its per-link state file exists, make the link
// (when create) and the state file.
func (r *run) makeSystemdLinks(unit, servicePath string, create bool) error {
	links, err := r.linkClosure(servicePath, nil)
	if err != nil {
		return err
	}
	state := r.dshState(unit)
	for _, l := range links {
		link, target := l[0], l[1]
		old, _ := r.readFile(state)
		if !containsLine(string(old), link) {
			if err := r.writeFile(state, append(old, []byte(link+"\n")...), 0o644); err != nil {
				return err
			}
		}
		statefile := r.dsh.enabled + "/" + strings.TrimPrefix(link, r.dsh.config+"/")
		if r.exists(statefile) {
			continue
		}
		if isLink, _, _ := r.linkState(link); create && !isLink {
			if err := r.symlink(target, link); err != nil {
				return err
			}
		}
		if err := r.writeFile(statefile, nil, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func containsLine(s, line string) bool {
	for _, l := range strings.Split(s, "\n") {
		if l == line {
			return true
		}
	}
	return false
}

func (r *run) dshRemoveLinks(servicePath string, purge bool) error {
	state := r.dshState(servicePath)
	entries := r.dshEntries(servicePath)
	if purge && r.exists(state) {
		if err := r.env.Tree.Remove(state); err != nil {
			return err
		}
	}
	for _, l := range entries {
		isLink, _, _ := r.linkState(l)
		if purge || isLink {
			if err := r.env.Tree.Remove(r.dsh.enabled + "/" + strings.TrimPrefix(l, r.dsh.config+"/")); err != nil {
				return err
			}
		}
		if isLink {
			if err := r.removeLink(l); err != nil {
				return err
			}
		}
	}
	b, err := r.readFile(servicePath)
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if m := reAlso.FindStringSubmatch(line); m != nil {
			if err := r.dshRemoveLinks(r.findUnit(m[1]), purge); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *run) dshMask(servicePath string) error {
	link := r.dsh.config + "/" + path.Base(servicePath)
	if isLink, t, missing := r.linkState(link); !missing {
		if isLink && t == "/dev/null" {
			return nil
		}
		return nil
	}
	if err := r.symlink("/dev/null", link); err != nil {
		return err
	}
	return r.writeFile(r.dsh.masked+"/"+path.Base(servicePath), nil, 0o644)
}

func (r *run) dshUnmask(servicePath string) error {
	link := r.dsh.config + "/" + path.Base(servicePath)
	isLink, t, missing := r.linkState(link)
	if missing || !isLink || t != "/dev/null" {
		return nil
	}
	state := r.dsh.masked + "/" + path.Base(servicePath)
	if !r.exists(state) {
		return nil
	}
	if err := r.removeLink(link); err != nil {
		return err
	}
	return r.env.Tree.Remove(state)
}

// rmdirIfEmpty removes dir and its subdirectories, deepest first, where
// they are empty, as deb-systemd-helper's rmdir_if_empty does.
func (r *run) rmdirIfEmpty(dir string) error {
	e := r.env.Tree.Get(dir)
	if e == nil || e.Type != rootfs.TypeDir {
		return nil
	}
	for _, c := range r.env.Tree.Children(dir) {
		if ce := r.env.Tree.Get(dir + "/" + c); ce != nil && ce.Type == rootfs.TypeDir {
			if err := r.rmdirIfEmpty(dir + "/" + c); err != nil {
				return err
			}
		}
	}
	if len(r.env.Tree.Children(dir)) == 0 {
		return r.env.Tree.Remove(dir)
	}
	return nil
}

// presetUser is systemctl --global --preset-mode=enable-only preset for a
// user unit. systemd's user presets enable two tmpfiles units by name and
// say nothing of the rest, and a unit no preset names is enabled: the
// links its [Install] section asks for are made in /etc/systemd/user,
// pointing where systemctl finds the unit.
func (r *run) presetUser(unit string) error {
	if r.presetDisabled(unit) {
		return nil
	}
	for _, d := range r.dsh.systemctlUnitDirs {
		if e, err := r.env.Tree.Lookup(d+unit, true); err == nil && e.Type == rootfs.TypeRegular {
			links, err := r.linkClosure(d+unit, nil)
			if err != nil {
				return err
			}
			for _, l := range links {
				if isLink, _, _ := r.linkState(l[0]); isLink {
					continue
				}
				if err := r.symlink(l[1], l[0]); err != nil {
					return err
				}
			}
			return nil
		}
	}
	return nil
}

// presetDisabled reads the user preset files, as systemctl does: the
// first line whose glob matches the unit decides; none means enable.
func (r *run) presetDisabled(unit string) bool {
	seen := map[string]bool{}
	var files []string
	for _, d := range []string{"/etc/systemd/user-preset", "/run/systemd/user-preset", "/usr/local/lib/systemd/user-preset", "/usr/lib/systemd/user-preset"} {
		rd, err := r.env.Tree.Resolve(d, true)
		if err != nil {
			continue
		}
		for _, c := range r.env.Tree.Children(rd) {
			if strings.HasSuffix(c, ".preset") && !seen[c] {
				seen[c] = true
				files = append(files, rd+"/"+c)
			}
		}
	}
	sort.Slice(files, func(i, j int) bool { return path.Base(files[i]) < path.Base(files[j]) })
	for _, f := range files {
		b, _ := r.readFile(f)
		for _, l := range strings.Split(string(b), "\n") {
			fs := strings.Fields(l)
			if len(fs) < 2 || strings.HasPrefix(fs[0], "#") {
				continue
			}
			if ok, _ := path.Match(fs[1], unit); ok {
				return fs[0] == "disable"
			}
		}
	}
	return false
}
