package layers

import (
	"errors"
	"fmt"
	"slices"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/repo"
	"github.com/stamp-dev/stamp/rootfs"
)

// variantPriorities are the priorities each bootstrap variant adds to the
// Essential set, as mmdebstrap selects them.
var variantPriorities = map[string][]string{
	"essential": nil,
	"apt":       nil,
	"minbase":   {"required"},
	"required":  {"required"},
	"important": {"required", "important"},
	"standard":  {"required", "important", "standard"},
}

// requests are the package names to resolve: Packages, and for a bootstrap
// every Essential package, those of the variant's priorities, and apt for
// the apt variant (the others have apt when the archive gives it their
// priority, as Debian's does), in the order of the index's names.
// usr-is-merged joins them when the archive has it, because the tree is
// merged-/usr from the start; it is what mmdebstrap's merged-/usr hook
// installs, and it keeps apt's choice for init-system-helpers'
// "usrmerge | usr-is-merged" off usrmerge, which would convert a system
// that needs no conversion.
func (l *Debs) requests(available []*repo.Package) ([]string, error) {
	if l.Variant == "" {
		return l.Packages, nil
	}
	prios, ok := variantPriorities[l.Variant]
	if !ok {
		return nil, fmt.Errorf("variant %q is not one of essential, apt, minbase, required, important, standard", l.Variant)
	}
	seen := map[string]bool{}
	var out []string
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	var extra []string
	for _, p := range available {
		switch {
		case p.Name == "usr-is-merged":
			// First, so that it is chosen before any package that offers
			// usrmerge as the first alternative is resolved.
			add(p.Name)
		case p.Essential || slices.Contains(prios, p.Priority):
			extra = append(extra, p.Name)
		}
	}
	slices.Sort(extra)
	for _, n := range extra {
		add(n)
	}
	if l.Variant == "apt" {
		add("apt")
	}
	for _, n := range l.Packages {
		add(n)
	}
	if len(out) == 0 {
		return nil, errors.New("the archive has no Essential package to bootstrap from")
	}
	return out, nil
}

// mergedUsrDirs are the top-level directories that are links into /usr on
// a merged-/usr system, per architecture, as debootstrap and mmdebstrap's
// merged-/usr hook make them.
var mergedUsrDirs = map[string][]string{
	"amd64":   {"bin", "sbin", "lib", "lib32", "lib64", "libx32"},
	"i386":    {"bin", "sbin", "lib", "lib64", "libx32"},
	"arm64":   {"bin", "sbin", "lib"},
	"armhf":   {"bin", "sbin", "lib"},
	"ppc64el": {"bin", "sbin", "lib", "lib64"},
	"s390x":   {"bin", "sbin", "lib", "lib32"},
	"riscv64": {"bin", "sbin", "lib"},
}

// mergedUsr lays out an empty tree as a merged-/usr system: /bin is a link
// to usr/bin and so on, before any package is unpacked, so that every
// package's /bin/sh lands in /usr/bin.
func mergedUsr(env *Env) error {
	if n := len(env.Tree.Children("/")); n > 0 {
		return fmt.Errorf("a bootstrap starts from an empty tree; this one has %d entries at /", n)
	}
	dirs, ok := mergedUsrDirs[env.Arch]
	if !ok {
		dirs = []string{"bin", "sbin", "lib"}
	}
	origin := env.Origin("", "merged-/usr")
	for _, d := range dirs {
		if _, err := env.Tree.MkdirAll("/usr/"+d, rootfs.Header{Perm: 0o755, MTime: env.Epoch, Origin: origin}); err != nil {
			return err
		}
		h := rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, MTime: env.Epoch, Target: "usr/" + d, Origin: origin}
		if _, err := env.Tree.Create("/"+d, h, nil); err != nil {
			return fmt.Errorf("/%s: %w", d, err)
		}
	}
	return nil
}

// essentialFirst splits a bootstrap's packages as mmdebstrap installs them:
// the Essential ones and what they depend on, then the rest, each in the
// resolver's order. Packages never declare a dependency on an Essential
// package, so every script of the second batch may use all of the first,
// configured: base-files' /usr/local, base-passwd's accounts, dash's /bin/sh.
func essentialFirst(pkgs []*debPackage) [][]*debPackage {
	byName := map[string]*debPackage{}
	for _, p := range pkgs {
		for _, alts := range p.pkg.Provides {
			for _, v := range alts {
				byName[v.Name] = p
			}
		}
	}
	for _, p := range pkgs {
		byName[p.pkg.Name] = p
	}
	in := map[string]bool{}
	var visit func(p *debPackage)
	visit = func(p *debPackage) {
		if in[p.pkg.Name] {
			return
		}
		in[p.pkg.Name] = true
		for _, alts := range append(append([]deb.Alternatives{}, p.pkg.PreDepends...), p.pkg.Depends...) {
			for _, a := range alts {
				if d := byName[a.Name]; d != nil {
					visit(d)
				}
			}
		}
	}
	for _, p := range pkgs {
		if p.pkg.Essential {
			visit(p)
		}
	}
	var first, rest []*debPackage
	for _, p := range pkgs {
		if in[p.pkg.Name] {
			first = append(first, p)
		} else {
			rest = append(rest, p)
		}
	}
	return [][]*debPackage{first, rest}
}
