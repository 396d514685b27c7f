//go:build node

// The node's end-to-end test needs the Kubernetes test inputs (make
// k8s-inputs, a cold build of about an hour) and boots a whole Debian
// under TCG, so it runs in make e2e-node (go test -tags node), not in
// make test.

package e2e

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/formats"
	ctdstate "github.com/stamp-dev/stamp/layers/containerd"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// nodeRecipePath is the recipe under test, relative to this package.
const nodeRecipePath = "../../recipes/k8s-node.yaml"

// TestNodeImage builds recipes/k8s-node.yaml as uid 65534 against a local
// Debian repository, a local Kubernetes repository and a local registry,
// checks the image's hygiene on the image itself, proves the build
// reproducible (stamp verify: as root and as uid 65534, under a varied
// environment), then boots the raw disk under OVMF with a NoCloud seed
// whose user-data runs nodeChecks inside the node and prints each result.
// With STAMP_E2E_NODE_OUT set, the outputs are left there (make e2e-node:
// out/e2e-node), with node.env naming the registry the images carry.
//
// STAMP_E2E_NODE_CONTAINERD (upstream, the default, or debian) and
// STAMP_E2E_NODE_IMAGES (containerd, the default, or archives) build the
// recipe's other choices, for the README's boot-to-Ready figures.
func TestNodeImage(t *testing.T) {
	harness.RequireTools(t, "qemu-system-x86_64", "qemu-img", "sgdisk", "cp", "truncate")
	step := stepTimer(t)
	nb := prepareNodeBuild(t, step)
	t.Logf("node: containerd=%s images_into=%s", nb.mode.containerd, nb.mode.imagesInto)
	dir, setArgs, reg, images := nb.dir, nb.setArgs, nb.reg, nb.images
	out := filepath.Join(dir, "out")
	cache := filepath.Join(dir, "cache")
	args := append([]string{"build", "k8s-node.yaml", "-o", out, "--cache-dir", cache, "--work-dir", dir, "--insecure-registry", reg.Addr}, setArgs...)
	r := stampAs65534(t, dir, nil, args...)
	r.mustSucceed(t)
	step("cold build as uid 65534")
	// The recipe skips update-initramfs (its disk and PXE outputs boot
	// through stamp's own initramfs), and the image's systemd-hwdb
	// compiles the hardware database in the sandbox: nothing waits for
	// first boot.
	deferred, skipped := 0, 0
	for _, l := range strings.Split(r.stderr, "\n") {
		switch {
		case strings.Contains(l, "deferred to first boot"):
			deferred++
			t.Errorf("deferred: %s", l)
		case strings.Contains(l, "skipped, as the recipe asks"):
			skipped++
			if !strings.Contains(l, "update-initramfs") {
				t.Errorf("skipped beyond update-initramfs: %s", l)
			}
		}
	}
	if skipped == 0 {
		t.Error("the build did not report skipping update-initramfs")
	}
	t.Logf("%d commands deferred to first boot, %d skipped (update-initramfs)", deferred, skipped)
	for _, f := range []string{"k8s-node.raw", "k8s-node.qcow2", "k8s-node.pxe", "k8s-node.live", "SHA256SUMS", "stamp.lock"} {
		p := filepath.Join(out, f)
		if f == "stamp.lock" {
			p = filepath.Join(dir, f)
		}
		if fi, err := os.Stat(p); err != nil {
			t.Fatalf("no %s: %v", f, err)
		} else {
			t.Logf("%s: %d bytes", f, fi.Size())
		}
	}

	raw := filepath.Join(out, "k8s-node.raw")
	checkNodeHygiene(t, raw, images, nb.mode)
	step("hygiene checked on the image")
	if o := os.Getenv("STAMP_E2E_NODE_OUT"); o != "" {
		keepNodeOutputs(t, out, o, reg.Addr, dir, nb.mode)
	}

	// The bytes again: stamp verify builds twice more (as root, then as
	// uid 65534 in another directory, umask, time zone, locale and
	// directory order) and compares; --against then holds the first
	// build to the same bytes.
	if os.Geteuid() == 0 {
		vargs := append([]string{"verify", "k8s-node.yaml", "--cache-dir", cache, "--insecure-registry", reg.Addr, "--against", filepath.Join(out, "SHA256SUMS")}, setArgs...)
		v := stamp(t, dir, nil, vargs...)
		v.mustSucceed(t)
		t.Logf("stamp verify:\n%s", lastLines(v.stdout+v.stderr, 12))
		step("stamp verify against the first build (a root build, compared)")
	} else {
		t.Error("not root: the node test's root build cannot run; make e2e-node runs as root")
	}

	bootNode(t, raw, reg.Addr, images, nb.mode)
	step("boot and in-node checks")
}

