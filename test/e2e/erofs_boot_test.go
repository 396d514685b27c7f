//go:build boot

package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/disk/erofs"
	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

// erofsMountTree is a tree with one of everything EROFS stores, over the
// real Debian base (setuid, file capabilities, devices, hard links): ACLs,
// trusted and user xattrs, a socket, a fifo, big compressible and
// incompressible files, zeros, a file past one segment, long symlinks,
// owners past 16 bits, older mtimes, a full-length name and a directory of
// many entries.
func erofsMountTree(t *testing.T) *rootfs.Tree {
	t.Helper()
	epoch := harness.DefaultEpoch
	tr := rootfstest.New(t, epoch)
	rootfstest.ExtractFile(t, tr, harness.Base(t), rootfs.ExtractOptions{})
	add := func(p string, h rootfs.Header, content string) {
		t.Helper()
		if h.MTime.IsZero() {
			h.MTime = epoch
		}
		if _, err := tr.Create(p, h, strings.NewReader(content)); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	acl := func(perm uint32) string {
		b := []byte{2, 0, 0, 0}
		for _, e := range [][3]uint32{{0x01, perm >> 6 & 7, 0xFFFFFFFF}, {0x02, 6, 1000}, {0x04, 4, 0xFFFFFFFF},
			{0x10, perm >> 3 & 7, 0xFFFFFFFF}, {0x20, perm & 7, 0xFFFFFFFF}} {
			b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
			b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
			b = binary.LittleEndian.AppendUint32(b, e[2])
		}
		return string(b)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	noise := make([]byte, 1<<20)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	var text strings.Builder
	for i := 0; text.Len() < 9<<20; i++ {
		fmt.Fprintf(&text, "%08x the node's root, line %d\n", rng.Uint32(), i)
		if i%5000 == 0 {
			text.WriteString(strings.Repeat("\x00", 8192))
		}
	}
	add("/srv/shared", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o2770, GID: 100,
		Xattrs: map[string]string{"system.posix_acl_access": acl(0o770), "system.posix_acl_default": acl(0o750)}}, "")
	add("/srv/shared/doc", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o664, GID: 100,
		Xattrs: map[string]string{"system.posix_acl_access": acl(0o664), "trusted.stamp": "t", "user.stamp.note": strings.Repeat("n", 300)}}, "doc\n")
	add("/run/stamp.sock", rootfs.Header{Type: rootfs.TypeSocket, Perm: 0o755}, "")
	add("/run/stamp.fifo", rootfs.Header{Type: rootfs.TypeFifo, Perm: 0o620, GID: 5}, "")
	add("/dev/nvme0n1p300", rootfs.Header{Type: rootfs.TypeBlock, Perm: 0o660, GID: 6, Major: 259, Minor: 70000}, "")
	add("/usr/share/stamp/text", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, UID: 70000, GID: 70001,
		MTime: epoch.Add(-48 * time.Hour)}, text.String())
	add("/usr/share/stamp/noise", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o600}, string(noise))
	add("/usr/share/stamp/zeros", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, strings.Repeat("\x00", 3<<20))
	for _, n := range []int{1, 4095, 4096, 4097, 12345} {
		add(fmt.Sprintf("/usr/share/stamp/size-%d", n), rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, text.String()[:n])
	}
	add("/usr/share/stamp/empty", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, "")
	add("/usr/share/stamp/long-target", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: strings.Repeat("deep/", 816) + "x"}, "")
	add("/usr/share/stamp/"+strings.Repeat("n", 255), rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, "long name\n")
	for i := range 400 {
		add(fmt.Sprintf("/usr/share/stamp/many/entry-%04d-%s", i, strings.Repeat("ü", i%30)), rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, fmt.Sprint(i))
	}
	if _, err := tr.Link("/usr/share/stamp/text-link", "/usr/share/stamp/text", rootfs.Origin{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Link("/dev/null-link", "/dev/null", rootfs.Origin{}); err != nil {
		t.Fatal(err)
	}
	return tr
}

// erofsMountModules are the modules a kernel of Debian's needs to mount an
// EROFS image from a virtio disk, in load order.
var erofsMountModules = []string{"crc32c_generic", "libcrc32c", "erofs", "virtio_ring", "virtio",
	"virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_pci", "virtio_blk"}

// Debian's kernel mounts stamp's EROFS image (LZ4, and uncompressed) from
// a virtio disk in a booted VM, and what it shows of every entry (type,
// mode, owner, mtime, size, sha256 of the content it decompressed, symlink
// target, device numbers, hard links, every xattr) equals the tree: a
// static lister run inside writes the manifest lines onto a second disk.
func TestErofsKernelMount(t *testing.T) {
	k := harness.BootParts(t)
	tree := erofsMountTree(t)
	lister := filepath.Join(t.TempDir(), "lstree")
	build := exec.Command("go", "build", "-trimpath", "-o", lister, "../cmd/lstree")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building lstree: %v\n%s", err, out)
	}
	var want bytes.Buffer
	if err := rootfs.WriteManifest(&want, tree.Entries(), false); err != nil {
		t.Fatal(err)
	}

	vm := k.Tree(t, harness.BootTreeOptions{Marker: "unused", Modules: []string{
		"kernel/crypto/crc32c_generic.ko", "kernel/lib/libcrc32c.ko", "kernel/fs/erofs", "kernel/drivers/virtio",
		"kernel/drivers/block/virtio_blk.ko"}})
	lbin, err := os.ReadFile(lister)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vm.Create("/usr/bin/lstree", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o755, MTime: harness.DefaultEpoch}, bytes.NewReader(lbin)); err != nil {
		t.Fatal(err)
	}
	var mods strings.Builder
	for _, m := range erofsMountModules {
		fmt.Fprintf(&mods, "insmod $(find /lib/modules -name %s.ko) || echo \"insmod %s failed\"\n", m, m)
	}
	init := `#!/bin/busybox sh
export PATH=/usr/bin:/usr/sbin
mkdir -p /proc /sys /dev /mnt
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
` + mods.String() + `if mount -t erofs -o ro /dev/vda /mnt; then
	lstree /mnt > /dev/vdb && sync && echo "erofs-listed $(lstree /mnt | wc -l) entries, ok-$((6 * 7))"
else
	echo "erofs mount failed"
	dmesg | tail -20
fi
poweroff -f
`
	initrd := filepath.Join(t.TempDir(), "initrd.img")
	f, err := os.Create(initrd)
	if err != nil {
		t.Fatal(err)
	}
	if err := formats.WriteCpio(context.Background(), vm.View(), f, formats.CpioOptions{Compression: compress.Gzip,
		Extra: []formats.CpioFile{{Path: "/init", Perm: 0o755, Content: []byte(init)}}, MTime: harness.DefaultEpoch}); err != nil {
		t.Fatal(err)
	}
	f.Close()

	for _, codec := range []erofs.Compression{erofs.LZ4, erofs.LZ4HC, erofs.None} {
		t.Run(string(codec), func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "root.erofs")
			f, err := os.Create(img)
			if err != nil {
				t.Fatal(err)
			}
			sum, err := erofs.Write(context.Background(), tree.View(), f, erofs.Options{Compression: codec, Epoch: harness.DefaultEpoch})
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%d bytes, %d files compressed", sum.Size, sum.Compressed)
			listing := filepath.Join(t.TempDir(), "listing.raw")
			if err := os.WriteFile(listing, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(listing, 16<<20); err != nil {
				t.Fatal(err)
			}
			harness.RunQEMU(t, []string{"-kernel", k.Vmlinuz, "-initrd", initrd, "-append", "console=ttyS0 panic=-1",
				"-drive", "file=" + img + ",if=virtio,format=raw,readonly=on",
				"-drive", "file=" + listing + ",if=virtio,format=raw"}, "ok-42", bootTimeout)
			got, err := os.ReadFile(listing)
			if err != nil {
				t.Fatal(err)
			}
			if i := bytes.IndexByte(got, 0); i >= 0 {
				got = got[:i]
			}
			compareListing(t, want.String(), string(got))
		})
	}
}

// compareListing names every line where the kernel's view and the tree's
// manifest differ.
func compareListing(t *testing.T, want, got string) {
	t.Helper()
	index := func(s string) map[string]string {
		m := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
			p, _, _ := strings.Cut(l, " ")
			m[p] = l
		}
		return m
	}
	w, g := index(want), index(got)
	bad := 0
	for p, wl := range w {
		if gl := g[p]; gl != wl {
			t.Errorf("%s:\n kernel %s\n tree   %s", p, gl, wl)
			if bad++; bad > 10 {
				t.Fatalf("more differences")
			}
		}
	}
	for p := range g {
		if _, ok := w[p]; !ok {
			t.Errorf("the kernel shows %s, which the tree does not hold", p)
		}
	}
	t.Logf("%d entries compared", len(w))
}
