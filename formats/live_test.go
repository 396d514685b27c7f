package formats

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// liveModuleGlobs are the module files a tree needs for a live initramfs
// that mounts its image and fetches it through virtio-net.
var liveModuleGlobs = []string{"kernel/drivers/block/loop.ko", "kernel/crypto/crc32c_generic.ko", "kernel/lib/libcrc32c.ko",
	"kernel/fs/erofs", "kernel/fs/overlayfs", "kernel/drivers/virtio", "kernel/drivers/net/virtio_net.ko",
	"kernel/drivers/net/net_failover.ko", "kernel/net/core/failover.ko"}

// liveWantOrder is the load order for those modules on Debian's 6.1
// kernel: LiveModules, then the network drivers the tree has.
var liveWantOrder = []string{"loop", "crc32c_generic", "libcrc32c", "erofs", "overlay",
	"virtio_ring", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio", "virtio_pci", "failover", "net_failover", "virtio_net"}

// addLiveParts puts Debian's static busybox and the modules of
// liveModuleGlobs into tree, for the kernel version given.
func addLiveParts(t *testing.T, tree *rootfs.Tree, version string) *harness.BootKit {
	t.Helper()
	k := harness.BootParts(t)
	host := func(p, src string, perm uint32) {
		t.Helper()
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tree.Create(p, rootfs.Header{Type: rootfs.TypeRegular, Perm: perm, MTime: tarEpoch}, bytes.NewReader(data)); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	host("/usr/bin/busybox", k.Busybox, 0o755)
	for _, g := range append([]string{"modules.builtin"}, liveModuleGlobs...) {
		found, _ := filepath.Glob(filepath.Join(k.Modules, g))
		if len(found) == 0 {
			t.Fatalf("no module matches %s", g)
		}
		for _, f := range found {
			filepath.Walk(f, func(p string, fi os.FileInfo, err error) error {
				if err == nil && fi.Mode().IsRegular() {
					rel, _ := filepath.Rel(k.Modules, p)
					host(path.Join("/usr/lib/modules", version, filepath.ToSlash(rel)), p, 0o644)
				}
				return err
			})
		}
	}
	return k
}

// A live bundle written from the tree holds the tree's kernel, an EROFS
// image that reads back as the tree, stamp's initramfs (the tree's static
// busybox, the modules in dependency order, the image's sha256, an /init
// busybox parses) and a script that loads all three; its SHA256SUMS check;
// two writes give the same bytes; made from an erofs output, the bundle's
// image is that output's file.
func TestLiveBundle(t *testing.T) {
	k := harness.BootParts(t)
	tree := k.Tree(t, harness.BootTreeOptions{Marker: "unused", Modules: liveModuleGlobs})
	src := &Source{Tree: tree.View(), Epoch: harness.DefaultEpoch, Name: "node", Arch: "amd64", Seed: "node"}
	spec := &Spec{Format: "live", Name: "live", Options: &LiveSpec{Cmdline: "console=ttyS0"}}
	var dirs []string
	for range 2 {
		dir := t.TempDir()
		res, err := liveFormat{}.Write(context.Background(), src, spec, dir, "node")
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Files) != 1 || res.Files[0] != "node.live" {
			t.Fatalf("files %q", res.Files)
		}
		dirs = append(dirs, filepath.Join(dir, "node.live"))
	}
	bdir := dirs[0]
	for _, f := range []string{LiveKernel, LiveInitrd, LiveRoot, LiveScript, LiveSums} {
		a, err1 := os.ReadFile(filepath.Join(dirs[0], f))
		b, err2 := os.ReadFile(filepath.Join(dirs[1], f))
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs between two writes (%v %v)", f, err1, err2)
		}
	}
	cmd := exec.Command("sha256sum", "--check", "--strict", LiveSums)
	cmd.Dir = bdir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("SHA256SUMS: %v\n%s", err, out)
	}
	root, _ := os.ReadFile(filepath.Join(bdir, LiveRoot))
	rootSum := sha256.Sum256(root)
	script, _ := os.ReadFile(filepath.Join(bdir, LiveScript))
	for _, want := range []string{"#!ipxe\n", "kernel vmlinuz initrd=initrd.img initrd=root.erofs stamp.root.sha256=" + hex.EncodeToString(rootSum[:]) + " console=ttyS0\n",
		"initrd initrd.img\n", "initrd root.erofs /stamp/root.erofs\n", "boot\n"} {
		if !strings.Contains(string(script), want) {
			t.Errorf("boot.ipxe lacks %q:\n%s", want, script)
		}
	}

	im, err := ReadImage(context.Background(), bdir)
	if err != nil {
		t.Fatal(err)
	}
	if im.Format != "live" || rootfs.Digest(im.Tree.Entries()) != rootfs.Digest(tree.Entries()) {
		t.Errorf("the bundle reads back as %s, its tree %s, want %s", im.Format, rootfs.Digest(im.Tree.Entries()), rootfs.Digest(tree.Entries()))
	}

	f, err := os.Open(filepath.Join(bdir, LiveInitrd))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	archive, _, err := ReadCpio(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	modDir := "/lib/modules/" + k.KernelVersion
	var mods []string
	for _, e := range archive.Entries() {
		if strings.HasPrefix(e.Path, modDir+"/") {
			mods = append(mods, strings.TrimSuffix(path.Base(e.Path), ".ko"))
		}
	}
	slices.Sort(mods)
	want := slices.Clone(liveWantOrder)
	slices.Sort(want)
	if !slices.Equal(mods, want) {
		t.Errorf("the initramfs holds modules %q, want %q", mods, want)
	}
	bb, _ := tree.Lookup("/usr/bin/busybox", true)
	if e := archive.Get("/bin/busybox"); e == nil || e.Digest != bb.Digest {
		t.Errorf("/bin/busybox is not the tree's")
	}
	sumFile := sha256.Sum256([]byte(hex.EncodeToString(rootSum[:]) + "\n"))
	if e := archive.Get("/etc/stamp/root.sha256"); e == nil || e.Digest != hex.EncodeToString(sumFile[:]) {
		t.Errorf("/etc/stamp/root.sha256 does not hold the image's sha256")
	}
	initItems := liveRootInit(k.KernelVersion, func() []string {
		var p []string
		for _, m := range liveWantOrder {
			p = append(p, modDir+"/"+m+".ko")
		}
		return p
	}())
	if e := archive.Get("/init"); e == nil || e.Perm != 0o755 || e.Size != int64(len(initItems)) {
		t.Errorf("/init is not the live init with the modules in load order")
	}
	if got := bootLoads(string(initItems)); !slices.Equal(got, liveWantOrder) {
		t.Errorf("/init loads %q, want %q", got, liveWantOrder)
	}
	for name, script := range map[string][]byte{"init": initItems, "udhcpc.script": []byte(liveDHCPScript)} {
		p := filepath.Join(t.TempDir(), name)
		os.WriteFile(p, script, 0o755)
		if out, err := exec.Command(k.Busybox, "sh", "-n", p).CombinedOutput(); err != nil {
			t.Errorf("busybox sh -n %s: %v\n%s", name, err, out)
		}
	}

	// Made from an erofs output: the same file, linked.
	dir := t.TempDir()
	eres, err := erofsFormat{}.Write(context.Background(), src, &Spec{Format: "erofs", Name: "erofs"}, dir, "node")
	if err != nil {
		t.Fatal(err)
	}
	from := filepath.Join(dir, eres.Files[0])
	src.From = from
	if _, err := (liveFormat{}).Write(context.Background(), src, spec, dir, "node"); err != nil {
		t.Fatal(err)
	}
	a, _ := os.Stat(from)
	b, _ := os.Stat(filepath.Join(dir, "node.live", LiveRoot))
	if a.Sys().(*syscall.Stat_t).Ino != b.Sys().(*syscall.Stat_t).Ino {
		t.Errorf("the bundle's root image is not the erofs output's file")
	}
}

