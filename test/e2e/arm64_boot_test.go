package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/rootfs/sandbox"
	"github.com/stamp-dev/stamp/test/harness"
)

const arm64BootRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: arm64-boot
arch: arm64
epoch: 1700000000
base:
  tarball: ./base.tar
outputs:
  - format: raw
    boot: {loader: systemd-boot, cmdline: "console=ttyAMA0 panic=-1"}
  - {format: pxe, boot: {cmdline: "console=ttyAMA0 panic=-1"}}
`

// arm64BootTimeout bounds one boot of qemu-system-aarch64 under TCG on an
// amd64 host, firmware included.
const arm64BootTimeout = 6 * time.Minute

// TestARM64Boots builds, on this amd64 machine, an arm64 raw disk and PXE
// bundle from a tree of Debian's arm64 parts (kernel, modules,
// busybox-static, systemd-bootaa64.efi), as root and as uid 65534, with the
// same bytes, which stamp verify confirms, and boots both under
// qemu-system-aarch64 -M virt with AAVMF: the raw through systemd-boot
// (BOOTAA64.EFI) → the kernel and the raw format's initramfs → the ext4
// root (the arm64 root partition type) by PARTUUID → /sbin/init; the
// bundle's kernel and initramfs handed to AAVMF as qemu's -kernel and
// -initrd (AAVMF has no iPXE to fetch them), started through the kernel's
// EFI stub. Each init prints the marker.
func TestARM64Boots(t *testing.T) {
	t.Parallel()
	harness.RequireSetpriv(t)
	harness.RequireTools(t, "qemu-system-aarch64", "qemu-aarch64-static", "sgdisk")
	const marker = "stamp-arm64-boot: the root file system is up"
	kit := harness.BootPartsFor(t, "arm64")
	dir := bootDiskDirFor(t, kit, arm64BootRecipe, marker)

	out := filepath.Join(dir, "out")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out).mustSucceed(t)
	other := filepath.Join(harness.TempDirFor65534(t), "out")
	stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", other).mustSucceed(t)
	a, b := diskSums(t, out), diskSums(t, other)
	for _, name := range []string{"arm64-boot.raw", "arm64-boot.pxe/vmlinuz", "arm64-boot.pxe/initrd.img",
		"arm64-boot.pxe/boot.ipxe", "arm64-boot.pxe/pxelinux.cfg/default", "arm64-boot.pxe/SHA256SUMS"} {
		if a[name] == "" || a[name] != b[name] {
			t.Errorf("%s: %q as root, %q as uid 65534", name, a[name], b[name])
		}
	}

	// verify builds twice more under a varied environment and compares
	// both with the first build's sums, reading the outputs back on a
	// difference.
	stamp(t, dir, nil, "verify", "recipe.yaml", "--cache-dir", filepath.Join(dir, "verify-cache"),
		"--against", filepath.Join(out, "SHA256SUMS")).mustSucceed(t)

	raw := filepath.Join(out, "arm64-boot.raw")
	if b, err := exec.Command(harness.Tool(t, "sgdisk"), "-v", raw).CombinedOutput(); err != nil ||
		!strings.Contains(string(b), "No problems found") || strings.Contains(string(b), "Warning") {
		t.Fatalf("sgdisk -v: %v\n%s", err, b)
	}
	stamp(t, dir, nil, "inspect", "--check", raw).mustSucceed(t)
	manifest, err := os.ReadFile(filepath.Join(out, "manifest.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"\nesp:/EFI/BOOT/BOOTAA64.EFI type=file", "\nesp:/initrd.img type=file"} {
		if !strings.Contains(string(manifest), w) {
			t.Errorf("manifest.txt lacks %q", w)
		}
	}
	info, err := exec.Command(harness.Tool(t, "sgdisk"), "-i", "2", raw).CombinedOutput()
	if err != nil || !strings.Contains(string(info), "B921B045-1DF0-41C3-AF44-4C6F280D3FAE") {
		t.Errorf("the root partition is not of the arm64 root type: %v\n%s", err, info)
	}
	// The bundle's kernel is the arm64 Image itself.
	kernel, err := os.ReadFile(filepath.Join(out, "arm64-boot.pxe", formats.PXEKernel))
	if err != nil || len(kernel) < 0x40 || string(kernel[0x38:0x3c]) != "ARM\x64" {
		t.Errorf("the bundle's kernel is not an arm64 Image (%v)", err)
	}

	harness.RunQEMUFor(t, "arm64", []string{"-bios", kit.OVMF, "-m", "1024",
		"-drive", "file=" + raw + ",format=raw,if=virtio", "-snapshot"}, marker, arm64BootTimeout)
	pxe := filepath.Join(out, "arm64-boot.pxe")
	// AAVMF starts the bundle's kernel through its EFI stub, as firmware
	// that fetched it over the network would.
	harness.RunQEMUFor(t, "arm64", []string{"-bios", kit.OVMF, "-m", "1024",
		"-kernel", filepath.Join(pxe, formats.PXEKernel), "-initrd", filepath.Join(pxe, formats.PXEInitrd),
		"-append", "console=ttyAMA0 panic=-1"}, marker, arm64BootTimeout)
}

// An arm64 recipe that asks for what arm64 does not have, or a tree whose
// kernel is another architecture's, fails before an output is written,
// naming the field.
func TestARM64Refusals(t *testing.T) {
	harness.RequireSetpriv(t)
	kit := harness.BootPartsFor(t, "arm64")
	const head = "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: arm64-refused\narch: %s\nepoch: 1700000000\nbase: {tarball: ./base.tar}\noutputs:\n"
	cases := []struct {
		name, arch, outputs string
		wants               []string
	}{
		{"legacy BIOS", "arm64", "  - {format: raw, boot: {loader: systemd-boot, bios: true}}\n", []string{"boot.bios", "amd64"}},
		{"shim", "arm64", "  - {format: raw, boot: {loader: shim}}\n", []string{"boot.loader", "shim", "amd64"}},
		{"ova", "arm64", "  - {format: raw, boot: {loader: systemd-boot}}\n  - {format: ova, from: raw}\n", []string{"arch arm64"}},
		// A run step runs the image's programs, which this amd64 machine
		// cannot without a binfmt handler (stamp's tests register none).
		{"run", "arm64", "  - {format: tar}\ncustomize:\n  layers:\n    - run: {command: [/bin/true]}\n", []string{"customize.layers[0]", "programs of the arm64 image", "binfmt_misc"}},
		// The tree's kernel is an arm64 Image, the recipe says amd64.
		{"an arm64 kernel in an amd64 bundle", "amd64", "  - {format: pxe}\n", []string{"pxe: arch: the recipe's arch is amd64", "is an arm64 Image"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := bootDiskDirFor(t, kit, fmt.Sprintf(head, c.arch)+c.outputs, "never printed")
			out := filepath.Join(dir, "out")
			res := stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir)
			if c.name == "run" && sandbox.CheckArch("arm64") == nil {
				// A machine whose root registered qemu's binfmt handler
				// runs the image's programs: the step is no refusal there.
				res.mustSucceed(t)
				return
			}
			res.mustFail(t, 1, c.wants...)
			if files := finalFiles(t, out); len(files) > 0 {
				t.Errorf("a failed build left %v", files)
			}
			t.Logf("%s", strings.TrimSpace(res.stderr[strings.LastIndex(strings.TrimSpace(res.stderr), "\n")+1:]))
		})
	}
}
