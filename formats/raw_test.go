package formats

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/fat"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

const (
	rawOldKernel = "6.1.0-9-amd64"
	rawKernel    = "6.1.0-10-amd64"
)

// rawTestTree is a small tree with what systemd-boot needs (fake binaries:
// these tests check structure, the boot test in test/e2e boots).
func rawTestTree(t testing.TB, arch string) *rootfs.Tree {
	t.Helper()
	tree := rootfstest.New(t, tarEpoch)
	efi := map[string]string{"amd64": "systemd-bootx64.efi", "arm64": "systemd-bootaa64.efi"}[arch]
	files := []struct {
		path, content string
		perm          uint32
	}{
		{"/usr/lib/systemd/boot/efi/" + efi, "MZ fake systemd-boot for " + arch, 0o644},
		{"/boot/vmlinuz-" + rawOldKernel, "old kernel", 0o644},
		{"/boot/vmlinuz-" + rawKernel, "new kernel " + strings.Repeat("k", 100000), 0o644},
		{"/boot/initrd.img-" + rawKernel, "initrd " + strings.Repeat("i", 50000), 0o644},
		{"/etc/hostname", "node\n", 0o644},
		{"/usr/bin/su", "setuid binary", 0o4755},
	}
	for _, f := range files {
		rootfstest.File(t, tree, f.path, f.perm, tarEpoch, f.content)
	}
	rootfstest.Symlink(t, tree, "/sbin/init", "/usr/bin/su", tarEpoch)
	return tree
}

func rawSpec() *RawSpec {
	return &RawSpec{
		Partitions: []PartitionSpec{
			{Name: "esp", Type: "esp", Size: 64 << 20, Filesystem: "vfat"},
			{Name: "root", Type: "root", Filesystem: "ext4"},
		},
		Boot: &BootSpec{Loader: "systemd-boot", Cmdline: "console=ttyS0"}}
}

func rawSource(tree *rootfs.Tree, arch string) *Source {
	return &Source{Tree: tree.View(), Epoch: tarEpoch, Name: "node", Arch: arch, Seed: "node"}
}

// writeRaw writes the disk and checks it left nothing in its work
// directory: the views and scratch trees a disk makes are its own to remove.
func writeRaw(t testing.TB, src *Source, spec *RawSpec) (string, *Result) {
	t.Helper()
	dir := t.TempDir()
	if src.WorkDir == "" {
		withWork := *src
		withWork.WorkDir = t.TempDir()
		src = &withWork
	}
	res, err := rawFormat{}.Write(context.Background(), src, &Spec{Format: "raw", Name: "raw", Options: spec}, dir, "node")
	if err != nil {
		t.Fatalf("raw: %v", err)
	}
	if left, _ := os.ReadDir(src.WorkDir); len(left) > 0 {
		t.Errorf("raw: left %s in its work directory", left[0].Name())
	}
	return filepath.Join(dir, res.Files[0]), res
}

// sgdiskClean runs sgdisk -v. "No problems found" alone proves little:
// sgdisk repairs a damaged table in memory before it verifies and says so
// only in warnings, so a warning counts as a problem too.
func sgdiskClean(t testing.TB, img string) {
	t.Helper()
	b, err := exec.Command(harness.Tool(t, "sgdisk"), "-v", img).CombinedOutput()
	out := string(b)
	ok := err == nil && strings.Contains(out, "No problems found")
	for _, bad := range []string{"Warning", "Caution", "ERROR", "Problem:"} {
		ok = ok && !strings.Contains(out, bad)
	}
	if !ok {
		t.Fatalf("sgdisk -v %s: %v\n%s", img, err, out)
	}
}

// extract copies a partition out of the disk with dd, as an operator would.
func extract(t testing.TB, img string, p disk.Partition) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), p.Name+".img")
	cmd := exec.Command("dd", "if="+img, "of="+out, "bs=1M", "conv=sparse", "status=none",
		"skip="+strconv.FormatInt(p.Start>>20, 10), "count="+strconv.FormatInt(p.Size>>20, 10))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dd: %v\n%s", err, b)
	}
	return out
}

func readGPT(t testing.TB, img string) (string, []disk.Partition) {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	g, parts, err := disk.ReadGPT(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	return g, parts
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	b, err := exec.Command(harness.Tool(t, name), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, b)
	}
	return string(b)
}

