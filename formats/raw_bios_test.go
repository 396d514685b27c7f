package formats

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

// biosSpec is rawSpec with a BIOS boot partition first and BIOS boot on.
func biosSpec() *RawSpec {
	s := rawSpec()
	s.Partitions = append([]PartitionSpec{{Name: "bios", Type: "bios", Size: 1 << 20, Filesystem: "none"}}, s.Partitions...)
	s.Boot.BIOS = true
	return s
}

// TestRawBIOS writes a hybrid disk and checks it as the firmware and the
// tools would read it: sgdisk, fsck.vfat and e2fsck find it clean; the
// protective MBR keeps its partition table and signature under GRUB's boot
// code, which names core.img's first sector; core.img's block list names
// the rest of it; and a second build gives the same bytes. The boot test in
// test/e2e boots such a disk under SeaBIOS and OVMF.
func TestRawBIOS(t *testing.T) {
	harness.RequireTools(t, "sgdisk", "fsck.vfat", "e2fsck", "dd", "grub-mkimage")
	tree := rawTestTree(t, "amd64")
	img, _ := writeRaw(t, rawSource(tree, "amd64"), biosSpec())
	sgdiskClean(t, img)
	_, parts := readGPT(t, img)
	if len(parts) != 3 || parts[0].Type != disk.TypeBIOSBoot || parts[1].Type != disk.TypeESP || parts[0].Start != 1<<20 {
		t.Fatalf("partitions: %+v", parts)
	}
	run(t, "fsck.vfat", "-n", extract(t, img, parts[1]))
	run(t, "e2fsck", "-fn", extract(t, img, parts[2]))

	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := BIOSBoot(bytes.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("BIOSBoot: %v", err)
	}
	bootImg, err := os.ReadFile(filepath.Join(GrubPCDir, "boot.img"))
	if err != nil {
		t.Fatal(err)
	}
	mbr := data[:512]
	first := uint64(parts[0].Start / 512)
	if got := binary.LittleEndian.Uint64(mbr[0x5c:]); got != first {
		t.Errorf("boot.img names sector %d for core.img, want %d", got, first)
	}
	if mbr[0x64] != 0xff || mbr[0x66] != 0x90 || mbr[0x67] != 0x90 {
		t.Errorf("boot drive %#x, drive check % x: want 0xff and nops", mbr[0x64], mbr[0x66:0x68])
	}
	// Apart from what grub-bios-setup patches, the boot code is boot.img's.
	want := bytes.Clone(bootImg[:440])
	copy(want[0x5c:0x68], mbr[0x5c:0x68])
	if !bytes.Equal(mbr[:440], want) {
		t.Error("the MBR's boot code is not boot.img's")
	}
	// The protective MBR's table: one partition of type 0xee, and the signature.
	if mbr[0x1c2] != 0xee || mbr[510] != 0x55 || mbr[511] != 0xaa {
		t.Errorf("protective MBR table: type %#x, signature % x", mbr[0x1c2], mbr[510:])
	}
	core := data[parts[0].Start : parts[0].Start+512]
	if start, n := binary.LittleEndian.Uint64(core[0x1f4:]), binary.LittleEndian.Uint16(core[0x1fc:]); start != first+1 || n == 0 {
		t.Errorf("core.img's block list: %d sectors at %d, want some at %d", n, start, first+1)
	} else if rest := data[parts[0].Start+512*(1+int64(n)) : parts[0].End()]; bytes.Count(rest, []byte{0}) != len(rest) {
		t.Errorf("the BIOS boot partition holds data past core.img's %d sectors", 1+n)
	}
	if tail := core[0x1e8:0x1f4]; bytes.Count(tail, []byte{0}) != len(tail) {
		t.Errorf("core.img's second block list entry is not the terminator: % x", tail)
	}

	im, err := ReadImage(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	var fact string
	for _, f := range im.Facts {
		if f.Key == "bios.loader" {
			fact = f.Value
		}
	}
	if want := "GRUB i386-pc: boot.img in the MBR, core.img of "; !strings.Contains(fact, want) || !strings.HasSuffix(fact, " sectors at sector 2048") {
		t.Errorf("inspect's bios.loader fact: %q", fact)
	}

	again, _ := writeRaw(t, rawSource(rawTestTree(t, "amd64"), "amd64"), biosSpec())
	if a, b := fileSum(t, img), fileSum(t, again); a != b {
		t.Errorf("two builds differ: %s and %s", a, b)
	}

	// Without BIOS boot the same disk has no boot code: BIOSBoot says so.
	plain, _ := writeRaw(t, rawSource(rawTestTree(t, "amd64"), "amd64"), rawSpec())
	f, err := os.Open(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	if err := BIOSBoot(f, fi.Size()); err == nil || !strings.Contains(err.Error(), "no boot code") {
		t.Errorf("BIOSBoot of a UEFI-only disk: %v", err)
	}
}

// TestRawBIOSTreeModules checks GRUB's modules are the tree's when it has
// them: the host's copied into the tree give the same disk, and a tree
// whose set lacks kernel.img fails, naming the tree.
func TestRawBIOSTreeModules(t *testing.T) {
	harness.RequireTools(t, "grub-mkimage")
	hostImg, _ := writeRaw(t, rawSource(rawTestTree(t, "amd64"), "amd64"), biosSpec())

	tree := rawTestTree(t, "amd64")
	copyHostDir(t, tree, GrubPCDir)
	img, _ := writeRaw(t, rawSource(tree, "amd64"), biosSpec())
	// The root file systems differ (one holds the modules); the boot code
	// and core.img do not.
	if a, b := biosBytes(t, hostImg), biosBytes(t, img); !bytes.Equal(a, b) {
		t.Errorf("the host's modules and the same modules in the tree give different boot code or core.img")
	}

	broken := rawTestTree(t, "amd64")
	copyHostDir(t, broken, GrubPCDir)
	if err := broken.Remove(path.Join(GrubPCDir, "kernel.img")); err != nil {
		t.Fatal(err)
	}
	_, err := rawFormat{}.Write(context.Background(), rawSource(broken, "amd64"), &Spec{Format: "raw", Options: biosSpec()}, t.TempDir(), "node")
	if err == nil || !strings.Contains(err.Error(), "boot.bios: grub-mkimage with the modules from the tree") {
		t.Fatalf("tree without kernel.img: %v", err)
	}
}

// TestRawBIOSRefused checks each way BIOS boot cannot be had fails before
// the disk file exists, naming the field.
func TestRawBIOSRefused(t *testing.T) {
	harness.RequireTools(t, "grub-mkimage")
	for _, c := range []struct {
		name string
		arch string
		edit func(s *RawSpec)
		path string // PATH, when not the test's
		want string
	}{
		{"no bios partition", "amd64", func(s *RawSpec) { s.Partitions = s.Partitions[1:] }, "", "boot.bios: BIOS boot needs a partition of type bios"},
		{"no loader", "amd64", func(s *RawSpec) { s.Boot.Loader = "none" }, "", "boot.bios: BIOS boot needs loader systemd-boot"},
		{"quoted cmdline", "amd64", func(s *RawSpec) { s.Boot.Cmdline = `console=ttyS0 x="a b"` }, "", "boot.cmdline:"},
		{"arm64", "arm64", func(s *RawSpec) {}, "", "boot.bios: legacy BIOS boot is for amd64"},
		{"no grub-mkimage", "amd64", func(s *RawSpec) {}, t.TempDir(), "boot.bios: BIOS boot needs grub-mkimage"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.path != "" {
				t.Setenv("PATH", c.path)
			}
			spec := biosSpec()
			c.edit(spec)
			dir := t.TempDir()
			_, err := rawFormat{}.Write(context.Background(), rawSource(rawTestTree(t, c.arch), c.arch), &Spec{Format: "raw", Options: spec}, dir, "node")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("the failed build left %v", ents)
			}
		})
	}
}

