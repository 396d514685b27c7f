package scripts

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs"
)

// Where update-alternatives keeps its links and its database.
const (
	altDir   = "/etc/alternatives"
	altAdmin = "/var/lib/dpkg/alternatives"
)

// altGroup is one link group, as /var/lib/dpkg/alternatives/NAME holds it.
type altGroup struct {
	name    string
	status  string // "auto" | "manual"
	link    string
	slaves  []altSlave
	choices []*altChoice
}

type altSlave struct{ name, link string }

type altChoice struct {
	path   string
	prio   int
	slaves map[string]string // slave name -> file
}

// loadAlt reads the link group NAME; a missing file is (nil, nil).
func (r *run) loadAlt(name string) (*altGroup, error) {
	b, err := r.readFile(altAdmin + "/" + name)
	if err != nil {
		if _, lerr := r.env.Tree.Lookup(altAdmin+"/"+name, true); lerr != nil {
			return nil, nil
		}
		return nil, err
	}
	lines := strings.Split(string(b), "\n")
	next := func() (string, bool) {
		if len(lines) == 0 {
			return "", false
		}
		l := lines[0]
		lines = lines[1:]
		return l, true
	}
	g := &altGroup{name: name}
	var ok bool
	bad := fmt.Errorf("%s/%s: malformed alternatives database", altAdmin, name)
	if g.status, ok = next(); !ok || g.status != "auto" && g.status != "manual" {
		return nil, bad
	}
	if g.link, ok = next(); !ok {
		return nil, bad
	}
	for {
		sn, ok := next()
		if !ok {
			return nil, bad
		}
		if sn == "" {
			break
		}
		sl, ok := next()
		if !ok {
			return nil, bad
		}
		g.slaves = append(g.slaves, altSlave{sn, sl})
	}
	for {
		p, ok := next()
		if !ok {
			return nil, bad
		}
		if p == "" {
			break
		}
		ps, ok := next()
		prio, err := strconv.Atoi(ps)
		if !ok || err != nil {
			return nil, bad
		}
		c := &altChoice{path: p, prio: prio, slaves: map[string]string{}}
		for _, s := range g.slaves {
			f, ok := next()
			if !ok {
				return nil, bad
			}
			if f != "" {
				c.slaves[s.name] = f
			}
		}
		g.choices = append(g.choices, c)
	}
	return g, nil
}

// save writes the database as update-alternatives does: unused slaves
// dropped, slaves sorted by name and choices by path.
func (r *run) saveAlt(g *altGroup) error {
	var used []altSlave
	for _, s := range g.slaves {
		for _, c := range g.choices {
			if _, ok := c.slaves[s.name]; ok {
				used = append(used, s)
				break
			}
		}
	}
	g.slaves = used
	sort.SliceStable(g.slaves, func(i, j int) bool { return g.slaves[i].name < g.slaves[j].name })
	sort.SliceStable(g.choices, func(i, j int) bool { return g.choices[i].path < g.choices[j].path })
	var b strings.Builder
	b.WriteString(g.status + "\n" + g.link + "\n")
	for _, s := range g.slaves {
		b.WriteString(s.name + "\n" + s.link + "\n")
	}
	b.WriteString("\n")
	for _, c := range g.choices {
		b.WriteString(c.path + "\n" + strconv.Itoa(c.prio) + "\n")
		for _, s := range g.slaves {
			b.WriteString(c.slaves[s.name] + "\n")
		}
	}
	b.WriteString("\n")
	if err := r.mkdirAll(altAdmin); err != nil {
		return err
	}
	return r.writeFile(altAdmin+"/"+g.name, []byte(b.String()), 0o644)
}

func (g *altGroup) choice(p string) *altChoice {
	for _, c := range g.choices {
		if c.path == p {
			return c
		}
	}
	return nil
}

// best is update-alternatives' alternative_get_best: the current choice,
// replaced only by a strictly higher priority.
func (g *altGroup) best(current string) *altChoice {
	b := g.choice(current)
	if b == nil && len(g.choices) > 0 {
		b = g.choices[0]
	}
	for _, c := range g.choices {
		if c.prio > b.prio {
			b = c
		}
	}
	return b
}

// current is where /etc/alternatives/NAME points, or "".
func (r *run) currentAlt(name string) string {
	e := r.env.Tree.Get(altDir + "/" + name)
	if e == nil || e.Type != rootfs.TypeSymlink {
		return ""
	}
	return e.Target
}

func (r *run) exists(p string) bool {
	_, err := r.env.Tree.Lookup(p, true)
	return err == nil
}