func TestRawDiskStructure(t *testing.T) {
	harness.RequireTools(t, "sgdisk", "fsck.vfat", "mcopy", "e2fsck", "dd")
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			tree := rawTestTree(t, arch)
			src := rawSource(tree, arch)
			img, res := writeRaw(t, src, rawSpec())
			sgdiskClean(t, img)
			diskGUID, parts := readGPT(t, img)
			rootType := map[string]string{"amd64": disk.TypeRootAMD64, "arm64": disk.TypeRootARM64}[arch]
			if diskGUID != disk.FormatUUID(disk.DiskGUID("node")) || len(parts) != 2 ||
				parts[0].Type != disk.TypeESP || parts[1].Type != rootType ||
				parts[0].GUID != disk.PartitionGUID("node", "esp") || parts[1].GUID != disk.PartitionGUID("node", "root") {
				t.Fatalf("GPT: %s %+v", diskGUID, parts)
			}
			if parts[0].Start != 1<<20 || parts[0].Size != 64<<20 || parts[1].Start != 65<<20 || parts[1].Attributes != 1<<59 {
				t.Errorf("layout: %+v", parts)
			}

			esp := extract(t, img, parts[0])
			run(t, "fsck.vfat", "-n", esp)
			out := t.TempDir()
			run(t, "mcopy", "-s", "-n", "-i", esp, "::*", out+"/")
			bootFile := map[string]string{"amd64": "BOOTX64.EFI", "arm64": "BOOTAA64.EFI"}[arch]
			partuuid := disk.FormatUUID(disk.PartitionGUID("node", "root"))
			want := map[string]string{
				"EFI/BOOT/" + bootFile:     "MZ fake systemd-boot for " + arch,
				"vmlinuz":                  "new kernel " + strings.Repeat("k", 100000),
				"initrd.img":               "initrd " + strings.Repeat("i", 50000),
				"loader/loader.conf":       "default node.conf\ntimeout 0\nconsole-mode keep\n",
				"loader/entries/node.conf": "title node\nlinux /vmlinuz\ninitrd /initrd.img\noptions root=PARTUUID=" + partuuid + " ro console=ttyS0\n",
			}
			var n int
			filepath.Walk(out, func(p string, fi os.FileInfo, err error) error {
				if fi.Mode().IsRegular() {
					n++
				}
				return nil
			})
			if n != len(want) {
				t.Errorf("the ESP holds %d files, want %d", n, len(want))
			}
			for p, content := range want {
				got, err := os.ReadFile(filepath.Join(out, p))
				if err != nil || string(got) != content {
					t.Errorf("ESP %s: %v\n%q\nwant\n%q", p, err, clip(got), clip([]byte(content)))
				}
			}

			root := extract(t, img, parts[1])
			run(t, "e2fsck", "-fn", root)

			// What the disk adds, as the manifest lists it.
			adds := strings.Join(res.Adds, "\n")
			for _, w := range []string{
				"esp:/EFI/BOOT/" + bootFile + " type=file mode=0644 uid=0 gid=0",
				"esp:/loader/entries type=dir mode=0755",
				"root:/lost+found type=dir mode=0700 uid=0 gid=0 mtime=1700000000",
			} {
				if !strings.Contains(adds, w) {
					t.Errorf("adds lack %q:\n%s", w, adds)
				}
			}
			if len(res.Adds) != 5+4+1 {
				t.Errorf("%d adds, want 10 (5 files, 4 directories, lost+found):\n%s", len(res.Adds), adds)
			}
			checkSparse(t, img)
			if got := readAdds(t, img, tree); !slices.Equal(got, res.Adds) {
				t.Errorf("the adds read back from the disk differ from those planned:\n%s\nplanned:\n%s", strings.Join(got, "\n"), adds)
			}

			again, _ := writeRaw(t, rawSource(tree, arch), rawSpec())
			if sumFile(t, img) != sumFile(t, again) {
				t.Error("two builds of the same disk differ")
			}
		})
	}
}

