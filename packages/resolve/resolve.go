// Package resolve chooses the packages to install for a request the way
// apt-get install --no-install-recommends does on a system with a given dpkg
// status: the candidate of a package is its newest version; a dependency
// already met by an installed or chosen package needs nothing; otherwise
// the solutions of its or-group are tried in apt's order (packages already
// installed before new ones, then apt's provider ranking) and the first
// whose own dependencies can be met wins. Nothing is ever removed: a
// conflict with an installed package is an error.
//
// The result depends only on the index, the status and the request: every
// tie apt breaks by its cache's internal ids is broken here by name.
package resolve

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/repo"
)

// Options tune a resolution.
type Options struct {
	// Arch is the native architecture; packages of other architectures
	// (but "all") are never candidates.
	Arch string
	// Recommends installs Recommends too, as apt does by default; a
	// Recommends that cannot be met is skipped silently.
	Recommends bool
}

// Result is what to install.
type Result struct {
	// Install holds the packages to install (new ones and upgrades), in
	// the order to unpack and configure them: dependencies first, ties and
	// cycles broken by name.
	Install []*repo.Package
}

// Names returns "name=version" of every package to install, sorted by name.
func (r *Result) Names() []string {
	out := make([]string, 0, len(r.Install))
	for _, p := range r.Install {
		out = append(out, p.Name+"="+p.Version)
	}
	sort.Strings(out)
	return out
}

// Error is a request that cannot be met; Chain names the path from the
// request to the dependency that failed.
type Error struct {
	Chain  []string // e.g. ["containerd", "runc (>= 1.1)", "libseccomp2 (>= 2.5)"]
	Reason string
}

func (e *Error) Error() string {
	return "unsatisfiable: " + strings.Join(e.Chain, " -> ") + ": " + e.Reason
}

type pkgState struct {
	name      string
	versions  []*repo.Package // available, newest first
	current   *repo.Package   // installed
	candidate *repo.Package
	mark      *repo.Package // chosen for install
}

func (s *pkgState) installVer() *repo.Package {
	if s.mark != nil {
		return s.mark
	}
	return s.current
}

type resolver struct {
	o     Options
	pkgs  map[string]*pkgState
	names []string // sorted
	// provides maps a virtual name to the packages whose candidate or
	// installed version provides it.
	provides map[string][]string
	marked   []string // undo log
}

// Resolve chooses the packages to install for requests. A request is a
// package name, "name=version", or a virtual package that exactly one
// package provides.
func Resolve(available, installed []*repo.Package, requests []string, o Options) (*Result, error) {
	r := &resolver{o: o, pkgs: map[string]*pkgState{}, provides: map[string][]string{}}
	get := func(n string) *pkgState {
		s := r.pkgs[n]
		if s == nil {
			s = &pkgState{name: n}
			r.pkgs[n] = s
		}
		return s
	}
	for _, p := range installed {
		if !r.archOK(p.Arch) {
			continue
		}
		get(p.Name).current = p
	}
	for _, p := range available {
		if !r.archOK(p.Arch) {
			continue
		}
		s := get(p.Name)
		s.versions = append(s.versions, p)
	}
	for n, s := range r.pkgs {
		r.names = append(r.names, n)
		sort.SliceStable(s.versions, func(i, j int) bool {
			return deb.CompareVersions(s.versions[i].Version, s.versions[j].Version) > 0
		})
		// apt never downgrades: an installed version newer than
		// everything available stays the candidate.
		if len(s.versions) > 0 {
			s.candidate = s.versions[0]
		}
		if s.current != nil && (s.candidate == nil || deb.CompareVersions(s.current.Version, s.candidate.Version) >= 0) {
			s.candidate = s.current
		}
	}
	sort.Strings(r.names)
	for _, n := range r.names {
		s := r.pkgs[n]
		seen := map[string]bool{}
		for _, v := range []*repo.Package{s.candidate, s.current} {
			if v == nil {
				continue
			}
			for _, alt := range v.Provides {
				for _, d := range alt {
					if !seen[d.Name] {
						seen[d.Name] = true
						r.provides[d.Name] = append(r.provides[d.Name], n)
					}
				}
			}
		}
	}

	for _, req := range requests {
		if err := r.request(req); err != nil {
			return nil, err
		}
	}
	return &Result{Install: r.order()}, nil
}

func (r *resolver) archOK(a string) bool { return a == r.o.Arch || a == "all" }

