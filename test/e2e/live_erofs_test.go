package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// liveRootInitBody checks, from inside a system booted from a live
// bundle, that the root is the image under an overlay, that what it wrote
// went to RAM, that containerd's state is on a tmpfs of its own with what
// the image holds there, and that owners, setuid bits and hard links came
// through.
const liveRootInitBody = `mount -t proc proc /proc
echo "root-fs: $(awk '$2 == "/" {print $3}' /proc/mounts)"
echo "containerd-fs: $(awk '$2 == "/var/lib/containerd" {print $3}' /proc/mounts) $(cat /var/lib/containerd/state)"
echo written > /etc/written-at-boot && echo "write: $(cat /etc/written-at-boot)"
echo "suid: $(stat -c '%a %u:%g' /usr/bin/stamp-suid)"
echo "owner: $(stat -c '%u:%g' /etc/stamp-owned)"
echo "links: $(stat -c '%h' /etc/link-a) $(stat -c %i /etc/link-a) $(stat -c %i /etc/link-b)"
echo "stamp-live-ok-$((6 * 7))"`

// liveModuleGlobs are the modules the live initramfs needs on Debian's
// kernel in a qemu VM: loop, EROFS, overlayfs and virtio-net.
var liveModuleGlobs = []string{"kernel/drivers/block/loop.ko", "kernel/crypto/crc32c_generic.ko", "kernel/lib/libcrc32c.ko",
	"kernel/fs/erofs", "kernel/fs/overlayfs", "kernel/drivers/virtio", "kernel/drivers/net/virtio_net.ko",
	"kernel/drivers/net/net_failover.ko", "kernel/net/core/failover.ko"}

// liveRootTree is a bootable tree with what liveRootInitBody checks.
func liveRootTree(t *testing.T, k *harness.BootKit) *rootfs.Tree {
	t.Helper()
	tree := k.Tree(t, harness.BootTreeOptions{Init: liveRootInitBody, Modules: liveModuleGlobs})
	mk := func(p string, h rootfs.Header, content string) {
		t.Helper()
		if h.Type == 0 {
			h.Type = rootfs.TypeRegular
		}
		h.MTime = harness.DefaultEpoch
		if _, err := tree.Create(p, h, strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
	}
	mk("/usr/bin/stamp-suid", rootfs.Header{Perm: 0o4755}, "#!/bin/sh\n")
	mk("/etc/stamp-owned", rootfs.Header{Perm: 0o640, UID: 1234, GID: 5678}, "owned\n")
	mk("/etc/link-a", rootfs.Header{Perm: 0o644}, "linked\n")
	mk("/var/lib/containerd", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o711}, "")
	mk("/var/lib/containerd/state", rootfs.Header{Perm: 0o600}, "from-the-image\n")
	if _, err := tree.Link("/etc/link-b", "/etc/link-a", rootfs.Origin{}); err != nil {
		t.Fatal(err)
	}
	// systemd-boot, which an iso boots by.
	efi, err := os.ReadFile(k.SystemdBoot)
	if err != nil {
		t.Fatal(err)
	}
	mk("/usr/lib/systemd/boot/efi/systemd-bootx64.efi", rootfs.Header{Perm: 0o644}, string(efi))
	return tree
}

func checkLiveRootLog(t *testing.T, log string) {
	t.Helper()
	for _, want := range []string{"root-fs: overlay\r\n", "containerd-fs: tmpfs from-the-image\r\n", "write: written\r\n",
		"suid: 4755 0:0\r\n", "owner: 1234:5678\r\n", "stamp-live: running from RAM"} {
		if !strings.Contains(log, want) {
			t.Errorf("serial log lacks %q", strings.TrimSpace(want))
		}
	}
	m := regexp.MustCompile(`links: (\d+) (\d+) (\d+)`).FindStringSubmatch(log)
	if m == nil || m[1] != "2" || m[2] != m[3] {
		t.Errorf("hard link not kept in the live system: %q", m)
	}
	if m := regexp.MustCompile(`the image found, checked and mounted in ([0-9.]+) s`).FindStringSubmatch(log); m != nil {
		t.Logf("the initramfs found, checked and mounted the root image in %s s (TCG)", m[1])
	} else {
		t.Errorf("the serial log does not say how long the image took to find, check and mount")
	}
}

