package order

import (
	"fmt"
	"path"
	"slices"
	"sort"
	"strings"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/repo"
)

// Known is what dpkg knows of a package on the system before a plan runs:
// its status entry and what its control files say.
type Known struct {
	Pkg    *repo.Package
	Status string // the state word of its Status field
	// Postinst says it has a postinst, which makes dpkg prefer breaking a
	// dependency cycle elsewhere.
	Postinst bool
	// Triggers are the directives of its triggers control file.
	Triggers [][2]string
	// Pending are its pending triggers (Triggers-Pending).
	Pending []string
}

// Unpacked is what unpacking a package showed dpkg.
type Unpacked struct {
	Control   *deb.Paragraph // the control file, whose field order dpkg keeps until it rewrites the status
	Postinst  bool
	Triggers  [][2]string
	Conffiles []string
	// Paths are every path of its data.tar, directories included, each
	// of which activates the file triggers on it.
	Paths []string
}

// Runner does what dpkg does to a package, when Dpkg decides.
type Runner interface {
	// Unpack runs p's preinst and extracts it.
	Unpack(p *repo.Package) (*Unpacked, error)
	// Configure runs p's postinst configure.
	Configure(p *repo.Package) error
	// Trigproc runs p's postinst triggered with the trigger names.
	Trigproc(p *repo.Package, triggers []string) error
}

// dpkg's package states, in its order.
const (
	stNotInstalled = iota
	stConfigFiles
	stHalfInstalled
	stUnpacked
	stHalfConfigured
	stTriggersAwaited
	stTriggersPending
	stInstalled
)

var statusWords = map[string]int{
	"not-installed": stNotInstalled, "config-files": stConfigFiles, "half-installed": stHalfInstalled,
	"unpacked": stUnpacked, "half-configured": stHalfConfigured, "triggers-awaited": stTriggersAwaited,
	"triggers-pending": stTriggersPending, "installed": stInstalled,
}

// Queue tries (dpkg's enum dependtry).
const (
	tryNormal         = 1
	tryCycles         = 2
	tryTriggers       = 3
	tryTriggersCycles = 4
	tryForceDepends   = 6
	tryLast           = 7
)

// found_status.
const (
	foundNone = iota
	foundDefer
	foundForced
	foundOK
)

// dep_check.
const (
	checkHalt = iota
	checkDefer
	checkOK
)

type dPossi struct {
	name       string
	arch       string
	op         deb.Op
	ver        string
	cyclebreak bool
}

type dDep struct {
	pre  bool
	alts []*dPossi
}

type dpkgPkg struct {
	name      string
	pkg       *repo.Package
	status    int
	postinst  bool
	triggers  [][2]string
	conffiles []string
	pending   []string
	// deps are the package's Depends and Pre-Depends in the order dpkg
	// parsed them: the status file's (Depends first) for what the
	// process read at its start, the control file's for what it unpacked.
	deps []*dDep
	// Per-process state.
	istobe, enqueued, deferred bool
	color                      int
}

// Dpkg is the system as successive dpkg calls see it.
type Dpkg struct {
	pkgs map[string]*dpkgPkg
	r    Runner

	// Per process.
	seqOf        map[string]int // when the hash table first met each name
	queue        []*dpkgPkg
	deferred     []*dpkgPkg
	sincenothing int
	dependtry    int
	triggers     bool
	forceDepends bool
	progressTrig *dpkgPkg
	providers    map[string][]*dpkgPkg
	fileInterest map[string][]*dpkgPkg
	nameInterest map[string][]*dpkgPkg
}

// NewDpkg starts from the packages the status lists.
func NewDpkg(known []Known, r Runner) *Dpkg {
	d := &Dpkg{pkgs: map[string]*dpkgPkg{}, r: r}
	for _, k := range known {
		if k.Pkg == nil {
			continue
		}
		p := d.get(k.Pkg.Name)
		p.pkg, p.status, p.postinst, p.triggers = k.Pkg, statusWords[k.Status], k.Postinst, k.Triggers
		p.pending = append([]string(nil), k.Pending...)
	}
	return d
}

func (d *Dpkg) get(name string) *dpkgPkg {
	p := d.pkgs[name]
	if p == nil {
		p = &dpkgPkg{name: name}
		d.pkgs[name] = p
	}
	return p
}

