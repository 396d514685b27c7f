package order

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/packages/dpkg"
	"github.com/stamp-dev/stamp/packages/repo"
	"github.com/stamp-dev/stamp/packages/resolve"
	"github.com/stamp-dev/stamp/test/harness"
)

// loadRepo reads a test repository's index.
func loadRepo(t *testing.T, r *harness.DebRepo) []*repo.Package {
	t.Helper()
	l := logrus.New()
	l.SetOutput(os.Stderr)
	l.SetLevel(logrus.WarnLevel)
	c, err := cache.Open(t.TempDir(), cache.Options{Log: l})
	if err != nil {
		t.Fatal(err)
	}
	kb, err := os.ReadFile(r.Keyring)
	if err != nil {
		t.Fatal(err)
	}
	kr, err := repo.ReadKeyring(kb)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := repo.Load(context.Background(), c, repo.Source{URL: r.FileURL(), Suite: r.Suite,
		Components: []string{r.Component}, Arch: r.Arch, Keyring: kr}, "")
	if err != nil {
		t.Fatal(err)
	}
	return repo.Merge(idx)
}

// readStatus reads a dpkg status file into the planner's input.
func readStatus(t *testing.T, path string) []Installed {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := dpkg.ReadStatus(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []Installed
	for _, para := range st.Paragraphs() {
		p, err := repo.FromParagraph(para)
		if err != nil {
			t.Fatal(err)
		}
		f := strings.Fields(para.Get("Status"))
		out = append(out, Installed{Pkg: p, Status: f[len(f)-1]})
	}
	return out
}

// writeStatus writes a status file listing pkgs as installed.
func writeStatus(t *testing.T, pkgs []*repo.Package) string {
	t.Helper()
	st := dpkg.NewStatus()
	for _, p := range pkgs {
		st.Put(dpkg.StatusParagraph(p.Paragraph, dpkg.StateInstalled, nil))
	}
	path := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(path, st.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// planNames is a plan as AptDpkgCalls reports apt's.
func planNames(calls []Call) [][]string {
	var out [][]string
	for _, c := range calls {
		call := []string{c.Op.String()}
		for _, p := range c.Pkgs {
			call = append(call, p.Name)
		}
		out = append(out, call)
	}
	return out
}

// TestAptMatchesApt is the judge of the planner: for an install onto an
// empty system (the Essential set, as mmdebstrap has apt order it), onto
// that set installed (minbase's required packages with systemd-sysv, as
// mmdebstrap's second stage), onto the node's base (the node's packages),
// and onto the Essential set with apt configured as mmdebstrap configures
// it (the node's bootstrap), the dpkg calls Apt plans are the ones the
// host's apt-get prints under Debug::pkgDpkgPm, package for package.
func TestAptMatchesApt(t *testing.T) {
	minbase := harness.MinbaseNodeRepoFor(t)
	available := loadRepo(t, minbase)
	var essential, required []string
	for _, p := range available {
		switch {
		case p.Essential:
			essential = append(essential, p.Name)
		case p.Priority == "required" || p.Name == "apt":
			required = append(required, p.Name)
		}
	}
	sort.Strings(essential)
	sort.Strings(required)
	resEssential, err := resolve.Resolve(available, nil, essential, resolve.Options{Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	afterEssential := writeStatus(t, resEssential.Install)
	node := harness.NodeRepoFor(t)
	var nodePkgs []string
	for _, p := range harness.NodeDebPackages {
		if p != harness.KernelPackage {
			nodePkgs = append(nodePkgs, p)
		}
	}
	mmdebstrap := []string{"-o", "pkgCacheGen::ForceEssential=,"}
	cases := []struct {
		name      string
		repo      *harness.DebRepo
		available []*repo.Package
		status    string
		request   []string
		aptOpts   []string
	}{
		{"essential onto nothing", minbase, available, "", essential, nil},
		{"minbase and systemd-sysv onto the Essential set", minbase, available, afterEssential, append(slices.Clone(required), "systemd-sysv"), nil},
		{"the node's packages onto its base", node, loadRepo(t, node), harness.NodeBaseFor(t).Status, harness.NodeDebPackages, nil},
		// mmdebstrap's second step for the node: its apt does not take
		// itself for Essential.
		{"the node's packages onto the Essential set as mmdebstrap's apt", minbase, available, afterEssential,
			append(slices.DeleteFunc(slices.Clone(required), func(n string) bool { return n == "apt" }), nodePkgs...), mmdebstrap},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var installed []Installed
			var inst []*repo.Package
			if c.status != "" {
				installed = readStatus(t, c.status)
				for _, in := range installed {
					inst = append(inst, in.Pkg)
				}
			}
			res, err := resolve.Resolve(c.available, inst, c.request, resolve.Options{Arch: "amd64"})
			if err != nil {
				t.Fatal(err)
			}
			calls, err := Apt(installed, res.Install, AptOptions{AptNotEssential: c.aptOpts != nil})
			if err != nil {
				t.Fatal(err)
			}
			got := planNames(calls)
			want := harness.AptDpkgCalls(t, c.repo, c.status, c.aptOpts, c.request...)
			if !slices.EqualFunc(got, want, slices.Equal) {
				t.Errorf("%d packages: Apt plans\n%s\napt-get plans\n%s", len(res.Install), showPlan(got), showPlan(want))
			}
			t.Logf("%d packages in %d dpkg calls; apt-get agrees:\n%s", len(res.Install), len(got), showPlan(got))
			if len(got) < 3 {
				t.Errorf("a plan of %d calls proves little", len(got))
			}
		})
	}
}

func showPlan(p [][]string) string {
	var b strings.Builder
	for _, c := range p {
		b.WriteString("  " + strings.Join(c, " ") + "\n")
	}
	return b.String()
}
