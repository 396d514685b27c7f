package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

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
func debsDir(t testing.TB, repo *harness.DebRepo, base *harness.DpkgBase, recipe string) string {
	t.Helper()
	dir := harness.TempDirFor65534(t)
	if err := os.WriteFile(filepath.Join(dir, "recipe.yaml"), []byte(recipe), 0o644); err != nil {
		t.Fatal(err)
	}
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
func extractAsRoot(t testing.TB, tarPath string) string {
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

// TestDebsMatchDebianTools builds the node packages onto the dpkg base as
// uid 65534 (offline script handlers) and has apt-get and dpkg install the
// same packages from the same repository into the same base as root; the
// two trees must be the same, path for path: type, mode, owner, symlink
// target and content, the dpkg database, alternatives, enabled units,
// accounts and the files scripts write included.
func TestDebsMatchDebianTools(t *testing.T) {
	harness.RequireSetpriv(t)
	harness.RequireTools(t, "dpkg", "tar")
	repo := harness.DebRepoFor(t)
	base := harness.DpkgBaseFor(t)
	// kmod, logrotate and anacron bring an /etc/modules written by a
	// postinst, timers, and an init script whose rc links update-rc.d
	// makes.
	pkgs := append(append([]string{}, harness.NodePackages...), "kmod", "logrotate", "anacron", "netcat-openbsd")
	dir := debsDir(t, repo, base, debsRecipe(repo.FileURL(), pkgs, ""))
	out := filepath.Join(dir, "out")
	r := stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir)
	r.mustSucceed(t)
	root := extractAsRoot(t, filepath.Join(out, "e2e-debs-rootfs.tar"))

	st := readDpkgStatus(t, root)
	for _, p := range pkgs {
		if got := st[p].Get("Status"); got != "install ok installed" {
			t.Errorf("%s: Status %q, want install ok installed", p, got)
		}
	}
	verify := exec.Command("dpkg", "--root", root, "--verify")
	vout, err := verify.CombinedOutput()
	if err != nil || len(bytes.TrimSpace(vout)) > 0 {
		t.Errorf("dpkg --verify: %v\n%s", err, vout)
	}
	for _, p := range harness.NodePackages {
		checkDebFiles(t, root, filepath.Join(repo.Dir, repo.Debs[p]))
	}
	if target, err := os.Readlink(filepath.Join(root, "usr/sbin/iptables")); err != nil || target != "/etc/alternatives/iptables" {
		t.Errorf("/usr/sbin/iptables -> %q (%v)", target, err)
	}
	if target, err := os.Readlink(filepath.Join(root, "etc/alternatives/iptables")); err != nil || target != "/usr/sbin/iptables-nft" {
		t.Errorf("/etc/alternatives/iptables -> %q (%v)", target, err)
	}

	oracle := oracleInstall(t, repo, base, pkgs)
	theirs := treeState(t, oracle)
	if diffs := diffOracle(t, root, oracle, theirs, oracleOnly); len(diffs) > 0 {
		t.Errorf("%d differences from apt-get/dpkg:\n%s", len(diffs), strings.Join(diffs, "\n"))
	}
	for _, p := range []string{"/etc/systemd/system/multi-user.target.wants/containerd.service", "/etc/alternatives/ebtables",
		"/etc/hosts.allow", "/etc/modules", "/etc/rc2.d/S01anacron", "/etc/systemd/system/timers.target.wants/logrotate.timer", "/etc/ld.so.cache"} {
		if _, ok := theirs[p]; !ok {
			t.Errorf("the oracle has no %s: the comparison would prove little", p)
		}
	}
}

// TestDebsRefusals: a .deb whose hash does not match the index, an
// InRelease whose signature is broken, and a dependency nothing satisfies
// each fail the build with a message that names the problem, and leave no
// output behind.
func TestDebsRefusals(t *testing.T) {
	harness.RequireSetpriv(t)
	shared := harness.DebRepoFor(t)
	base := harness.DpkgBaseFor(t)
	cases := []struct {
		name      string
		breakRepo func(r *harness.DebRepo)
		pkgs      []string
		code      int
		wants     []string
	}{
		{"deb hash", func(r *harness.DebRepo) {
			p := filepath.Join(r.Dir, r.Debs["socat"])
			b, _ := os.ReadFile(p)
			b[len(b)-100] ^= 0xff
			os.WriteFile(p, b, 0o644)
		}, []string{"socat"}, 1, []string{"socat 1.7.4.4-2", "socat_1.7.4.4-2_amd64.deb", "sha256:"}},
		{"signature", func(r *harness.DebRepo) {
			p := filepath.Join(r.Dir, "dists/stamp/InRelease")
			b, _ := os.ReadFile(p)
			os.WriteFile(p, bytes.Replace(b, []byte("Architectures: amd64"), []byte("Architectures: arm64"), 1), 0o644)
		}, []string{"socat"}, 1, []string{"InRelease", "signature check failed"}},
		{"unsatisfiable", nil, []string{"socat", "no-such-package"}, 1, []string{"unsatisfiable: no-such-package: no such package in the repository"}},
		{"virtual", nil, []string{"netcat"}, 1, []string{"netcat: a virtual package provided by netcat-openbsd, netcat-traditional"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := shared
			if c.breakRepo != nil {
				r = harness.CopyDebRepo(t, shared)
				c.breakRepo(r)
			}
			dir := debsDir(t, r, base, debsRecipe(r.FileURL(), c.pkgs, ""))
			out := filepath.Join(dir, "out")
			res := stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir)
			res.mustFail(t, c.code, c.wants...)
			if files := finalFiles(t, out); len(files) > 0 {
				t.Errorf("a failed build left %v", files)
			}
			t.Logf("%s", strings.TrimSpace(res.stderr[strings.LastIndex(strings.TrimSpace(res.stderr), "\n")+1:]))
		})
	}
	// A dependency chain that breaks deep down is named link by link.
	t.Run("chain", func(t *testing.T) {
		r := harness.CopyDebRepo(t, shared)
		// Drop libonig5 from the index: jq -> libjq1 -> libonig5 breaks.
		for _, name := range []string{"Packages", "Packages.gz", "Packages.xz"} {
			os.Remove(filepath.Join(r.Dir, "dists/stamp/main/binary-amd64", name))
		}
		idx, err := os.ReadFile(filepath.Join(shared.Dir, "dists/stamp/main/binary-amd64/Packages"))
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, para := range strings.Split(string(idx), "\n\n") {
			if !strings.HasPrefix(para, "Package: libonig5\n") {
				kept = append(kept, para)
			}
		}
		os.WriteFile(filepath.Join(r.Dir, "dists/stamp/main/binary-amd64/Packages"), []byte(strings.Join(kept, "\n\n")), 0o644)
		// The repository is then trusted without a Release signature.
		rel := "Suite: stamp\nCodename: stamp\nArchitectures: amd64\nComponents: main\nSHA256:\n"
		b, _ := os.ReadFile(filepath.Join(r.Dir, "dists/stamp/main/binary-amd64/Packages"))
		sum := sha256.Sum256(b)
		rel += fmt.Sprintf(" %s %d main/binary-amd64/Packages\n", hex.EncodeToString(sum[:]), len(b))
		os.WriteFile(filepath.Join(r.Dir, "dists/stamp/Release"), []byte(rel), 0o644)
		recipe := strings.Replace(debsRecipe(r.FileURL(), []string{"jq"}, ""), "keyring: ./keyring.gpg", "trusted: true", 1)
		dir := debsDir(t, r, base, recipe)
		out := filepath.Join(dir, "out")
		res := stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir)
		res.mustFail(t, 1, "unsatisfiable: jq -> libjq1 (= 1.6-2.1+deb12u3) -> libonig5 (>= 6.8.1): no candidate (libonig5 is not in the repository)")
		if files := finalFiles(t, out); len(files) > 0 {
			t.Errorf("a failed build left %v", files)
		}
	})
}