// readAdds reads the disk back as inspect does and lists what it holds
// beyond the tree, as manifest lines.
func readAdds(t testing.TB, img string, _ *rootfs.Tree) []string {
	t.Helper()
	im, err := ReadImage(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	var adds []string
	for _, e := range im.Extra {
		adds = append(adds, rootfs.ManifestLine(e, nil, false))
	}
	return adds
}

func clip(b []byte) []byte {
	if len(b) > 200 {
		return b[:200]
	}
	return b
}

func sumFile(t testing.TB, p string) [32]byte {
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	io.Copy(h, f)
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

// checkSparse fails when the disk takes more than a third of its size on
// the host: the writers must leave zeros as holes.
func checkSparse(t testing.TB, img string) {
	t.Helper()
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	used := fi.Sys().(*syscall.Stat_t).Blocks * 512
	if used > fi.Size()/3 {
		t.Errorf("%s: %d of %d bytes allocated; the disk is not sparse", img, used, fi.Size())
	}
}

// derived is one output written from a raw disk.
type derived struct {
	path string
	res  *Result
	src  *Source
}

// writeTwiceFromRaw writes spec, a format made from raw, twice from the raw
// disk img of tree, each time into a new directory, and checks what every
// such output must hold: the same bytes both times, the raw disk's
// additions, a clean qemu-img check where qemu can check the format, and
// the raw's content when qemu-img opens it as driver, with no options.
func writeTwiceFromRaw(t *testing.T, f Format, tree *rootfs.Tree, img string, spec *Spec, driver string) []derived {
	t.Helper()
	var out []derived
	var sums [][32]byte
	for range 2 {
		dir := t.TempDir()
		src := rawSource(tree, "amd64")
		src.From = img
		src.FromAdds = readAdds(t, img, tree)
		res, err := f.Write(context.Background(), src, spec, dir, "node")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, res.Files[0])
		if driver != "vpc" { // qemu-img checks no VHD
			if o := run(t, "qemu-img", "check", "-f", driver, p); !strings.Contains(o, "No errors were found") {
				t.Fatalf("qemu-img check:\n%s", o)
			}
		}
		if o := run(t, "qemu-img", "compare", "-f", "raw", "-F", driver, img, p); !strings.Contains(o, "Images are identical.") {
			t.Fatalf("qemu-img compare:\n%s", o)
		}
		// compare passes a longer disk whose excess is zeros: the size
		// qemu sees must be the raw's too.
		if fi, err := os.Stat(img); err != nil || !strings.Contains(run(t, "qemu-img", "info", "--output=json", "-f", driver, p), fmt.Sprintf(`"virtual-size": %d,`, fi.Size())) {
			t.Errorf("qemu-img info: the virtual size is not the raw's (%v)", err)
		}
		if want := readAdds(t, img, tree); !slices.Equal(res.Adds, want) {
			t.Errorf("%s adds %q, want the raw disk's %q", spec.Format, res.Adds, want)
		}
		sum := sumFile(t, p)
		for name, h := range res.Sums {
			if name != res.Files[0] || h != hex.EncodeToString(sum[:]) {
				t.Errorf("%s reports sha256 %s for %s; %s's is %x", spec.Format, h, name, res.Files[0], sum)
			}
		}
		sums = append(sums, sum)
		out = append(out, derived{p, res, src})
	}
	if sums[0] != sums[1] {
		t.Errorf("two %s encodings of the same raw disk differ", spec.Format)
	}
	return out
}

func TestRawAndQcow2(t *testing.T) {
	harness.RequireTools(t, "qemu-img")
	tree := rawTestTree(t, "amd64")
	img, _ := writeRaw(t, rawSource(tree, "amd64"), rawSpec())
	for _, comp := range []string{"none", "zlib"} {
		t.Run(comp, func(t *testing.T) {
			writeTwiceFromRaw(t, qcow2Format{}, tree, img,
				&Spec{Format: "qcow2", Name: "qcow2", From: "raw", Options: &Qcow2Spec{Compress: comp == "zlib"}}, "qcow2")
		})
	}
}

func TestRawFixedSizes(t *testing.T) {
	harness.RequireTools(t, "sgdisk", "e2fsck", "dd", "swaplabel")
	tree := rawTestTree(t, "amd64")
	spec := rawSpec()
	spec.Size = 300 << 20
	spec.Partitions = append(spec.Partitions,
		PartitionSpec{Name: "swap", Type: "swap", Size: 16 << 20, Filesystem: "swap", Label: "swap"},
		PartitionSpec{Name: "data", Type: "linux", Size: 32 << 20, Filesystem: "ext4", Label: "data"},
	)
	img, res := writeRaw(t, rawSource(tree, "amd64"), spec)
	if fi, _ := os.Stat(img); fi.Size() != 300<<20 {
		t.Fatalf("disk of %d bytes, want 300 MiB", fi.Size())
	}
	sgdiskClean(t, img)
	_, parts := readGPT(t, img)
	if len(parts) != 4 || parts[1].Size != (300-1-64-16-32-1)<<20 {
		t.Fatalf("the root does not take what the fixed disk leaves: %+v", parts)
	}
	run(t, "e2fsck", "-fn", extract(t, img, parts[1]))
	run(t, "e2fsck", "-fn", extract(t, img, parts[3]))
	out := run(t, "swaplabel", extract(t, img, parts[2]))
	if !strings.Contains(out, "UUID:  "+disk.FormatUUID(disk.FilesystemUUID("node", "swap"))) || !strings.Contains(out, "LABEL: swap") {
		t.Errorf("swaplabel:\n%s", out)
	}
	if !strings.Contains(strings.Join(res.Adds, "\n"), "data:/lost+found type=dir") {
		t.Errorf("adds lack the data partition's lost+found:\n%s", strings.Join(res.Adds, "\n"))
	}
}

func TestRawFailuresLeaveNoFile(t *testing.T) {
	big := rawTestTree(t, "amd64")
	if _, err := big.Create("/var/big", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: tarEpoch},
		bytes.NewReader(bytes.Repeat([]byte{1}, 40<<20))); err != nil {
		t.Fatal(err)
	}
	noKernel := rawTestTree(t, "amd64")
	noKernel.Remove("/boot/vmlinuz-" + rawKernel)
	noKernel.Remove("/boot/vmlinuz-" + rawOldKernel)
	for _, c := range []struct {
		name string
		tree *rootfs.Tree
		edit func(s *RawSpec)
		want string
	}{
		{"root too small", big, func(s *RawSpec) { s.Partitions[1].Size = 16 << 20 }, "partitions[1].size:"},
		{"esp too small", big, func(s *RawSpec) { s.Partitions[0].Size = 1 << 20 }, "partitions[0].size:"},
		{"disk too small", big, func(s *RawSpec) { s.Size = 64 << 20 }, "size:"},
		{"fixed parts over a fixed disk", big, func(s *RawSpec) { s.Size = 100 << 20; s.Partitions[1].Size = 200 << 20 }, "size: 100.0 MiB is smaller"},
		{"unknown filesystem", big, func(s *RawSpec) { s.Partitions[1].Filesystem = "btrfs" }, "partitions[1].filesystem"},
		{"unknown filesystem elsewhere", big, func(s *RawSpec) {
			s.Partitions = append(s.Partitions, PartitionSpec{Name: "x", Type: "linux", Size: 8 << 20, Filesystem: "zfs"})
		}, `partitions[2].filesystem: unknown filesystem "zfs"`},
		{"bad size", big, func(s *RawSpec) { s.Partitions[0].Size = -1 }, "partitions[0].size"},
		{"no kernel", noKernel, func(s *RawSpec) {}, "boot.loader"},
		{"bios", big, func(s *RawSpec) { s.Boot.BIOS = true }, "boot.bios"},
		{"grub", big, func(s *RawSpec) { s.Boot.Loader = "grub" }, "boot.loader"},
		{"no root", big, func(s *RawSpec) { s.Partitions = s.Partitions[:1] }, "partitions: "},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec := rawSpec()
			c.edit(spec)
			dir := t.TempDir()
			_, err := rawFormat{}.Write(context.Background(), rawSource(c.tree, "amd64"), &Spec{Format: "raw", Options: spec}, dir, "node")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error with %q", err, c.want)
			}
			t.Log(err)
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("the failed build left %v", ents)
			}
		})
	}
	// A failure while writing, after the file exists, removes it too: the
	// kernel's content vanishes from under the tree.
	tree := rawTestTree(t, "amd64")
	if err := os.Remove(tree.DiskPath("/boot/vmlinuz-" + rawKernel)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := (rawFormat{}).Write(context.Background(), rawSource(tree, "amd64"), &Spec{Format: "raw", Options: rawSpec()}, dir, "node"); err == nil {
		t.Fatal("a missing kernel file: want an error")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the failed build left %v", ents)
	}
}

func TestRawNoLoader(t *testing.T) {
	tree := rawTestTree(t, "amd64")
	spec := rawSpec()
	spec.Boot = nil
	img, res := writeRaw(t, rawSource(tree, "amd64"), spec)
	_, parts := readGPT(t, img)
	f, _ := os.Open(img)
	defer f.Close()
	fsys, err := fat.Open(io.NewSectionReader(f, parts[0].Start, parts[0].Size), parts[0].Size)
	if err != nil {
		t.Fatal(err)
	}
	if ents, err := fsys.ReadDir("."); err != nil || len(ents) != 0 {
		t.Errorf("without a loader the ESP holds %v (%v)", ents, err)
	}
	if fmt.Sprint(res.Adds) != "[root:/lost+found type=dir mode=0700 uid=0 gid=0 mtime=1700000000]" {
		t.Errorf("adds: %q", res.Adds)
	}
}
