package order

import (
	"fmt"

	"github.com/stamp-dev/stamp/packages/repo"
)

// item is one entry of apt's dpkg action list.
type item struct {
	configure bool // else install (unpack)
	pkg       *aPkg
}

// packageManager is apt's pkgPackageManager for an install without
// removals: it walks the unpack order, unpacking each package after what
// its Pre-Depends need, and configuring at once the packages flagged
// immediate (apt-pkg/packagemanager.cc).
type packageManager struct {
	c     *aptCache
	list  *orderList
	items []item
}

// maxLoops is APT::pkgPackageManager::MaxLoopCount.
const maxLoops = 5000

// Apt returns the dpkg calls apt-get install makes to install the
// packages of install (new ones and upgrades, as the resolver chose them)
// on a system whose dpkg status lists installed: stretches of --unpack and
// --configure, then --configure --pending.
func Apt(installed []Installed, install []*repo.Package, o AptOptions) ([]Call, error) {
	m := &packageManager{c: newAptCache(installed, install, o), list: newOrderList()}
	m.createOrderList()
	m.list.orderUnpack()
	for _, p := range m.list.list {
		if !m.list.isNow(p) {
			continue
		}
		if err := m.smartUnPack(p, m.list.is(p, fImmediate), 0); err != nil {
			return nil, err
		}
	}
	var calls []Call
	for _, it := range m.items {
		op := Unpack
		if it.configure {
			op = Configure
		}
		if n := len(calls); n > 0 && calls[n-1].Op == op {
			calls[n-1].Pkgs = append(calls[n-1].Pkgs, it.pkg.inst.p)
			continue
		}
		calls = append(calls, Call{Op: op, Pkgs: []*repo.Package{it.pkg.inst.p}})
	}
	return append(calls, Call{Op: ConfigurePending}), nil
}

// UnpackOrder is the order a plan unpacks its packages in: what
// mmdebstrap hands dpkg --install for the Essential set.
func UnpackOrder(calls []Call) []*repo.Package {
	var out []*repo.Package
	for _, c := range calls {
		if c.Op == Unpack || c.Op == Install {
			out = append(out, c.Pkgs...)
		}
	}
	return out
}

// createOrderList flags Essential packages and everything they depend on
// for immediate configuration and lists what changes.
func (m *packageManager) createOrderList() {
	for _, n := range m.c.names {
		p := m.c.pkgs[n]
		if p.inst == nil && p.cur == nil {
			continue
		}
		if p.essential {
			m.list.flag(p, fImmediate)
			m.immediateAdd(p, true)
			m.immediateAdd(p, false)
		}
		if keep(p) && p.state() == needsNothing {
			continue
		}
		m.list.list = append(m.list.list, p)
	}
}

// immediateAdd flags the targets of p's Depends and Pre-Depends, of its
// install or its installed version, and theirs, for immediate
// configuration.
func (m *packageManager) immediateAdd(p *aPkg, useInstall bool) {
	v := p.cur
	if useInstall {
		v = p.inst // the installed one when kept
	}
	if v == nil {
		return
	}
	for _, d := range v.deps {
		if d.typ != depDepends && d.typ != depPreDepends {
			continue
		}
		if !m.list.is(d.target, fImmediate) {
			m.list.flag(d.target, fImmediate)
			m.immediateAdd(d.target, useInstall)
		}
	}
}

type smartAction int

const (
	unpackImmediate smartAction = iota
	unpackOnly
	configureNow
)

// nonLoopingSmart unpacks or configures dep on behalf of p, with p flagged
// as looping meanwhile so that a cycle back to it stops.
func (m *packageManager) nonLoopingSmart(action smartAction, p, dep *aPkg, depth int, pkgLoop bool, bad, changed *bool) error {
	if !pkgLoop {
		m.list.flag(p, fLoop)
	}
	var err error
	switch action {
	case unpackImmediate:
		err = m.smartUnPack(dep, true, depth+1)
	case unpackOnly:
		err = m.smartUnPack(dep, false, depth+1)
	case configureNow:
		err = m.smartConfigure(dep, depth+1)
	}
	if !pkgLoop {
		m.list.unflag(p, fLoop)
	}
	if err != nil {
		return err
	}
	if bad != nil {
		*bad = false
	}
	if changed != nil && !m.list.is(dep, fLoop) {
		*changed = true
	}
	return nil
}

