package e2e

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

// baseDebsRecipe bootstraps a base from the repository at repoURL with
// the variant and extra packages, as a tar.
func baseDebsRecipe(repoURL, variant string, packages []string, extra string) string {
	pkgs := ""
	if len(packages) > 0 {
		pkgs = "\n    packages: [" + strings.Join(packages, ", ") + "]"
	}
	return fmt.Sprintf(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: e2e-bootstrap
arch: amd64
epoch: 1700000000
base:
  debs:
    repo: %q
    suite: stamp
    keyring: ./keyring.gpg
    variant: %s%s
%s
outputs:
  - {format: tar, name: rootfs}
`, repoURL, variant, pkgs, extra)
}

// bootstrapDir lays out a recipe directory uid 65534 can read, with the
// repository's keyring.
func bootstrapDir(t *testing.T, repo *harness.DebRepo, recipe string) string {
	t.Helper()
	dir := harness.TempDirFor65534(t)
	if err := os.WriteFile(filepath.Join(dir, "recipe.yaml"), []byte(recipe), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(repo.Keyring)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keyring.gpg"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// mmdebstrapOnly are what mmdebstrap leaves in its tarball and a bootstrap
// by stamp does not make, each for a reason that is not a difference in the
// installed system. Patterns as matchAny reads them.
var mmdebstrapOnly = []string{
	"/dev/**",                 // device nodes mmdebstrap makes; a booted system mounts devtmpfs there, a container runtime its own
	"/etc/apt/sources.list",   // mmdebstrap writes the mirror it used; stamp writes no mirror into an image
	"/etc/apt/sources.list.d", // made by mmdebstrap for its apt (apt itself is not in the test archive's minbase)
	"/etc/apt/preferences.d",  //
	"/etc/hostname",           // copied from the building host
	"/etc/resolv.conf",        // copied from the building host
	"/etc/fstab",              // mmdebstrap's "UNCONFIGURED FSTAB" placeholder
	"/etc/.pwd.lock",          // shadow-utils' lock file
	"/etc/passwd-",            // shadow-utils' backups; stamp edits the databases without keeping one
	"/etc/group-",             //
	"/var/lib/dpkg/arch",      // mmdebstrap records the native architecture; dpkg needs the file only for foreign ones
	"/var/lib/dpkg/lock*",     // dpkg's locks
	"/var/lib/dpkg/triggers/Lock",
	"/var/lib/dpkg/triggers/Unincorp", // dpkg's queue of triggers of a run, empty at its end
	"/var/lib/dpkg/*-old",             // dpkg's backups, which Seal cleans
	"/var/lib/apt/**",                 // the apt that drove mmdebstrap: its lists, locks and auto-installed marks
	"/var/lib/apt",
	"/var/cache/apt/**", // its download cache (Seal cleans it)
	"/var/cache/apt",
	"/var/cache/debconf/**", // debconf's database; stamp answers every question with its default and records none
	"/var/log/**",           // logs, which Seal cleans (directories stay)
}

// shadowBackups are the backups systemd-sysusers and pwconv leave of the
// shadow databases; stamp edits the databases without keeping any.
var shadowBackups = []string{"/etc/shadow-", "/etc/gshadow-"}

// machineID differs in mode only: mmdebstrap empties /etc/machine-id by
// writing a new file (0644); stamp empties systemd's, which keeps its
// 0444.
const machineID = "/etc/machine-id"

// stampOnly are what a stamp build adds to every image.
var stampOnly = []string{"/usr/lib/stamp", "/usr/lib/stamp/**"}

// TestBaseDebsMinbase bootstraps the minbase variant from the test archive
// as uid 65534, alone and with systemd-sysv (whose postinst makes system
// accounts with systemd-sysusers and whose packages add login shells), and
// compares each, entry by entry, with what mmdebstrap --variant=minbase
// makes in root mode from the same archive at the same SOURCE_DATE_EPOCH:
// path, type, mode, owner, link target, device numbers and content, byte
// for byte (the account databases, /etc/shells and the dpkg database
// included). Then stamp verify holds a root build and another uid-65534
// build to the same bytes.
func TestBaseDebsMinbase(t *testing.T) {
	harness.RequireSetpriv(t)
	cases := []struct {
		name    string
		repo    func(testing.TB) *harness.DebRepo
		include []string
		diff    tarballDiff
	}{
		{"minbase", harness.MinbaseRepoFor, nil, tarballDiff{oursOnly: stampOnly, theirsOnly: mmdebstrapOnly}},
		{"systemd-sysv", harness.MinbaseNodeRepoFor, []string{"systemd-sysv"},
			tarballDiff{oursOnly: stampOnly, theirsOnly: append(slices.Clone(mmdebstrapOnly), shadowBackups...), differ: []string{machineID}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			repo := c.repo(t)
			oracle := harness.MmdebstrapFor(t, repo, harness.MmdebstrapOptions{Variant: "minbase", Include: c.include, Epoch: time.Unix(1700000000, 0)})
			url := harness.ServeDebRepo(t, repo.Dir)
			dir := bootstrapDir(t, repo, baseDebsRecipe(url, "minbase", c.include, ""))
			out := filepath.Join(dir, "out")
			cache := filepath.Join(dir, "cache")
			start := time.Now()
			stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", cache, "--work-dir", dir).mustSucceed(t)
			t.Logf("bootstrap as uid 65534: %s", time.Since(start).Round(time.Millisecond))

			diffs := compareTarballs(t, filepath.Join(out, "e2e-bootstrap-rootfs.tar"), oracle, c.diff)
			for _, d := range diffs {
				t.Error(d)
			}

			if os.Geteuid() != 0 {
				t.Fatal("stamp verify's root build needs root")
			}
			v := stamp(t, dir, nil, "verify", "recipe.yaml", "--cache-dir", cache, "--against", filepath.Join(out, "SHA256SUMS"))
			v.mustSucceed(t)
			t.Logf("stamp verify:\n%s", lastLines(v.stdout+v.stderr, 6))
		})
	}
}

// tarballDiff says how compareTarballs compares two tarballs.
type tarballDiff struct {
	oursOnly, theirsOnly []string // patterns only one side is expected to have
	// differ are patterns whose entries may differ, each for a reason.
	differ []string
}

// compareTarballs lists how two tarballs differ in every entry's type,
// mode, owner, link target, device numbers and content, byte for byte; a
// text file that differs comes with a unified diff of the two.
func compareTarballs(t *testing.T, ours, theirs string, o tarballDiff) []string {
	t.Helper()
	a := harness.TarIndex(harness.ReadTar(t, ours))
	b := harness.TarIndex(harness.ReadTar(t, theirs))
	describe := func(e harness.TarEntry) string {
		return fmt.Sprintf("type=%c mode=%04o owner=%d:%d link=%q dev=%d,%d sha256=%s",
			e.Type, e.Mode, e.UID, e.GID, e.Linkname, e.DevMajor, e.DevMinor, e.SHA256)
	}
	var diffs []string
	var changed []string
	for p, x := range a {
		y, ok := b[p]
		switch {
		case !ok && !matchAny(o.oursOnly, p):
			diffs = append(diffs, "only stamp's: "+p+" "+describe(x))
		case ok && matchAny(o.differ, p):
		case ok && describe(x) != describe(y):
			d := fmt.Sprintf("%s: stamp's %s, the oracle's %s", p, describe(x), describe(y))
			if x.SHA256 != y.SHA256 && x.Type == tar.TypeReg && y.Type == tar.TypeReg {
				changed = append(changed, p)
				d += "\n" + p
			}
			diffs = append(diffs, d)
		}
	}
	for p, y := range b {
		if _, ok := a[p]; !ok && !matchAny(o.theirsOnly, p) {
			diffs = append(diffs, "only the oracle's: "+p+" "+describe(y))
		}
	}
	if len(changed) > 0 {
		ca, cb := tarContents(t, ours, changed), tarContents(t, theirs, changed)
		for i, d := range diffs {
			if _, p, ok := strings.Cut(d, "\n"); ok {
				diffs[i] = strings.TrimSuffix(d, p) + textDiff(t, cb[p], ca[p])
			}
		}
	}
	slices.Sort(diffs)
	return diffs
}

// textDiff is diff -u from the oracle's version of a file to stamp's, cut
// short, or "" for binary files.
func textDiff(t *testing.T, theirs, ours string) string {
	t.Helper()
	if strings.ContainsRune(theirs+ours, 0) {
		return ""
	}
	dir := t.TempDir()
	a, b := filepath.Join(dir, "oracle"), filepath.Join(dir, "stamp")
	if err := os.WriteFile(a, []byte(theirs), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte(ours), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := exec.Command("diff", "-u", a, b).Output()
	if len(out) > 6000 {
		out = out[:6000]
	}
	return string(out)
}

// tarContents reads the named regular files of a tarball.
func tarContents(t *testing.T, p string, names []string) map[string]string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if n := harness.CleanTarName(h.Name); slices.Contains(names, n) && h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[n] = string(b)
		}
	}
}

// TestBaseDebsRefusals: a bootstrap that cannot be done fails naming the
// package or the file, and leaves no output.
func TestBaseDebsRefusals(t *testing.T) {
	harness.RequireSetpriv(t)
	shared := harness.MinbaseRepoFor(t)
	unhandled := harness.DebRepoWith(t, shared, harness.ScriptDeb(t, t.TempDir(), "frob", "#!/bin/sh\nset -e\nfrob-tool --now\n"))
	cases := []struct {
		name      string
		repo      *harness.DebRepo
		breakRepo func(r *harness.DebRepo)
		pkgs      []string
		wants     []string
	}{
		{"missing package", shared, nil, []string{"no-such-package"}, []string{"base.debs", "no-such-package: no such package in the repository"}},
		{"unsatisfiable dependency", shared, func(r *harness.DebRepo) {
			// coreutils (Essential) pre-depends on libacl1, which goes.
			dropFromIndex(t, r, "libacl1")
		}, nil, []string{"base.debs", "coreutils", "libacl1"}},
		{"bad signature", shared, func(r *harness.DebRepo) {
			p := filepath.Join(r.Dir, "dists/stamp/InRelease")
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			os.WriteFile(p, []byte(strings.Replace(string(b), "Architectures: amd64", "Architectures: arm64", 1)), 0o644)
		}, nil, []string{"base.debs", "InRelease", "signature check failed"}},
		{"unhandled script", unhandled, nil, []string{"frob"}, []string{"base.debs", "frob postinst", `"frob-tool --now"`, "not handled offline"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := c.repo
			if c.breakRepo != nil {
				r = harness.CopyDebRepo(t, c.repo)
				c.breakRepo(r)
			}
			recipe := baseDebsRecipe(r.FileURL(), "minbase", c.pkgs, "")
			if c.name == "unsatisfiable dependency" {
				recipe = strings.Replace(recipe, "keyring: ./keyring.gpg", "trusted: true", 1)
			}
			dir := bootstrapDir(t, r, recipe)
			out := filepath.Join(dir, "out")
			res := stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir)
			res.mustFail(t, 1, c.wants...)
			if files := finalFiles(t, out); len(files) > 0 {
				t.Errorf("a failed build left %v", files)
			}
			t.Logf("%s", strings.TrimSpace(res.stderr[strings.LastIndex(strings.TrimSpace(res.stderr), "\n")+1:]))
		})
	}
}

// dropFromIndex removes a package from the repository's index and leaves
// the repository unsigned (a Release without InRelease), to be read with
// trusted: true.
func dropFromIndex(t *testing.T, r *harness.DebRepo, name string) {
	t.Helper()
	dir := filepath.Join(r.Dir, "dists/stamp/main/binary-amd64")
	idx, err := os.ReadFile(filepath.Join(dir, "Packages"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"Packages", "Packages.gz", "Packages.xz"} {
		os.Remove(filepath.Join(dir, n))
	}
	var kept []string
	for _, para := range strings.Split(string(idx), "\n\n") {
		if !strings.HasPrefix(para, "Package: "+name+"\n") {
			kept = append(kept, para)
		}
	}
	b := []byte(strings.Join(kept, "\n\n"))
	if err := os.WriteFile(filepath.Join(dir, "Packages"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	rel := fmt.Sprintf("Suite: stamp\nCodename: stamp\nArchitectures: amd64\nComponents: main\nSHA256:\n %s %d main/binary-amd64/Packages\n", hex.EncodeToString(sum[:]), len(b))
	for _, n := range []string{"InRelease", "Release.gpg"} {
		os.Remove(filepath.Join(r.Dir, "dists/stamp", n))
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "dists/stamp/Release"), []byte(rel), 0o644); err != nil {
		t.Fatal(err)
	}
}

// bootstrapBootMarker is what the booted image's own systemd prints once
// multi-user.target is reached; the unit appends the path of PID 1.
const bootstrapBootMarker = "stamp-bootstrap: multi-user.target reached, PID 1 is /usr/lib/systemd/systemd"

// TestBaseDebsBoots bootstraps minbase with systemd-sysv, Debian's kernel,
// systemd-boot and busybox-static (for the raw format's initramfs) as uid
// 65534, and boots the raw disk under OVMF: Debian's systemd, as PID 1,
// reaches multi-user.target, where a unit of the recipe prints the marker
// and powers off.
func TestBaseDebsBoots(t *testing.T) {
	t.Parallel()
	harness.RequireSetpriv(t)
	harness.RequireTools(t, "qemu-system-x86_64", "sgdisk")
	repo := harness.MinbaseNodeRepoFor(t)
	extra := markerBootLayers("/dev/ttyS0", `echo "stamp-bootstrap: multi-user.target reached, PID 1 is $(readlink /proc/1/exe)"`)
	recipe := baseDebsRecipe(repo.FileURL(), "minbase", []string{"systemd-sysv", "linux-image-amd64", "systemd-boot-efi", "busybox-static"}, extra)
	recipe = strings.Replace(recipe, "  - {format: tar, name: rootfs}\n",
		"  - format: raw\n    boot: {loader: systemd-boot, cmdline: \"rw console=ttyS0 panic=-1\"}\n", 1)
	dir := bootstrapDir(t, repo, recipe)
	out := filepath.Join(dir, "out")
	start := time.Now()
	stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir).mustSucceed(t)
	t.Logf("bootstrap and raw disk as uid 65534: %s", time.Since(start).Round(time.Second))
	raw := filepath.Join(out, "e2e-bootstrap.raw")
	log := harness.RunQEMU(t, []string{"-bios", harness.OVMFPath, "-m", "1024", "-drive", "file=" + raw + ",format=raw,if=virtio", "-snapshot"},
		bootstrapBootMarker, 8*time.Minute)
	if !strings.Contains(log, "Reached target") {
		t.Errorf("systemd's own status lines are not on the console")
	}
}

// TestBaseDebsNodePackages bootstraps minbase with systemd-sysv and the
// node's packages as uid 65534 and compares it with mmdebstrap's minbase
// of the same --include, as TestBaseDebsMinbase does. The kernel is left
// out of both: in mmdebstrap its postinst spends minutes making an
// initramfs that stamp's node does not use (the node skips
// update-initramfs), and its scripts are held to dpkg's by TestDebsKernel.
// Nothing may wait for first boot: the build runs without deferScripts.
// Every file is compared byte for byte, the account databases too: the
// ids systemd-sysusers and adduser pick, and the order of the lines, come
// from the order apt has dpkg configure the packages in, and stamp follows
// it.
func TestBaseDebsNodePackages(t *testing.T) {
	harness.RequireSetpriv(t)
	repo := harness.MinbaseNodeRepoFor(t)
	pkgs := slices.DeleteFunc(append([]string{}, harness.NodeDebPackages...), func(p string) bool { return p == harness.KernelPackage })
	oracle := harness.MmdebstrapFor(t, repo, harness.MmdebstrapOptions{Variant: "minbase", Include: pkgs, Epoch: time.Unix(1700000000, 0)})
	dir := bootstrapDir(t, repo, baseDebsRecipe(repo.FileURL(), "minbase", pkgs, ""))
	out := filepath.Join(dir, "out")
	start := time.Now()
	stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir).mustSucceed(t)
	t.Logf("bootstrap as uid 65534: %s", time.Since(start).Round(time.Second))
	diffs := compareTarballs(t, filepath.Join(out, "e2e-bootstrap-rootfs.tar"), oracle, tarballDiff{
		oursOnly: stampOnly,
		theirsOnly: append(append([]string{
			"/etc/ssh/ssh_host_*",                    // machine state, which Seal cleans
			"/etc/.resolv.conf.systemd-resolved.bak", // resolved's backup of the host's resolv.conf mmdebstrap copied in
		}, shadowBackups...), mmdebstrapOnly...),
		differ: []string{
			machineID,
			// the apt that drove mmdebstrap downloaded into the image's
			// own cache, and made it _apt's
			"/var/cache/apt/archives/partial",
		},
	})
	for _, d := range diffs {
		t.Error(d)
	}
}

// BenchmarkBootstrapMinbase times base.debs' minbase beside mmdebstrap
// --variant=minbase in root mode, from the same local archive, each with
// its .debs at hand (stamp's cache warmed by a first build; mmdebstrap
// copies from the archive's own directory), and reports each side's wall
// time and peak RSS and their ratios. Needs root for mmdebstrap.
func BenchmarkBootstrapMinbase(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("needs root: mmdebstrap runs in --mode=root beside stamp")
	}
	mm := harness.Tool(b, "mmdebstrap")
	repo := harness.MinbaseRepoFor(b)
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "recipe.yaml"), []byte(baseDebsRecipe(repo.FileURL(), "minbase", nil, "")), 0o644); err != nil {
		b.Fatal(err)
	}
	kr, err := os.ReadFile(repo.Keyring)
	if err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keyring.gpg"), kr, 0o644); err != nil {
		b.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	run := func(cmd *exec.Cmd) (time.Duration, int64) {
		b.Helper()
		exec.Command("sync").Run()
		start := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", cmd.Args[0], err, out)
		}
		return time.Since(start), cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss / 1024
	}
	stampBuild := func(out string) *exec.Cmd {
		cmd := exec.Command(stampBin, "build", "recipe.yaml", "-o", out, "--cache-dir", cache, "--work-dir", dir, "--log-level", "error", "--no-cache")
		cmd.Dir = dir
		return cmd
	}
	run(stampBuild(filepath.Join(dir, "warm")))
	var st, mt time.Duration
	var srss, mrss int64
	for i := 0; i < b.N; i++ {
		out := filepath.Join(dir, fmt.Sprintf("out-%d", i))
		d, rss := run(stampBuild(out))
		st, srss = st+d, max(srss, rss)
		os.RemoveAll(out)
		tarball := filepath.Join(dir, "mmdebstrap.tar")
		cmd := exec.Command(mm, "--mode=root", "--variant=minbase", "--quiet", "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
			repo.Suite, tarball, fmt.Sprintf("deb [signed-by=%s] copy://%s %s %s", repo.Keyring, repo.Dir, repo.Suite, repo.Component))
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1700000000")
		d, rss = run(cmd)
		mt, mrss = mt+d, max(mrss, rss)
		os.Remove(tarball)
	}
	n := float64(b.N)
	b.ReportMetric(st.Seconds()/n, "stamp-s/op")
	b.ReportMetric(mt.Seconds()/n, "mmdebstrap-s/op")
	b.ReportMetric(st.Seconds()/mt.Seconds(), "time-ratio")
	b.ReportMetric(float64(srss), "stamp-peak-MiB")
	b.ReportMetric(float64(mrss), "mmdebstrap-peak-MiB")
}

// TestBaseDebsFetchOffline: stamp lock pins the archive's index and every
// .deb of a bootstrap, stamp fetch puts them all into an empty cache, and
// build --offline then bootstraps from the cache alone, to the bytes of an
// online build.
func TestBaseDebsFetchOffline(t *testing.T) {
	repo := harness.MinbaseRepoFor(t)
	url := harness.ServeDebRepo(t, repo.Dir)
	dir := bootstrapDir(t, repo, baseDebsRecipe(url, "essential", nil, ""))
	cache := filepath.Join(dir, "cache")
	stamp(t, dir, nil, "lock", "recipe.yaml", "--cache-dir", filepath.Join(dir, "lock-cache")).mustSucceed(t)
	stamp(t, dir, nil, "fetch", "recipe.yaml", "--cache-dir", cache).mustSucceed(t)
	lock, err := os.ReadFile(filepath.Join(dir, "stamp.lock"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(lock), ".deb"); n < 30 {
		t.Errorf("stamp.lock pins %d .debs, want the essential set's", n)
	}
	stamp(t, dir, nil, "build", "recipe.yaml", "--offline", "--cache-dir", cache, "-o", filepath.Join(dir, "offline")).mustSucceed(t)
	stamp(t, dir, nil, "build", "recipe.yaml", "--cache-dir", filepath.Join(dir, "cache2"), "-o", filepath.Join(dir, "online")).mustSucceed(t)
	a, err := os.ReadFile(filepath.Join(dir, "offline", "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "online", "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if string(a) != string(b) {
		t.Errorf("offline:\n%s\nonline:\n%s", a, b)
	}
	// A cache without the .debs fails offline, naming the package.
	res := stamp(t, dir, nil, "build", "recipe.yaml", "--offline", "--cache-dir", filepath.Join(dir, "empty"), "-o", filepath.Join(dir, "none"))
	res.mustFail(t, 1, "base.debs")
}

// TestBaseDebsChroot bootstraps minbase with scripts: chroot, as root: the
// Essential set is extracted first, as mmdebstrap does, so the first
// preinst has a shell, then dpkg configures each batch for real. The
// result is mmdebstrap's, entry by entry, as the offline one is.
func TestBaseDebsChroot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("scripts: chroot runs as root here; make test runs as root")
	}
	repo := harness.MinbaseRepoFor(t)
	oracle := harness.MmdebstrapFor(t, repo, harness.MmdebstrapOptions{Variant: "minbase", Epoch: time.Unix(1700000000, 0)})
	dir := bootstrapDir(t, repo, baseDebsRecipe(repo.FileURL(), "minbase", nil, "    scripts: chroot"))
	out := filepath.Join(dir, "out")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir).mustSucceed(t)
	// debconf's database records questions in the order they were asked,
	// which is apt's order of configuring, not dpkg's of this build.
	for _, d := range compareTarballs(t, filepath.Join(out, "e2e-bootstrap-rootfs.tar"), oracle, tarballDiff{oursOnly: stampOnly, theirsOnly: mmdebstrapOnly,
		differ: []string{"/var/cache/debconf/**"}}) {
		t.Error(d)
	}
}

// markerBootLayers is the end of a bootstrap's base (update-initramfs
// skipped, scripts deferred) and a customize phase whose unit, once
// multi-user.target is reached, runs each shell command with its output
// on console, then powers off.
func markerBootLayers(console string, commands ...string) string {
	var execs strings.Builder
	for _, c := range commands {
		fmt.Fprintf(&execs, "            ExecStart=/bin/sh -c '%s >%s'\n", c, console)
	}
	return `    skip: [update-initramfs]
    deferScripts: true
customize:
  layers:
    - files:
        - path: /etc/systemd/system/stamp-marker.service
          content: |
            [Unit]
            Description=Say the image reached multi-user.target
            After=multi-user.target

            [Service]
            Type=oneshot
` + execs.String() + `            ExecStart=/usr/bin/systemctl --no-block poweroff

            [Install]
            WantedBy=multi-user.target
    - systemd: {enable: [stamp-marker.service]}`
}