// nodeMode is which of the node recipe's choices a test builds.
type nodeMode struct {
	containerd string // the recipe's containerd parameter: upstream or debian
	imagesInto string // its images_into parameter: containerd or archives
}

// upstream reports whether the node runs upstream's containerd and runc.
func (m nodeMode) upstream() bool { return m.containerd == "upstream" }

// runtimePackages are the packages the node's container runtime is, with
// the versions the tree must hold ("" for whatever the mirror has).
func (m nodeMode) runtimePackages() [][2]string {
	if m.upstream() {
		return [][2]string{{"containerd.io", harness.UpstreamContainerdPackage()}, {"runc", harness.UpstreamRuncPackage()}}
	}
	return [][2]string{{"containerd", ""}, {"runc", ""}}
}

// nodeModeFromEnv reads STAMP_E2E_NODE_CONTAINERD and STAMP_E2E_NODE_IMAGES;
// unset, they are the recipe's defaults.
func nodeModeFromEnv(tb testing.TB) nodeMode {
	m := nodeMode{containerd: "upstream", imagesInto: "containerd"}
	if v := os.Getenv("STAMP_E2E_NODE_CONTAINERD"); v != "" {
		m.containerd = v
	}
	if v := os.Getenv("STAMP_E2E_NODE_IMAGES"); v != "" {
		m.imagesInto = v
	}
	if !slices.Contains([]string{"upstream", "debian"}, m.containerd) || !slices.Contains([]string{"containerd", "archives"}, m.imagesInto) {
		tb.Fatalf("STAMP_E2E_NODE_CONTAINERD=%q (upstream or debian), STAMP_E2E_NODE_IMAGES=%q (containerd or archives)", m.containerd, m.imagesInto)
	}
	return m
}