// okNow is SmartConfigure's test that dep's installed version is there and
// needs nothing.
func (m *packageManager) okNow(dep *aPkg, v *aVer) bool {
	return dep.cur == v && m.list.isNow(dep) && !m.list.is(dep, fRemoved) && dep.state() == needsNothing
}

// smartUnPack unpacks p once what its Pre-Depends need is configured and
// what it conflicts with is out of the way, then configures it if
// immediate is set.
func (m *packageManager) smartUnPack(p *aPkg, immediate bool, depth int) error {
	pkgLoop := m.list.is(p, fLoop)
	deps := p.inst.deps
	somethingBad := false
	for loops := 0; ; loops++ {
		changed := false
		for i := 0; i < len(deps); {
			start := i
			end, next := globOr(deps, i)
			i = next
			switch deps[end].typ {
			case depPreDepends:
				bad := true
				for cur := start; bad; cur++ {
					for _, v := range deps[cur].allTargets() {
						if q := v.pkg; q.cur == v && m.list.isNow(q) && q.state() == needsNothing {
							bad = false
							break
						}
					}
					if cur == end {
						break
					}
				}
				// As in apt, this search runs on past the or-group.
				for cur := start; bad && cur < len(deps); cur++ {
					for _, v := range deps[cur].allTargets() {
						dep := v.pkg
						if dep.inst != v || (keep(dep) && dep.state() == needsNothing) {
							continue
						}
						if m.list.is(dep, fConfigured) {
							bad = false
							break
						}
						var err error
						if !m.list.is(dep, fUnPacked) {
							if m.list.is(dep, fLoop) && pkgLoop {
								continue
							}
							err = m.nonLoopingSmart(unpackImmediate, p, dep, depth, pkgLoop, &bad, &changed)
						} else {
							err = m.nonLoopingSmart(configureNow, p, dep, depth, pkgLoop, &bad, &changed)
						}
						if err != nil {
							return err
						}
						break
					}
				}
				if bad {
					somethingBad = true
				}
			case depConflicts, depBreaks:
				for _, v := range deps[end].allTargets() {
					q := v.pkg
					if q.cur != v || !m.list.isNow(q) || m.list.is(q, fRemoved) {
						continue
					}
					if m.list.is(q, fLoop) && pkgLoop {
						return fmt.Errorf("%s and %s conflict in a loop only a removal breaks", p.name, q.name)
					}
					// Unpack the conflicting package's new version first.
					if err := m.nonLoopingSmart(unpackOnly, p, q, depth, pkgLoop, nil, &changed); err != nil {
						return fmt.Errorf("%s conflicts with %s, which cannot be unpacked first: %w", p.name, q.name, err)
					}
				}
			}
		}
		if !changed {
			break
		}
		if loops > maxLoops {
			return fmt.Errorf("%s: apt's loop limit reached ordering its unpack", p.name)
		}
	}
	if somethingBad {
		return fmt.Errorf("couldn't configure %s, probably a dependency cycle", p.name)
	}
	if pkgLoop {
		return nil
	}
	m.list.setState(p, fUnPacked)
	if p.inst != p.cur {
		m.items = append(m.items, item{pkg: p})
	}
	if immediate {
		// apt ignores a failure to configure at once.
		_ = m.smartConfigure(p, depth+1)
	}
	return nil
}

// smartConfigure configures p after unpacking and configuring what its
// Depends and Pre-Depends need.
func (m *packageManager) smartConfigure(p *aPkg, depth int) error {
	pkgLoop := m.list.is(p, fLoop)
	deps := p.inst.deps
	needConfigure, err := m.unpackDepends(p, deps, depth, pkgLoop)
	if err != nil {
		return err
	}
	bad, err := m.configureDepends(p, deps, needConfigure, depth, pkgLoop)
	if err != nil {
		return err
	}
	if bad {
		return fmt.Errorf("could not configure %s", p.name)
	}
	if pkgLoop {
		return nil
	}
	if m.list.is(p, fConfigured) {
		return fmt.Errorf("%s is configured twice", p.name)
	}
	m.items = append(m.items, item{configure: true, pkg: p})
	m.list.setState(p, fConfigured)
	return nil
}

