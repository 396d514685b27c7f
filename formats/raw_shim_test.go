package formats

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

// fakePE is a PE32+ image holding body, with an Authenticode certificate
// table when signed: what peSigned looks at, and no more (these tests
// check structure; the boot test in test/e2e boots the real parts).
func fakePE(body string, signed bool) string {
	b := make([]byte, 512)
	copy(b, "MZ")
	binary.LittleEndian.PutUint32(b[peHeaderOffset:], 0x40)
	copy(b[0x40:], "PE\x00\x00")
	binary.LittleEndian.PutUint16(b[0x40+peOptionalHeader:], 0x20b)
	b = append(b, body...)
	if signed {
		cert := make([]byte, 8, 16)
		cert = append(cert, "pkcs7 ..."...)
		binary.LittleEndian.PutUint32(cert, uint32(len(cert)))
		binary.LittleEndian.PutUint16(cert[4:], 0x200)
		binary.LittleEndian.PutUint16(cert[6:], certPKCSSigned)
		dir := 0x40 + peOptionalHeader + peCertTable64
		binary.LittleEndian.PutUint32(b[dir:], uint32(len(b)))
		binary.LittleEndian.PutUint32(b[dir+4:], uint32(len(cert)))
		b = append(b, cert...)
	}
	return string(b)
}

// shimTestTree is rawTestTree with Debian's signed boot parts: shim,
// MokManager, GRUB, and a signed kernel.
func shimTestTree(t testing.TB) *rootfs.Tree {
	t.Helper()
	tree := rawTestTree(t, "amd64")
	for p, body := range shimTestFiles {
		rootfstest.File(t, tree, p, 0o644, tarEpoch, fakePE(body, true))
	}
	return tree
}

var shimTestFiles = map[string]string{
	ShimSigned:                   "shim",
	MokManagerSigned:             "mokmanager",
	GrubEFISigned:                "grub",
	"/boot/vmlinuz-" + rawKernel: "new kernel " + strings.Repeat("k", 100000),
}

func shimSpec() *RawSpec {
	s := rawSpec()
	s.Boot.Loader = "shim"
	s.Boot.Cmdline = "console=ttyS0 panic=-1"
	return s
}

// TestRawShim writes a Secure Boot disk and reads its ESP back as the
// firmware and the tools would: sgdisk and fsck.vfat find it clean; shim
// is the removable media boot file with signed GRUB and MokManager beside
// it, /EFI/debian/grub.cfg (signed GRUB's prefix) boots the ESP's kernel
// and initramfs with systemd-boot's command line; the manifest's adds are
// what is read back; and a second build gives the same bytes.
func TestRawShim(t *testing.T) {
	harness.RequireTools(t, "sgdisk", "fsck.vfat", "mcopy", "dd")
	img, res := writeRaw(t, rawSource(shimTestTree(t), "amd64"), shimSpec())
	sgdiskClean(t, img)
	_, parts := readGPT(t, img)
	esp := extract(t, img, parts[0])
	run(t, "fsck.vfat", "-n", esp)
	out := t.TempDir()
	run(t, "mcopy", "-s", "-n", "-i", esp, "::*", out+"/")
	partuuid := disk.FormatUUID(disk.PartitionGUID("node", "root"))
	want := map[string]string{
		"EFI/BOOT/BOOTX64.EFI": fakePE("shim", true),
		"EFI/BOOT/grubx64.efi": fakePE("grub", true),
		"EFI/BOOT/mmx64.efi":   fakePE("mokmanager", true),
		"EFI/debian/grub.cfg": "# Written by stamp: boot the ESP's kernel and initramfs.\n" +
			"linux /vmlinuz 'root=PARTUUID=" + partuuid + "' 'ro' 'console=ttyS0' 'panic=-1'\ninitrd /initrd.img\nboot\n",
		"vmlinuz":    fakePE("new kernel "+strings.Repeat("k", 100000), true),
		"initrd.img": "initrd " + strings.Repeat("i", 50000),
	}
	var got []string
	filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			rel, _ := filepath.Rel(out, p)
			got = append(got, rel)
		}
		return nil
	})
	if len(got) != len(want) {
		t.Errorf("the ESP holds %v, want %d files", got, len(want))
	}
	for p, content := range want {
		b, err := os.ReadFile(filepath.Join(out, p))
		if err != nil || string(b) != content {
			t.Errorf("ESP %s: %v\n%q\nwant\n%q", p, err, clip(b), clip([]byte(content)))
		}
	}
	if back := readAdds(t, img, nil); !slices.Equal(back, res.Adds) {
		t.Errorf("the adds read back differ from those planned:\n%s\nplanned:\n%s", strings.Join(back, "\n"), strings.Join(res.Adds, "\n"))
	}
	im, err := ReadImage(t.Context(), img)
	if err != nil {
		t.Fatal(err)
	}
	fact := Fact{"secure-boot", "shim: /EFI/BOOT/BOOTX64.EFI signed, /EFI/BOOT/grubx64.efi signed, /vmlinuz signed"}
	if len(im.Filesystems) == 0 || !slices.Contains(im.Filesystems[0].Facts, fact) {
		t.Errorf("inspect's facts of the ESP lack %v", fact)
	}
	again, _ := writeRaw(t, rawSource(shimTestTree(t), "amd64"), shimSpec())
	if a, b := fileSum(t, img), fileSum(t, again); a != b {
		t.Errorf("two builds differ: %s and %s", a, b)
	}

	// MokManager is shim's helper, not needed to boot: a tree without it
	// gets an ESP without it.
	tree := shimTestTree(t)
	if err := tree.Remove(MokManagerSigned); err != nil {
		t.Fatal(err)
	}
	_, res = writeRaw(t, rawSource(tree, "amd64"), shimSpec())
	if adds := strings.Join(res.Adds, "\n"); strings.Contains(adds, "mmx64") || !strings.Contains(adds, "esp:/EFI/BOOT/grubx64.efi ") {
		t.Errorf("adds without MokManager:\n%s", adds)
	}
}