// buildAsRootAnd65534 builds the recipe.yaml of dir twice, each with a
// cache and a work directory of its own: by root through run (stamp or
// stampUmask022) with rootEnv into dir/out-root, and as uid 65534 with
// nobodyEnv into dir/out-nobody. It returns the two output directories.
func buildAsRootAnd65534(t *testing.T, dir string, run func(*testing.T, string, []string, ...string) result, rootEnv, nobodyEnv []string) (string, string) {
	t.Helper()
	out1 := filepath.Join(dir, "out-root")
	run(t, dir, rootEnv, "build", "recipe.yaml", "-o", out1, "--cache-dir", filepath.Join(dir, "cache-root"), "--work-dir", dir).mustSucceed(t)
	work2 := filepath.Join(dir, "work-nobody")
	out2 := filepath.Join(dir, "out-nobody")
	for _, d := range []string{work2, out2} {
		os.MkdirAll(d, 0o777)
		os.Chmod(d, 0o777)
	}
	stampAs65534(t, dir, nobodyEnv, "build", "recipe.yaml", "-o", out2,
		"--cache-dir", filepath.Join(work2, "cache"), "--work-dir", work2).mustSucceed(t)
	return out1, out2
}

// serveOverHTTP serves dir over HTTP on 127.0.0.1, which a qemu guest on user
// networking reaches as 10.0.2.2, and returns the port.
func serveOverHTTP(t testing.TB, dir string) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir))}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// liveBuild builds a recipe of an erofs output, a live bundle made from it
// and an iso made from that, of liveRootTree, as root and as uid 65534
// (another time zone); it returns the recipe's directory and the two
// output directories.
func liveBuild(t *testing.T) (dir, out1, out2 string) {
	t.Helper()
	harness.RequireSetpriv(t)
	k := harness.BootParts(t)
	tree := liveRootTree(t, k)
	dir = harness.TempDirFor65534(t)
	var base bytes.Buffer
	if err := formats.WriteTar(context.Background(), tree.View(), &base, formats.TarOptions{}); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{
		"base.tar": base.String(),
		"recipe.yaml": `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: live
epoch: 1700000000
base: {tarball: ./base.tar}
customize:
  layers:
    - files: [{path: /etc/hostname, content: "live\n"}]
outputs:
  - {format: erofs}
  - {format: live, from: erofs, boot: {cmdline: "console=ttyS0 panic=-1"}}
  - {format: iso, from: live, boot: {cmdline: "console=ttyS0 panic=-1", bios: true}}
`})
	out1, out2 = buildAsRootAnd65534(t, dir, stamp, nil, []string{"TZ=Asia/Kathmandu"})
	return dir, out1, out2
}

// liveNetBoot serves the bundle over HTTP on 127.0.0.1 and returns the
// qemu arguments that boot a script of it through iPXE (qemu user
// networking, 10.0.2.2 the host) and the server's port.
func liveNetBoot(t *testing.T, bundle string) (func(script string) []string, int) {
	t.Helper()
	port := serveOverHTTP(t, bundle)
	return func(script string) []string {
		return []string{"-m", "1024", "-netdev", fmt.Sprintf("user,id=n,bootfile=http://10.0.2.2:%d/%s", port, script),
			"-device", "virtio-net-pci,netdev=n", "-boot", "n"}
	}, port
}