// checkNodeRecipe holds the recipe to what the test repositories hold: its
// base and Debian runtime layer ask for harness.NodeDebPackages, and its
// upstream runtime layer for the versions harness.UpstreamContainerdRepo
// has, image-builder's pins.
func checkNodeRecipe(tb testing.TB) {
	tb.Helper()
	load := func(containerd string, more ...string) *recipes.Recipe {
		set := map[string]string{"mirror": "file:///mirror", "kubernetes_repo": "file:///k8s", "kubernetes_keyring": "x",
			"registry": "reg.invalid", "containerd": containerd}
		for i := 0; i+1 < len(more); i += 2 {
			set[more[i]] = more[i+1]
		}
		if containerd == "upstream" {
			set["containerd_repo"], set["containerd_keyring"] = "file:///containerd", "y"
		}
		rec, err := recipes.LoadWith(nodeRecipePath, recipes.Options{Set: set})
		if err != nil {
			tb.Fatal(err)
		}
		return rec
	}
	runtimeLayer := func(rec *recipes.Recipe, repo string) []string {
		var found []string
		for _, l := range rec.Customize.Layers {
			if l.Debs != nil && l.Debs.Repo == repo {
				found = append(found, l.Debs.Packages...)
			}
		}
		return found
	}
	deb := load("debian")
	if deb.Base.Debs == nil || deb.Base.Debs.Variant != "minbase" {
		tb.Fatalf("the node recipe's base is not bootstrapped minbase: %+v", deb.Base)
	}
	pkgs := append(slices.Clone(deb.Base.Debs.Packages), runtimeLayer(deb, "file:///mirror")...)
	if got, want := sortedCopy(pkgs), sortedCopy(harness.NodeDebPackages); !slices.Equal(got, want) {
		tb.Fatalf("the recipe's Debian packages (base.debs and the containerd=debian layer) and harness.NodeDebPackages (what the test repository holds) differ:\nrecipe  %q\nharness %q", got, want)
	}
	up := load("upstream")
	if !slices.Equal(up.Base.Debs.Packages, deb.Base.Debs.Packages) || len(runtimeLayer(up, "file:///mirror")) != 0 {
		tb.Fatal("with containerd=upstream the recipe still asks the mirror for a runtime")
	}
	want := []string{"containerd.io=" + harness.UpstreamContainerdPackage(), "runc=" + harness.UpstreamRuncPackage()}
	if got := runtimeLayer(up, "file:///containerd"); !slices.Equal(got, want) {
		tb.Fatalf("the recipe's upstream runtime is %q; harness.UpstreamContainerdRepo holds %q (image-builder's pins)", got, want)
	}
	sealed := load("debian", "disk", "sealed", "secure_boot_key", "k", "secure_boot_cert", "c")
	extra := runtimeLayer(sealed, "file:///mirror")[len(runtimeLayer(deb, "file:///mirror")):]
	if !slices.Equal(extra, harness.NodeSealedPackages) {
		tb.Fatalf("with disk=sealed the recipe adds %q from the mirror; harness.NodeSealedPackages (in the test repository) is %q", extra, harness.NodeSealedPackages)
	}
}

// nodeBuild is a directory, owned by uid 65534, holding the node recipe,
// its overlay, base and keyrings, ready to build against local
// repositories and a local registry with setArgs.
type nodeBuild struct {
	dir     string
	setArgs []string
	reg     *harness.Registry
	images  []string // what the registry holds, as the recipe names them
	in      *harness.K8sInputs
	repo    *harness.DebRepo
	ctdRepo *harness.DebRepo // upstream's containerd and runc; nil for Debian's
	mode    nodeMode
}

