package order

import (
	"sort"
	"strings"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/repo"
)

// CallOp is what one dpkg call does.
type CallOp int

const (
	// Unpack is dpkg --unpack --no-triggers of the packages, in order.
	Unpack CallOp = iota
	// Configure is dpkg --configure --no-triggers of the packages, which
	// dpkg queues in the order given.
	Configure
	// ConfigurePending is dpkg --configure --pending: every unpacked
	// package and every pending trigger, in dpkg's hash order.
	ConfigurePending
	// Install is dpkg --install --force-depends of the packages: all
	// unpacked in order, then configured as queued. mmdebstrap installs
	// the Essential set so, in the order apt would unpack it.
	Install
)

func (o CallOp) String() string {
	return [...]string{"--unpack", "--configure", "--configure --pending", "--install"}[o]
}

// Call is one dpkg invocation.
type Call struct {
	Op   CallOp
	Pkgs []*repo.Package
}

func (c Call) String() string {
	names := make([]string, len(c.Pkgs))
	for i, p := range c.Pkgs {
		names[i] = p.Name
	}
	return strings.TrimSpace(c.Op.String() + " " + strings.Join(names, " "))
}

// AptOptions are the apt configuration that changes its plan.
type AptOptions struct {
	// AptNotEssential is pkgCacheGen::ForceEssential ",", as mmdebstrap
	// configures apt for every variant but apt: the apt package is then
	// no more Essential than its control file says. By default apt
	// treats itself as Essential, which has what it depends on
	// configured at once.
	AptNotEssential bool
}

// Installed is one package of the dpkg status.
type Installed struct {
	Pkg *repo.Package
	// Status is the state word of its Status field: installed, unpacked,
	// half-configured, triggers-pending, ...
	Status string
}

// Dependency types, in the order apt's parser adds them to a version's
// list (debListParser::NewVersion): Pre-Depends first.
type depType int

const (
	depPreDepends depType = iota
	depDepends
	depConflicts
	depBreaks
)

// aDep is one element of an or-group, as apt keeps it.
type aDep struct {
	typ    depType
	target *aPkg
	op     deb.Op
	ver    string
	or     bool // another alternative follows in the group
	parent *aVer
}

func (d *aDep) negative() bool { return d.typ == depConflicts || d.typ == depBreaks }
func (d *aDep) critical() bool { return d.typ != depDepends }

// aVer is one version of a package in apt's cache.
type aVer struct {
	pkg  *aPkg
	p    *repo.Package
	deps []*aDep
	prov []*aPrv
}

// aPrv is a Provides: of a version.
type aPrv struct {
	owner   *aVer
	virtual *aPkg
	version string // "" for an unversioned provide
}

// okState is apt's PkgIterator::State.
type okState int

const (
	needsNothing okState = iota
	needsUnpack
	needsConfigure
)

// Order list flags (apt-pkg/orderlist.h).
const (
	fAdded      = 1 << 0
	fAddPending = 1 << 1
	fImmediate  = 1 << 2
	fLoop       = 1 << 3
	fUnPacked   = 1 << 4
	fConfigured = 1 << 5
	fRemoved    = 1 << 6
	fInList     = 1 << 7
	fStates     = fUnPacked | fConfigured | fRemoved
)

// aPkg is one package name in apt's cache.
type aPkg struct {
	name      string
	versions  []*aVer // newest first
	cur, inst *aVer   // installed; to be installed (the installed one when kept)
	install   bool    // marked for install (apt's ModeInstall)
	status    string
	essential bool
	provides  []*aPrv // newest first, as apt links them
	revDeps   []*aDep
}

func (p *aPkg) state() okState {
	switch {
	case p.cur == nil:
		return needsNothing
	case p.status == "unpacked" || p.status == "half-configured":
		return needsConfigure
	case p.status == "half-installed" || p.status == "not-installed":
		return needsUnpack
	}
	return needsNothing
}

// aptCache is what the planner knows: every package named by what is
// installed and what is to be installed.
type aptCache struct {
	pkgs  map[string]*aPkg
	names []string
}

func (c *aptCache) get(name string) *aPkg {
	p := c.pkgs[name]
	if p == nil {
		p = &aPkg{name: name}
		c.pkgs[name] = p
		c.names = append(c.names, name)
	}
	return p
}

