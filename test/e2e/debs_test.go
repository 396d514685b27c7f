package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/test/harness"
)

// debsRecipe installs packages from the test repository onto the dpkg base
// (the base tarball, then its dpkg database as a second tarball).
func debsRecipe(repoURL string, packages []string, extra string) string {
	return fmt.Sprintf(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: e2e-debs
arch: amd64
epoch: 1700000000
base:
  tarball: ./base.tar.zst
customize:
  layers:
    - tarball: {path: ./dpkgdb.tar}
provision:
  layers:
    - debs:
        repo: %q
        suite: stamp
        components: [main]
        keyring: ./keyring.gpg
        packages: [%s]
%s
outputs:
  - {format: tar, name: rootfs}
`, repoURL, strings.Join(packages, ", "), extra)
}

// debsDir lays out a recipe directory uid 65534 can read, with the dpkg
// base and the repository's keyring.
func debsDir(t *testing.T, repo *harness.DebRepo, base *harness.DpkgBase, recipe string) string {
	t.Helper()
	dir := harness.TempDirFor65534(t)
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe})
	for src, dst := range map[string]string{base.Tarball: "base.tar.zst", base.DB: "dpkgdb.tar", repo.Keyring: "keyring.gpg"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// extractAsRoot unpacks a tar output into a fresh directory with real
// owners, modes and devices, as the image would be.
func extractAsRoot(t *testing.T, tarPath string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("tar", "-x", "--numeric-owner", "--same-permissions", "--xattrs", "--xattrs-include=*", "-f", tarPath, "-C", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("tar -x: %v\n%s", err, out)
	}
	return dir
}

// readDpkgStatus reads the status file of a root and returns package -> status
// paragraph.
func readDpkgStatus(t *testing.T, root string) map[string]*deb.Paragraph {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "var/lib/dpkg/status"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ps, err := deb.ParseControl(f)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*deb.Paragraph{}
	for _, p := range ps {
		out[p.Get("Package")] = p
	}
	return out
}

func TestDebsUnprivilegedBuild(t *testing.T) {
	harness.RequireSetpriv(t)
	harness.RequireTools(t, "dpkg", "tar")
	repo := harness.DebRepoFor(t)
	base := harness.DpkgBaseFor(t)
	dir := debsDir(t, repo, base, debsRecipe(repo.FileURL(), harness.NodePackages, ""))
	out := filepath.Join(dir, "out")
	r := stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir)
	r.mustSucceed(t)
	root := extractAsRoot(t, filepath.Join(out, "e2e-debs-rootfs.tar"))

	st := readDpkgStatus(t, root)
	for _, p := range harness.NodePackages {
		if got := st[p].Get("Status"); got != "install ok installed" {
			t.Errorf("%s: Status %q, want install ok installed", p, got)
		}
	}
	verify := exec.Command("dpkg", "--root", root, "--verify")
	vout, err := verify.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(vout)) > 0 {
		t.Errorf("dpkg --verify: %v\n%s", err, vout)
	}
	// Files match the .debs byte for byte.
	for _, p := range harness.NodePackages {
		checkDebFiles(t, root, filepath.Join(repo.Dir, repo.Debs[p]))
	}
	if target, err := os.Readlink(filepath.Join(root, "usr/sbin/iptables")); err != nil || target != "/etc/alternatives/iptables" {
		t.Errorf("/usr/sbin/iptables -> %q (%v)", target, err)
	}
	if target, err := os.Readlink(filepath.Join(root, "etc/alternatives/iptables")); err != nil || target != "/usr/sbin/iptables-nft" {
		t.Errorf("/etc/alternatives/iptables -> %q (%v)", target, err)
	}
}

// checkDebFiles compares every regular file and symlink of a .deb with the
// root, following the root's directory symlinks (merged /usr).
func checkDebFiles(t *testing.T, root, debPath string) {
	t.Helper()
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", debPath)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ents, err := harness.ReadTarStream(stdout)
	cmd.Wait()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		p := filepath.Join(root, e.Name)
		switch e.Type {
		case '0':
			b, err := os.ReadFile(p)
			if err != nil {
				t.Errorf("%s: %s: %v", filepath.Base(debPath), e.Name, err)
				continue
			}
			sum := sha256.Sum256(b)
			if hex.EncodeToString(sum[:]) != e.SHA256 {
				t.Errorf("%s: %s differs from the .deb", filepath.Base(debPath), e.Name)
			}
			n++
		case '2':
			if got, err := os.Readlink(p); err != nil || got != e.Linkname {
				t.Errorf("%s: %s -> %q (%v), the .deb says %q", filepath.Base(debPath), e.Name, got, err, e.Linkname)
			}
		}
	}
	if n == 0 {
		t.Errorf("%s: no regular files compared", filepath.Base(debPath))
	}
}

var _ = sort.Strings
var _ = io.EOF
