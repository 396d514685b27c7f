package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestDebRepo(t *testing.T) {
	r := DebRepoFor(t)
	for _, p := range append(append([]string{}, NodePackages...), "anacron", "mawk", "netcat-openbsd", "netcat-traditional", "debconf", "dpkg") {
		if r.Debs[p] == "" {
			t.Errorf("repository has no %s", p)
		}
	}
	if r.Debs["cron"] != "" {
		t.Error("repository has cron; the alternatives test needs it missing")
	}
	// gpgv is what apt itself verifies with.
	out, err := exec.Command("gpgv", "--keyring", r.Keyring, filepath.Join(r.Dir, "dists/stamp/InRelease")).CombinedOutput()
	if err != nil {
		t.Fatalf("gpgv InRelease: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(r.Dir, "dists/stamp/main/binary-amd64/Packages"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "\nSHA256: "); n != len(r.Debs) {
		t.Errorf("Packages lists %d SHA256 fields for %d debs", n, len(r.Debs))
	}
	url := ServeDebRepo(t, r.Dir)
	base := DpkgBaseFor(t)
	got, err := AptSimulate(t, r, url, base.Status, "socat")
	if err != nil {
		t.Fatal(err)
	}
	joined := " " + strings.Join(got, " ")
	if !strings.Contains(joined, " socat=") || strings.Contains(joined, " libc6=") {
		t.Errorf("apt would install %v for socat on the dpkg base (want socat, and not libc6, which the base has)", got)
	}
}
