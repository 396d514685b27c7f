package formats

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

func TestVersionLess(t *testing.T) {
	for _, c := range []struct {
		a, b string
		less bool
	}{
		{"6.1.0-9-amd64", "6.1.0-10-amd64", true},
		{"6.1.0-10-amd64", "6.1.0-9-amd64", false},
		{"6.1.0-57-amd64", "6.12.0-1-amd64", true},
		{"5.10.0-28-amd64", "6.1.0-9-amd64", true},
		{"6.1.0-9-amd64", "6.1.0-9-amd64", false},
		{"6.1.0-9-amd64", "6.1.0-9-cloud-amd64", true},
		{"6.1.0-09", "6.1.0-9", false},
	} {
		if got := versionLess(c.a, c.b); got != c.less {
			t.Errorf("versionLess(%q, %q) = %t, want %t", c.a, c.b, got, c.less)
		}
	}
}

func TestKernelOf(t *testing.T) {
	tree := rootfstest.New(t, tarEpoch)
	if _, _, err := KernelOf(tree.View()); err == nil || !strings.Contains(err.Error(), "/boot") {
		t.Errorf("no /boot: err = %v", err)
	}
	file := func(p string) { rootfstest.File(t, tree, p, 0o644, tarEpoch, "kernel") }
	file("/boot/config-6.1.0-10-amd64")
	if _, _, err := KernelOf(tree.View()); err == nil || !strings.Contains(err.Error(), "vmlinuz") {
		t.Errorf("no kernel: err = %v", err)
	}
	file("/boot/vmlinuz-6.1.0-9-amd64")
	file("/boot/vmlinuz-6.1.0-10-amd64")
	file("/boot/vmlinuz")
	tree.Create("/boot/vmlinuz-7.0.0", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o755, MTime: tarEpoch}, nil)
	p, v, err := KernelOf(tree.View())
	if err != nil || p != "/boot/vmlinuz-6.1.0-10-amd64" || v != "6.1.0-10-amd64" {
		t.Errorf("KernelOf = %q %q %v, want the 6.1.0-10 kernel", p, v, err)
	}
}

// bootTestTree is a tree holding Debian's kernel, the modules an ext4 root
// on virtio needs, busybox-static and nothing else.
func bootTestTree(t *testing.T) (*harness.BootKit, *rootfs.Tree) {
	t.Helper()
	k := harness.BootParts(t)
	return k, k.Tree(t, harness.BootTreeOptions{Marker: "unused", Modules: harness.BootModuleGlobs})
}

// bootWantOrder is the load order the modules' own .modinfo dependencies
// give for BootModules and DiskModules on Debian's 6.1 kernel: every
// module after those it depends on, in the order each names them.
var bootWantOrder = []string{
	"crc32c_generic", "jbd2", "mbcache", "crc16", "ext4",
	"virtio_ring", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio", "virtio_pci", "virtio_blk",
	"crct10dif_common", "crct10dif_generic", "crc64", "crc64_rocksoft_generic",
	"scsi_common", "scsi_mod", "virtio_scsi",
	"crc_t10dif", "crc64_rocksoft", "t10_pi", "sd_mod",
	"nvme_core", "nvme",
	"libata", "libahci", "ahci",
}

func bootInitOf(t *testing.T, items []cpioItem) string {
	t.Helper()
	for _, it := range items {
		if it.path == "/init" {
			return string(it.data)
		}
	}
	t.Fatal("no /init")
	return ""
}

func bootLoads(init string) []string {
	var loads []string
	for _, l := range strings.Split(init, "\n") {
		if m, ok := strings.CutPrefix(l, "load /"); ok {
			loads = append(loads, strings.TrimSuffix(path.Base(m), ".ko"))
		}
	}
	return loads
}

