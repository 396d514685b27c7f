//go:build node

package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

// TestDebsNodePackages installs the Kubernetes node's whole package set
// (harness.NodeDebPackages: 173 packages over the node base) as uid 65534
// with offline scripts. Every package must end up configured, with only
// update-initramfs put off to first boot (the image's systemd-hwdb
// compiles the hardware database in the sandbox); a second build
// must give the same bytes; and the tree must equal what apt-get and dpkg
// make in a chroot of the same base, but for the differences listed in
// nodeOracleOnly and nodeOursOnly, each with its reason.
func TestDebsNodePackages(t *testing.T) {
	harness.RequireSetpriv(t)
	harness.RequireTools(t, "dpkg", "tar")
	repo := harness.NodeRepoFor(t)
	base := harness.NodeBaseFor(t)
	recipe := debsRecipe(repo.FileURL(), harness.NodeDebPackages, "        deferScripts: true")
	// The oracle's chroot install takes longer than both builds and
	// shares nothing with them, so it runs beside them.
	var oracle string
	var oracleTime time.Duration
	waitOracle, oracleDone := inBackground(t, func(t testing.TB) {
		start := time.Now()
		oracle = oracleInstall(t, repo, base, harness.NodeDebPackages)
		oracleTime = time.Since(start)
	})
	defer oracleDone()
	var outs []string
	var stderr string
	for i := range 2 {
		dir := debsDir(t, repo, base, recipe)
		out := filepath.Join(dir, "out")
		start := time.Now()
		r := stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir)
		r.mustSucceed(t)
		t.Logf("build %d as uid 65534: %s", i+1, time.Since(start).Round(100*time.Millisecond))
		stderr = r.stderr
		outs = append(outs, filepath.Join(out, "e2e-debs-rootfs.tar"))
	}

	// Nothing is deferred but update-initramfs, which makes an initramfs
	// for the hardware it boots on.
	deferred := 0
	for _, l := range strings.Split(stderr, "\n") {
		if !strings.Contains(l, "deferred") {
			continue
		}
		deferred++
		if !strings.Contains(l, "update-initramfs") {
			t.Errorf("deferred: %s", l)
		}
	}
	if deferred == 0 {
		t.Error("nothing deferred: update-initramfs should wait for first boot")
	}

	a, err := os.ReadFile(outs[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(outs[1])
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		ea, eb := harness.TarIndex(harness.ReadTar(t, outs[0])), harness.TarIndex(harness.ReadTar(t, outs[1]))
		n := 0
		for p, x := range ea {
			if y, ok := eb[p]; !ok || x.String() != y.String() {
				t.Errorf("%s: first %v, second %v", p, x, eb[p])
				if n++; n > 20 {
					break
				}
			}
		}
		t.Errorf("the two builds differ (%d vs %d bytes)", len(a), len(b))
	}

	root := extractAsRoot(t, outs[0])
	st := readDpkgStatus(t, root)
	for _, p := range harness.NodeDebPackages {
		if st[p] == nil {
			t.Errorf("%s is not in the dpkg status", p)
		}
	}
	var names []string
	for name, para := range st {
		names = append(names, name)
		if got := para.Get("Status"); got != "install ok installed" {
			t.Errorf("%s: Status %q, want install ok installed", name, got)
		}
	}
	sort.Strings(names)
	t.Logf("%d packages installed, %d of them by the build", len(names), len(names)-len(base.Packages))
	unit, err := os.ReadFile(filepath.Join(root, "etc/systemd/system/stamp-dpkg-configure.service"))
	if err != nil || strings.Contains(string(unit), "dpkg --configure") ||
		!strings.Contains(string(unit), "update-initramfs") || strings.Contains(string(unit), "systemd-hwdb") {
		t.Errorf("first-boot unit: %v\n%s", err, unit)
	}

	waitOracle()
	t.Logf("oracle (apt-get and dpkg in a chroot, as root, beside the builds): %s", oracleTime.Round(100*time.Millisecond))
	theirs := treeState(t, oracle)
	skip := append(append(append([]string{}, oracleOnly...), nodeOracleOnly...), nodeOursOnly...)
	diffs := diffOracle(t, root, oracle, theirs, skip)
	if len(diffs) > 0 {
		t.Errorf("%d differences from apt-get/dpkg:\n%s", len(diffs), strings.Join(diffs, "\n"))
	}
	for _, p := range []string{"/etc/audit/audit.rules", "/etc/ssl/certs/ca-certificates.crt", "/var/lib/ucf/hashfile",
		"/usr/lib/python3/dist-packages/cloudinit/__pycache__/__init__.cpython-311.pyc", "/var/lib/systemd/catalog/database",
		"/etc/systemd/user/sockets.target.wants/gpg-agent.socket", "/etc/default/locale", "/usr/lib/udev/hwdb.bin"} {
		if _, ok := theirs[p]; !ok {
			t.Errorf("the oracle has no %s: the comparison would prove little", p)
		}
	}
}

// The account databases are compared byte for byte like every other
// file: the offline build configures the packages in the order apt has
// dpkg configure them (packages/order), so adduser and systemd-sysusers
// pick the same ids and write the same lines in the same order.

// nodeOracleOnly are paths the chroot run leaves and the offline build
// does not, each for a reason that is not a difference in what the
// packages install:
var nodeOracleOnly = []string{
	// update-initramfs ran in the chroot; offline it waits for first boot
	// (deferScripts), as the first-boot unit says. (systemd-hwdb's
	// database is compared: the image's own program made both.)
	"/boot/initrd.img-*",
	"/var/lib/initramfs-tools/*",
	// Python's import-time caches of py3compile's own modules and of the
	// .pth hooks its interpreter ran: written in timestamp mode while the
	// real py3compile imported them, not what py3compile was asked to
	// compile (the chroot build does not reproduce them either).
	"/usr/share/python3/debpython/__pycache__/*",
	"/usr/lib/python3/dist-packages/_distutils_hack/__pycache__/*",
}

// nodeOursOnly are paths only the offline build has:
var nodeOursOnly = []string{
	// The first-boot unit that runs the deferred commands, and its link.
	"/etc/systemd/system/stamp-dpkg-configure.service",
	"/etc/systemd/system/multi-user.target.wants/stamp-dpkg-configure.service",
	// What systemd's postinst asks systemd-tmpfiles to create. It needs
	// /proc, which apt's bare chroot lacks ("/proc/ is not mounted, but
	// required"; the postinst ignores the failure); in a chroot with /proc,
	// as mmdebstrap and scripts: chroot make, it creates the same.
	"/etc/mtab", "/srv", "/root/.ssh", "/run/**", "/var/cache/private", "/var/lib/private",
	"/var/lib/systemd/coredump", "/var/lib/systemd/pstore",
	// shadow-utils' backups of the account files before the last change
	// and its lock file, and adduser's lock in /run: the offline account
	// handlers keep no backups and need no locks.
	"/etc/.pwd.lock", "/etc/passwd-", "/etc/group-", "/etc/shadow-", "/etc/gshadow-", "/run/adduser",
}