// Run is one dpkg call.
func (d *Dpkg) Run(c Call) error {
	d.begin(c.Op != Unpack && c.Op != Configure, c.Op == Install)
	switch c.Op {
	case Unpack:
		for _, p := range c.Pkgs {
			if err := d.unpack(p); err != nil {
				return err
			}
		}
		return nil
	case Configure:
		for _, p := range c.Pkgs {
			d.enqueue(d.get(p.Name))
		}
	case ConfigurePending:
		for _, p := range d.hashOrder() {
			if p.status == stUnpacked || p.status == stHalfConfigured || len(p.pending) > 0 && p.status >= stTriggersAwaited {
				d.enqueue(p)
			}
		}
	case Install:
		for _, p := range c.Pkgs {
			if err := d.unpack(p); err != nil {
				return err
			}
			d.enqueue(d.get(p.Name))
		}
	}
	if err := d.processQueue(); err != nil {
		return err
	}
	return d.runDeferred()
}

// begin starts a dpkg process: it reads the status (by name) into its hash
// table, so each package's dependencies are in the status file's order,
// and its trigger interests.
func (d *Dpkg) begin(triggers, forceDepends bool) {
	d.queue, d.deferred, d.progressTrig = nil, nil, nil
	d.sincenothing, d.dependtry = 0, tryNormal
	d.triggers, d.forceDepends = triggers, forceDepends
	d.providers = map[string][]*dpkgPkg{}
	d.fileInterest = map[string][]*dpkgPkg{}
	d.nameInterest = map[string][]*dpkgPkg{}
	names := make([]string, 0, len(d.pkgs))
	for n := range d.pkgs {
		names = append(names, n)
	}
	sort.Strings(names)
	d.seqOf = map[string]int{}
	for _, n := range names {
		p := d.pkgs[n]
		p.istobe, p.enqueued, p.deferred = false, false, false
		if p.pkg != nil {
			d.meet(p.pkg.Paragraph, statusRelations, p.pkg)
		}
		d.meetName(n)
		if p.pkg == nil || p.status < stHalfInstalled {
			p.deps = nil
			continue
		}
		p.deps = depsOf(p.pkg, nil)
		d.link(p)
		d.addInterests(p)
	}
}

// statusRelations are the relationship fields in the order dpkg writes
// them into its status file.
var statusRelations = []string{"Replaces", "Provides", "Depends", "Pre-Depends", "Recommends", "Suggests", "Breaks", "Conflicts", "Enhances"}

// isRelation reports whether a field names packages.
func isRelation(f string) bool {
	return slices.ContainsFunc(statusRelations, func(r string) bool { return strings.EqualFold(r, f) })
}

// meetName is the process's hash table meeting a name: a name met first
// comes first in its bin.
func (d *Dpkg) meetName(name string) {
	if _, ok := d.seqOf[name]; !ok {
		d.seqOf[name] = len(d.seqOf)
	}
}

// meet is the hash table meeting the names of a stanza's relationships as
// dpkg parses it, before the package's own: in the order of fields (the
// status file's when fields is given, the stanza's own otherwise).
func (d *Dpkg) meet(para *deb.Paragraph, fields []string, p *repo.Package) {
	var order []string
	switch {
	case fields != nil:
		order = fields
	case para != nil:
		for _, f := range para.Fields {
			if isRelation(f.Name) {
				order = append(order, f.Name)
			}
		}
	}
	for _, f := range order {
		v := ""
		if para != nil {
			v = para.Get(f)
		}
		rels, err := deb.ParseRelations(v)
		if err != nil {
			continue
		}
		for _, alts := range rels {
			for _, a := range alts {
				d.meetName(a.Name)
			}
		}
	}
}

// depsOf is a package's Depends and Pre-Depends in the order of control,
// or the status file's when control is nil.
func depsOf(p *repo.Package, control *deb.Paragraph) []*dDep {
	preFirst := false
	if control != nil {
		for _, f := range control.Fields {
			if strings.EqualFold(f.Name, "Pre-Depends") {
				preFirst = true
				break
			}
			if strings.EqualFold(f.Name, "Depends") {
				break
			}
		}
	}
	conv := func(rels []deb.Alternatives, pre bool) []*dDep {
		var out []*dDep
		for _, alts := range rels {
			dd := &dDep{pre: pre}
			for _, a := range alts {
				dd.alts = append(dd.alts, &dPossi{name: a.Name, arch: a.Arch, op: a.Op, ver: a.Version})
			}
			out = append(out, dd)
		}
		return out
	}
	if preFirst {
		return append(conv(p.PreDepends, true), conv(p.Depends, false)...)
	}
	return append(conv(p.Depends, false), conv(p.PreDepends, true)...)
}

