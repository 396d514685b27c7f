package formats

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/fat"
	"github.com/stamp-dev/stamp/disk/iso9660"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// isoTestTree is a live tree (busybox, the modules the live initramfs
// loads) with Debian's systemd-boot.
func isoTestTree(t *testing.T) (*rootfs.Tree, *harness.BootKit) {
	t.Helper()
	k := harness.BootParts(t)
	tree := k.Tree(t, harness.BootTreeOptions{Marker: "unused", Modules: liveModuleGlobs})
	efi, err := os.ReadFile(k.SystemdBoot)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Create("/usr/lib/systemd/boot/efi/systemd-bootx64.efi",
		rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: harness.DefaultEpoch}, bytes.NewReader(efi)); err != nil {
		t.Fatal(err)
	}
	return tree, k
}

// An iso made from a live bundle is a hybrid ISO 9660 image that xorriso
// checks clean and reports with El Torito's BIOS and UEFI entries; its EFI
// image is a FAT file system fsck.vfat finds clean, holding systemd-boot,
// a loader entry, the bundle's kernel and initramfs byte for byte (the
// initramfs padded to 4 bytes) and its root image in a newc archive; the
// GPT in its system area names the same EFI image as an ESP and GRUB's
// core.img as a BIOS boot partition, with GRUB's boot code in the MBR; it
// reads back as the tree; two writes are the same bytes, and one made
// without a live output reads back as the tree too.
func TestISO(t *testing.T) {
	tree, _ := isoTestTree(t)
	ctx := context.Background()
	src := &Source{Tree: tree.View(), Epoch: harness.DefaultEpoch, Name: "node", Arch: "amd64", Seed: "node", WorkDir: t.TempDir()}
	dir := t.TempDir()
	if _, err := (liveFormat{}).Write(ctx, src, &Spec{Format: "live", Name: "live", Options: &LiveSpec{}}, dir, "node"); err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(dir, "node.live")
	spec := &Spec{Format: "iso", Name: "iso", From: "live", Options: &ISOSpec{Cmdline: "console=ttyS0 panic=-1", BIOS: true}}
	var isos []string
	for i := range 2 {
		out := filepath.Join(t.TempDir())
		s := *src
		s.From = bundle
		res, err := (isoFormat{}).Write(ctx, &s, spec, out, "node")
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Files) != 1 || res.Files[0] != "node.iso" {
			t.Fatalf("files %q", res.Files)
		}
		if i == 0 && (len(res.Adds) != 6 || !strings.Contains(strings.Join(res.Adds, "\n"), "# iso file EFIBOOT.IMG:/root.img the root image")) {
			t.Errorf("manifest lines:\n%s", strings.Join(res.Adds, "\n"))
		}
		isos = append(isos, filepath.Join(out, "node.iso"))
	}
	img, err := os.ReadFile(isos[0])
	if err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(isos[1]); !bytes.Equal(img, again) {
		t.Error("two writes of the iso differ")
	}

	out, err := exec.Command(harness.Tool(t, "xorriso"), "-abort_on", "WARNING", "-indev", isos[0], "-check_media", "--",
		"-report_el_torito", "plain", "-report_system_area", "plain").CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso: %v\n%s", err, out)
	}
	for _, want := range []string{"Media region :          0 ", "+ good", "El Torito boot img :   1  BIOS  y   none", "El Torito boot img :   2  UEFI  y   none",
		"El Torito img opts :   1  boot-info-table", "El Torito img path :   2  /EFIBOOT.IMG", "GPT partname local :   1  esp",
		"GPT type GUID      :   1  28732ac11ff8d211ba4b00a0c93ec93b", "GPT partname local :   2  bios"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("xorriso lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "- bad") || strings.Contains(string(out), "unreadable") {
		t.Errorf("xorriso -check_media:\n%s", out)
	}
	out, err = exec.Command(harness.Tool(t, "isoinfo"), "-d", "-i", isos[0]).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "Volume id: NODE_LIVE") || !strings.Contains(string(out), "El Torito VD version 1 found") {
		t.Errorf("isoinfo -d: %v\n%s", err, out)
	}
	out, err = exec.Command(harness.Tool(t, "sgdisk"), "-v", isos[0]).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "No problems found") {
		t.Errorf("sgdisk -v: %v\n%s", err, out)
	}
	if err := BIOSBoot(bytes.NewReader(img), int64(len(img))); err != nil {
		t.Errorf("the disk's BIOS boot: %v", err)
	}

	v, err := iso9660.Open(bytes.NewReader(img), int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	esp := v.File(ISOEFIImage)
	_, parts, err := disk.ReadGPT(bytes.NewReader(img), int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	if esp == nil || len(parts) != 2 || parts[0].Type != disk.TypeESP || parts[0].Start != esp.Offset || parts[0].Size != esp.Size ||
		parts[1].Type != disk.TypeBIOSBoot || parts[1].Start != v.File(ISOCoreImage).Offset {
		t.Fatalf("the GPT %+v does not name the EFI image %+v and core.img", parts, esp)
	}
	espPath := filepath.Join(t.TempDir(), "esp.img")
	if err := os.WriteFile(espPath, img[esp.Offset:esp.Offset+esp.Size], 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(harness.Tool(t, "fsck.vfat"), "-n", espPath).CombinedOutput(); err != nil {
		t.Errorf("fsck.vfat -n: %v\n%s", err, out)
	}
	ffs, err := fat.Open(bytes.NewReader(img[esp.Offset:esp.Offset+esp.Size]), esp.Size)
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) []byte {
		t.Helper()
		f, err := ffs.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for name, host := range map[string]string{"vmlinuz": LiveKernel, "initrd.img": LiveInitrd} {
		want, _ := os.ReadFile(filepath.Join(bundle, host))
		if name == "initrd.img" {
			want = append(want, make([]byte, (4-len(want)%4)%4)...)
		}
		if !bytes.Equal(read(name), want) {
			t.Errorf("%s is not the bundle's %s (the initramfs padded to 4 bytes)", name, host)
		}
	}
	entry := string(read("loader/entries/live.conf"))
	if entry != "title node (live)\nlinux /vmlinuz\ninitrd /initrd.img\ninitrd /root.img\noptions console=ttyS0 panic=-1\n" {
		t.Errorf("loader entry:\n%s", entry)
	}
	if efi, _ := os.ReadFile(harness.BootParts(t).SystemdBoot); !bytes.Equal(read("EFI/BOOT/BOOTX64.EFI"), efi) {
		t.Error("BOOTX64.EFI is not the tree's systemd-boot")
	}
	// The root archive: what cpio lists, and the bundle's image within.
	archive := read("root.img")
	cmd := exec.Command(harness.Tool(t, "cpio"), "-itv", "--quiet")
	cmd.Stdin = bytes.NewReader(archive)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "-r--------   1 root     root") || !strings.HasSuffix(strings.TrimSpace(string(out)), "stamp/root.erofs") {
		t.Errorf("cpio -itv: %v\n%s", err, out)
	}
	off, n, err := newcSingle(bytes.NewReader(archive), int64(len(archive)), "stamp/root.erofs")
	if err != nil {
		t.Fatal(err)
	}
	root, _ := os.ReadFile(filepath.Join(bundle, LiveRoot))
	if !bytes.Equal(archive[off:off+n], root) {
		t.Error("root.img does not hold the bundle's root image")
	}

	im, err := ReadImage(ctx, isos[0])
	if err != nil {
		t.Fatal(err)
	}
	if im.Format != "iso" || rootfs.Digest(im.Tree.Entries()) != rootfs.Digest(tree.Entries()) {
		t.Errorf("the iso reads back as %s, its tree %s, want %s", im.Format, rootfs.Digest(im.Tree.Entries()), rootfs.Digest(tree.Entries()))
	}
	var extra []string
	for _, e := range im.Extra {
		extra = append(extra, e.Path)
	}
	if got := strings.Join(extra, " "); !strings.Contains(got, "esp:/EFI/BOOT/BOOTX64.EFI") || !strings.Contains(got, "esp:/root.img") {
		t.Errorf("extra entries: %s", got)
	}

	// Made from the tree: the same root image (and initramfs).
	own := t.TempDir()
	if _, err := (isoFormat{}).Write(ctx, src, &Spec{Format: "iso", Name: "iso", Options: &ISOSpec{Cmdline: "console=ttyS0"}}, own, "node"); err != nil {
		t.Fatal(err)
	}
	ownImg, err := os.ReadFile(filepath.Join(own, "node.iso"))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := iso9660.Open(bytes.NewReader(ownImg), int64(len(ownImg)))
	if err != nil {
		t.Fatal(err)
	}
	if len(v2.Boot) != 1 || v2.Boot[0].Platform != iso9660.EFI || v2.File(ISOBIOSImage) != nil {
		t.Errorf("without bios: boot entries %+v", v2.Boot)
	}
	if im, err := ReadImage(ctx, filepath.Join(own, "node.iso")); err != nil || rootfs.Digest(im.Tree.Entries()) != rootfs.Digest(tree.Entries()) {
		t.Errorf("the iso made from the tree does not read back as the tree (%v)", err)
	}
}

// An iso needs systemd-boot in the tree, and BIOS boot only on amd64.
func TestISORefuses(t *testing.T) {
	k := harness.BootParts(t)
	tree := k.Tree(t, harness.BootTreeOptions{Marker: "unused", Modules: liveModuleGlobs})
	src := &Source{Tree: tree.View(), Epoch: harness.DefaultEpoch, Name: "node", Arch: "amd64", Seed: "node", WorkDir: t.TempDir()}
	dir := t.TempDir()
	_, err := (isoFormat{}).Write(context.Background(), src, &Spec{Format: "iso", Name: "iso", Options: &ISOSpec{}}, dir, "node")
	if err == nil || !strings.Contains(err.Error(), "systemd-boot-efi") {
		t.Errorf("no systemd-boot: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node.iso")); err == nil {
		t.Error("a refused iso left its file")
	}
	src.Arch = "arm64"
	_, err = (isoFormat{}).Write(context.Background(), src, &Spec{Format: "iso", Name: "iso", Options: &ISOSpec{BIOS: true}}, dir, "node")
	if err == nil || !strings.Contains(err.Error(), "boot.bios") {
		t.Errorf("bios on arm64: %v", err)
	}
}