// newVer adds a version's relationships: Pre-Depends, Depends, Conflicts
// and Breaks (the others never order anything), then its Provides, each
// linked into its target's reverse lists the way apt's cache generator
// prepends them.
func (c *aptCache) newVer(pkg *aPkg, p *repo.Package) *aVer {
	v := &aVer{pkg: pkg, p: p}
	for _, f := range []struct {
		typ  depType
		rels []deb.Alternatives
	}{{depPreDepends, p.PreDepends}, {depDepends, p.Depends}, {depConflicts, p.Conflicts}, {depBreaks, p.Breaks}} {
		for _, alts := range f.rels {
			// One architecture: an arch qualifier (":any") names the
			// same package.
			for i, a := range alts {
				d := &aDep{typ: f.typ, target: c.get(a.Name), op: a.Op, ver: a.Version, or: i < len(alts)-1, parent: v}
				v.deps = append(v.deps, d)
				d.target.revDeps = append([]*aDep{d}, d.target.revDeps...)
			}
		}
	}
	for _, alts := range p.Provides {
		for _, a := range alts {
			pr := &aPrv{owner: v, virtual: c.get(a.Name)}
			if a.Op == deb.OpEQ {
				pr.version = a.Version
			}
			v.prov = append(v.prov, pr)
			pr.virtual.provides = append([]*aPrv{pr}, pr.virtual.provides...)
		}
	}
	pkg.versions = append(pkg.versions, v)
	sort.SliceStable(pkg.versions, func(i, j int) bool {
		return deb.CompareVersions(pkg.versions[i].p.Version, pkg.versions[j].p.Version) > 0
	})
	return v
}

func newAptCache(installed []Installed, install []*repo.Package, o AptOptions) *aptCache {
	c := &aptCache{pkgs: map[string]*aPkg{}}
	// apt reads the index before the status: an installed version the
	// index also has is the same version.
	byName := append([]*repo.Package(nil), install...)
	sort.SliceStable(byName, func(i, j int) bool { return byName[i].Name < byName[j].Name })
	for _, p := range byName {
		pkg := c.get(p.Name)
		pkg.inst = c.newVer(pkg, p)
		pkg.install = true
	}
	inst := append([]Installed(nil), installed...)
	sort.SliceStable(inst, func(i, j int) bool { return inst[i].Pkg.Name < inst[j].Pkg.Name })
	for _, in := range inst {
		if in.Status == "not-installed" || in.Status == "config-files" || in.Pkg == nil {
			continue
		}
		pkg := c.get(in.Pkg.Name)
		pkg.status = in.Status
		if pkg.inst != nil && pkg.inst.p.Version == in.Pkg.Version {
			pkg.cur = pkg.inst
		} else {
			pkg.cur = c.newVer(pkg, in.Pkg)
		}
		if pkg.inst == nil {
			pkg.inst = pkg.cur
		}
	}
	for _, n := range c.names {
		p := c.pkgs[n]
		for _, v := range []*aVer{p.inst, p.cur} {
			if v != nil && (v.p.Essential || p.name == "apt" && !o.AptNotEssential) {
				p.essential = true
			}
		}
	}
	return c
}

// satisfies reports whether version s meets d's version constraint.
func (d *aDep) satisfies(s string) bool {
	if d.op == deb.OpNone {
		return true
	}
	if s == "" {
		return false
	}
	return deb.Dep{Op: d.op, Version: d.ver}.Satisfied(s)
}

// allTargets is apt's DepIterator::AllTargets: the target's versions that
// satisfy d, then the versions providing it, as apt lists them.
func (d *aDep) allTargets() []*aVer {
	var out []*aVer
	for _, v := range d.target.versions {
		if d.negative() && v.pkg == d.parent.pkg {
			continue // a self-conflict
		}
		if d.satisfies(v.p.Version) {
			out = append(out, v)
		}
	}
	for _, pr := range d.target.provides {
		if d.negative() && pr.owner.pkg == d.parent.pkg {
			continue
		}
		if d.satisfies(pr.version) {
			out = append(out, pr.owner)
		}
	}
	return out
}

// globOr returns the index of the last element of the or-group starting
// at i, and the index after it.
func globOr(deps []*aDep, i int) (end, next int) {
	end = i
	for end < len(deps)-1 && deps[end].or {
		end++
	}
	return end, end + 1
}