// link records what p provides, ahead of the providers linked before, as
// dpkg's reverse dependency lists grow.
func (d *Dpkg) link(p *dpkgPkg) {
	for name, ps := range d.providers {
		d.providers[name] = remove(ps, p)
	}
	for _, alts := range p.pkg.Provides {
		for _, a := range alts {
			d.providers[a.Name] = append([]*dpkgPkg{p}, d.providers[a.Name]...)
		}
	}
}

func remove(ps []*dpkgPkg, p *dpkgPkg) []*dpkgPkg {
	out := ps[:0]
	for _, q := range ps {
		if q != p {
			out = append(out, q)
		}
	}
	return out
}

// addInterests registers p's trigger interests after those registered
// before.
func (d *Dpkg) addInterests(p *dpkgPkg) {
	for m, ps := range d.fileInterest {
		d.fileInterest[m] = remove(ps, p)
	}
	for m, ps := range d.nameInterest {
		d.nameInterest[m] = remove(ps, p)
	}
	for _, t := range p.triggers {
		if !strings.HasPrefix(t[0], "interest") {
			continue
		}
		if strings.HasPrefix(t[1], "/") {
			d.fileInterest[t[1]] = append(d.fileInterest[t[1]], p)
		} else {
			d.nameInterest[t[1]] = append(d.nameInterest[t[1]], p)
		}
	}
}

// hashOrder is the order of dpkg's package hash table: FNV-1a of the name
// modulo 65521 bins, and in a bin the order the process met the names.
func (d *Dpkg) hashOrder() []*dpkgPkg {
	out := make([]*dpkgPkg, 0, len(d.pkgs))
	for _, p := range d.pkgs {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool {
		bi, bj := fnv1a(out[i].name)%65521, fnv1a(out[j].name)%65521
		if bi != bj {
			return bi < bj
		}
		return d.seqOf[out[i].name] < d.seqOf[out[j].name]
	})
	return out
}

// fnv1a is dpkg's str_fnv_hash.
func fnv1a(s string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 16777619
	}
	return h
}

func (d *Dpkg) enqueue(p *dpkgPkg) {
	if p.enqueued {
		return
	}
	p.enqueued = true
	d.queue = append(d.queue, p)
}

// unpack has the runner unpack p, then notes what dpkg notes: its control
// information, the triggers its paths and its own directives activate, and
// its interests.
func (d *Dpkg) unpack(rp *repo.Package) error {
	p := d.get(rp.Name)
	u, err := d.r.Unpack(rp)
	if err != nil {
		return err
	}
	d.meet(u.Control, nil, rp)
	d.meetName(rp.Name)
	p.pkg, p.status, p.pending = rp, stUnpacked, nil
	p.postinst, p.triggers, p.conffiles = u.Postinst, u.Triggers, u.Conffiles
	p.deps = depsOf(rp, u.Control)
	d.link(p)
	d.activateDirectives(p)
	for _, f := range u.Paths {
		d.activateFile(f)
	}
	d.addInterests(p)
	return nil
}

// activateDirectives activates p's own activate directives, as dpkg does
// when p is unpacked or configured.
func (d *Dpkg) activateDirectives(p *dpkgPkg) {
	for _, t := range p.triggers {
		if !strings.HasPrefix(t[0], "activate") {
			continue
		}
		if strings.HasPrefix(t[1], "/") {
			d.activateFile(t[1])
		} else {
			d.activateName(t[1])
		}
	}
}

func (d *Dpkg) activateName(name string) {
	for _, p := range d.nameInterest[name] {
		d.record(p, name)
	}
}

func (d *Dpkg) activateFile(f string) {
	f = path.Clean("/" + strings.TrimPrefix(f, "."))
	for _, p := range d.fileInterest[f] {
		d.record(p, f)
	}
}

// activatePath activates the file triggers on f and its parents, as a
// conffile's installation does.
func (d *Dpkg) activatePath(f string) {
	f = path.Clean("/" + f)
	for {
		d.activateFile(f)
		if f == "/" {
			return
		}
		f = path.Dir(f)
	}
}

// record is trig_record_activation: only a configured package takes a
// pending trigger.
func (d *Dpkg) record(p *dpkgPkg, trig string) {
	if p.status < stTriggersAwaited {
		return
	}
	if !slices.Contains(p.pending, trig) {
		p.pending = append(p.pending, trig)
	}
	if p.status == stInstalled {
		p.status = stTriggersPending
	}
	if d.triggers && !p.deferred {
		p.deferred = true
		d.deferred = append(d.deferred, p)
	}
}

