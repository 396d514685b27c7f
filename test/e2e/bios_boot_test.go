package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/test/harness"
)

const biosBootRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: bios-boot
arch: amd64
epoch: 1700000000
base:
  tarball: ./base.tar
outputs:
  - format: raw
    boot: {loader: systemd-boot, cmdline: "console=ttyS0 panic=-1", bios: true}
  - {format: vmdk, from: raw}
  - {format: ova, firmware: bios}
`

// TestDiskBootsBIOS builds a hybrid raw disk from the boot test's tree of
// real Debian parts, with GRUB's i386-pc modules from the host, and boots
// the same file twice: under SeaBIOS (qemu's default firmware: the MBR's
// boot.img → core.img in the BIOS boot partition → the kernel and
// initramfs on the ESP) and under OVMF (systemd-boot, as TestDiskBoots),
// each to the marker /sbin/init prints from the ext4 root; the
// stream-optimized VMDK made from it (the disk an OVA carries) boots under
// SeaBIOS too. sgdisk, fsck.vfat
// and e2fsck find the disk clean; the build runs as root and again as uid
// 65534 in another directory, and the raw and its OVA (which describes a
// BIOS machine) are the same bytes both times; stamp verify agrees.
func TestDiskBootsBIOS(t *testing.T) {
	t.Parallel()
	harness.RequireTools(t, "qemu-system-x86_64", "sgdisk", "fsck.vfat", "e2fsck", "dd", "grub-mkimage")
	const marker = "stamp-bios-boot: the root file system is up"
	dir := bootDiskDir(t, biosBootRecipe, marker)

	out := filepath.Join(dir, "out")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out).mustSucceed(t)
	raw := filepath.Join(out, "bios-boot.raw")

	checkRawDisk(t, raw, disk.TypeBIOSBoot, disk.TypeESP, disk.TypeRootAMD64)
	for _, p := range []string{raw, filepath.Join(out, "bios-boot.ova")} {
		stamp(t, dir, nil, "inspect", "--check", p).mustSucceed(t)
	}

	sameAs65534(t, dir, out, "bios-boot.raw", "bios-boot.vmdk", "bios-boot.ova")

	// stamp verify varies more (umask, time zone, locale, GOMAXPROCS,
	// reversed directory reads, the work directory) and compares.
	stamp(t, dir, nil, "verify", "recipe.yaml", "-o", filepath.Join(dir, "verify")).mustSucceed(t)

	drive := "file=" + raw + ",format=raw,if=virtio"
	// SeaBIOS is qemu's own firmware: no -bios.
	bios := harness.RunQEMU(t, []string{"-m", "1024", "-drive", drive, "-snapshot"}, marker, 6*time.Minute)
	uefi := harness.RunQEMU(t, []string{"-bios", harness.OVMFPath, "-m", "1024", "-drive", drive, "-snapshot"}, marker, 6*time.Minute)
	harness.RunQEMU(t, []string{"-m", "1024", "-drive", "file=" + filepath.Join(out, "bios-boot.vmdk") + ",format=vmdk,if=virtio", "-snapshot"}, marker, 6*time.Minute)
	// GRUB gives the kernel the command line systemd-boot gives it, each
	// after a word of its own (BOOT_IMAGE=, initrd=).
	if a, b := commandLine(bios), commandLine(uefi); a == "" || a != b {
		t.Errorf("the kernel's command line under BIOS is %q, under UEFI %q", a, b)
	} else if !strings.Contains(a, "root=PARTUUID=") || !strings.HasSuffix(a, " ro console=ttyS0 panic=-1") {
		t.Errorf("the kernel's command line: %q", a)
	}
}

// commandLine is the command line the kernel logs it was given, without
// the word the loader puts first.
func commandLine(log string) string {
	for _, l := range strings.Split(log, "\n") {
		if _, c, ok := strings.Cut(l, "] Command line: "); ok {
			c = strings.TrimSpace(c)
			if w, rest, _ := strings.Cut(c, " "); strings.HasPrefix(w, "BOOT_IMAGE=") || strings.HasPrefix(w, "initrd=") {
				c = rest
			}
			return c
		}
	}
	return ""
}

// checkRawDisk runs the real validators on a raw disk: sgdisk -v on the
// GPT, whose partitions must have the types given, in order; fsck.vfat -n
// on each ESP and e2fsck -fn on each root, each copied out with dd.
func checkRawDisk(t *testing.T, raw string, types ...string) {
	t.Helper()
	if b, err := exec.Command(harness.Tool(t, "sgdisk"), "-v", raw).CombinedOutput(); err != nil ||
		!strings.Contains(string(b), "No problems found") || strings.Contains(string(b), "Warning") {
		t.Fatalf("sgdisk -v: %v\n%s", err, b)
	}
	f, err := os.Open(raw)
	if err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	_, parts, err := disk.ReadGPT(f, fi.Size())
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range parts {
		got = append(got, p.Type)
	}
	if !slices.Equal(got, types) {
		t.Fatalf("partition types %v, want %v", got, types)
	}
	for _, p := range parts {
		var tool []string
		switch p.Type {
		case disk.TypeESP:
			tool = []string{"fsck.vfat", "-n"}
		case disk.TypeRootAMD64:
			tool = []string{"e2fsck", "-fn"}
		default:
			continue
		}
		img := filepath.Join(t.TempDir(), p.Name+".img")
		if b, err := exec.Command("dd", "if="+raw, "of="+img, "bs=1M", "conv=sparse", "status=none",
			"skip="+strconv.FormatInt(p.Start>>20, 10), "count="+strconv.FormatInt(p.Size>>20, 10)).CombinedOutput(); err != nil {
			t.Fatalf("dd: %v\n%s", err, b)
		}
		if b, err := exec.Command(harness.Tool(t, tool[0]), append(tool[1:], img)...).CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", strings.Join(tool, " "), p.Name, err, b)
		}
	}
}