// request marks one requested package.
func (r *resolver) request(req string) error {
	name, version, pinned := strings.Cut(req, "=")
	name = strings.TrimSuffix(name, ":"+r.o.Arch)
	s := r.pkgs[name]
	if s == nil || len(s.versions) == 0 && s.current == nil {
		provs := r.provides[name]
		switch {
		case pinned:
		case len(provs) == 1:
			s = r.pkgs[provs[0]]
		case len(provs) > 1:
			for _, pn := range provs {
				if r.pkgs[pn].current != nil {
					return nil // apt: one provider installed is enough
				}
			}
			return &Error{Chain: []string{name}, Reason: fmt.Sprintf("a virtual package provided by %s; request one of them", strings.Join(provs, ", "))}
		}
		if s == nil || len(s.versions) == 0 && s.current == nil {
			return &Error{Chain: []string{name}, Reason: "no such package in the repository"}
		}
	}
	if pinned {
		var found *repo.Package
		for _, v := range s.versions {
			if v.Version == version {
				found = v
			}
		}
		if found == nil {
			return &Error{Chain: []string{req}, Reason: "version not in the repository"}
		}
		s.candidate = found
	}
	return r.markInstall(s, []string{s.name}, true)
}

// markInstall is apt's MarkInstall: mark the candidate, then meet each
// dependency not already met, in the order the control file lists them.
// On failure everything it marked is undone.
func (r *resolver) markInstall(s *pkgState, chain []string, fromUser bool) error {
	if s.candidate == nil {
		return &Error{Chain: chain, Reason: "no installation candidate"}
	}
	if s.candidate == s.current || s.mark != nil {
		return nil
	}
	cand := s.candidate
	if c := r.conflict(cand); c != "" {
		return &Error{Chain: chain, Reason: c}
	}
	undo := len(r.marked)
	s.mark = cand
	r.marked = append(r.marked, s.name)
	groups := [][]deb.Alternatives{cand.PreDepends, cand.Depends}
	if r.o.Recommends {
		groups = append(groups, cand.Recommends)
	}
	for gi, deps := range groups {
		critical := gi < 2
		for _, g := range deps {
			if r.satisfied(g) {
				continue
			}
			var first error
			found := false
			for _, sol := range r.solutions(g) {
				err := r.markInstall(sol, append(append([]string(nil), chain...), g.String()), false)
				if err == nil {
					found = true
					break
				}
				if first == nil {
					first = err
				}
			}
			if found || !critical {
				continue
			}
			if first == nil {
				first = &Error{Chain: append(append([]string(nil), chain...), g.String()), Reason: r.why(g)}
			}
			r.rollback(undo)
			return first
		}
	}
	return nil
}

func (r *resolver) rollback(to int) {
	for _, n := range r.marked[to:] {
		r.pkgs[n].mark = nil
	}
	r.marked = r.marked[:to]
}

// why explains a group that has no solution at all.
func (r *resolver) why(g deb.Alternatives) string {
	var parts []string
	for _, d := range g {
		s := r.pkgs[d.Name]
		switch {
		case s != nil && s.candidate != nil:
			parts = append(parts, fmt.Sprintf("%s has only %s", d.Name, s.candidate.Version))
		case len(r.provides[d.Name]) > 0:
			parts = append(parts, fmt.Sprintf("no provider of %s matches", d.Name))
		default:
			parts = append(parts, fmt.Sprintf("%s is not in the repository", d.Name))
		}
	}
	return "no candidate (" + strings.Join(parts, "; ") + ")"
}

// depArchOK reports whether version v of a package may satisfy d as far as
// architecture qualifiers go, on a single-architecture system.
func (r *resolver) depArchOK(d deb.Dep, v *repo.Package, viaProvides bool) bool {
	switch d.Arch {
	case "", "native", r.o.Arch:
		return true
	case "any":
		if viaProvides {
			return v.MultiArch == "foreign" || v.MultiArch == "allowed"
		}
		return v.MultiArch == "allowed"
	}
	return false
}

// satisfiesReal reports whether v, a version of package d.Name, meets d.
func (r *resolver) satisfiesReal(d deb.Dep, v *repo.Package) bool {
	return v != nil && v.Name == d.Name && d.Satisfied(v.Version) && r.depArchOK(d, v, false)
}

// satisfiesProvide reports whether v provides d. A versioned dependency
// needs a versioned Provides.
func (r *resolver) satisfiesProvide(d deb.Dep, v *repo.Package) bool {
	if v == nil || !r.depArchOK(d, v, true) {
		return false
	}
	for _, alt := range v.Provides {
		for _, p := range alt {
			if p.Name != d.Name {
				continue
			}
			if d.Op == deb.OpNone {
				return true
			}
			if p.Op == deb.OpEQ && d.Satisfied(p.Version) {
				return true
			}
		}
	}
	return false
}

// satisfied is apt's DepInstall: some alternative is met by what will be
// installed (installed versions and marks).
func (r *resolver) satisfied(g deb.Alternatives) bool {
	for _, d := range g {
		if s := r.pkgs[d.Name]; s != nil && r.satisfiesReal(d, s.installVer()) {
			return true
		}
		for _, pn := range r.provides[d.Name] {
			if r.satisfiesProvide(d, r.pkgs[pn].installVer()) {
				return true
			}
		}
	}
	return false
}

