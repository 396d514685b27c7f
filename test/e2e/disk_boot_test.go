package e2e

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

const diskBootRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: disk-boot
arch: amd64
epoch: 1700000000
base:
  tarball: ./base.tar
outputs:
  - format: raw
    boot: {loader: systemd-boot, cmdline: "console=ttyS0 panic=-1"}
  - {format: qcow2, from: raw}
  - {format: vhd, from: raw}
  - {format: vhd, name: dyn, type: dynamic, from: raw}
  - {format: vmdk, from: raw}
  - {format: vmdk, name: sparse, type: monolithicSparse, from: raw}
  - {format: ova, from: raw}
  - {format: gce, from: raw}
`

// TestDiskBoots builds a raw disk, its qcow2, its fixed and dynamic VHDs,
// its stream-optimized and monolithic sparse VMDKs, an OVA and a GCE
// archive from a tree of real Debian parts (kernel, modules,
// busybox-static, systemd-boot) and boots the raw, the qcow2, the fixed VHD
// and the stream-optimized VMDK (the disk an OVA carries) under OVMF (one
// boot per format: the other disks are compared with the raw instead):
// firmware → systemd-boot on the ESP → the kernel and the initramfs
// the raw format made → the ext4 root found by its PARTUUID → /sbin/init,
// which prints the marker. The build runs as root and again as uid 65534 in
// another directory, and both give the same bytes.
func TestDiskBoots(t *testing.T) {
	t.Parallel()
	harness.RequireTools(t, "qemu-system-x86_64", "qemu-img", "sgdisk")
	const marker = "stamp-disk-boot: the root file system is up"
	dir := bootDiskDir(t, diskBootRecipe, marker)

	out := filepath.Join(dir, "out")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out).mustSucceed(t)
	raw, qcow := filepath.Join(out, "disk-boot.raw"), filepath.Join(out, "disk-boot.qcow2")
	// The qcow2's sum comes from its writer, the raw disk's from the
	// qcow2's first pass over it, the VHDs' from reading them back:
	// coreutils must agree with every one.
	check := exec.Command("sha256sum", "--strict", "-c", "SHA256SUMS")
	check.Dir = out
	if b, err := check.CombinedOutput(); err != nil || !strings.Contains(string(b), "disk-boot.qcow2: OK") {
		t.Fatalf("sha256sum -c SHA256SUMS: %v\n%s", err, b)
	}

	if b, err := exec.Command(harness.Tool(t, "sgdisk"), "-v", raw).CombinedOutput(); err != nil ||
		!strings.Contains(string(b), "No problems found") || strings.Contains(string(b), "Warning") {
		t.Fatalf("sgdisk -v: %v\n%s", err, b)
	}
	if b, err := exec.Command("qemu-img", "compare", "-f", "raw", "-F", "qcow2", raw, qcow).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img compare: %v\n%s", err, b)
	}
	fixed, dyn := filepath.Join(out, "disk-boot.vhd"), filepath.Join(out, "disk-boot-dyn.vhd")
	// qemu sizes a VHD whose creator it does not know ("stmp") by its CHS
	// geometry, which stamp chooses to cover the footer's size exactly:
	// qemu needs no options to see the disk Hyper-V and Azure see.
	for _, v := range []string{fixed, dyn} {
		if b, err := exec.Command("qemu-img", "compare", "-f", "raw", "-F", "vpc", raw, v).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img compare %s: %v\n%s", filepath.Base(v), err, b)
		}
		stamp(t, dir, nil, "inspect", "--check", v).mustSucceed(t)
	}
	stream, sparse := filepath.Join(out, "disk-boot.vmdk"), filepath.Join(out, "disk-boot-sparse.vmdk")
	for _, v := range []string{stream, sparse} {
		if b, err := exec.Command("qemu-img", "check", "-f", "vmdk", v).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img check %s: %v\n%s", filepath.Base(v), err, b)
		}
		if b, err := exec.Command("qemu-img", "compare", "-f", "raw", "-F", "vmdk", raw, v).CombinedOutput(); err != nil {
			t.Fatalf("qemu-img compare %s: %v\n%s", filepath.Base(v), err, b)
		}
	}
	// inspect --check reads each back by detection alone: the OVA's
	// manifest digests, the disk inside it and inside the GCE archive.
	for _, p := range []string{stream, sparse, filepath.Join(out, "disk-boot.ova"), filepath.Join(out, "disk-boot.tar.gz")} {
		stamp(t, dir, nil, "inspect", "--check", p).mustSucceed(t)
	}
	manifest, err := os.ReadFile(filepath.Join(out, "manifest.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"\nesp:/EFI/BOOT/BOOTX64.EFI type=file", "\nesp:/initrd.img type=file", "\nroot:/lost+found type=dir"} {
		if !strings.Contains(string(manifest), w) {
			t.Errorf("manifest.txt lacks %q", w)
		}
	}

	sameAs65534(t, dir, out, "disk-boot.raw", "disk-boot.qcow2", "disk-boot.vhd", "disk-boot-dyn.vhd",
		"disk-boot.vmdk", "disk-boot-sparse.vmdk", "disk-boot.ova", "disk-boot.tar.gz")

	for _, drive := range []string{"file=" + raw + ",format=raw,if=virtio", "file=" + qcow + ",format=qcow2,if=virtio",
		"file=" + fixed + ",format=vpc,if=virtio",
		// qemu reads a stream-optimized VMDK as it is; -snapshot keeps the
		// guest's writes out of it.
		"file=" + stream + ",format=vmdk,if=virtio"} {
		harness.RunQEMU(t, []string{"-bios", harness.OVMFPath, "-m", "1024", "-drive", drive, "-snapshot"}, marker, 6*time.Minute)
	}
}

// diskSums reads SHA256SUMS of an output directory.
func diskSums(t *testing.T, dir string) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		if sum, name, ok := strings.Cut(s.Text(), "  "); ok {
			m[name] = sum
		}
	}
	return m
}

// bootDiskDir lays out a directory uid 65534 can read with recipe.yaml and
// base.tar: a tree of real Debian boot parts (kernel, modules,
// busybox-static, systemd-boot) whose /sbin/init prints marker.
func bootDiskDir(t *testing.T, recipe, marker string) string {
	t.Helper()
	return bootDiskDirFor(t, harness.BootParts(t), recipe, marker)
}

// bootDiskDirFor is bootDiskDir with the parts of a kit, of any
// architecture.
func bootDiskDirFor(t *testing.T, kit *harness.BootKit, recipe, marker string) string {
	t.Helper()
	dir := harness.TempDirFor65534(t)
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe})
	writeBaseTar(t, filepath.Join(dir, "base.tar"), bootDiskTree(t, kit, harness.BootTreeOptions{Marker: marker, Modules: harness.BootModuleGlobs}))
	return dir
}

// bootDiskTree is kit's tree for o with systemd-boot where the raw writer
// looks for it.
func bootDiskTree(t *testing.T, kit *harness.BootKit, o harness.BootTreeOptions) *rootfs.Tree {
	t.Helper()
	tree := kit.Tree(t, o)
	efi, err := os.ReadFile(kit.SystemdBoot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Create("/usr/lib/systemd/boot/efi/"+filepath.Base(kit.SystemdBoot),
		rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: harness.DefaultEpoch}, strings.NewReader(string(efi))); err != nil {
		t.Fatal(err)
	}
	return tree
}

// writeBaseTar writes tree as a tar at p that uid 65534 can read.
func writeBaseTar(t *testing.T, p string, tree *rootfs.Tree) {
	t.Helper()
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := formats.WriteTar(context.Background(), tree.View(), f, formats.TarOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
}

// sameAs65534 builds recipe.yaml in dir again as uid 65534 and fails the
// test unless each of names has the sum it has in out, the root build's
// output directory.
func sameAs65534(t *testing.T, dir, out string, names ...string) {
	t.Helper()
	other := filepath.Join(harness.TempDirFor65534(t), "out")
	stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", other).mustSucceed(t)
	a, b := diskSums(t, out), diskSums(t, other)
	for _, name := range names {
		if a[name] == "" || a[name] != b[name] {
			t.Errorf("%s: %q as root, %q as uid 65534", name, a[name], b[name])
		}
	}
}
