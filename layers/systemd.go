package layers

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
)

// unitConfigDir is where systemctl enable writes, and unitSearchPath where
// it looks for unit files, in the order systemd 252 as Debian builds it
// (split-usr) does: /lib before /usr/lib, so on a merged-/usr tree links
// point into /lib/systemd/system as the real systemctl makes them.
const unitConfigDir = "/etc/systemd/system"

var unitSearchPath = []string{
	"/etc/systemd/system",
	"/usr/local/lib/systemd/system",
	"/lib/systemd/system",
	"/usr/lib/systemd/system",
}

// Systemd does offline what `systemctl --root=TREE disable, enable, mask,
// set-default` do, in that order: it reads [Install] sections and makes or
// removes symlinks under /etc/systemd/system.
type Systemd struct {
	Enable, Disable, Mask []string
	// Default is the target /etc/systemd/system/default.target points to.
	Default string
}

// Kind implements Layer.
func (*Systemd) Kind() string { return "systemd" }

// Apply implements Layer.
func (l *Systemd) Apply(ctx context.Context, env *Env) error {
	s := &systemctl{env: env, t: env.Tree}
	steps := []struct {
		verb  string
		units []string
		fn    func(string) error
	}{
		{"disable", l.Disable, s.disable},
		{"enable", l.Enable, func(u string) error { return s.enable(u, map[string]bool{}) }},
		{"mask", l.Mask, s.mask},
	}
	if l.Default != "" {
		steps = append(steps, struct {
			verb  string
			units []string
			fn    func(string) error
		}{"set-default", []string{l.Default}, s.setDefault})
	}
	for _, st := range steps {
		for _, u := range st.units {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := validUnitName(u); err != nil {
				return fmt.Errorf("%s: %s %s: %w", env.Label, st.verb, u, err)
			}
			if err := st.fn(u); err != nil {
				return fmt.Errorf("%s: %s %s: %w", env.Label, st.verb, u, err)
			}
		}
	}
	return nil
}

type systemctl struct {
	env *Env
	t   *rootfs.Tree
}

// unitFile is a unit found in the search path.
type unitFile struct {
	name string // as asked for, e.g. foo@bar.service
	path string // where it was found, e.g. /lib/systemd/system/foo@.service
	install
}

// install is what the [Install] section says.
type install struct {
	wantedBy, requiredBy, upheldBy, alias, also []string
	defaultInstance                             string
}

var errMasked = errors.New("unit is masked")

// find looks name up in the search path; an instance falls back to its
// template, as systemd does.
func (s *systemctl) find(name string) (*unitFile, error) { return s.findDepth(name, 0) }

func (s *systemctl) findDepth(name string, depth int) (*unitFile, error) {
	candidates := []string{name}
	if prefix, inst, suffix, ok := splitInstance(name); ok && inst != "" {
		candidates = append(candidates, prefix+"@"+suffix)
	}
	for _, c := range candidates {
		for _, dir := range unitSearchPath {
			p := dir + "/" + c
			e, err := s.t.Lookup(p, false)
			if errors.Is(err, fs.ErrNotExist) || errors.Is(err, rootfs.ErrNotDir) {
				continue
			}
			if err != nil {
				return nil, err
			}
			if e.Type == rootfs.TypeSymlink {
				if path.Clean(e.Target) == "/dev/null" {
					return nil, errMasked
				}
				// Links in the config dir are what enable made; systemctl
				// does not take them for unit files either.
				if dir == unitConfigDir {
					continue
				}
				// A vendor alias stands for the unit it points to.
				if e, err = s.t.Lookup(p, true); err != nil {
					return nil, fmt.Errorf("%s: %w", p, err)
				}
				if target := path.Base(e.Path); target != c && depth < 8 {
					return s.findDepth(target, depth+1)
				}
			}
			if e.Type != rootfs.TypeRegular {
				return nil, fmt.Errorf("%s: is a %s, not a unit file", p, e.Type)
			}
			b, _, err := readTreeContent(s.t, p)
			if err != nil {
				return nil, err
			}
			in, err := parseInstall(b)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			return &unitFile{name: name, path: p, install: in}, nil
		}
	}
	return nil, fmt.Errorf("unit file %s not found in %s", name, strings.Join(unitSearchPath, ", "))
}

