package order

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/repo"
)

// testPkg is a package made for the dpkg tests.
type testPkg struct {
	name, depends, preDepends, provides string
	postinst                            bool
	triggers                            string   // the triggers control file
	files                               []string // paths it installs (files; their directories come along)
}

func (s testPkg) control() string {
	c := fmt.Sprintf("Package: %s\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@example.org>\n", s.name)
	if s.preDepends != "" {
		c += "Pre-Depends: " + s.preDepends + "\n"
	}
	if s.depends != "" {
		c += "Depends: " + s.depends + "\n"
	}
	if s.provides != "" {
		c += "Provides: " + s.provides + "\n"
	}
	return c + "Description: a test package\n"
}

// build makes the .deb of s in dir.
func (s testPkg) build(t *testing.T, dir string) string {
	t.Helper()
	stage := filepath.Join(dir, "stage-"+s.name)
	if err := os.MkdirAll(filepath.Join(stage, "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p, body string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), mode); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(stage, "DEBIAN", "control"), s.control(), 0o644)
	if s.postinst {
		write(filepath.Join(stage, "DEBIAN", "postinst"), "#!/bin/sh\nexit 0\n", 0o755)
	}
	if s.triggers != "" {
		write(filepath.Join(stage, "DEBIAN", "triggers"), s.triggers, 0o644)
	}
	for _, f := range s.files {
		write(filepath.Join(stage, f), s.name+"\n", 0o644)
	}
	out := filepath.Join(dir, s.name+".deb")
	if b, err := exec.Command("dpkg-deb", "--root-owner-group", "-Zgzip", "-b", stage, out).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, b)
	}
	return out
}

func (s testPkg) repo(t *testing.T) *repo.Package {
	t.Helper()
	ps, err := deb.ParseControl(strings.NewReader(s.control()))
	if err != nil {
		t.Fatal(err)
	}
	p, err := repo.FromParagraph(ps[0])
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// paths are the data.tar paths of s, directories included.
func (s testPkg) paths() []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range s.files {
		for d := filepath.Dir(f); d != "/" && !seen[d]; d = filepath.Dir(d) {
			seen[d] = true
			out = append(out, d)
		}
		out = append(out, f)
	}
	return out
}

// recorder is a Runner that notes what the model does, in dpkg.log's
// words.
type recorder struct {
	specs map[string]testPkg
	t     *testing.T
	log   []string
}

func (r *recorder) Unpack(p *repo.Package) (*Unpacked, error) {
	s := r.specs[p.Name]
	ps, err := deb.ParseControl(strings.NewReader(s.control()))
	if err != nil {
		return nil, err
	}
	var trig [][2]string
	for _, l := range strings.Split(s.triggers, "\n") {
		if f := strings.Fields(l); len(f) == 2 {
			trig = append(trig, [2]string{f[0], f[1]})
		}
	}
	return &Unpacked{Control: ps[0], Postinst: s.postinst, Triggers: trig, Paths: s.paths()}, nil
}

func (r *recorder) Configure(p *repo.Package) error {
	r.log = append(r.log, "configure "+p.Name)
	return nil
}

func (r *recorder) Trigproc(p *repo.Package, _ []string) error {
	r.log = append(r.log, "trigproc "+p.Name)
	return nil
}

// dpkgRun runs the real dpkg on a root of its own and returns the
// configure and trigproc lines it logged.
func dpkgRun(t *testing.T, root string, args ...string) []string {
	t.Helper()
	logf := filepath.Join(t.TempDir(), "dpkg.log")
	cmd := exec.Command("dpkg", append([]string{"--root=" + root, "--force-not-root", "--force-script-chrootless",
		"--log=" + logf}, args...)...)
	cmd.Env = append(os.Environ(), "DPKG_ROOT="+root)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dpkg %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	b, err := os.ReadFile(logf)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 4 && (f[2] == "configure" || f[2] == "trigproc") {
			name, _, _ := strings.Cut(f[3], ":")
			out = append(out, f[2]+" "+name)
		}
	}
	return out
}