func TestBootInitramfs(t *testing.T) {
	k, tree := bootTestTree(t)
	var buf bytes.Buffer
	if err := WriteBootInitramfs(context.Background(), tree.View(), &buf, BootInitramfsOptions{}); err != nil {
		t.Fatal(err)
	}
	if a, _, _ := compress.Detect(bytes.NewReader(buf.Bytes())); a != compress.Zstd {
		t.Errorf("compression %s, want the zstd default", a)
	}
	archive, _, err := ReadCpio(context.Background(), bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	entries := archive.Entries()
	kernel := tree.Get("/boot/vmlinuz-" + k.KernelVersion)
	modDir := "/lib/modules/" + k.KernelVersion
	byPath := map[string]*rootfs.Entry{}
	var paths []string
	for _, e := range entries {
		byPath[e.Path] = e
		paths = append(paths, e.Path)
		if e.UID != 0 || e.GID != 0 || !e.MTime.Equal(kernel.MTime) {
			t.Errorf("%s: owner %d:%d mtime %v, want 0:0 and the kernel's %v", e.Path, e.UID, e.GID, e.MTime, kernel.MTime)
		}
	}
	want := []string{"/", "/bin", "/bin/busybox", "/dev", "/init", "/lib", "/lib/modules", modDir, "/proc", "/sys", "/sysroot"}
	for _, m := range bootWantOrder {
		want = append(want, modDir+"/"+m+".ko")
	}
	slices.Sort(want)
	if !slices.Equal(paths, want) {
		t.Errorf("archive holds\n%q\nwant\n%q", paths, want)
	}
	bb, _ := tree.Lookup("/bin/busybox", true)
	if e := byPath["/bin/busybox"]; e == nil || e.Digest != bb.Digest || e.Perm != 0o755 {
		t.Errorf("/bin/busybox is not the tree's busybox")
	}
	for _, m := range bootWantOrder {
		var host []string
		err := filepath.WalkDir(filepath.Join(k.Modules, "kernel"), func(p string, d fs.DirEntry, err error) error {
			if err == nil && strings.ReplaceAll(d.Name(), "-", "_") == m+".ko" {
				host = append(host, p)
			}
			return err
		})
		if err != nil || len(host) != 1 {
			t.Fatalf("%s: %v %q", m, err, host)
		}
		data, _ := os.ReadFile(host[0])
		sum := sha256.Sum256(data)
		if e := byPath[modDir+"/"+m+".ko"]; e == nil || e.Digest != hex.EncodeToString(sum[:]) {
			t.Errorf("%s: not the content of %s", m, host[0])
		}
	}
	items, err := bootInitramfsItems(tree.View(), BootInitramfsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	init := bootInitOf(t, items)
	if got := bootLoads(init); !slices.Equal(got, bootWantOrder) {
		t.Errorf("/init loads\n%q\nwant\n%q", got, bootWantOrder)
	}
	if !strings.HasPrefix(init, "#!/bin/busybox sh\n") || !strings.Contains(init, "exec switch_root /sysroot \"$init\"") ||
		!strings.Contains(init, "PARTUUID=*)") || !strings.Contains(init, "mode=ro") {
		t.Errorf("/init does not look like the boot init:\n%s", init)
	}
	if byPath["/init"].Perm != 0o755 {
		t.Errorf("/init mode %04o", byPath["/init"].Perm)
	}

	var again bytes.Buffer
	if err := WriteBootInitramfs(context.Background(), tree.View(), &again, BootInitramfsOptions{}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Errorf("two writes differ")
	}
	// busybox sh parses the script.
	p := filepath.Join(t.TempDir(), "init")
	os.WriteFile(p, []byte(init), 0o755)
	if out, err := exec.Command(k.Busybox, "sh", "-n", p).CombinedOutput(); err != nil {
		t.Errorf("busybox sh -n /init: %v\n%s", err, out)
	}
}

// With a modules.dep (made by busybox depmod, as a tree with kmod installed
// would have one), the dependencies come from it: same modules, each still
// after what it needs.
func TestBootInitramfsModulesDep(t *testing.T) {
	k, tree := bootTestTree(t)
	out, err := exec.Command(k.Busybox, "depmod", "-n", "-b", tree.Dir(), k.KernelVersion).Output()
	if err != nil {
		t.Fatalf("busybox depmod: %v", err)
	}
	// -n prints every file it would write, each under a "# file" header;
	// modules.dep is the part before the first alias line.
	dep := string(out)
	if i := strings.Index(dep, "\nalias "); i >= 0 {
		dep = dep[:i+1]
	}
	var lines []string
	for _, l := range strings.Split(dep, "\n") {
		if strings.Contains(l, ".ko:") {
			lines = append(lines, l)
		}
	}
	if len(lines) < len(bootWantOrder) {
		t.Fatalf("depmod -n gave %d module lines:\n%s", len(lines), out)
	}
	modDep := "/usr/lib/modules/" + k.KernelVersion + "/modules.dep"
	create := func(content string) {
		tree.Remove(modDep)
		if _, err := tree.Create(modDep, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: tarEpoch}, strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
	}
	create(strings.Join(lines, "\n") + "\n")
	items, err := bootInitramfsItems(tree.View(), BootInitramfsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got := bootLoads(bootInitOf(t, items))
	if !slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(bootWantOrder))) {
		t.Fatalf("loads %q, want the modules %q", got, bootWantOrder)
	}
	pos := map[string]int{}
	for i, m := range got {
		pos[m] = i
	}
	for _, l := range lines {
		mod, deps, _ := strings.Cut(l, ":")
		name, _, _ := kmodName(path.Base(mod))
		if _, loaded := pos[name]; !loaded {
			continue
		}
		for _, d := range strings.Fields(deps) {
			dn, _, _ := kmodName(path.Base(d))
			if pos[dn] > pos[name] {
				t.Errorf("%s loads before %s, which it needs", name, dn)
			}
		}
	}

	var kept []string
	for _, l := range lines {
		if !strings.Contains(l, "virtio_blk") {
			kept = append(kept, l)
		}
	}
	create(strings.Join(kept, "\n") + "\n")
	if _, err := bootInitramfsItems(tree.View(), BootInitramfsOptions{}); err == nil || !strings.Contains(err.Error(), "virtio_blk") {
		t.Errorf("module missing from modules.dep: err = %v", err)
	}
}

// A compressed module is stored decompressed: busybox insmod passes the
// file to the kernel as it is.
func TestBootInitramfsCompressedModule(t *testing.T) {
	k, tree := bootTestTree(t)
	src := "/usr/lib/modules/" + k.KernelVersion + "/kernel/fs/ext4/ext4.ko"
	orig := tree.Get(src)
	if orig == nil {
		t.Fatalf("%s not in the test tree", src)
	}
	xzed, err := exec.Command("xz", "-c", "-1", "--check=crc32", tree.DiskPath(src)).Output()
	if err != nil {
		t.Fatalf("xz: %v", err)
	}
	digest := orig.Digest
	if err := tree.Remove(src); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Create(src+".xz", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: tarEpoch}, bytes.NewReader(xzed)); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteBootInitramfs(context.Background(), tree.View(), &buf, BootInitramfsOptions{Compression: compress.None}); err != nil {
		t.Fatal(err)
	}
	archive, _, err := ReadCpio(context.Background(), &buf)
	if err != nil {
		t.Fatal(err)
	}
	entries := archive.Entries()
	for _, e := range entries {
		if e.Path == "/lib/modules/"+k.KernelVersion+"/ext4.ko" {
			if e.Digest != digest {
				t.Errorf("ext4.ko is not the decompressed module")
			}
			return
		}
	}
	t.Errorf("no ext4.ko in the archive")
}