// prepareNodeBuild gathers the inputs (built once per machine), pushes the
// images to a fresh local registry and lays out the recipe directory.
func prepareNodeBuild(tb testing.TB, step func(string)) *nodeBuild {
	tb.Helper()
	in := harness.K8sInputsFor(tb)
	// The node bootstraps its base from this archive: minbase and the
	// node's packages.
	repo := harness.MinbaseNodeRepoFor(tb)
	mode := nodeModeFromEnv(tb)
	var ctdRepo *harness.DebRepo
	if mode.upstream() {
		// Upstream's containerd and runc, built from the module proxy.
		ctdRepo = harness.UpstreamContainerdRepo(tb)
	}
	step("inputs (Kubernetes binaries, .deb repositories, images)")
	checkNodeRecipe(tb)

	reg := harness.StartRegistry(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	// kube-proxy runs for real on the cluster test's node, so it needs the
	// iptables its upstream image has.
	k8sImages := slices.Clone(in.Images)
	for i := range k8sImages {
		if k8sImages[i].Repository == "kube-proxy" {
			k8sImages[i] = harness.KubeProxyDebianImage(tb, in, harness.NodeRepoFor(tb), harness.NodeBaseTarball(tb))
		}
	}
	refs, err := harness.PushK8sMirror(ctx, in.Stamp, in.Bins, k8sImages, reg)
	if err != nil {
		tb.Fatal(err)
	}
	var images []string
	for name := range refs {
		images = append(images, name)
	}
	sort.Strings(images)
	step("images pushed to the local registry")

	dir := harness.TempDirFor65534(tb)
	copyFile(tb, nodeRecipePath, filepath.Join(dir, "k8s-node.yaml"))
	copyTree(tb, filepath.Join(filepath.Dir(nodeRecipePath), "k8s-node"), filepath.Join(dir, "k8s-node"))
	for src, dst := range map[string]string{repo.Keyring: "debian.gpg", in.Repo.Keyring: "kubernetes.gpg"} {
		copyFile(tb, src, filepath.Join(dir, dst))
	}
	sets := []string{
		"mirror=" + repo.FileURL(), "suite=" + repo.Suite, "debian_keyring=./debian.gpg",
		"kubernetes_repo=" + in.Repo.FileURL(), "kubernetes_keyring=./kubernetes.gpg",
		"registry=" + reg.Addr, "containerd=" + mode.containerd, "images_into=" + mode.imagesInto,
	}
	if ctdRepo != nil {
		copyFile(tb, ctdRepo.Keyring, filepath.Join(dir, "containerd.gpg"))
		sets = append(sets, "containerd_repo="+ctdRepo.FileURL(), "containerd_keyring=./containerd.gpg")
	}
	var setArgs []string
	for _, s := range sets {
		setArgs = append(setArgs, "--set", s)
	}
	return &nodeBuild{dir: dir, setArgs: setArgs, reg: reg, images: images, in: in, repo: repo, ctdRepo: ctdRepo, mode: mode}
}

// stepTimer logs the time each step took, for the README's table.
func stepTimer(t *testing.T) func(string) {
	last := time.Now()
	return func(what string) {
		t.Logf("STEP %-60s %s", what, time.Since(last).Round(time.Second))
		last = time.Now()
	}
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	sort.Strings(c)
	return c
}

func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}