func (s *systemctl) enable(name string, seen map[string]bool) error {
	if seen[name] {
		return nil
	}
	seen[name] = true
	u, err := s.find(name)
	if err != nil {
		return err
	}
	links := 0
	// The name the wants links carry: a template enables its default instance.
	inst := u.name
	if p, i, sfx, ok := splitInstance(u.name); ok && i == "" {
		inst = ""
		if u.defaultInstance != "" {
			inst = p + "@" + u.defaultInstance + sfx
		}
	}
	if inst != "" {
		for _, dep := range []struct {
			list []string
			dir  string
		}{{u.wantedBy, ".wants"}, {u.requiredBy, ".requires"}, {u.upheldBy, ".upholds"}} {
			for _, raw := range dep.list {
				dst, err := expandSpecifiers(raw, u.name)
				if err != nil {
					return err
				}
				if err := validUnitName(dst); err != nil {
					return fmt.Errorf("%s: %w", u.path, err)
				}
				// A template target takes the instance of the unit.
				if p, i, sfx, ok := splitInstance(dst); ok && i == "" {
					_, ui, _, _ := splitInstance(inst)
					if ui == "" {
						s.env.Log.Warnf("%s: %s: target %s is a template and the unit has no instance, skipped", s.env.Label, u.name, dst)
						continue
					}
					dst = p + "@" + ui + sfx
				}
				if err := s.link(unitConfigDir+"/"+dst+dep.dir+"/"+inst, u.path, true, u.path); err != nil {
					return err
				}
				links++
			}
		}
	}
	for _, raw := range u.alias {
		dst, err := expandSpecifiers(raw, u.name)
		if err != nil {
			return err
		}
		if err := validUnitName(dst); err != nil {
			return fmt.Errorf("%s: alias: %w", u.path, err)
		}
		if path.Ext(dst) != path.Ext(u.name) {
			return fmt.Errorf("%s: alias %s has a different unit type", u.path, dst)
		}
		if p, i, sfx, ok := splitInstance(dst); ok && i == "" {
			if _, ui, _, _ := splitInstance(u.name); ui != "" {
				dst = p + "@" + ui + sfx
			}
		}
		if err := s.link(unitConfigDir+"/"+dst, u.path, false, u.path); err != nil {
			return err
		}
		links++
	}
	if links == 0 && len(u.also) == 0 {
		// systemctl says the same and succeeds.
		s.env.Log.Warnf("%s: %s has no installation config ([Install] WantedBy=, RequiredBy=, UpheldBy=, Alias=, Also=, or DefaultInstance= for a template); nothing to enable", s.env.Label, u.name)
	}
	for _, raw := range u.also {
		also, err := expandSpecifiers(raw, u.name)
		if err != nil {
			return err
		}
		if err := s.enable(also, seen); err != nil {
			return fmt.Errorf("also %s: %w", also, err)
		}
	}
	return nil
}

// link makes the symlink p -> target under the config dir. An existing link
// to the same target is kept; another one is replaced only when replace is
// set (as systemctl does for .wants links but not for aliases).
func (s *systemctl) link(p, target string, replace bool, unitPath string) error {
	if e := s.t.Get(p); e != nil {
		if e.Type == rootfs.TypeSymlink && e.Target == target {
			return nil
		}
		if e.Type != rootfs.TypeSymlink || !replace {
			what := e.Type.String()
			if e.Type == rootfs.TypeSymlink {
				what = "symlink to " + e.Target
			}
			return fmt.Errorf("%s already exists as a %s", p, what)
		}
	}
	h := rootfs.Header{Perm: 0o755, MTime: s.env.Epoch, Origin: s.env.Origin("", unitPath)}
	if _, err := s.t.MkdirAll(path.Dir(p), h); err != nil {
		return err
	}
	h.Type, h.Perm, h.Target = rootfs.TypeSymlink, 0o777, target
	_, err := s.t.Create(p, h, nil)
	return err
}