// A recipe's erofs output, the live bundle and the iso made from it are
// the same byte for byte as root and as uid 65534; the iso reads back as
// the erofs output's tree; the bundle boots through iPXE from an HTTP
// server on 127.0.0.1 (qemu user networking, TCG), iPXE fetching the image
// and the initramfs checking it, into the tree running from RAM; an image
// whose sha256 is not the one the kernel command line names is refused,
// with the reason on the console; and the iso boots the same system with
// no network as a CD-ROM under OVMF (El Torito's EFI image, systemd-boot)
// and under SeaBIOS (El Torito's GRUB). The other ways it boots (the
// initramfs fetching the image, the iso as a USB stick and a disk) are
// TestLiveBootVariants, in make e2e-boot.
func TestLiveBoot(t *testing.T) {
	t.Parallel()
	dir, out1, out2 := liveBuild(t)
	sums, err := os.ReadFile(filepath.Join(out1, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"live.erofs", "live.iso", "live.live/vmlinuz", "live.live/initrd.img", "live.live/root.erofs", "live.live/boot.ipxe", "live.live/SHA256SUMS"} {
		if !strings.Contains(string(sums), "  "+name+"\n") {
			t.Errorf("SHA256SUMS does not list %s:\n%s", name, sums)
		}
		a, err1 := os.ReadFile(filepath.Join(out1, name))
		b, err2 := os.ReadFile(filepath.Join(out2, name))
		if err1 != nil || err2 != nil || !bytes.Equal(a, b) {
			t.Errorf("%s differs between the root and the uid 65534 build (%v %v)", name, err1, err2)
		}
	}
	// The iso reads back as the tree its root image holds.
	r := stamp(t, dir, nil, "diff", filepath.Join(out1, "live.erofs"), filepath.Join(out1, "live.iso")).mustSucceed(t)
	if strings.TrimSpace(r.stdout) != "" {
		t.Errorf("stamp diff of the erofs output and the iso:\n%s", r.stdout)
	}
	r = stamp(t, dir, nil, "inspect", filepath.Join(out1, "live.iso")).mustSucceed(t)
	for _, want := range []string{"format:       iso", "iso.boot.bios", "iso.boot.efi", "EFIBOOT.IMG", "bios.loader"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stamp inspect of the iso lacks %q:\n%s", want, r.stdout)
		}
	}

	bundle := filepath.Join(out1, "live.live")
	boot, _ := liveNetBoot(t, bundle)
	t.Run("ipxe", func(t *testing.T) {
		log := harness.RunQEMU(t, boot(formats.LiveScript), liveMarker, bootTimeout)
		if !strings.Contains(log, "iPXE") {
			t.Errorf("the log shows no iPXE")
		}
		checkLiveRootLog(t, log)
	})

	// Another image than the one the command line's sha256 names.
	good, err := os.ReadFile(filepath.Join(bundle, formats.LiveRoot))
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	bad[len(bad)/2] ^= 0x40
	script, err := os.ReadFile(filepath.Join(bundle, formats.LiveScript))
	if err != nil {
		t.Fatal(err)
	}
	badScript := strings.NewReplacer("initrd="+formats.LiveRoot, "initrd=bad.erofs",
		"initrd "+formats.LiveRoot+" ", "initrd bad.erofs ").Replace(string(script))
	if badScript == string(script) {
		t.Fatalf("the bundle's script names no %s to replace:\n%s", formats.LiveRoot, script)
	}
	writeFiles(t, bundle, map[string]string{"bad.erofs": string(bad), "bad.ipxe": badScript})
	t.Run("refused", func(t *testing.T) {
		b := harness.BootQEMU(t, boot("bad.ipxe"), bootTimeout)
		switch {
		case b.TimedOut:
			t.Fatalf("qemu did not stop within %s; log ends:\n%s", bootTimeout, b.Tail(30))
		case strings.Contains(b.Log, liveMarker):
			t.Fatalf("a damaged image booted; log ends:\n%s", b.Tail(30))
		case !regexp.MustCompile(`stamp-live: the root image's sha256 is [0-9a-f]{64}, not the [0-9a-f]{64} it must be: refusing to boot it`).MatchString(b.Log):
			t.Fatalf("no refusal on the console; log ends:\n%s", b.Tail(30))
		}
	})

	for _, c := range liveISOBoots(filepath.Join(out1, "live.iso"))[:2] {
		t.Run("iso-"+c.name, func(t *testing.T) { bootLiveISO(t, c.args) })
	}
}

// liveISOBoot is one way of booting the live iso with no network.
type liveISOBoot struct {
	name string
	args []string // qemu's, beside -m and -nic none
}

// liveISOBoots are the iso as a CD-ROM under OVMF and under SeaBIOS
// (TestLiveBoot), then copied to a USB stick under OVMF and to a disk
// under SeaBIOS (TestLiveBootVariants).
func liveISOBoots(iso string) []liveISOBoot {
	return []liveISOBoot{
		{"cd-uefi", []string{"-bios", harness.OVMFPath, "-drive", "if=none,id=cd,media=cdrom,readonly=on,format=raw,file=" + iso,
			"-device", "ide-cd,drive=cd,bootindex=0"}},
		{"cd-bios", []string{"-drive", "if=none,id=cd,media=cdrom,readonly=on,format=raw,file=" + iso, "-device", "ide-cd,drive=cd,bootindex=0"}},
		{"usb-uefi", []string{"-bios", harness.OVMFPath, "-drive", "if=none,id=stick,format=raw,snapshot=on,file=" + iso,
			"-device", "qemu-xhci", "-device", "usb-storage,drive=stick,bootindex=0"}},
		{"disk-bios", []string{"-drive", "if=none,id=hd,format=raw,snapshot=on,file=" + iso, "-device", "ide-hd,drive=hd,bootindex=0"}},
	}
}

// bootLiveISO boots the live iso one way and checks the system it runs,
// which must have found its root image on the medium.
func bootLiveISO(t *testing.T, args []string) {
	t.Helper()
	log := harness.RunQEMU(t, append([]string{"-m", "1024", "-nic", "none"}, args...), liveMarker, 2*bootTimeout)
	if strings.Contains(log, "fetching") {
		t.Errorf("the initramfs fetched the image instead of finding it beside itself")
	}
	checkLiveRootLog(t, log)
}
