package layers

import (
	"slices"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/repo"
	"github.com/stamp-dev/stamp/packages/resolve"
)

func TestBootstrapRequests(t *testing.T) {
	avail := []*repo.Package{
		{Name: "libc6", Priority: "required"},
		{Name: "dash", Priority: "required", Essential: true},
		{Name: "tzdata", Priority: "required"},
		{Name: "apt", Priority: "important"},
		{Name: "less", Priority: "important"},
		{Name: "file", Priority: "standard"},
		{Name: "usr-is-merged", Priority: "optional"},
		{Name: "jq", Priority: "optional"},
	}
	for _, c := range []struct{ variant, want string }{
		{"essential", "usr-is-merged dash"},
		{"apt", "usr-is-merged dash apt"},
		{"minbase", "usr-is-merged dash libc6 tzdata"},
		{"required", "usr-is-merged dash libc6 tzdata"},
		{"important", "usr-is-merged apt dash less libc6 tzdata"},
		{"standard", "usr-is-merged apt dash file less libc6 tzdata"},
	} {
		got, err := (&Debs{Variant: c.variant, Packages: []string{"jq", "dash"}}).requests(avail)
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.Join(got, " "); s != c.want+" jq" {
			t.Errorf("%s: %s, want %s jq", c.variant, s, c.want)
		}
	}
	if _, err := (&Debs{Variant: "huge"}).requests(avail); err == nil {
		t.Error("an unknown variant was accepted")
	}
	if got, _ := (&Debs{Packages: []string{"jq"}}).requests(avail); !slices.Equal(got, []string{"jq"}) {
		t.Errorf("without a variant: %v", got)
	}
}

// TestEssentialFirst: the Essential packages and what they need, through
// Provides too, come first, each batch in the resolver's order.
func TestEssentialFirst(t *testing.T) {
	dep := func(names ...string) []deb.Alternatives {
		var out []deb.Alternatives
		for _, n := range names {
			out = append(out, deb.Alternatives{{Name: n}})
		}
		return out
	}
	pkgs := []*debPackage{
		{pkg: &repo.Package{Name: "libc6"}},
		{pkg: &repo.Package{Name: "mawk", Provides: dep("awk")}},
		{pkg: &repo.Package{Name: "ca-certificates", Depends: dep("openssl")}},
		{pkg: &repo.Package{Name: "openssl", Depends: dep("libc6")}},
		{pkg: &repo.Package{Name: "base-files", Essential: true, PreDepends: dep("awk")}},
		{pkg: &repo.Package{Name: "dash", Essential: true, Depends: dep("libc6")}},
	}
	b := essentialFirst(pkgs)
	names := func(ps []*debPackage) string {
		var s []string
		for _, p := range ps {
			s = append(s, p.pkg.Name)
		}
		return strings.Join(s, " ")
	}
	if got := names(b[0]) + " | " + names(b[1]); got != "libc6 mawk base-files dash | ca-certificates openssl" {
		t.Errorf("batches: %s", got)
	}
}

// TestBootstrapPrefersUsrIsMerged: Debian's archive has usrmerge, which
// init-system-helpers (Essential) names before usr-is-merged; a bootstrap
// must still take usr-is-merged, as mmdebstrap's merged-/usr hook does, and
// not usrmerge and the Perl it needs.
func TestBootstrapPrefersUsrIsMerged(t *testing.T) {
	var avail []*repo.Package
	paras, err := deb.ParseControl(strings.NewReader(`Package: dash
Version: 1
Architecture: amd64
Essential: yes
Priority: required

Package: init-system-helpers
Version: 1
Architecture: all
Essential: yes
Priority: required
Depends: usrmerge | usr-is-merged

Package: perl
Version: 1
Architecture: amd64
Priority: standard

Package: usrmerge
Version: 1
Architecture: all
Priority: optional
Depends: perl

Package: usr-is-merged
Version: 1
Architecture: all
Priority: optional
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, para := range paras {
		p, err := repo.FromParagraph(para)
		if err != nil {
			t.Fatal(err)
		}
		avail = append(avail, p)
	}
	for _, variant := range []string{"essential", "minbase"} {
		reqs, err := (&Debs{Variant: variant}).requests(avail)
		if err != nil {
			t.Fatal(err)
		}
		res, err := resolve.Resolve(avail, nil, reqs, resolve.Options{Arch: "amd64"})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(res.Names(), " "); got != "dash=1 init-system-helpers=1 usr-is-merged=1" {
			t.Errorf("%s: installs %s", variant, got)
		}
	}
}