// disable removes every symlink under the config dir that carries the
// unit's name or points to it (and, in turn, links to those links), for the
// unit and its Also= units, and then directories left empty. An instance
// only loses its own links, not those of its template's other instances.
func (s *systemctl) disable(name string) error {
	marked := map[string]bool{}
	queue := []string{name}
	seen := map[string]bool{}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if seen[n] {
			continue
		}
		seen[n] = true
		u, err := s.find(n)
		if errors.Is(err, errMasked) {
			s.env.Log.Warnf("%s: %s is masked, not disabled", s.env.Label, n)
			continue
		}
		if err != nil {
			return err
		}
		marked[n] = true
		if _, i, _, ok := splitInstance(n); !ok || i == "" {
			marked[u.path] = true
			if rp, err := s.t.Resolve(u.path, true); err == nil {
				marked[rp] = true
			}
		}
		for _, raw := range u.also {
			also, err := expandSpecifiers(raw, u.name)
			if err != nil {
				return err
			}
			queue = append(queue, also)
		}
	}
	for again := true; again; {
		again = false
		var remove []string
		for _, p := range s.t.Paths() {
			if !strings.HasPrefix(p, unitConfigDir+"/") {
				continue
			}
			e := s.t.Get(p)
			base := path.Base(p)
			if e.Type != rootfs.TypeSymlink || validUnitName(base) != nil {
				continue
			}
			found := marked[base]
			if pfx, i, sfx, ok := splitInstance(base); ok && i != "" {
				found = found || marked[pfx+"@"+sfx]
			}
			if !found {
				dest, err := s.t.Resolve(p, true)
				if err != nil {
					continue
				}
				found = marked[dest] || marked[path.Base(dest)] || marked[e.Target]
			}
			if found {
				remove = append(remove, p)
			}
		}
		for _, p := range remove {
			if err := s.t.Remove(p); err != nil {
				return err
			}
			if !marked[p] {
				marked[p] = true
				again = true
			}
			for dir := path.Dir(p); dir != unitConfigDir && strings.HasPrefix(dir, unitConfigDir+"/"); dir = path.Dir(dir) {
				if e := s.t.Get(dir); e == nil || e.Type != rootfs.TypeDir || len(s.t.Children(dir)) > 0 {
					break
				}
				if err := s.t.Remove(dir); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// mask links the unit to /dev/null. Like systemctl it does not need the
// unit to exist (a later layer may install it), but says so.
func (s *systemctl) mask(name string) error {
	if _, err := s.find(name); err != nil && !errors.Is(err, errMasked) {
		s.env.Log.Warnf("%s: mask %s: %v", s.env.Label, name, err)
	}
	return s.link(unitConfigDir+"/"+name, "/dev/null", false, "")
}

func (s *systemctl) setDefault(name string) error {
	if path.Ext(name) != ".target" {
		return fmt.Errorf("%s is not a target", name)
	}
	u, err := s.find(name)
	if err != nil {
		return err
	}
	return s.link(unitConfigDir+"/default.target", u.path, true, u.path)
}

// parseInstall reads the [Install] section of a unit file with systemd's
// syntax: comments, continuation lines, and an empty assignment resetting a
// list.
func parseInstall(b []byte) (install, error) {
	var in install
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var line string
	for sc.Scan() {
		l := sc.Text()
		if strings.HasSuffix(l, "\\") {
			line += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		line += l
		l, line = strings.TrimSpace(line), ""
		if l == "" || l[0] == '#' || l[0] == ';' {
			continue
		}
		if l[0] == '[' && strings.HasSuffix(l, "]") {
			section = l[1 : len(l)-1]
			continue
		}
		if section != "Install" {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			continue
		}
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		var list *[]string
		switch k {
		case "WantedBy":
			list = &in.wantedBy
		case "RequiredBy":
			list = &in.requiredBy
		case "UpheldBy":
			list = &in.upheldBy
		case "Alias":
			list = &in.alias
		case "Also":
			list = &in.also
		case "DefaultInstance":
			in.defaultInstance = v
			continue
		default:
			continue
		}
		if v == "" {
			*list = nil
			continue
		}
		*list = append(*list, strings.Fields(v)...)
	}
	return in, sc.Err()
}

// splitInstance splits "foo@bar.service" into "foo", "bar", ".service";
// ok is false for names without "@".
func splitInstance(name string) (prefix, instance, suffix string, ok bool) {
	at := strings.IndexByte(name, '@')
	if at < 0 {
		return "", "", "", false
	}
	suffix = path.Ext(name)
	return name[:at], name[at+1 : len(name)-len(suffix)], suffix, true
}

// expandSpecifiers resolves the specifiers systemctl resolves in [Install]
// values; ones that depend on the running host are refused.
func expandSpecifiers(s, name string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	base := strings.TrimSuffix(name, path.Ext(name))
	prefix, inst, _, ok := splitInstance(name)
	if !ok {
		prefix = base
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+1 == len(s) {
			return "", fmt.Errorf("%q: trailing %%", s)
		}
		i++
		switch s[i] {
		case '%':
			b.WriteByte('%')
		case 'n':
			b.WriteString(name)
		case 'N':
			b.WriteString(base)
		case 'p':
			b.WriteString(prefix)
		case 'i':
			b.WriteString(inst)
		case 'j':
			b.WriteString(prefix[strings.LastIndexByte(prefix, '-')+1:])
		default:
			return "", fmt.Errorf("%q: specifier %%%c is not supported offline", s, s[i])
		}
	}
	return b.String(), nil
}

var unitTypes = []string{".service", ".socket", ".device", ".mount", ".automount", ".swap", ".target", ".path", ".timer", ".slice", ".scope"}

// validUnitName checks a unit name the way systemd's unit_name_is_valid
// does, in outline: a known type suffix, no path separators, bounded length.
func validUnitName(n string) error {
	if n == "" || len(n) > 255 || strings.ContainsAny(n, "/\x00 \t\n") || n[0] == '.' {
		return fmt.Errorf("invalid unit name %q", n)
	}
	ext := path.Ext(n)
	for _, t := range unitTypes {
		if ext == t && len(n) > len(ext) {
			if strings.Count(n, "@") > 1 || strings.HasPrefix(n, "@") {
				return fmt.Errorf("invalid unit name %q", n)
			}
			return nil
		}
	}
	return fmt.Errorf("invalid unit name %q: unknown unit type", n)
}