// keepNodeOutputs copies the outputs (sparse) to dst for the cluster test,
// with node.env saying what they were built against.
func keepNodeOutputs(t *testing.T, out, dst, registry, recipeDir string, mode nodeMode) {
	t.Helper()
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if b, err := exec.Command("cp", "-a", "--sparse=always", out, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp %s %s: %v\n%s", out, dst, err, b)
	}
	copyFile(t, filepath.Join(recipeDir, "stamp.lock"), filepath.Join(dst, "stamp.lock"))
	env := fmt.Sprintf("# what %s was built against (test/e2e/node_test.go)\nREGISTRY=%s\nKUBERNETES_VERSION=%s\nCONTAINERD=%s\nIMAGES_INTO=%s\n",
		dst, registry, harness.K8sVersion, mode.containerd, mode.imagesInto)
	if err := os.WriteFile(filepath.Join(dst, "node.env"), []byte(env), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("outputs kept in %s", dst)
}

// checkNodeHygiene reads the raw disk back (no mount) and checks what the
// seal and the recipe promise before any boot: no SSH host keys, an empty
// machine-id, no cloud-init instance state, no core files, no logs, no apt
// lists or caches, no swap, the release file and every pre-seeded image.
func checkNodeHygiene(t *testing.T, raw string, images []string, mode nodeMode) {
	t.Helper()
	im, err := formats.ReadImage(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	bad := func(format string, args ...any) { t.Errorf("hygiene: "+format, args...) }
	sshKey := regexp.MustCompile(`^/etc/ssh/ssh_host_.*_key(\.pub)?$`)
	for _, e := range im.Tree.Entries() {
		p := e.Path
		switch {
		case sshKey.MatchString(p):
			bad("%s is in the image", p)
		case strings.HasPrefix(p, "/var/lib/cloud/"):
			bad("cloud-init state %s is in the image", p)
		case strings.HasPrefix(p, "/var/log/") && e.Type != rootfs.TypeDir:
			bad("log %s is in the image", p)
		case strings.HasPrefix(p, "/var/lib/apt/lists/") && e.Type != rootfs.TypeDir,
			strings.HasPrefix(p, "/var/cache/apt/") && e.Type == rootfs.TypeRegular:
			bad("apt state %s is in the image", p)
		case path.Base(p) == "core" && e.Type == rootfs.TypeRegular, strings.HasPrefix(p, "/var/lib/systemd/coredump/") && e.Type != rootfs.TypeDir:
			bad("core file %s is in the image", p)
		case strings.HasPrefix(p, "/etc/ssh/") && strings.HasSuffix(p, "_key"):
			bad("private key %s is in the image", p)
		}
	}
	if e := im.Tree.Get("/etc/machine-id"); e == nil || e.Size != 0 {
		bad("/etc/machine-id must exist and be empty: %v", e)
	}
	for _, p := range []string{"/var/lib/dbus/machine-id", "/var/lib/systemd/random-seed", "/etc/stamp-release",
		"/usr/sbin/ntpd", "/etc/containerd/config.toml", "/etc/crictl.yaml", "/opt/cni/bin/bridge", "/opt/cni/bin/host-local",
		"/etc/cni/net.d/10-stamp-bridge.conflist", "/usr/lib/systemd/system/kubelet.service",
		"/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf", "/etc/systemd/system/multi-user.target.wants/kubelet.service",
		"/etc/systemd/system/multi-user.target.wants/containerd.service", "/etc/systemd/system/timers.target.wants/apt-daily.timer"} {
		have := im.Tree.Get(p) != nil
		want := !slices.Contains([]string{"/var/lib/dbus/machine-id", "/var/lib/systemd/random-seed", "/usr/sbin/ntpd",
			"/etc/systemd/system/timers.target.wants/apt-daily.timer"}, p)
		if have != want {
			bad("%s present %t, want %t", p, have, want)
		}
	}
	for _, p := range im.Partitions {
		if p.Filesystem == "swap" || strings.Contains(strings.ToLower(p.Type), "swap") || strings.EqualFold(p.Type, "0657FD6D-A4AB-43C4-84E5-0933C84B4F4F") {
			bad("partition %+v is swap", p)
		}
	}
	if mode.imagesInto == "archives" {
		// The archives and the unit that imports them at first boot.
		for _, p := range []string{"/var/lib/stamp/images", "/usr/lib/systemd/system/stamp-import-images.service"} {
			if im.Tree.Get(p) == nil {
				bad("no %s: the archives mode imports the images at first boot", p)
			}
		}
		if im.Tree.Get(ctdstate.MetaDBPath) != nil {
			bad("%s is there in the archives mode", ctdstate.MetaDBPath)
		}
		return
	}
	// The images are in containerd's own state, with nothing to import.
	for _, p := range []string{"/var/lib/containerd/io.containerd.metadata.v1.bolt/meta.db",
		"/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/metadata.db",
		"/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs"} {
		if im.Tree.Get(p) == nil {
			bad("no %s: the images are not in containerd's state", p)
		}
	}
	for _, p := range []string{"/var/lib/stamp/images", "/usr/lib/systemd/system/stamp-import-images.service"} {
		if im.Tree.Get(p) != nil {
			bad("%s is there: the node imports nothing at first boot", p)
		}
	}
	// What stamp inspect lists: every image under its name, from the
	// databases read back off the raw disk's ext4 root.
	meta, err := formats.ReadTreeFile(context.Background(), im, ctdstate.MetaDBPath, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := formats.ReadTreeFile(context.Background(), im, ctdstate.SnapshotsDBPath, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ctdstate.ReadState(meta, snaps)
	if err != nil {
		t.Fatal(err)
	}
	listed := strings.Join(st.Lines(), "\n")
	for _, name := range images {
		if !strings.Contains(listed, "image k8s.io/"+name+" -> ") {
			bad("containerd's state does not list %s:\n%s", name, listed)
		}
	}
	if !strings.Contains(listed, "(committed, snapshots/7)") {
		bad("containerd's state lists fewer than seven committed snapshots:\n%s", listed)
	}
}
