package order

import "sort"

// consideration is one of the order list's dependency functions
// (DepUnPackCrit and the others), applied to a version's dependencies
// (reverse false) or to the dependencies naming a package (reverse true).
type consideration int

const (
	cNone consideration = iota
	cUnPackCrit
	cUnPackPreD
	cUnPackPre
	cUnPackDep
	cConfigure
)

// orderList is apt's pkgOrderList: the packages to change and a flag word
// for each, ordered by a depth-first visit whose considerations each pass
// narrows (apt-pkg/orderlist.cc). Nothing is removed and every archive is
// at hand, so the removal and after-list machinery is left out.
type orderList struct {
	flags      map[*aPkg]int
	list       []*aPkg
	next       []*aPkg // the list being rebuilt by a run
	primary    consideration
	secondary  consideration
	revDepends consideration
	depth      int
}

func newOrderList() *orderList { return &orderList{flags: map[*aPkg]int{}} }

func (o *orderList) is(p *aPkg, f int) bool { return o.flags[p]&f == f }
func (o *orderList) flag(p *aPkg, f int)    { o.flags[p] |= f }
func (o *orderList) unflag(p *aPkg, f int)  { o.flags[p] &^= f }

// setState sets f among the state flags, clearing the others.
func (o *orderList) setState(p *aPkg, f int) { o.flags[p] = o.flags[p]&^fStates | f }

// isNow: neither unpacked nor configured yet by this plan.
func (o *orderList) isNow(p *aPkg) bool { return o.flags[p]&(fStates&^fRemoved) == 0 }

// keep is apt's Keep(): not marked for install.
func keep(p *aPkg) bool { return !p.install || p.inst == p.cur }

// score ranks a package for the first sort: Essential, immediate
// configuration, Pre-Depends and priority count, higher first.
func (o *orderList) score(p *aPkg) int {
	if p.inst == nil {
		return -1
	}
	s := 0
	if p.essential {
		s += 200
	}
	if o.is(p, fImmediate) {
		s += 10
	}
	for _, d := range p.inst.deps {
		if d.typ == depPreDepends {
			s += 50
			break
		}
	}
	switch p.inst.p.Priority {
	case "required":
		s += 5
	case "important":
		s += 4
	case "standard":
		s += 3
	case "optional":
		s++
	}
	return s
}

// compareA is OrderCompareA: what has yet to happen first, then packages
// already on the system needing work, then score, then name.
func (o *orderList) compareA(a, b *aPkg) int {
	if na, nb := o.isNow(a), o.isNow(b); na != nb {
		if na {
			return -1
		}
		return 1
	}
	if sa, sb := a.state() != needsNothing, b.state() != needsNothing; sa != sb {
		if sa {
			return -1
		}
		return 1
	}
	if sa, sb := o.score(a), o.score(b); sa != sb {
		if sa > sb {
			return -1
		}
		return 1
	}
	switch {
	case a.name < b.name:
		return -1
	case a.name > b.name:
		return 1
	}
	return 0
}

// orderUnpack is OrderUnpack: pass A orders by critical dependencies,
// breakage of installed packages and Depends; B drops Depends; C drops
// the reverse checks; D orders by Pre-Depends (and Depends at the top
// level and of immediate packages).
func (o *orderList) orderUnpack() {
	o.primary, o.secondary, o.revDepends = cUnPackCrit, cConfigure, cUnPackDep
	sort.Slice(o.list, func(i, j int) bool { return o.compareA(o.list[i], o.list[j]) < 0 })
	o.doRun()
	o.secondary = cNone
	o.doRun()
	o.revDepends = cNone
	o.doRun()
	o.primary = cUnPackPre
	o.doRun()
}

// doRun rebuilds the list by visiting each package in its current order.
func (o *orderList) doRun() {
	o.depth = 0
	for p := range o.flags {
		o.unflag(p, fAdded|fAddPending|fLoop|fInList)
	}
	for _, p := range o.list {
		o.flag(p, fInList)
	}
	old := o.list
	o.next = nil
	for _, p := range old {
		o.visitNode(p)
	}
	o.list = o.next
}

func (o *orderList) visitNode(p *aPkg) {
	if p == nil || o.is(p, fAdded) || o.is(p, fAddPending) || !o.is(p, fInList) {
		return
	}
	o.depth++
	o.flag(p, fAddPending)
	old := o.primary
	if o.is(p, fImmediate) && o.primary != cUnPackPre {
		o.primary = cUnPackPreD
	}
	if o.isNow(p) {
		o.visitDeps(o.primary, p)
		o.visitRDeps(o.primary, p)
		o.visitRDeps(o.revDepends, p)
		o.visitDeps(o.secondary, p)
		o.visitRDeps(o.secondary, p)
	}
	if !o.is(p, fAdded) {
		o.flags[p] = o.flags[p]&^(fAdded|fAddPending) | fAdded
		o.next = append(o.next, p)
	}
	o.primary = old
	o.depth--
}

// visitDeps applies c to the dependencies of p's install version.
func (o *orderList) visitDeps(c consideration, p *aPkg) {
	if c != cNone && p.inst != nil {
		o.apply(c, p.inst.deps, false)
	}
}

// visitRDeps applies c to the dependencies naming p, then to those naming
// what its installed and install versions provide (VisitRDeps and
// VisitRProvides).
func (o *orderList) visitRDeps(c consideration, p *aPkg) {
	if c == cNone {
		return
	}
	o.apply(c, p.revDeps, true)
	for _, v := range []*aVer{p.cur, p.inst} {
		if v == nil {
			continue
		}
		for _, pr := range v.prov {
			o.apply(c, pr.virtual.revDeps, true)
		}
	}
}