// TestDebsReproducible builds the same recipe, from the repository over
// HTTP, as root and as uid 65534 with different environments and caches:
// the outputs are byte-identical.
func TestDebsReproducible(t *testing.T) {
	harness.RequireSetpriv(t)
	repo := harness.DebRepoFor(t)
	base := harness.DpkgBaseFor(t)
	url := harness.ServeDebRepo(t, repo.Dir)
	pkgs := []string{"iptables", "socat", "containerd"}
	exclude := "        exclude: [\"/usr/share/doc/**\", \"/usr/share/man/**\", \"/usr/share/locale/**\"]"
	dirRoot := debsDir(t, repo, base, debsRecipe(url, pkgs, exclude))
	dirNobody := debsDir(t, repo, base, debsRecipe(url, pkgs, exclude))
	outRoot, outNobody := filepath.Join(dirRoot, "out"), filepath.Join(dirNobody, "out")
	stamp(t, dirRoot, []string{"TZ=UTC", "LANG=C.UTF-8"}, "build", "recipe.yaml", "-o", outRoot,
		"--cache-dir", filepath.Join(dirRoot, "cache"), "--work-dir", dirRoot).mustSucceed(t)
	stampAs65534(t, dirNobody, []string{"TZ=Asia/Kathmandu", "LANG=de_DE.UTF-8"}, "build", "recipe.yaml", "-o", outNobody,
		"--cache-dir", filepath.Join(dirNobody, "cache"), "--work-dir", dirNobody).mustSucceed(t)
	a, err := os.ReadFile(filepath.Join(outRoot, "e2e-debs-rootfs.tar"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(outNobody, "e2e-debs-rootfs.tar"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		ea, eb := harness.TarIndex(harness.ReadTar(t, filepath.Join(outRoot, "e2e-debs-rootfs.tar"))), harness.TarIndex(harness.ReadTar(t, filepath.Join(outNobody, "e2e-debs-rootfs.tar")))
		n := 0
		for p, x := range ea {
			if y, ok := eb[p]; !ok || x.String() != y.String() {
				t.Errorf("%s: root %v, nobody %v", p, x, eb[p])
				if n++; n > 20 {
					break
				}
			}
		}
		t.Fatalf("outputs differ (%d vs %d bytes)", len(a), len(b))
	}
	// Excluded paths are gone and the database says so: dpkg --verify
	// stays clean.
	root := extractAsRoot(t, filepath.Join(outRoot, "e2e-debs-rootfs.tar"))
	if _, err := os.Stat(filepath.Join(root, "usr/share/doc/socat")); err == nil {
		t.Error("/usr/share/doc/socat was not excluded")
	}
	if out, err := exec.Command("dpkg", "--root", root, "--verify").CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("dpkg --verify after exclude: %v\n%s", err, out)
	}
	list, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/info/socat.list"))
	if err != nil || strings.Contains(string(list), "/usr/share/man/") || !strings.Contains(string(list), "/usr/bin/socat\n") {
		t.Errorf("socat.list after exclude: %v\n%s", err, list)
	}
}

// TestDebsLock: stamp lock pins the suite's InRelease and every .deb
// (kind deb, URL and digest) of the packages; a build then uses the lock,
// and a repository whose InRelease changed since is refused.
func TestDebsLock(t *testing.T) {
	harness.RequireSetpriv(t)
	shared := harness.DebRepoFor(t)
	base := harness.DpkgBaseFor(t)
	repo := harness.CopyDebRepo(t, shared)
	dir := debsDir(t, repo, base, debsRecipe(repo.FileURL(), []string{"socat", "jq"}, ""))
	cacheDir := filepath.Join(dir, "cache")
	stampAs65534(t, dir, nil, "lock", "recipe.yaml", "--cache-dir", cacheDir).mustSucceed(t)
	lockText, err := os.ReadFile(filepath.Join(dir, "stamp.lock"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"socat", "jq", "libjq1", "libonig5"} {
		b, err := os.ReadFile(filepath.Join(repo.Dir, repo.Debs[p]))
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		want := fmt.Sprintf("digest: sha256:%s", hex.EncodeToString(sum[:]))
		if !strings.Contains(string(lockText), want) || !strings.Contains(string(lockText), filepath.Base(repo.Debs[p])) {
			t.Errorf("stamp.lock does not pin %s (%s):\n%s", p, want, lockText)
		}
	}
	if !strings.Contains(string(lockText), "dists/stamp/InRelease") {
		t.Errorf("stamp.lock does not pin the InRelease:\n%s", lockText)
	}
	stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out"), "--cache-dir", cacheDir, "--work-dir", dir).mustSucceed(t)
	// A lock whose .deb pin disagrees with the pinned index is refused,
	// naming the package, before anything is installed.
	socat := filepath.Base(repo.Debs["socat"])
	var edited []string
	lines := strings.Split(string(lockText), "\n")
	for i, l := range lines {
		if strings.Contains(l, socat) {
			for j := i; j < len(lines) && j < i+4; j++ {
				if strings.Contains(lines[j], "digest: sha256:") {
					lines[j] = lines[j][:strings.Index(lines[j], "sha256:")] + "sha256:" + strings.Repeat("0", 64)
					edited = append(edited, lines[j])
					break
				}
			}
		}
	}
	if len(edited) != 1 {
		t.Fatalf("could not find socat's digest in stamp.lock:\n%s", lockText)
	}
	if err := os.WriteFile(filepath.Join(dir, "stamp.lock"), []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out3"), "--cache-dir", cacheDir, "--work-dir", dir).
		mustFail(t, 1, "socat", "stamp.lock pins")
	if err := os.WriteFile(filepath.Join(dir, "stamp.lock"), lockText, 0o644); err != nil {
		t.Fatal(err)
	}
	// A re-signed repository with other content no longer matches.
	p := filepath.Join(repo.Dir, "dists/stamp/InRelease")
	b, _ := os.ReadFile(p)
	os.WriteFile(p, append(b, '\n'), 0o644)
	res := stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out2"), "--cache-dir", cacheDir, "--work-dir", dir)
	res.mustFail(t, 1, "InRelease", "stamp.lock")
}

// BenchmarkDebsInstall installs ~60 packages onto the dpkg base with stamp
// (as root, whole build: base, packages, seal, tar output) and with
// apt-get + dpkg in a chroot of the same base (tar -x of the base, then
// apt-get install), and reports both times and their ratio.
func BenchmarkDebsInstall(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the oracle needs root")
	}
	repo := harness.DebRepoFor(b)
	base := harness.DpkgBaseFor(b)
	pkgs := append(append([]string{}, harness.NodePackages...), "kmod", "logrotate", "anacron", "netcat-openbsd", "openssl")
	url := harness.ServeDebRepo(b, repo.Dir)
	var stampTotal, oracleTotal time.Duration
	for i := 0; i < b.N; i++ {
		dir := debsDir(b, repo, base, debsRecipe(url, pkgs, ""))
		// Warm the cache so both sides read the .debs from local disk.
		warm := exec.Command(stampBin, "build", "recipe.yaml", "-o", filepath.Join(dir, "warm"), "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir, "--log-level", "error", "--no-cache")
		warm.Dir = dir
		if out, err := warm.CombinedOutput(); err != nil {
			b.Fatalf("warm build: %v\n%s", err, out)
		}
		os.RemoveAll(filepath.Join(dir, "warm"))
		exec.Command("sync").Run()
		start := time.Now()
		cmd := exec.Command(stampBin, "build", "recipe.yaml", "-o", filepath.Join(dir, "out"), "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir, "--log-level", "error", "--no-cache")
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("stamp build: %v\n%s", err, out)
		}
		stampTotal += time.Since(start)
		exec.Command("sync").Run()
		start = time.Now()
		root := oracleInstall(b, repo, base, pkgs)
		oracleTotal += time.Since(start)
		if i == 0 {
			st, _ := os.ReadFile(filepath.Join(root, "var/lib/dpkg/status"))
			b.Logf("%d packages installed by the oracle over %d in the base", strings.Count(string(st), "\nStatus: install ok installed")+1-len(base.Packages), len(base.Packages))
		}
		os.RemoveAll(dir)
	}
	b.ReportMetric(stampTotal.Seconds()/float64(b.N), "stamp-s/op")
	b.ReportMetric(oracleTotal.Seconds()/float64(b.N), "apt-dpkg-s/op")
	b.ReportMetric(stampTotal.Seconds()/oracleTotal.Seconds(), "ratio")
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

// diffOracle lists how the tree at root differs from the oracle's tree
// (theirs is its treeState), leaving out the skip patterns and what Seal
// cleans.
func diffOracle(t *testing.T, root, oracle string, theirs map[string]string, skip []string) []string {
	t.Helper()
	ours := treeState(t, root)
	cleanup := []string{"/usr/lib/stamp", "/usr/lib/stamp/**", "/etc/machine-id", "/var/lib/dbus/machine-id", "/etc/ssh/ssh_host_*", "/var/lib/systemd/random-seed",
		"/var/lib/apt/lists/**", "/var/cache/apt/**", "/tmp/**", "/var/lib/dpkg/*-old", "/var/log/**",
		"/run/**"} // Seal empties /run but for /run/lock: a tmpfs at boot
	var diffs []string
	for p, want := range theirs {
		if matchAny(skip, p) || matchAny(cleanup, p) {
			continue
		}
		if got, ok := ours[p]; !ok {
			diffs = append(diffs, "missing "+p+" ("+want+")")
		} else if got != want {
			d := fmt.Sprintf("%s: ours %s, dpkg's %s", p, got, want)
			if out, _ := exec.Command("diff", "-u", filepath.Join(oracle, p), filepath.Join(root, p)).Output(); len(out) > 0 {
				if len(out) > 6000 {
					out = out[:6000]
				}
				d += "\n" + string(out)
			}
			diffs = append(diffs, d)
		}
	}
	for p, got := range ours {
		if _, ok := theirs[p]; !ok && !matchAny(cleanup, p) && !matchAny(skip, p) {
			diffs = append(diffs, "extra "+p+" ("+got+")")
		}
	}
	sort.Strings(diffs)
	return diffs
}

// oracleInstall extracts the dpkg base as root and has Debian's own tools
// install pkgs into it: the host's apt-get resolves and downloads from the
// repository over HTTP, and dpkg runs chrooted into the tree (apt's
// DPkg::Chroot-Directory, as mmdebstrap drives it), so every maintainer
// script runs for real, with a policy-rc.d that forbids starting services.
func oracleInstall(t testing.TB, repo *harness.DebRepo, base *harness.DpkgBase, pkgs []string) string {
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
	if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
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
	if err := os.WriteFile(filepath.Join(aptDir, "etc", "sources.list"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
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
	top := filepath.Join(root, strings.Split(strings.TrimPrefix(root, "/"), "/")[0])
	for d := filepath.Dir(self); d != top && strings.HasPrefix(d, top); d = filepath.Dir(d) {
		os.Remove(d)
	}
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
	"/var/cache/apt/**",           // apt's download cache (Seal cleans it)
	"/var/lib/dpkg/status-old",    // dpkg's backup
	"/var/lib/dpkg/available-old", // dpkg's backup
	"/var/lib/dpkg/lock*",         // lock files
	"/var/lib/dpkg/triggers/**",   // trigger bookkeeping of the run
	"/var/lib/dpkg/diversions*",   // empty databases dpkg creates
	"/var/lib/dpkg/statoverride*", //
	"/var/log/**",                 // dpkg.log, alternatives.log
	"/var/cache/ldconfig/**",      // ldconfig's aux-cache, a speed-up Seal cleans
	// debianutils' file trigger: dpkg fires it over this hand-made base
	// although no package of the run ships a file under its interest
	// (a chroot build, where dpkg runs, makes both files too); a base that
	// was ever configured has them already.
	"/etc/shells",
	"/var/lib/shells.state",
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

// TestDebsKernelSkipsInitramfs installs the kernel with skip:
// [update-initramfs], as a recipe booted by stamp's own initramfs does:
// the command runs neither now nor at first boot, and the kernel is
// configured all the same.
func TestDebsKernelSkipsInitramfs(t *testing.T) {
	harness.RequireSetpriv(t)
	repo := harness.DebRepoFor(t)
	base := harness.DpkgBaseFor(t)
	dir := debsDir(t, repo, base, debsRecipe(repo.FileURL(), []string{harness.KernelPackage}, "        deferScripts: true\n        skip: [update-initramfs]"))
	out := filepath.Join(dir, "out")
	build := stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", "cache", "--work-dir", "work").mustSucceed(t)
	if !strings.Contains(build.stderr, "skipped, as the recipe asks") {
		t.Errorf("the build does not say it skipped update-initramfs:\n%s", build.stderr)
	}
	root := extractAsRoot(t, filepath.Join(out, "e2e-debs-rootfs.tar"))
	for name, para := range readDpkgStatus(t, root) {
		if got := para.Get("Status"); got != "install ok installed" {
			t.Errorf("%s: Status %q, want install ok installed", name, got)
		}
	}
	if made, _ := filepath.Glob(filepath.Join(root, "boot/initrd.img-*")); len(made) > 0 {
		t.Errorf("an initramfs was made: %q", made)
	}
	// Nothing is left for first boot: the hardware database was compiled
	// by the image's systemd-hwdb in the sandbox.
	if unit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/stamp-dpkg-configure.service")); err == nil {
		t.Errorf("a first-boot unit, with nothing deferred:\n%s", unit)
	}
	if fi, err := os.Stat(filepath.Join(root, "usr/lib/udev/hwdb.bin")); err != nil || fi.Size() == 0 {
		t.Errorf("no hardware database: %v", err)
	}
}

// TestDebsKernel installs Debian's kernel as uid 65534. Its postinst runs
// depmod, linux-update-symlinks and run-parts of /etc/kernel/postinst.d,
// whose initramfs hook runs update-initramfs. The module indexes, which
// stamp writes without running depmod, must be what the image's own depmod
// writes when run for real in a chroot of the result, the default links what linux-update-symlinks makes there, and
// the hardware database what the image's systemd-hwdb makes there;
// update-initramfs, allowed by deferScripts, waits for first boot while
// every package is configured.
func TestDebsKernel(t *testing.T) {
	harness.RequireSetpriv(t)
	harness.RequireTools(t, "chroot", "tar")
	if os.Geteuid() != 0 {
		t.Skip("the oracle runs depmod in a chroot, which needs root")
	}
	repo := harness.DebRepoFor(t)
	base := harness.DpkgBaseFor(t)
	dir := debsDir(t, repo, base, debsRecipe(repo.FileURL(), []string{harness.KernelPackage}, "        deferScripts: true"))
	out := filepath.Join(dir, "out")
	// A relative work directory that does not exist yet: stamp makes it,
	// private.
	build := stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", "cache/not-yet-made", "--work-dir", "work/not-yet-made").mustSucceed(t)
	if fi, err := os.Stat(filepath.Join(dir, "work/not-yet-made")); err != nil {
		t.Error(err)
	} else if fi.Mode().Perm() != 0o700 {
		t.Errorf("the work directory stamp made has mode %v; want 0700", fi.Mode().Perm())
	}
	for _, l := range strings.Split(build.stderr, "\n") {
		if strings.Contains(l, "deferred") {
			t.Log(l)
		}
	}
	root := extractAsRoot(t, filepath.Join(out, "e2e-debs-rootfs.tar"))

	st := readDpkgStatus(t, root)
	var kernel string
	for name, para := range st {
		if strings.HasPrefix(name, "linux-image-") && name != harness.KernelPackage {
			kernel = name
		}
		if got := para.Get("Status"); got != "install ok installed" {
			t.Errorf("%s: Status %q, want install ok installed", name, got)
		}
	}
	version := strings.TrimPrefix(kernel, "linux-image-")
	if version == "" {
		t.Fatal("no kernel image package installed")
	}
	modDir := filepath.Join(root, "usr/lib/modules", version)
	ours := map[string][]byte{}
	ents, err := os.ReadDir(modDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "modules.") && e.Type().IsRegular() {
			b, err := os.ReadFile(filepath.Join(modDir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			ours[e.Name()] = b
		}
	}
	for _, must := range []string{"modules.dep", "modules.dep.bin", "modules.alias.bin", "modules.symbols.bin"} {
		if len(ours[must]) == 0 {
			t.Errorf("%s is missing or empty", must)
		}
	}
	if _, err := os.Stat(filepath.Join(modDir, ".fresh-install")); err == nil {
		t.Error("the postinst's .fresh-install flag was left behind")
	}
	links := map[string]string{}
	for _, l := range []string{"vmlinuz", "vmlinuz.old", "initrd.img", "initrd.img.old"} {
		links[l], _ = os.Readlink(filepath.Join(root, l))
	}
	unit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/stamp-dpkg-configure.service"))
	if err != nil || !strings.Contains(string(unit), "ExecStart=/usr/sbin/update-initramfs -c -k "+version) ||
		strings.Contains(string(unit), "systemd-hwdb") ||
		strings.Contains(string(unit), "dpkg --configure") {
		t.Errorf("first-boot unit: %v\n%s", err, unit)
	}

	// The oracle: remove what the handlers made, and run Debian's own
	// depmod and linux-update-symlinks in a chroot of the result.
	for name := range ours {
		if name != "modules.order" && name != "modules.builtin" && name != "modules.builtin.modinfo" {
			os.Remove(filepath.Join(modDir, name))
		}
	}
	for l := range links {
		os.Remove(filepath.Join(root, l))
	}
	hwdb := filepath.Join(root, "usr/lib/udev/hwdb.bin")
	ourHwdb, err := os.ReadFile(hwdb)
	if err != nil {
		t.Errorf("no hardware database: %v", err)
	}
	os.Remove(hwdb)
	for _, argv := range [][]string{{"/sbin/depmod", version}, {"/usr/bin/linux-update-symlinks", "install", version, "/boot/vmlinuz-" + version},
		{"/usr/bin/systemd-hwdb", "--usr", "update"}} {
		cmd := exec.Command("chroot", append([]string{root}, argv...)...)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("oracle: %s: %v\n%s", strings.Join(argv, " "), err, b)
		}
	}
	for name, b := range ours {
		theirs, err := os.ReadFile(filepath.Join(modDir, name))
		if err != nil {
			t.Errorf("%s: stamp made it, depmod did not: %v", name, err)
		} else if !bytes.Equal(b, theirs) {
			t.Errorf("%s differs from depmod's (%d vs %d bytes)", name, len(b), len(theirs))
		}
	}
	ents, _ = os.ReadDir(modDir)
	for _, e := range ents {
		if _, ok := ours[e.Name()]; !ok && strings.HasPrefix(e.Name(), "modules.") {
			t.Errorf("depmod made %s, stamp did not", e.Name())
		}
	}
	for l, target := range links {
		if theirs, _ := os.Readlink(filepath.Join(root, l)); theirs != target || target == "" {
			t.Errorf("/%s -> %q, linux-update-symlinks makes %q", l, target, theirs)
		}
	}
	if theirs, err := os.ReadFile(hwdb); err != nil || !bytes.Equal(ourHwdb, theirs) {
		t.Errorf("hwdb.bin differs from what systemd-hwdb makes in a chroot (%d vs %d bytes; %v)", len(ourHwdb), len(theirs), err)
	}
}

// TestDebsChroot: with scripts: chroot the maintainer scripts run for real,
// so the result equals what apt-get and dpkg make in a chroot of the same
// base, every file the scripts write included; and it is reproducible
// against another chroot build, as root or as uid 65534 in a user
// namespace.
func TestDebsChroot(t *testing.T) {
	harness.RequireTools(t, "unshare", "chroot", "dpkg", "tar")
	if os.Geteuid() != 0 {
		t.Skip("scripts: chroot needs a root build")
	}
	repo := harness.DebRepoFor(t)
	base := harness.DpkgBaseFor(t)
	pkgs := append(append([]string{}, harness.NodePackages...), "kmod", "logrotate", "anacron", "netcat-openbsd")
	// Twice as root, and once as uid 65534 in a user namespace, where the
	// build user is root: none of these scripts chowns to another user.
	var outs []string
	for i := range 3 {
		dir := debsDir(t, repo, base, debsRecipe(repo.FileURL(), pkgs, "        scripts: chroot"))
		out := filepath.Join(dir, "out")
		args := []string{"build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir}
		if i < 2 {
			stamp(t, dir, []string{"TZ=UTC", "LANG=C.UTF-8"}, args...).mustSucceed(t)
		} else {
			harness.RequireSetpriv(t)
			stampAs65534(t, dir, nil, args...).mustSucceed(t)
		}
		outs = append(outs, filepath.Join(out, "e2e-debs-rootfs.tar"))
	}
	first, err := os.ReadFile(outs[0])
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range outs[1:] {
		b, err := os.ReadFile(o)
		if err != nil || !bytes.Equal(first, b) {
			ea, eb := harness.TarIndex(harness.ReadTar(t, outs[0])), harness.TarIndex(harness.ReadTar(t, o))
			n := 0
			for p, x := range ea {
				if y, ok := eb[p]; !ok || x.String() != y.String() {
					t.Errorf("%s: first %v, other %v", p, x, eb[p])
					if n++; n > 20 {
						break
					}
				}
			}
			t.Errorf("chroot build %d differs from the first (%v)", i+2, err)
		}
	}
	root := extractAsRoot(t, outs[0])
	st := readDpkgStatus(t, root)
	for _, p := range pkgs {
		if got := st[p].Get("Status"); got != "install ok installed" {
			t.Errorf("%s: Status %q, want install ok installed", p, got)
		}
	}
	if out, err := exec.Command("dpkg", "--root", root, "--verify").CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("dpkg --verify: %v\n%s", err, out)
	}
	oracle := oracleInstall(t, repo, base, pkgs)
	theirs := treeState(t, oracle)
	// Only the bookkeeping of one dpkg run is left out, and the debconf
	// and ldconfig caches, which Seal cleans; what the scripts and
	// triggers write (/etc/shells, /etc/ld.so.cache) must match.
	skip := []string{"/var/cache/apt/**", "/var/lib/dpkg/status-old", "/var/lib/dpkg/available-old", "/var/lib/dpkg/lock*",
		"/var/lib/dpkg/triggers/**", "/var/log/**", "/var/lib/dpkg/diversions*", "/var/lib/dpkg/statoverride*",
		"/var/cache/debconf/**", "/var/cache/ldconfig/**"}
	if diffs := diffOracle(t, root, oracle, theirs, skip); len(diffs) > 0 {
		t.Errorf("%d differences from apt-get/dpkg:\n%s", len(diffs), strings.Join(diffs, "\n"))
	}
	for _, p := range []string{"/etc/systemd/system/multi-user.target.wants/containerd.service", "/etc/alternatives/iptables", "/etc/rc2.d/S01anacron", "/etc/ld.so.cache"} {
		if _, ok := theirs[p]; !ok {
			t.Errorf("the oracle has no %s: the comparison would prove little", p)
		}
	}
}