// A live bundle needs a static busybox and the modules that mount its
// image; without them it names what is missing.
func TestLiveBundleRefuses(t *testing.T) {
	tree := rawTestTree(t, "amd64")
	src := rawSource(tree, "amd64")
	_, err := liveFormat{}.Write(context.Background(), src, &Spec{Format: "live", Name: "live", Options: &LiveSpec{}}, t.TempDir(), "node")
	if err == nil || !strings.Contains(err.Error(), "busybox") {
		t.Errorf("a tree without busybox: %v", err)
	}
	addLiveBusyboxOnly(t, tree)
	_, err = liveFormat{}.Write(context.Background(), src, &Spec{Format: "live", Name: "live", Options: &LiveSpec{}}, t.TempDir(), "node")
	if err == nil || !strings.Contains(err.Error(), "module loop") {
		t.Errorf("a tree without modules: %v", err)
	}
}

func addLiveBusyboxOnly(t *testing.T, tree *rootfs.Tree) {
	k := harness.BootParts(t)
	data, err := os.ReadFile(k.Busybox)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Create("/usr/bin/busybox", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o755, MTime: tarEpoch}, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Create("/usr/lib/modules/"+rawKernel, rootfs.Header{Type: rootfs.TypeDir, Perm: 0o755, MTime: tarEpoch}, nil); err != nil {
		t.Fatal(err)
	}
}
