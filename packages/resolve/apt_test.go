package resolve

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/packages/dpkg"
	"github.com/stamp-dev/stamp/packages/repo"
	"github.com/stamp-dev/stamp/test/harness"
)

// TestMatchesApt is the judge: for each request, on the dpkg base and on an
// empty system, the set Resolve picks equals what apt-get install
// --simulate --no-install-recommends picks from the same repository, and a
// request apt refuses is refused.
func TestMatchesApt(t *testing.T) {
	r := harness.DebRepoFor(t)
	base := harness.DpkgBaseFor(t)
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
	available := repo.Merge(idx)

	empty := filepath.Join(t.TempDir(), "status")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	requests := [][]string{
		harness.NodePackages,
		{"logrotate"},       // cron | anacron | cron-daemon | systemd-sysv, without cron
		{"ca-certificates"}, // debconf (>= 0.5) | debconf-2.0
		{"debconf-2.0"},     // a virtual package with one provider
		{"kmod", "socat"},
		{"netcat"}, // two providers: apt refuses
		{"netcat-openbsd", "netcat-traditional", "jq"},
	}
	for _, st := range []struct{ name, path string }{{"dpkg base", base.Status}, {"empty", empty}} {
		f, err := os.Open(st.path)
		if err != nil {
			t.Fatal(err)
		}
		status, err := dpkg.ReadStatus(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		installed, err := status.Installed("amd64")
		if err != nil {
			t.Fatal(err)
		}
		for _, req := range requests {
			t.Run(st.name+"/"+strings.Join(req, "+"), func(t *testing.T) {
				want, aptErr := harness.AptSimulate(t, r, r.FileURL(), st.path, req...)
				res, err := Resolve(available, installed, req, Options{Arch: "amd64"})
				if aptErr != nil {
					if err == nil {
						t.Fatalf("apt refuses but Resolve picks %v\napt: %v", res.Names(), aptErr)
					}
					t.Logf("both refuse: %v", err)
					return
				}
				if err != nil {
					t.Fatalf("Resolve: %v\napt picks %v", err, want)
				}
				got := res.Names()
				if strings.Join(got, " ") != strings.Join(want, " ") {
					t.Errorf("Resolve picks %d packages:\n%s\napt picks %d:\n%s", len(got), strings.Join(got, " "), len(want), strings.Join(want, " "))
				}
				if len(got) == 0 && st.name == "empty" {
					t.Error("nothing to install on an empty system: the test proves nothing")
				}
			})
		}
	}
}
