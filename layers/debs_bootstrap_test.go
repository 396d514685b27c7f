package layers

import (
	"slices"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/repo"
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
		{"essential", "dash usr-is-merged"},
		{"apt", "dash usr-is-merged apt"},
		{"minbase", "dash libc6 tzdata usr-is-merged"},
		{"required", "dash libc6 tzdata usr-is-merged"},
		{"important", "apt dash less libc6 tzdata usr-is-merged"},
		{"standard", "apt dash file less libc6 tzdata usr-is-merged"},
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