// solutions is apt's getAllPossibleSolutions for an unmet group: for each
// alternative, the candidates that would meet it, ranked as apt's
// CompareProviders ranks them; installed packages (upgrades) of all
// alternatives before new ones.
func (r *resolver) solutions(g deb.Alternatives) []*pkgState {
	var upgrades, fresh []*pkgState
	seen := map[string]bool{}
	for _, d := range g {
		var list []*pkgState
		if s := r.pkgs[d.Name]; s != nil && r.satisfiesReal(d, s.candidate) {
			list = append(list, s)
		}
		for _, pn := range r.provides[d.Name] {
			if s := r.pkgs[pn]; pn != d.Name && r.satisfiesProvide(d, s.candidate) {
				list = append(list, s)
			}
		}
		sort.SliceStable(list, func(i, j int) bool { return r.better(d.Name, list[i], list[j]) })
		for _, s := range list {
			if seen[s.name] {
				continue
			}
			seen[s.name] = true
			if s.current != nil {
				upgrades = append(upgrades, s)
			} else {
				fresh = append(fresh, s)
			}
		}
	}
	return append(upgrades, fresh...)
}

var priorities = map[string]int{"required": 1, "important": 2, "standard": 3, "optional": 4, "extra": 5}

// priority is apt's numeric priority: a missing field is 0 (ranked first,
// as apt's cache leaves it zero), an unknown word is "extra".
func priority(p *repo.Package) int {
	if p.Priority == "" {
		return 0
	}
	if n, ok := priorities[p.Priority]; ok {
		return n
	}
	return 5
}

// better is apt's CompareProviders for one target name, with the final
// tie (apt's cache ids) broken by name.
func (r *resolver) better(target string, a, b *pkgState) bool {
	if (a.current != nil) != (b.current != nil) {
		return a.current != nil
	}
	if (a.name == target) != (b.name == target) {
		return a.name == target
	}
	ac, bc := a.candidate, b.candidate
	if ac.Essential != bc.Essential {
		return ac.Essential
	}
	if ai, bi := important(ac), important(bc); ai != bi {
		return ai
	}
	if ac.Arch != bc.Arch {
		if ac.Arch == r.o.Arch {
			return true
		}
		if bc.Arch == r.o.Arch {
			return false
		}
	}
	if pa, pb := priority(ac), priority(bc); pa != pb {
		return pa < pb
	}
	return a.name < b.name
}

func important(p *repo.Package) bool {
	return p.Paragraph != nil && p.Paragraph.Get("Important") == "yes"
}

// conflict names an installed or chosen package that v conflicts with (or
// breaks), or that conflicts with v; "" when there is none.
func (r *resolver) conflict(v *repo.Package) string {
	for _, n := range r.names {
		s := r.pkgs[n]
		other := s.installVer()
		if other == nil || s.name == v.Name {
			continue
		}
		if d, ok := r.hits(v, other); ok {
			return fmt.Sprintf("%s %s conflicts with %s %s (%s), which is installed or chosen", v.Name, v.Version, other.Name, other.Version, d)
		}
		if d, ok := r.hits(other, v); ok {
			return fmt.Sprintf("%s %s (installed or chosen) conflicts with %s %s (%s)", other.Name, other.Version, v.Name, v.Version, d)
		}
	}
	return ""
}

// hits reports whether a's Conflicts or Breaks name b.
func (r *resolver) hits(a, b *repo.Package) (string, bool) {
	for _, rel := range [][]deb.Alternatives{a.Conflicts, a.Breaks} {
		for _, g := range rel {
			for _, d := range g {
				if r.satisfiesReal(d, b) || d.Op == deb.OpNone && r.satisfiesProvide(d, b) && b.Name != a.Name {
					return d.String(), true
				}
			}
		}
	}
	return "", false
}

// order lists the marked packages dependencies first: a depth-first walk
// over Pre-Depends and Depends, starting from names in byte order, so a
// cycle is cut at the same place every time.
func (r *resolver) order() []*repo.Package {
	var out []*repo.Package
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(n string)
	visit = func(n string) {
		s := r.pkgs[n]
		if s == nil || s.mark == nil || state[n] != 0 {
			return
		}
		state[n] = 1
		for _, deps := range [][]deb.Alternatives{s.mark.PreDepends, s.mark.Depends, s.mark.Recommends} {
			for _, g := range deps {
				for _, t := range r.targets(g) {
					visit(t)
				}
			}
		}
		state[n] = 2
		out = append(out, s.mark)
	}
	for _, n := range r.names {
		visit(n)
	}
	return out
}

// targets are the marked packages that meet some alternative of g.
func (r *resolver) targets(g deb.Alternatives) []string {
	var out []string
	for _, d := range g {
		if s := r.pkgs[d.Name]; s != nil && s.mark != nil && r.satisfiesReal(d, s.mark) {
			out = append(out, s.name)
		}
		for _, pn := range r.provides[d.Name] {
			if s := r.pkgs[pn]; s.mark != nil && r.satisfiesProvide(d, s.mark) {
				out = append(out, pn)
			}
		}
	}
	return out
}

// IsUnsatisfiable reports whether err is a resolution failure.
func IsUnsatisfiable(err error) bool {
	var e *Error
	return errors.As(err, &e)
}