// TestRawShimRefusals: a Secure Boot disk without one of its signed parts
// in the tree, or with one unsigned, fails before the disk file exists,
// naming boot.loader, the file and the Debian package it comes from.
func TestRawShimRefusals(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(t *testing.T, tree *rootfs.Tree) // nil: leave the tree
		arch string
		want string
	}{
		{"no shim", remove(ShimSigned), "amd64", "boot.loader: Secure Boot with shim needs " + ShimSigned + " in the tree (Debian's shim-signed package)"},
		{"unsigned shim", unsign(ShimSigned), "amd64", "needs a signed " + ShimSigned + " (Debian's shim-signed package): it carries no signature"},
		{"no grub", remove(GrubEFISigned), "amd64", GrubEFISigned + " in the tree (Debian's grub-efi-amd64-signed package)"},
		{"grub not PE", func(t *testing.T, tree *rootfs.Tree) {
			rootfstest.File(t, tree, GrubEFISigned, 0o644, tarEpoch, "#!/bin/sh")
		}, "amd64", "grub-efi-amd64-signed package): not a PE/COFF image"},
		{"unsigned mokmanager", unsign(MokManagerSigned), "amd64", "shim-helpers-amd64-signed"},
		{"unsigned kernel", unsign("/boot/vmlinuz-" + rawKernel), "amd64", "boot.loader: Secure Boot with shim needs a kernel signed by Debian (linux-image-*-amd64), but /boot/vmlinuz-" + rawKernel + " is not: it carries no signature"},
		{"no kernel", func(t *testing.T, tree *rootfs.Tree) {
			for _, v := range []string{rawKernel, rawOldKernel} {
				if err := tree.Remove("/boot/vmlinuz-" + v); err != nil {
					t.Fatal(err)
				}
			}
		}, "amd64", "boot.loader: shim needs a kernel in /boot"},
		{"arm64", nil, "arm64", "boot.loader: shim is Debian's signed shim for amd64, not arm64"},
		{"quote", nil, "amd64", `boot.cmdline: "console=ttyS0 x=\"a b\"": signed GRUB cannot pass quotes or backslashes`},
	} {
		t.Run(c.name, func(t *testing.T) {
			tree := shimTestTree(t)
			if c.edit != nil {
				c.edit(t, tree)
			}
			dir := t.TempDir()
			spec := shimSpec()
			if c.name == "quote" {
				spec.Boot.Cmdline = `console=ttyS0 x="a b"`
			}
			_, err := rawFormat{}.Write(t.Context(), rawSource(tree, c.arch), &Spec{Format: "raw", Name: "raw", Options: spec}, dir, "node")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("a failed build left %v", left)
			}
		})
	}
}

func remove(p string) func(*testing.T, *rootfs.Tree) {
	return func(t *testing.T, tree *rootfs.Tree) {
		if err := tree.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}

func unsign(p string) func(*testing.T, *rootfs.Tree) {
	return func(t *testing.T, tree *rootfs.Tree) {
		rootfstest.File(t, tree, p, 0o644, tarEpoch, fakePE("unsigned", false))
	}
}

// TestPESigned reads real Debian binaries: the kernel of
// linux-image-*-amd64 and Debian's shim and GRUB are signed, systemd-boot
// (systemd-boot-efi) is not.
func TestPESigned(t *testing.T) {
	kit := harness.BootParts(t)
	sb := harness.SignedBootParts(t)
	for p, signed := range map[string]bool{kit.Vmlinuz: true, sb.Shim: true, sb.Grub: true, sb.MokManager: true, kit.SystemdBoot: false} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		err = peSigned(bytes.NewReader(b), int64(len(b)))
		if signed != (err == nil) {
			t.Errorf("%s: signed %t, got %v", filepath.Base(p), signed, err)
		}
	}
}

// TestRawShimBIOS: a Secure Boot disk may boot BIOS machines too: GRUB for
// i386-pc in the BIOS boot partition boots the same kernel and initramfs,
// and the ESP is the one loader shim lays out without BIOS.
func TestRawShimBIOS(t *testing.T) {
	harness.RequireTools(t, "sgdisk", "grub-mkimage")
	spec := shimSpec()
	spec.Partitions = append([]PartitionSpec{{Name: "bios", Type: "bios", Size: 1 << 20, Filesystem: "none"}}, spec.Partitions...)
	spec.Boot.BIOS = true
	img, res := writeRaw(t, rawSource(shimTestTree(t), "amd64"), spec)
	sgdiskClean(t, img)
	if err := rawBootsBIOS(img); err != nil {
		t.Errorf("BIOSBoot: %v", err)
	}
	_, plain := writeRaw(t, rawSource(shimTestTree(t), "amd64"), shimSpec())
	if !slices.Equal(res.Adds, plain.Adds) {
		t.Errorf("the ESP with BIOS boot:\n%s\nwithout:\n%s", strings.Join(res.Adds, "\n"), strings.Join(plain.Adds, "\n"))
	}
}