// newRoot is an empty system for dpkg --root.
func newRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates", "var/lib/dpkg/triggers"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"var/lib/dpkg/status", "var/lib/dpkg/available"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// dpkgSpecs are packages whose configure order is not their unpack
// order: chains, a two-package and a three-package dependency cycle (one
// member of each without a postinst, where dpkg prefers to break it, one
// with postinsts throughout), a Pre-Depends, a virtual package, an or-group
// whose first choice is absent, names spread over dpkg's hash bins and two
// in the same bin.
// The trigger packages come last: tw is interested in /usr/share/tw, which
// later packages install into.
var dpkgSpecs = []testPkg{
	{name: "zeta", depends: "alpha, beta"},
	{name: "alpha", depends: "gamma", postinst: true},
	{name: "beta", depends: "alpha", postinst: true},
	{name: "gamma", postinst: true},
	{name: "cyc-a", depends: "cyc-b", postinst: true},
	{name: "cyc-b", depends: "cyc-a"},
	{name: "ring-1", depends: "ring-2", postinst: true},
	{name: "ring-2", depends: "ring-3", postinst: true},
	{name: "ring-3", depends: "ring-1", postinst: true},
	{name: "pre", preDepends: "gamma", depends: "zeta", postinst: true},
	{name: "virt-user", depends: "some-virtual"},
	{name: "virt-giver", provides: "some-virtual", depends: "libthing1", postinst: true},
	{name: "libthing1", postinst: true},
	{name: "either", depends: "absent | libthing1", postinst: true},
	{name: "omega", depends: "ring-1, cyc-a", postinst: true},
	// Two names in one hash bin, the later one met first, as a
	// dependency of a package the status lists before both.
	{name: "aaa-first", depends: "libpython3.11-stdlib"},
	{name: "libcbor0.8", postinst: true},
	{name: "libpython3.11-stdlib", postinst: true},
	{name: "tw", triggers: "interest-noawait /usr/share/tw\n", postinst: true},
	{name: "tw-user-1", files: []string{"/usr/share/tw/one"}, depends: "tw"},
	{name: "tw-user-2", files: []string{"/usr/share/tw/two"}, postinst: true},
}

// TestDpkgMatchesDpkg holds the model to dpkg 1.21 on packages made for
// it, in the three ways a plan calls dpkg: --install --force-depends of
// them all (mmdebstrap's Essential step), --unpack then --configure of a
// list, and --unpack then --configure --pending (apt's last call) after
// a trigger's interest was configured, so its activation waits in the
// queue. Each time the configure and trigger runs dpkg logs are the ones
// the model has its runner do, in the same order.
func TestDpkgMatchesDpkg(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	specs := map[string]testPkg{}
	var debs []string
	var pkgs []*repo.Package
	for _, s := range dpkgSpecs {
		specs[s.name] = s
		debs = append(debs, s.build(t, dir))
		pkgs = append(pkgs, s.repo(t))
	}
	model := func(calls ...Call) []string {
		r := &recorder{specs: specs, t: t}
		d := NewDpkg(nil, r)
		for _, c := range calls {
			if err := d.Run(c); err != nil {
				t.Fatalf("%s: %v", c, err)
			}
		}
		return r.log
	}
	check := func(name string, got, want []string) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s: the model does\n  %s\ndpkg does\n  %s", name, strings.Join(got, "\n  "), strings.Join(want, "\n  "))
		}
		t.Logf("%s: %s", name, strings.Join(want, ", "))
		if len(want) < len(dpkgSpecs) {
			t.Errorf("%s: dpkg did %d things: the comparison proves little", name, len(want))
		}
	}

	root := newRoot(t)
	want := dpkgRun(t, root, append([]string{"--install", "--force-depends"}, debs...)...)
	check("--install --force-depends", model(Call{Op: Install, Pkgs: pkgs}), want)

	root = newRoot(t)
	dpkgRun(t, root, append([]string{"--unpack", "--no-triggers", "--force-depends"}, debs...)...)
	names := make([]string, len(pkgs))
	for i, p := range pkgs {
		names[i] = p.Name
	}
	want = dpkgRun(t, root, append([]string{"--configure", "--no-triggers"}, names...)...)
	check("--configure LIST", model(Call{Op: Unpack, Pkgs: pkgs}, Call{Op: Configure, Pkgs: pkgs}), want)

	// tw configured first, so what its users install activates its
	// interest; then everything else unpacked and configured as apt's
	// last call does it.
	root = newRoot(t)
	n := len(pkgs)
	twDeb, twPkg := debs[n-3], pkgs[n-3]
	dpkgRun(t, root, "--install", twDeb)
	others := append(append([]string{}, debs[:n-3]...), debs[n-2:]...)
	otherPkgs := append(append([]*repo.Package{}, pkgs[:n-3]...), pkgs[n-2:]...)
	dpkgRun(t, root, append([]string{"--unpack", "--no-triggers", "--force-depends"}, others...)...)
	want = append([]string{"configure tw"}, dpkgRun(t, root, "--configure", "--pending")...)
	got := model(Call{Op: Install, Pkgs: []*repo.Package{twPkg}}, Call{Op: Unpack, Pkgs: otherPkgs}, Call{Op: ConfigurePending})
	check("--configure --pending", got, want)
	if !slices.Contains(want, "trigproc tw") {
		t.Errorf("dpkg processed no trigger: the test proves nothing about them\n%s", strings.Join(want, "\n"))
	}
}