// unpackDepends is SmartConfigure's first pass: for each or-group of p's
// Depends and Pre-Depends that nothing satisfies now, it unpacks a target
// that is to be installed. It returns the start of each group still
// unsatisfied, to configure.
func (m *packageManager) unpackDepends(p *aPkg, deps []*aDep, depth int, pkgLoop bool) ([]int, error) {
	var needConfigure []int
	for loops := 0; ; loops++ {
		changed := false
		for i := 0; i < len(deps); {
			start := i
			end, next := globOr(deps, i)
			i = next
			if t := deps[end].typ; t != depDepends && t != depPreDepends {
				continue
			}
			bad, err := m.unpackGroup(p, deps[start:end+1], depth, pkgLoop, &changed)
			if err != nil {
				return nil, err
			}
			if bad {
				needConfigure = append(needConfigure, start)
			}
		}
		if !changed {
			return needConfigure, nil
		}
		if loops > maxLoops {
			return nil, fmt.Errorf("%s: apt's loop limit reached ordering its configure", p.name)
		}
	}
}

// unpackGroup looks at the or-group group of p's dependencies: bad says
// that nothing satisfies it now, after unpacking the first target that
// can be.
func (m *packageManager) unpackGroup(p *aPkg, group []*aDep, depth int, pkgLoop bool, changed *bool) (bad bool, err error) {
	bad = true
	for _, d := range group {
		for _, v := range d.allTargets() {
			dep := v.pkg
			if m.okNow(dep, v) {
				bad = false
				break
			}
			if dep.inst != v || !m.list.isNow(dep) {
				continue
			}
			if pkgLoop && m.list.is(dep, fUnPacked) {
				bad = false
			}
		}
		if !bad {
			break
		}
	}
	if !bad {
		return false, nil
	}
	for _, d := range group {
		for _, v := range d.allTargets() {
			dep := v.pkg
			if m.okNow(dep, v) {
				continue
			}
			if dep.inst != v || !m.list.isNow(dep) {
				continue
			}
			if pkgLoop {
				if m.list.is(dep, fUnPacked) {
					bad = false
				}
			} else if err := m.nonLoopingSmart(unpackImmediate, p, dep, depth, pkgLoop, &bad, changed); err != nil {
				return bad, err
			}
			break
		}
		if !bad {
			break
		}
	}
	return bad, nil
}

// configureDepends is SmartConfigure's second pass: it configures a target
// of each or-group in needConfigure. bad says the last group is still
// unsatisfied.
func (m *packageManager) configureDepends(p *aPkg, deps []*aDep, needConfigure []int, depth int, pkgLoop bool) (bad bool, err error) {
	for loops := 0; ; loops++ {
		changed := false
		for _, start := range needConfigure {
			end, _ := globOr(deps, start)
			if t := deps[end].typ; t != depDepends && t != depPreDepends {
				continue
			}
			bad = true
			for cur := start; ; cur++ {
				for _, v := range deps[cur].allTargets() {
					dep := v.pkg
					if dep.inst != v {
						continue
					}
					if m.list.is(dep, fUnPacked) {
						if m.list.is(dep, fLoop) && pkgLoop {
							bad = false
							break
						}
						if err := m.nonLoopingSmart(configureNow, p, dep, depth, pkgLoop, &bad, &changed); err != nil {
							return bad, err
						}
						break
					} else if m.list.is(dep, fConfigured) {
						bad = false
						break
					}
				}
				if cur == end || !bad {
					break
				}
			}
		}
		if !changed {
			return bad, nil
		}
		if loops > maxLoops {
			return bad, fmt.Errorf("%s: apt's loop limit reached ordering its configure", p.name)
		}
	}
}