func TestGrubBIOSConfig(t *testing.T) {
	got, err := grubBIOSConfig(kernelOptions("11111111-2222-3333-4444-555555555555", " console=ttyS0  $x;y "))
	want := "linux /vmlinuz 'root=PARTUUID=11111111-2222-3333-4444-555555555555' 'ro' 'console=ttyS0' '$x;y'\ninitrd /initrd.img\nboot\n"
	if err != nil || got != want {
		t.Errorf("got %q, %v\nwant %q", got, err, want)
	}
}

// copyHostDir copies the regular files of a host directory into the tree
// at the same path.
func copyHostDir(t *testing.T, tree *rootfs.Tree, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		rootfstest.File(t, tree, path.Join(dir, e.Name()), 0o644, tarEpoch, string(b))
	}
}

func fileSum(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256Hex(string(b))
}

// biosBytes is the MBR's boot code and the first partition of a disk.
func biosBytes(t *testing.T, img string) []byte {
	t.Helper()
	_, parts := readGPT(t, img)
	data, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	return append(data[:440:440], data[parts[0].Start:parts[0].End()]...)
}

// TestOVABIOS: an ova of a disk that boots by BIOS may describe a BIOS
// machine, and its descriptor says so.
func TestOVABIOS(t *testing.T) {
	harness.RequireTools(t, "grub-mkimage")
	tree := rawTestTree(t, "amd64")
	img, _ := writeRaw(t, rawSource(tree, "amd64"), biosSpec())
	src := rawSource(tree, "amd64")
	src.From, src.WorkDir = img, t.TempDir()
	dir := t.TempDir()
	res, err := ovaFormat{}.Write(context.Background(), src, &Spec{Format: "ova", Name: "ova", From: "raw",
		Options: &OVASpec{Firmware: "bios"}}, dir, "node")
	if err != nil {
		t.Fatal(err)
	}
	im, err := ReadImage(context.Background(), filepath.Join(dir, res.Files[0]))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range im.Facts {
		found = found || f == Fact{"ova.firmware", "bios"}
	}
	if !found {
		t.Errorf("the OVF states no BIOS firmware: %v", im.Facts)
	}
}

// TestBIOSDiskNamesItsHostFiles: the cache keys a BIOS disk on the host's
// grub-mkimage and modules, which its writer runs and reads; a disk without
// BIOS boot reads neither.
func TestBIOSDiskNamesItsHostFiles(t *testing.T) {
	var hr HostReader = &RawSpec{Boot: &BootSpec{Loader: "systemd-boot", BIOS: true}}
	mkimage, err := exec.LookPath("grub-mkimage")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := hr.HostFiles(), []string{mkimage, GrubPCDir}; !slices.Equal(got, want) {
		t.Errorf("HostFiles = %q, want %q", got, want)
	}
	for _, s := range []*RawSpec{{}, {Boot: &BootSpec{Loader: "systemd-boot"}}} {
		if got := s.HostFiles(); got != nil {
			t.Errorf("%+v: HostFiles = %q, want none", s.Boot, got)
		}
	}
}
