package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/test/harness"
)

// The Secure Boot test's disks: the shim disk and the qcow2 made from it,
// and the same tree with systemd-boot, which is not signed.
const secureBootRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: secure-boot
arch: amd64
epoch: 1700000000
base:
  tarball: ./base.tar
outputs:
  - format: raw
    boot: {loader: shim, cmdline: "console=ttyS0 panic=-1"}
  - {format: qcow2, from: raw}
  - format: raw
    name: unsigned
    boot: {loader: systemd-boot, cmdline: "console=ttyS0 panic=-1"}
`

// A tree without Debian's signed shim and GRUB asks for Secure Boot.
const secureBootUnsignedRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: no-shim
arch: amd64
epoch: 1700000000
base:
  tarball: ./base-unsigned.tar
outputs:
  - {format: tar}
  - format: raw
    boot: {loader: shim}
`

// efiGlobalVariable is the vendor GUID of the UEFI specification's global
// variables, SecureBoot among them.
const efiGlobalVariable = "8be4df61-93ca-11d2-aa0d-00e098032b8c"

// secureBootInit is the boot tree's /sbin/init: it loads efivarfs (a
// module, which the kernel, locked down by Secure Boot, loads only when
// signed), reads the SecureBoot variable (four bytes of attributes, then
// the value: 1 when the firmware enforces Secure Boot) and says what it
// found. The marker is printed in two pieces, so the script's text is not
// itself the marker.
const secureBootInit = `mount -t sysfs sysfs /sys
insmod /lib/modules/$(uname -r)/kernel/fs/efivarfs/efivarfs.ko
mount -t efivarfs efivarfs /sys/firmware/efi/efivars
set -- $(od -An -tu1 /sys/firmware/efi/efivars/SecureBoot-` + efiGlobalVariable + `)
eval value=\${$#}
echo "SecureBoot variable: $*"
if [ "$value" = 1 ]; then echo "stamp-secure-boot: Secure Boot is" "on"; fi
`

const secureBootMarker = "stamp-secure-boot: Secure Boot is on"

// TestDiskBootsSecureBoot builds a raw disk with loader shim from the boot
// test's tree of real Debian parts (the Debian-signed kernel of
// linux-image-*-amd64, with shim-signed, shim-helpers-amd64-signed and
// grub-efi-amd64-signed unpacked where they install) and boots it under
// OVMF with Microsoft's keys enrolled and Secure Boot enforced: the
// firmware checks shim against Microsoft's key, shim checks GRUB and GRUB
// has shim check the kernel against Debian's; the init on the ext4 root
// reads the SecureBoot variable and prints that it is on. The same tree
// with systemd-boot, which nobody signed, does not boot under that
// firmware. sgdisk, fsck.vfat and e2fsck find the disk clean, inspect
// --check reads it and its qcow2 back, a build as uid 65534 gives the same
// bytes as one as root, and stamp verify agrees. A tree without the signed
// parts fails the build before any output is written, naming boot.loader.
func TestDiskBootsSecureBoot(t *testing.T) {
	t.Parallel()
	harness.RequireTools(t, "qemu-system-x86_64", "sgdisk", "fsck.vfat", "e2fsck", "dd")
	signed := harness.SignedBootParts(t)
	opts := harness.BootTreeOptions{Marker: secureBootMarker, Init: secureBootInit,
		Modules: append([]string{"kernel/fs/efivarfs"}, harness.BootModuleGlobs...)}
	tree := bootDiskTree(t, harness.BootParts(t), opts)
	signed.AddTo(t, tree)
	dir := harness.TempDirFor65534(t)
	writeFiles(t, dir, map[string]string{"recipe.yaml": secureBootRecipe, "unsigned.yaml": secureBootUnsignedRecipe})
	writeBaseTar(t, filepath.Join(dir, "base.tar"), tree)
	writeBaseTar(t, filepath.Join(dir, "base-unsigned.tar"), harness.BootParts(t).Tree(t, opts))

	// Without the signed parts, nothing is written.
	refused := filepath.Join(dir, "refused")
	stamp(t, dir, nil, "build", "unsigned.yaml", "-o", refused).mustFail(t, 1,
		"boot.loader: Secure Boot with shim needs "+formats.ShimSigned+" in the tree (Debian's shim-signed package)")
	if left, _ := os.ReadDir(refused); len(left) != 0 {
		t.Errorf("a refused build left %v", left)
	}

	out := filepath.Join(dir, "out")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out).mustSucceed(t)
	raw := filepath.Join(out, "secure-boot.raw")
	checkRawDisk(t, raw, disk.TypeESP, disk.TypeRootAMD64)
	const fact = "secure-boot: shim: /EFI/BOOT/BOOTX64.EFI signed, /EFI/BOOT/grubx64.efi signed, /vmlinuz signed"
	for _, p := range []string{raw, filepath.Join(out, "secure-boot.qcow2")} {
		stamp(t, dir, nil, "inspect", "--check", p).mustSucceed(t)
		if r := stamp(t, dir, nil, "inspect", p).mustSucceed(t); !strings.Contains(r.stdout, fact) {
			t.Errorf("inspect %s does not say %q:\n%s", filepath.Base(p), fact, r.stdout)
		}
	}

	sameAs65534(t, dir, out, "secure-boot.raw", "secure-boot.qcow2", "secure-boot-unsigned.raw")
	stamp(t, dir, nil, "verify", "recipe.yaml", "-o", filepath.Join(dir, "verify")).mustSucceed(t)

	boot := func(p, format string) []string {
		return append(harness.SecureBootQEMU(t), "-m", "1024", "-nic", "none", "-snapshot",
			"-drive", "file="+p+",format="+format+",if=virtio")
	}
	log := harness.RunQEMU(t, boot(raw, "raw"), secureBootMarker, 6*time.Minute)
	if !strings.Contains(log, "secureboot: Secure boot enabled") {
		t.Errorf("the kernel does not say Secure Boot is enabled")
	}
	for _, l := range strings.Split(log, "\n") {
		if strings.HasPrefix(l, "SecureBoot variable: ") {
			t.Log(strings.TrimSpace(l))
		}
	}
	if c := commandLine(log); !strings.Contains(c, "root=PARTUUID="+disk.FormatUUID(disk.PartitionGUID("secure-boot", "root"))) ||
		!strings.HasSuffix(c, " ro console=ttyS0 panic=-1") {
		t.Errorf("the kernel's command line: %q", c)
	}
	harness.RunQEMU(t, boot(filepath.Join(out, "secure-boot.qcow2"), "qcow2"), secureBootMarker, 6*time.Minute)

	// systemd-boot is not signed: the firmware refuses it (within seconds
	// here) and no kernel starts. The firmware then waits in its boot menu,
	// so the run ends by the timeout.
	r := harness.BootQEMU(t, boot(filepath.Join(out, "secure-boot-unsigned.raw"), "raw"), time.Minute)
	if strings.Contains(r.Log, "Linux version") || strings.Contains(r.Log, secureBootMarker) ||
		!strings.Contains(r.Log, "Access Denied") || !strings.Contains(r.Log, "No bootable option") {
		t.Errorf("systemd-boot under Secure Boot: the firmware did not refuse it (timed out %t after %s); log ends:\n%s", r.TimedOut, r.Took, r.Tail(30))
	}
	for _, l := range strings.Split(r.Log, "\n") {
		if strings.Contains(l, "Access Denied") {
			t.Log(strings.TrimSpace(l))
		}
	}
}