// processQueue is dpkg's process_queue for configuring.
func (d *Dpkg) processQueue() error {
	for _, p := range d.queue {
		p.istobe = true
	}
	var errs []string
	for len(d.queue) > 0 {
		p := d.queue[0]
		d.queue = d.queue[1:]
		p.enqueued = false
		old := d.sincenothing
		d.sincenothing++
		if old > len(d.queue)*3+2 {
			d.dependtry++
			d.sincenothing = 0
		} else if d.sincenothing > len(d.queue)*2+2 {
			if d.dependtry >= tryTriggers && d.progressTrig != nil && len(d.progressTrig.pending) > 0 {
				d.enqueue(p)
				p = d.progressTrig
				d.progressTrig = nil
			} else {
				d.dependtry++
				d.sincenothing = 0
			}
		}
		if d.dependtry >= tryLast {
			return fmt.Errorf("dpkg gave up configuring: %s", strings.Join(errs, "; "))
		}
		var err error
		if len(p.pending) > 0 && p.status >= stTriggersAwaited {
			err = d.trigproc(p, true)
		} else {
			err = d.configure(p)
		}
		if err != nil {
			var de *depError
			if !asDepError(err, &de) {
				return err
			}
			// dpkg reports it and goes on with the queue.
			p.istobe = false
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("dependency problems: %s", strings.Join(errs, "; "))
	}
	return nil
}

// depError is a package dpkg leaves unconfigured for its dependencies.
type depError struct{ msg string }

func (e *depError) Error() string { return e.msg }

func asDepError(err error, out **depError) bool {
	de, ok := err.(*depError)
	if ok {
		*out = de
	}
	return ok
}

// configure is deferred_configure.
func (d *Dpkg) configure(p *dpkgPkg) error {
	if p.status != stUnpacked && p.status != stHalfConfigured {
		return &depError{fmt.Sprintf("%s is not ready for configuration", p.name)}
	}
	if d.dependtry >= tryCycles && d.findBreakCycle(p) {
		d.sincenothing = 0
	}
	switch d.dependenciesOK(p) {
	case checkDefer:
		p.istobe = true
		d.enqueue(p)
		return nil
	case checkHalt:
		d.sincenothing = 0
		return &depError{fmt.Sprintf("dependency problems prevent configuration of %s", p.name)}
	}
	d.sincenothing = 0
	d.activateDirectives(p)
	for _, c := range p.conffiles {
		d.activatePath(c)
	}
	p.status = stHalfConfigured
	if err := d.r.Configure(p.pkg); err != nil {
		return err
	}
	p.pending = nil
	p.status = stInstalled
	return nil
}

// trigproc processes p's pending triggers; queued ones wait for the
// triggers round of the queue.
func (d *Dpkg) trigproc(p *dpkgPkg, queued bool) error {
	if p.deferred {
		p.deferred = false
		d.deferred = remove(d.deferred, p)
	}
	if len(p.pending) == 0 {
		return nil
	}
	if d.dependtry < tryTriggers && queued {
		d.enqueue(p)
		return nil
	}
	if d.dependtry >= tryCycles && d.findBreakCycle(p) {
		d.sincenothing = 0
	}
	switch d.dependenciesOK(p) {
	case checkDefer:
		d.enqueue(p)
		return nil
	case checkHalt:
		if !queued {
			return nil
		}
		d.sincenothing = 0
		return &depError{fmt.Sprintf("dependency problems prevent processing triggers for %s", p.name)}
	}
	names := p.pending
	p.pending = nil
	p.status = stHalfConfigured
	d.sincenothing = 0
	if err := d.r.Trigproc(p.pkg, names); err != nil {
		return err
	}
	if len(p.pending) > 0 {
		p.status = stTriggersPending
	} else {
		p.status = stInstalled
	}
	return nil
}

// runDeferred processes the triggers the process activated, in the order
// they were activated.
func (d *Dpkg) runDeferred() error {
	for len(d.deferred) > 0 {
		p := d.deferred[0]
		d.deferred = d.deferred[1:]
		p.deferred = false
		if err := d.trigproc(p, false); err != nil {
			return err
		}
	}
	return nil
}

// archSatisfied is archsatisfied for one native architecture: a
// qualifier of :any needs a Multi-Arch: allowed target, unless it is
// foreign.
func archSatisfied(target *dpkgPkg, possi *dPossi) bool {
	ma := ""
	if target.pkg != nil {
		ma = target.pkg.MultiArch
	}
	if ma == "foreign" {
		return true
	}
	if possi.arch == "any" {
		return ma == "allowed"
	}
	return true
}

// dependenciesOK is dependencies_ok for configuring p.
func (d *Dpkg) dependenciesOK(p *dpkgPkg) int {
	ok := checkOK
	anyCannotFixByTrig := false
	var canFixByTrig *dpkgPkg
	for _, dep := range p.deps {
		found := foundNone
		var possFixByTrig *dpkgPkg
		for _, possi := range dep.alts {
			if found == foundOK {
				break
			}
			if possi.cyclebreak {
				found = foundOK
				break
			}
			if t := d.pkgs[possi.name]; t != nil && archSatisfied(t, possi) {
				if f := d.possiFound(t, p, false, possi, &possFixByTrig); f > found {
					found = f
				}
			}
			if found != foundOK {
				for _, prov := range d.providers[possi.name] {
					if found == foundOK {
						break
					}
					f := d.possiFound(prov, p, true, possi, &possFixByTrig)
					if f == foundDefer && prov == p {
						f = foundOK
					}
					if f > found {
						found = f
					}
				}
			}
		}
		if d.forceDepends {
			f := foundDefer
			if d.dependtry >= tryForceDepends {
				f = foundForced
			}
			if f > found {
				found = f
			}
		}
		switch found {
		case foundNone:
			anyCannotFixByTrig = true
			ok = checkHalt
		case foundDefer:
			if possFixByTrig != nil {
				canFixByTrig = possFixByTrig
			} else {
				anyCannotFixByTrig = true
			}
			if ok > checkDefer {
				ok = checkDefer
			}
		}
	}
	if !anyCannotFixByTrig && canFixByTrig != nil {
		d.progressTrig = canFixByTrig
	}
	return ok
}

// possiFound is deppossi_ok_found: whether t, by itself or as a provider,
// satisfies possi for requiredBy now, later, or not.
func (d *Dpkg) possiFound(t, requiredBy *dpkgPkg, provider bool, possi *dPossi, fixByTrig **dpkgPkg) int {
	if t.status < stUnpacked {
		return foundNone
	}
	if possi.op != deb.OpNone {
		v := ""
		if provider {
			for _, alts := range t.pkg.Provides {
				for _, a := range alts {
					if a.Name == possi.name && a.Op == deb.OpEQ {
						v = a.Version
					}
				}
			}
		} else {
			v = t.pkg.Version
		}
		if v == "" || !(deb.Dep{Op: possi.op, Version: possi.ver}).Satisfied(v) {
			return foundNone
		}
	}
	switch {
	case t.status == stInstalled || t.status == stTriggersPending:
		return foundOK
	case t.istobe:
		return foundDefer
	}
	return foundNone
}

// cycleLink is one step of findbreakcycle's walk.
type cycleLink struct {
	prev  *cycleLink
	pkg   *dpkgPkg
	possi *dPossi
}

// findBreakCycle is findbreakcycle: a depth-first walk of the
// dependencies from p that, on meeting a package already on its path,
// marks one dependency of the cycle broken, preferring one of a package
// without a postinst.
func (d *Dpkg) findBreakCycle(p *dpkgPkg) bool {
	for _, q := range d.pkgs {
		q.color = 0
	}
	return d.breakCycleFrom(p, nil)
}

const (
	colorWhite = iota
	colorGray
	colorBlack
)

func (d *Dpkg) breakCycleFrom(p *dpkgPkg, sofar *cycleLink) bool {
	if p.color == colorBlack {
		return false
	}
	p.color = colorGray
	this := &cycleLink{prev: sofar, pkg: p}
	for _, dep := range p.deps {
		for _, possi := range dep.alts {
			if possi.cyclebreak {
				continue
			}
			this.possi = possi
			if t := d.pkgs[possi.name]; t != nil && archSatisfied(t, possi) {
				if d.foundCycleBroken(this, sofar, t, possi) {
					return true
				}
			}
			for _, prov := range d.providers[possi.name] {
				if !prov.istobe {
					continue
				}
				if d.foundCycleBroken(this, sofar, prov, possi) {
					return true
				}
			}
		}
	}
	p.color = colorBlack
	return false
}

func (d *Dpkg) foundCycleBroken(this, sofar *cycleLink, on *dpkgPkg, possi *dPossi) bool {
	sol := sofar
	for sol != nil && sol.pkg != on {
		sol = sol.prev
	}
	if sol == nil {
		return d.breakCycleFrom(on, this)
	}
	for sol = this; !(sol != this && sol.pkg == on); sol = sol.prev {
		if !sol.pkg.postinst {
			break
		}
	}
	sol.possi.cyclebreak = true
	return true
}