func TestBootInitramfsErrors(t *testing.T) {
	k, tree := bootTestTree(t)
	write := func(o BootInitramfsOptions) error {
		return WriteBootInitramfs(context.Background(), tree.View(), &bytes.Buffer{}, o)
	}
	for _, c := range []struct {
		name string
		o    BootInitramfsOptions
		want string
	}{
		{"missing module", BootInitramfsOptions{Modules: []string{"e1000e"}}, "e1000e"},
		{"missing kernel", BootInitramfsOptions{KernelVersion: "9.9.9"}, "vmlinuz-9.9.9"},
		{"missing busybox", BootInitramfsOptions{Busybox: "/opt/busybox"}, "busybox-static"},
	} {
		if err := write(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one mentioning %q", c.name, err, c.want)
		}
	}
	// A dynamically linked busybox would find no libc in the initramfs.
	dyn, err := os.ReadFile("/usr/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Create("/opt/busybox", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o755, MTime: tarEpoch}, bytes.NewReader(dyn)); err != nil {
		t.Fatal(err)
	}
	if err := write(BootInitramfsOptions{Busybox: "/opt/busybox"}); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("dynamic busybox: err = %v", err)
	}
	if err := tree.Remove("/usr/lib/modules/" + k.KernelVersion + "/kernel/fs/jbd2/jbd2.ko"); err != nil {
		t.Fatal(err)
	}
	if err := write(BootInitramfsOptions{}); err == nil || !strings.Contains(err.Error(), "jbd2") || !strings.Contains(err.Error(), "needed by ext4") {
		t.Errorf("missing dependency: err = %v", err)
	}
}

// A disk driver the kernel lacks (Debian's cloud kernel has no AHCI) is
// left out, not an error: the image boots from the buses it has.
func TestBootInitramfsWithoutADiskDriver(t *testing.T) {
	k := harness.BootParts(t)
	var globs []string
	for _, g := range harness.BootModuleGlobs {
		if !strings.Contains(g, "/ata/") {
			globs = append(globs, g)
		}
	}
	tree := k.Tree(t, harness.BootTreeOptions{Marker: "unused", Modules: globs})
	items, err := bootInitramfsItems(tree.View(), BootInitramfsOptions{})
	if err != nil {
		t.Fatal(err)
	}
	loads := bootLoads(bootInitOf(t, items))
	if slices.Contains(loads, "ahci") || !slices.Contains(loads, "nvme") || !slices.Contains(loads, "virtio_scsi") {
		t.Errorf("/init loads %q: want nvme and virtio_scsi, and no ahci", loads)
	}
}
