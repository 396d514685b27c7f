package resolve

import (
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/repo"
)

// index parses a Packages-style text; Filename and SHA256 are not needed.
func index(t *testing.T, text string) []*repo.Package {
	t.Helper()
	ps, err := deb.ParseControl(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	var out []*repo.Package
	for _, para := range ps {
		if para.Get("Architecture") == "" {
			para.Set("Architecture", "amd64")
		}
		p, err := repo.FromParagraph(para)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

const universe = `Package: app
Version: 1.0
Depends: libfoo (>= 2), mta | mail-transport-agent, awk
Recommends: extra

Package: libfoo
Version: 1.5

Package: libfoo
Version: 2.1
Depends: libc6

Package: libc6
Version: 2.36

Package: exim
Version: 4
Provides: mail-transport-agent

Package: postfix
Version: 3
Provides: mail-transport-agent
Priority: optional

Package: mawk
Version: 1.3
Provides: awk
Priority: required

Package: gawk
Version: 5
Provides: awk
Priority: optional

Package: extra
Version: 1

Package: netcat-a
Version: 1
Provides: netcat

Package: netcat-b
Version: 1
Provides: netcat

Package: vers
Version: 1
Depends: libgcc1 (>= 1:12)

Package: libgcc-s1
Version: 12.2
Provides: libgcc1 (= 1:12.2)

Package: unversioned-only
Version: 1
Depends: virt (>= 1)

Package: virtprov
Version: 1
Provides: virt

Package: broken
Version: 1
Depends: middle (>= 2)

Package: middle
Version: 1
Depends: libc6

Package: chain
Version: 1
Depends: mid2

Package: mid2
Version: 1
Depends: missing | alsomissing (>= 3)

Package: altbroken
Version: 1
Depends: chain | libfoo

Package: anyuser
Version: 1
Depends: perl:any, python3:any

Package: perl
Version: 5
Multi-Arch: allowed

Package: python3
Version: 3
Multi-Arch: allowed

Package: notallowed
Version: 1

Package: anybad
Version: 1
Depends: notallowed:any

Package: clash
Version: 1
Conflicts: libc6

Package: armonly
Version: 1
Architecture: arm64

Package: data
Version: 1
Architecture: all
`

func resolve(t *testing.T, installed string, o Options, req ...string) ([]string, error) {
	t.Helper()
	var inst []*repo.Package
	if installed != "" {
		inst = index(t, installed)
	}
	if o.Arch == "" {
		o.Arch = "amd64"
	}
	r, err := Resolve(index(t, universe), inst, req, o)
	if err != nil {
		return nil, err
	}
	return r.Names(), nil
}

func TestResolve(t *testing.T) {
	cases := []struct {
		name      string
		installed string
		o         Options
		req       []string
		want      string // names joined by space, or "error: substring"
	}{
		{"alternatives, versions, virtual ranked by priority", "", Options{}, []string{"app"},
			"app=1.0 exim=4 libc6=2.36 libfoo=2.1 mawk=1.3"},
		{"recommends", "", Options{Recommends: true}, []string{"app"},
			"app=1.0 exim=4 extra=1 libc6=2.36 libfoo=2.1 mawk=1.3"},
		{"installed satisfy", "Package: libc6\nVersion: 2.36\n\nPackage: postfix\nVersion: 2\nProvides: mail-transport-agent\n\nPackage: gawk\nVersion: 4\nProvides: awk\n", Options{}, []string{"app"},
			"app=1.0 libfoo=2.1"},
		{"installed too old is upgraded", "Package: libfoo\nVersion: 1.5\n", Options{}, []string{"libfoo"},
			"libc6=2.36 libfoo=2.1"},
		{"virtual request, one provider", "", Options{}, []string{"mail-transport-agent"},
			"error: provided by exim, postfix"},
		{"virtual request, several providers", "", Options{}, []string{"netcat"},
			"error: netcat: a virtual package provided by netcat-a, netcat-b"},
		{"virtual request, one installed", "Package: netcat-b\nVersion: 1\nProvides: netcat\n", Options{}, []string{"netcat"}, ""},
		{"versioned provides", "", Options{}, []string{"vers"}, "libgcc-s1=12.2 vers=1"},
		{"unversioned provides do not meet versioned deps", "", Options{}, []string{"unversioned-only"},
			"error: unversioned-only -> virt (>= 1): no candidate (no provider of virt matches)"},
		{"chain", "", Options{}, []string{"broken"},
			"error: unsatisfiable: broken -> middle (>= 2): no candidate (middle has only 1)"},
		{"deep chain", "", Options{}, []string{"chain"},
			"error: unsatisfiable: chain -> mid2 -> missing | alsomissing (>= 3): no candidate (missing is not in the repository; alsomissing is not in the repository)"},
		{"uninstallable first alternative", "", Options{}, []string{"altbroken"}, "altbroken=1 libc6=2.36 libfoo=2.1"},
		{"any", "", Options{}, []string{"anyuser"}, "anyuser=1 perl=5 python3=3"},
		{"any needs Multi-Arch allowed", "", Options{}, []string{"anybad"}, "error: notallowed:any"},
		{"conflict with installed", "Package: libc6\nVersion: 2.36\n", Options{}, []string{"clash"}, "error: conflicts with libc6"},
		{"foreign arch", "", Options{}, []string{"armonly"}, "error: armonly: no such package"},
		{"arch all", "", Options{}, []string{"data"}, "data=1"},
		{"pinned version", "", Options{}, []string{"libfoo=1.5"}, "libfoo=1.5"},
		{"unknown", "", Options{}, []string{"nope"}, "error: nope: no such package"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := resolve(t, c.installed, c.o, c.req...)
			if want, ok := strings.CutPrefix(c.want, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("err = %v, want one containing %q (got %v)", err, want, got)
				}
				if !IsUnsatisfiable(err) {
					t.Errorf("%v is not an *Error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := strings.Join(got, " "); s != c.want {
				t.Errorf("got  %s\nwant %s", s, c.want)
			}
		})
	}
}

func TestOrderDependenciesFirst(t *testing.T) {
	r, err := Resolve(index(t, universe), nil, []string{"app"}, Options{Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, p := range r.Install {
		pos[p.Name] = i
	}
	for _, e := range [][2]string{{"libc6", "libfoo"}, {"libfoo", "app"}, {"exim", "app"}, {"mawk", "app"}} {
		if pos[e[0]] > pos[e[1]] {
			t.Errorf("%s comes after %s in %v", e[0], e[1], r.Names())
		}
	}
}
