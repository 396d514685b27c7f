package layers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/stamp-dev/stamp/packages/dpkg"
	"github.com/stamp-dev/stamp/packages/order"
	"github.com/stamp-dev/stamp/packages/repo"
	"github.com/stamp-dev/stamp/packages/scripts"
)

// usrIsMerged is the package mmdebstrap's merged-/usr hook stands in for
// with an empty one of version 1 until the Essential set is installed, so
// that apt does not pull in usrmerge, and then installs for real.
const usrIsMerged = "usr-is-merged"

// plan is the dpkg calls that install pkgs, in the order apt would make
// them: for a layer on a system, apt-get install of the resolver's choice
// on the tree's dpkg status; for a bootstrap, mmdebstrap's three steps:
// dpkg --install --force-depends of the Essential set in the order apt
// would unpack it (onto the hook's stand-in usr-is-merged), apt-get
// install usr-is-merged, then apt-get install of the rest. It returns the
// calls and what dpkg knows of the system before them (the stand-in
// included).
func (l *Debs) plan(env *Env, status *dpkg.Status, pkgs []*debPackage) ([]order.Call, []order.Known, error) {
	known, err := knownPackages(env, status)
	if err != nil {
		return nil, nil, err
	}
	if l.Variant == "" {
		calls, err := order.Apt(installedOf(known), repoPackages(pkgs), order.AptOptions{})
		return calls, known, err
	}
	// mmdebstrap configures its apt with pkgCacheGen::ForceEssential ","
	// for every variant but apt.
	o := order.AptOptions{AptNotEssential: l.Variant != "apt"}
	batches := essentialFirst(pkgs)
	var essential, rest []*repo.Package
	var uim *repo.Package
	for _, p := range batches[0] {
		if p.pkg.Name == usrIsMerged {
			uim = p.pkg
			continue
		}
		essential = append(essential, p.pkg)
	}
	rest = repoPackages(batches[1])
	if uim != nil {
		standIn := &repo.Package{Name: usrIsMerged, Version: "1", Arch: "all", MultiArch: "foreign", Priority: "optional"}
		known = append(known, order.Known{Pkg: standIn, Status: "installed"})
	}
	first, err := order.Apt(installedOf(known), essential, o)
	if err != nil {
		return nil, nil, err
	}
	calls := []order.Call{{Op: order.Install, Pkgs: order.UnpackOrder(first)}}
	after := installedOf(known)
	for _, p := range essential {
		after = append(after, order.Installed{Pkg: p, Status: "installed"})
	}
	if uim != nil {
		merged, err := order.Apt(after, []*repo.Package{uim}, o)
		if err != nil {
			return nil, nil, err
		}
		calls = append(calls, merged...)
		for i := range after {
			if after[i].Pkg.Name == usrIsMerged {
				after[i].Pkg = uim
			}
		}
	}
	if len(rest) > 0 {
		second, err := order.Apt(after, rest, o)
		if err != nil {
			return nil, nil, err
		}
		calls = append(calls, second...)
	}
	return calls, known, nil
}

func repoPackages(pkgs []*debPackage) []*repo.Package {
	out := make([]*repo.Package, len(pkgs))
	for i, p := range pkgs {
		out[i] = p.pkg
	}
	return out
}

func installedOf(known []order.Known) []order.Installed {
	out := make([]order.Installed, len(known))
	for i, k := range known {
		out[i] = order.Installed{Pkg: k.Pkg, Status: k.Status}
	}
	return out
}

// knownPackages is what dpkg knows of the tree's packages: their status
// and, from the info directory, whether each has a postinst and which
// triggers it declares.
func knownPackages(env *Env, status *dpkg.Status) ([]order.Known, error) {
	var out []order.Known
	for _, para := range status.Paragraphs() {
		f := strings.Fields(para.Get("Status"))
		if len(f) != 3 || f[2] == "not-installed" || f[2] == "config-files" {
			continue
		}
		p, err := repo.FromParagraph(para)
		if err != nil {
			return nil, fmt.Errorf("dpkg status: %w", err)
		}
		k := order.Known{Pkg: p, Status: f[2], Pending: strings.Fields(para.Get("Triggers-Pending"))}
		ma := para.Get("Multi-Arch")
		k.Postinst = env.Tree.Get(dpkg.InfoFile(p.Name, p.Arch, ma, "postinst")) != nil
		if b, _, err := readTreeContent(env.Tree, dpkg.InfoFile(p.Name, p.Arch, ma, "triggers")); err == nil {
			k.Triggers = triggerDirectives(b)
		}
		out = append(out, k)
	}
	return out, nil
}

// debsRunner does what dpkg does to each package when the dpkg model says,
// with the layer's unpacking and its offline script handlers.
type debsRunner struct {
	ctx      context.Context
	l        *Debs
	env      *Env
	se       *scripts.Env
	byName   map[string]*debPackage
	next     func(p *debPackage) (decoded, error)
	unpacked []*debPackage // in unpack order
	deferred []string
}

func (r *debsRunner) Unpack(rp *repo.Package) (*order.Unpacked, error) {
	if err := r.ctx.Err(); err != nil {
		return nil, err
	}
	p := r.byName[rp.Name]
	if p == nil {
		return nil, fmt.Errorf("%s: planned, but not fetched", rp.Name)
	}
	r.env.Log.Debugf("%s: unpack %s", r.env.Label, rp.Name)
	d, err := r.next(p)
	if err != nil {
		return nil, err
	}
	if err := r.l.unpack(r.ctx, r.env, r.se, nil, p, d); err != nil {
		return nil, err
	}
	p.state = "install ok unpacked"
	r.unpacked = append(r.unpacked, p)
	_, postinst := p.control.Files["postinst"]
	return &order.Unpacked{
		Control:   p.control.Paragraph,
		Postinst:  postinst,
		Triggers:  triggerDirectives(p.control.Files["triggers"]),
		Conffiles: dpkg.ParseConffiles(p.control.Files["conffiles"]),
		Paths:     p.list,
	}, nil
}

func (r *debsRunner) Configure(rp *repo.Package) error {
	if err := r.ctx.Err(); err != nil {
		return err
	}
	p := r.byName[rp.Name]
	r.env.Log.Debugf("%s: configure %s", r.env.Label, rp.Name)
	err := r.l.configure(r.ctx, r.env, r.se, p)
	var ue *scripts.UnhandledError
	switch {
	case err == nil:
		p.state = dpkg.StateInstalled
	case errors.As(err, &ue) && r.l.DeferScripts:
		r.env.Log.Warnf("%s: %v; deferred to first boot", r.env.Label, err)
		p.state = "install ok unpacked"
		r.deferred = append(r.deferred, p.pkg.Name)
	case errors.As(err, &ue):
		return fmt.Errorf("%w (set deferScripts to run it at first boot instead)", err)
	default:
		return err
	}
	return nil
}

// Trigproc notes a trigger run: the one trigger processed offline,
// ldconfig's, is processed once at the end (processTriggers), as every
// other's work is done by the configure steps this plan runs.
func (r *debsRunner) Trigproc(rp *repo.Package, triggers []string) error {
	r.env.Log.Debugf("%s: dpkg would process triggers %s for %s here", r.env.Label, strings.Join(triggers, " "), rp.Name)
	return nil
}