func (o *orderList) apply(c consideration, deps []*aDep, reverse bool) {
	switch c {
	case cUnPackCrit:
		o.depUnPackCrit(deps, reverse)
	case cUnPackPreD:
		o.depUnPackPreD(deps, reverse)
	case cUnPackPre:
		o.depUnPackPre(deps, reverse)
	case cUnPackDep:
		o.depUnPackDep(deps, reverse)
	case cConfigure:
		o.depConfigure(deps, reverse)
	}
}

// targetLoops is the order list's loop detection: a target already added
// or being added is not visited again.
func (o *orderList) targetLoops(d *aDep) bool {
	return o.is(d.target, fAdded) || o.is(d.target, fAddPending)
}

// depUnPackCrit orders by what must hold before unpacking: Pre-Depends
// (whose targets must then be configurable, hence DepUnPackPreD below
// them) and Conflicts and Breaks; in reverse, installed packages that
// conflict with this one.
func (o *orderList) depUnPackCrit(deps []*aDep, reverse bool) {
	for _, d := range deps {
		if reverse {
			if d.typ != depConflicts || d.parent.pkg.cur != d.parent || o.checkDep(d, true) {
				continue
			}
			o.visitNode(d.parent.pkg)
			continue
		}
		if !d.negative() && d.typ != depPreDepends {
			continue
		}
		if o.checkDep(d, false) && (!o.is(d.target, fAddPending) || d.typ != depPreDepends) {
			continue
		}
		if o.targetLoops(d) {
			continue
		}
		old := o.primary
		if d.typ == depPreDepends {
			o.primary = cUnPackPreD
		}
		o.visitProvides(d, true)
		o.primary = old
	}
}

// depUnPackPreD is DepUnPackCrit for a package to be configured as soon
// as it is unpacked: every critical dependency counts.
func (o *orderList) depUnPackPreD(deps []*aDep, reverse bool) {
	if reverse {
		o.depUnPackCrit(deps, true)
		return
	}
	for _, d := range deps {
		if !d.critical() {
			continue
		}
		if o.checkDep(d, false) && (!o.is(d.target, fAddPending) || d.typ != depPreDepends) {
			continue
		}
		if o.targetLoops(d) {
			continue
		}
		o.visitProvides(d, true)
	}
}

// depUnPackPre orders by Pre-Depends, and by Depends below the top level
// or of an immediate package.
func (o *orderList) depUnPackPre(deps []*aDep, reverse bool) {
	if reverse {
		return
	}
	for _, d := range deps {
		switch d.typ {
		case depPreDepends:
		case depDepends:
			if o.depth == 1 && !o.is(d.parent.pkg, fImmediate) {
				continue
			}
		default:
			continue
		}
		if o.checkDep(d, false) && !o.is(d.target, fAddPending) {
			continue
		}
		if o.targetLoops(d) {
			continue
		}
		o.visitProvides(d, true)
	}
}

// depUnPackDep brings installed packages whose critical dependencies this
// package's unpacking would break before it, and the targets of its
// Breaks. (Its Depends branch sits under the critical test, as in apt,
// and so never runs.)
func (o *orderList) depUnPackDep(deps []*aDep, reverse bool) {
	for _, d := range deps {
		if !d.critical() {
			continue
		}
		if reverse {
			if d.parent.pkg.cur == nil || d.parent.pkg.cur != d.parent || o.checkDep(d, true) {
				continue
			}
			o.visitNode(d.parent.pkg)
			continue
		}
		if d.typ == depBreaks && !o.checkDep(d, false) {
			o.visitNode(d.target)
		}
	}
}

// depConfigure orders by Depends.
func (o *orderList) depConfigure(deps []*aDep, reverse bool) {
	if reverse {
		return
	}
	for _, d := range deps {
		if d.typ == depDepends {
			o.visitProvides(d, false)
		}
	}
}

// visitProvides visits every package whose install version satisfies d,
// or for a Conflicts or Breaks every installed one that changes.
func (o *orderList) visitProvides(d *aDep, critical bool) {
	targets := d.allTargets()
	for _, v := range targets {
		p := v.pkg
		if d.negative() {
			continue // nothing is removed
		}
		if keep(p) && p.state() == needsNothing {
			continue
		}
		if p.inst != v {
			continue
		}
		o.visitNode(p)
	}
	if !d.negative() {
		return
	}
	for _, v := range targets {
		p := v.pkg
		if keep(p) && p.state() == needsNothing {
			continue
		}
		if p.cur != v {
			continue
		}
		o.visitNode(p)
	}
}

// checkDep reports whether d holds once what is added so far is unpacked:
// for a Conflicts, whether no target is present.
func (o *orderList) checkDep(d *aDep, reverse bool) bool {
	for _, v := range d.allTargets() {
		p := v.pkg
		if o.is(p, fAdded) || (o.is(p, fAddPending) && reverse) {
			if p.inst != v {
				continue
			}
		} else if p.cur != v || p.state() != needsNothing {
			continue
		}
		if d.negative() {
			return false
		}
		if ((!reverse && p == d.parent.pkg) || (reverse && p == d.target)) && p.inst != v {
			continue
		}
		return true
	}
	return d.typ == depConflicts
}