// linkState classifies a link path as update-alternatives does.
func (r *run) linkState(p string) (isLink bool, target string, missing bool) {
	rp, err := r.env.Tree.Resolve(p, false)
	if err != nil {
		return false, "", true
	}
	e := r.env.Tree.Get(rp)
	if e == nil {
		return false, "", true
	}
	if e.Type == rootfs.TypeSymlink {
		return true, e.Target, false
	}
	return false, "", false
}

// installSingle points altDir/NAME at file and link at altDir/NAME.
func (r *run) installSingle(name, link, file string) error {
	if err := r.mkdirAll(altDir); err != nil {
		return err
	}
	if err := r.symlink(file, altDir+"/"+name); err != nil {
		return err
	}
	fn := altDir + "/" + name
	isLink, target, missing := r.linkState(link)
	switch {
	case missing || isLink && target != fn:
		return r.symlink(fn, link)
	case !isLink:
		r.logf("update-alternatives: warning: not replacing %s with a link", link)
	}
	return nil
}

func (r *run) removeLink(p string) error {
	isLink, _, missing := r.linkState(p)
	if missing {
		return nil
	}
	if !isLink {
		r.logf("update-alternatives: warning: not removing %s since it's not a symlink", p)
		return nil
	}
	rp, _ := r.env.Tree.Resolve(p, false)
	return r.env.Tree.Remove(rp)
}

// prepareInstall makes every link of the group point to choice.
func (r *run) prepareInstall(g *altGroup, choice string) error {
	c := g.choice(choice)
	if c == nil {
		return fmt.Errorf("update-alternatives: can't install unknown choice %s", choice)
	}
	if err := r.installSingle(g.name, g.link, choice); err != nil {
		return err
	}
	for _, s := range g.slaves {
		if f, ok := c.slaves[s.name]; ok && r.exists(f) {
			if err := r.installSingle(s.name, s.link, f); err != nil {
				return err
			}
			continue
		}
		if err := r.removeLink(s.link); err != nil {
			return err
		}
		if err := r.env.Tree.Remove(altDir + "/" + s.name); err != nil {
			return err
		}
	}
	return nil
}

// needsUpdate reports whether the links on disk differ from what choice
// wants (alternative_needs_update).
func (r *run) needsUpdate(g *altGroup, choice string) bool {
	c := g.choice(choice)
	if c == nil {
		return true
	}
	if isLink, t, _ := r.linkState(g.link); !isLink || t != altDir+"/"+g.name {
		return true
	}
	if r.currentAlt(g.name) != choice {
		return true
	}
	for _, s := range g.slaves {
		f, ok := c.slaves[s.name]
		want := ok && r.exists(f)
		isLink, t, _ := r.linkState(s.link)
		if want != (isLink && t == altDir+"/"+s.name) {
			return true
		}
		if want && r.currentAlt(s.name) != f {
			return true
		}
	}
	return false
}

// update is alternative_update for a group that still has choices.
func (r *run) updateAlt(g *altGroup, current, newChoice string) error {
	switch {
	case newChoice != "" && newChoice != current:
		if err := r.prepareInstall(g, newChoice); err != nil {
			return err
		}
	case current != "" && r.needsUpdate(g, current):
		if g.choice(current) == nil {
			current = g.best("").path
			g.status = "auto"
		}
		if err := r.prepareInstall(g, current); err != nil {
			return err
		}
	}
	return r.saveAlt(g)
}

func cmdUpdateAlternatives(r *run, hc interp.HandlerContext, args []string) error {
	var action string
	var params []string
	var slaves [][3]string
	for i := 1; i < len(args); i++ {
		a := args[i]
		need := func(n int) ([]string, error) {
			if i+n >= len(args) {
				return nil, fmt.Errorf("update-alternatives: %s needs %d arguments", a, n)
			}
			v := args[i+1 : i+1+n]
			i += n
			return v, nil
		}
		var err error
		switch a {
		case "--quiet", "--verbose", "--debug", "--skip-auto":
		case "--install":
			action = a
			params, err = need(4)
		case "--slave":
			var v []string
			if v, err = need(3); err == nil {
				slaves = append(slaves, [3]string{v[0], v[1], v[2]})
			}
		case "--set", "--remove":
			action = a
			params, err = need(2)
		case "--auto", "--remove-all":
			action = a
			params, err = need(1)
		default:
			return r.unhandledCommand(args)
		}
		if err != nil {
			fmt.Fprintln(hc.Stderr, err)
			return exit(2)
		}
	}
	switch action {
	case "--install":
		prio, err := strconv.Atoi(params[3])
		if err != nil {
			fmt.Fprintf(hc.Stderr, "update-alternatives: error: priority must be an integer\n")
			return exit(2)
		}
		return r.altInstall(hc, params[0], params[1], params[2], prio, slaves)
	case "--set":
		return r.altSet(hc, params[0], params[1])
	case "--auto":
		return r.altAuto(hc, params[0])
	case "--remove":
		return r.altRemove(hc, params[0], params[1])
	}
	return r.unhandledCommand(args)
}

