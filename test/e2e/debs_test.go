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
	"syscall"
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

// oracleInstall extracts the dpkg base as root and has Debian's own tools
// install pkgs into it: the host's apt-get resolves and downloads from the
// repository over HTTP, and dpkg runs chrooted into the tree (apt's
// DPkg::Chroot-Directory, as mmdebstrap drives it), so every maintainer
// script runs for real, with a policy-rc.d that forbids starting services.
func oracleInstall(t *testing.T, repo *harness.DebRepo, base *harness.DpkgBase, pkgs []string) string {
	t.Helper()
	harness.RequireTools(t, "apt-get", "tar", "zstd")
	if os.Geteuid() != 0 {
		t.Skip("the oracle runs dpkg in a chroot, which needs root")
	}
	work := t.TempDir()
	root := filepath.Join(work, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tarball := range []string{base.Tarball, base.DB} {
		if out, err := exec.Command("tar", "-x", "--numeric-owner", "-p", "--xattrs", "--xattrs-include=*", "-f", tarball, "-C", root).CombinedOutput(); err != nil {
			t.Fatalf("tar -x %s: %v\n%s", tarball, err, out)
		}
	}
	policy := filepath.Join(root, "usr/sbin/policy-rc.d")
	writeFiles(t, filepath.Dir(policy), map[string]string{"policy-rc.d.sh": "#!/bin/sh\nexit 101\n"})
	if err := os.Rename(policy+".sh", policy); err != nil {
		t.Fatal(err)
	}
	// apt links the archives it hands dpkg by their host paths; inside
	// the chroot, make the tree's own host path lead back to its root.
	self := filepath.Join(root, root)
	if err := os.MkdirAll(filepath.Dir(self), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", self); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "var/cache/apt/archives/partial"), 0o755); err != nil {
		t.Fatal(err)
	}
	aptDir := filepath.Join(work, "apt")
	for _, d := range []string{"lists/partial", "etc/sources.list.d", "etc/preferences.d", "etc/apt.conf.d", "log"} {
		if err := os.MkdirAll(filepath.Join(aptDir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	url := harness.ServeDebRepo(t, repo.Dir)
	src := fmt.Sprintf("deb [signed-by=%s] %s %s %s\n", repo.Keyring, url, repo.Suite, repo.Component)
	writeFiles(t, filepath.Join(aptDir, "etc"), map[string]string{"sources.list": src})
	opts := harness.AptOptions(aptDir, filepath.Join(root, "var/lib/dpkg/status"))
	opts = append(opts, "-o", "Dir::Cache="+filepath.Join(root, "var/cache/apt"), "-o", "DPkg::Chroot-Directory="+root)
	run := func(args ...string) {
		cmd := exec.Command("apt-get", append(opts, args...)...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C.UTF-8", "SOURCE_DATE_EPOCH=1700000000"}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("oracle: apt-get %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("update")
	run(append([]string{"install", "-y", "--no-install-recommends"}, pkgs...)...)
	for _, p := range []string{self, policy} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	os.RemoveAll(filepath.Join(root, strings.Split(strings.TrimPrefix(root, "/"), "/")[0]))
	return root
}

// treeState describes every path of a root: type, mode, owner, symlink
// target and content digest; mtimes are left out.
func treeState(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(hp string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		p := "/" + strings.TrimPrefix(strings.TrimPrefix(hp, root), "/")
		st := fi.Sys().(*syscall.Stat_t)
		desc := fmt.Sprintf("%s %04o %d:%d", fi.Mode().Type(), fi.Mode().Perm()|fi.Mode()&(os.ModeSetuid|os.ModeSetgid|os.ModeSticky), st.Uid, st.Gid)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, _ := os.Readlink(hp)
			desc += " -> " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(hp)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += " " + hex.EncodeToString(sum[:8])
		}
		out[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// oracleOnly are paths only the oracle's run leaves, each for a reason
// that is not a difference in the installed system:
var oracleOnly = []string{
	"/var/cache/apt/**",             // apt's download cache (Seal cleans it)
	"/var/lib/dpkg/status-old",      // dpkg's backup
	"/var/lib/dpkg/available-old",   // dpkg's backup
	"/var/lib/dpkg/lock*",           // lock files
	"/var/lib/dpkg/triggers/**",     // trigger bookkeeping of the run
	"/var/lib/dpkg/diversions*",     // empty databases dpkg creates
	"/var/lib/dpkg/statoverride*",   //
	"/var/log/**",                   // dpkg.log, alternatives.log
	"/etc/ld.so.cache",              // libc-bin's ldconfig trigger; stamp's ldconfig is a no-op
	"/var/cache/ldconfig/**",        //
	"/var/cache/debconf/**",         // debconf's cache of questions
	"/var/lib/dpkg/info/*.postinst", // compared below through the control archives
}

func matchAny(pats []string, p string) bool {
	for _, pat := range pats {
		if ok, _ := filepath.Match(strings.TrimSuffix(pat, "/**"), p); ok && !strings.HasSuffix(pat, "/**") {
			return true
		}
		if pre, ok := strings.CutSuffix(pat, "/**"); ok && strings.HasPrefix(p, pre+"/") {
			return true
		}
		if strings.HasSuffix(pat, "*") && !strings.HasSuffix(pat, "/**") && strings.HasPrefix(p, strings.TrimSuffix(pat, "*")) {
			return true
		}
	}
	return false
}

var _ = sort.Strings
var _ = io.EOF