func (r *run) altInstall(hc interp.HandlerContext, link, name, file string, prio int, slaves [][3]string) error {
	if !r.exists(file) {
		fmt.Fprintf(hc.Stderr, "update-alternatives: error: alternative path %s doesn't exist\n", file)
		return exit(2)
	}
	g, err := r.loadAlt(name)
	if err != nil {
		return err
	}
	current := r.currentAlt(name)
	if g == nil {
		g = &altGroup{name: name, status: "auto"}
	} else if current == "" || g.choice(current) == nil && !r.exists(current) {
		g.status = "auto"
	} else if g.choice(current) == nil {
		g.status = "manual"
	}
	if g.link != "" && g.link != link {
		if isLink, _, _ := r.linkState(g.link); isLink {
			if err := r.removeLink(g.link); err != nil {
				return err
			}
		}
	}
	g.link = link
	c := &altChoice{path: file, prio: prio, slaves: map[string]string{}}
	for _, s := range slaves {
		found := false
		for i := range g.slaves {
			if g.slaves[i].name == s[1] {
				if g.slaves[i].link != s[0] {
					if err := r.removeLink(g.slaves[i].link); err != nil {
						return err
					}
				}
				g.slaves[i].link = s[0]
				found = true
			}
		}
		if !found {
			g.slaves = append(g.slaves, altSlave{s[1], s[0]})
		}
		c.slaves[s[1]] = s[2]
	}
	replaced := false
	for i, old := range g.choices {
		if old.path == file {
			g.choices[i] = c
			replaced = true
		}
	}
	if !replaced {
		g.choices = append(g.choices, c)
	}
	newChoice := ""
	if g.status == "auto" {
		newChoice = g.best(current).path
	}
	r.logf("update-alternatives: %s: %s (%s) -> %s", r.s.Package, link, name, firstNonEmpty(newChoice, current))
	return r.updateAlt(g, current, newChoice)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}

func (r *run) altSet(hc interp.HandlerContext, name, file string) error {
	g, err := r.loadAlt(name)
	if err != nil {
		return err
	}
	if g == nil {
		fmt.Fprintf(hc.Stderr, "update-alternatives: error: no alternatives for %s\n", name)
		return exit(2)
	}
	if g.choice(file) == nil {
		fmt.Fprintf(hc.Stderr, "update-alternatives: error: alternative %s for %s not registered; not setting\n", file, name)
		return exit(2)
	}
	g.status = "manual"
	return r.updateAlt(g, r.currentAlt(name), file)
}

func (r *run) altAuto(hc interp.HandlerContext, name string) error {
	g, err := r.loadAlt(name)
	if err != nil {
		return err
	}
	if g == nil {
		fmt.Fprintf(hc.Stderr, "update-alternatives: error: no alternatives for %s\n", name)
		return exit(2)
	}
	g.status = "auto"
	current := r.currentAlt(name)
	return r.updateAlt(g, current, g.best(current).path)
}

func (r *run) altRemove(hc interp.HandlerContext, name, file string) error {
	g, err := r.loadAlt(name)
	if err != nil || g == nil {
		return err
	}
	current := r.currentAlt(name)
	var keep []*altChoice
	for _, c := range g.choices {
		if c.path != file {
			keep = append(keep, c)
		}
	}
	g.choices = keep
	if len(g.choices) == 0 {
		for _, p := range append([]string{g.link, altDir + "/" + name}, slaveLinks(g)...) {
			if err := r.removeLink(p); err != nil {
				return err
			}
		}
		return r.env.Tree.Remove(altAdmin + "/" + name)
	}
	newChoice := ""
	if current == file {
		g.status = "auto"
		newChoice = g.best("").path
	}
	return r.updateAlt(g, current, newChoice)
}

func slaveLinks(g *altGroup) []string {
	var out []string
	for _, s := range g.slaves {
		out = append(out, s.link, altDir+"/"+s.name)
	}
	return out
}
