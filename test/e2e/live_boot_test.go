package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/test/harness"
)

// bootTimeout bounds one qemu boot under TCG; they take 10 to 25 s here.
const bootTimeout = 180 * time.Second

// liveMarker is what the test tree's init prints last. It is built at run
// time by the init (6*7), so the kernel command line, the init script and
// the kernel's own messages never hold it.
const liveMarker = "stamp-live-ok-42"

// liveInitBody checks, from inside the booted live system, what the live
// init promised: the root is a tmpfs (switch_root happened), setuid bits,
// owners and hard links came through the copy.
const liveInitBody = `mount -t proc proc /proc
echo "root-fs: $(awk '$2 == "/" {print $3}' /proc/mounts)"
echo "suid: $(stat -c '%a %u:%g' /usr/bin/stamp-suid)"
echo "owner: $(stat -c '%u:%g' /etc/stamp-owned)"
echo "links: $(stat -c '%h' /etc/link-a) $(stat -c %i /etc/link-a) $(stat -c %i /etc/link-b)"
echo "stamp-live-ok-$((6 * 7))"`

// liveTree is a bootable tree with the entries liveInitBody checks.
func liveTree(t *testing.T, k *harness.BootKit) *rootfs.Tree {
	t.Helper()
	tree := k.Tree(t, harness.BootTreeOptions{Init: liveInitBody})
	mk := func(p string, h rootfs.Header, content string) {
		t.Helper()
		h.Type, h.MTime = rootfs.TypeRegular, harness.DefaultEpoch
		if _, err := tree.Create(p, h, strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
	}
	mk("/usr/bin/stamp-suid", rootfs.Header{Perm: 0o4755}, "#!/bin/sh\n")
	mk("/etc/stamp-owned", rootfs.Header{Perm: 0o640, UID: 1234, GID: 5678}, "owned\n")
	mk("/etc/link-a", rootfs.Header{Perm: 0o644}, "linked\n")
	if _, err := tree.Link("/etc/link-b", "/etc/link-a", rootfs.Origin{}); err != nil {
		t.Fatal(err)
	}
	return tree
}

// checkLiveLog checks what liveInitBody printed.
func checkLiveLog(t *testing.T, log string) {
	t.Helper()
	for _, want := range []string{"root-fs: tmpfs\r\n", "suid: 4755 0:0\r\n", "owner: 1234:5678\r\n"} {
		if !strings.Contains(log, want) {
			t.Errorf("serial log lacks %q", strings.TrimSpace(want))
		}
	}
	m := regexp.MustCompile(`links: (\d+) (\d+) (\d+)`).FindStringSubmatch(log)
	if m == nil || m[1] != "2" || m[2] != m[3] {
		t.Errorf("hard link not kept in the live system: %q", m)
	}
}

// liveBaseTar is liveTree as a tarball, for a recipe's base.
func liveBaseTar(t *testing.T, k *harness.BootKit) string {
	t.Helper()
	var base bytes.Buffer
	if err := formats.WriteTar(context.Background(), liveTree(t, k).View(), &base, formats.TarOptions{}); err != nil {
		t.Fatal(err)
	}
	return base.String()
}

// liveRecipe builds a cpio output and a pxe bundle from it on liveBaseTar,
// as base.tar beside it.
const liveRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: live
epoch: 1700000000
base: {tarball: ./base.tar}
customize:
  layers:
    - files: [{path: /etc/hostname, content: "live\n"}]
outputs:
  - {format: cpio}
  - {format: pxe, from: cpio}
`

// The PXE bundle's initramfs, made from a tree holding busybox-static,
// boots Debian's kernel into the tree's init for every compression the
// kernel takes.
func TestLiveBootPXE(t *testing.T) {
	t.Parallel()
	k := harness.BootParts(t)
	tree := liveTree(t, k)
	// Two files of 20 MiB first in path order make the initramfs three
	// archives or more (formats.WriteCpio's Split), the hard link the init
	// checks in a later one than the first.
	if _, err := tree.MkdirAll("/a-filler", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o755, MTime: harness.DefaultEpoch}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"one", "two"} {
		var filler strings.Builder
		for i := 0; filler.Len() < 20<<20; i++ {
			fmt.Fprintf(&filler, "filler %s line %d\n", name, i)
		}
		h := rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: harness.DefaultEpoch}
		if _, err := tree.Create("/a-filler/"+name, h, strings.NewReader(filler.String())); err != nil {
			t.Fatal(err)
		}
	}
	for _, alg := range []compress.Algorithm{compress.Gzip, compress.Zstd, compress.XZ} {
		t.Run(string(alg), func(t *testing.T) {
			dir := t.TempDir()
			start := time.Now()
			b, err := formats.WritePXE(context.Background(), tree.View(), dir, formats.PXEOptions{
				Compression: alg, MTime: harness.DefaultEpoch, Name: "live-test"})
			if err != nil {
				t.Fatal(err)
			}
			fi, _ := os.Stat(filepath.Join(dir, formats.PXEInitrd))
			t.Logf("bundle written in %s; initrd %d bytes (%s)", time.Since(start).Round(time.Millisecond), fi.Size(), alg)
			if n := initrdArchives(t, filepath.Join(dir, formats.PXEInitrd), alg); n < 3 {
				t.Errorf("the initramfs is %d archives, want the 3 or more its size makes", n)
			}
			if len(b.Warnings) != 0 {
				t.Errorf("warnings: %q", b.Warnings)
			}
			log := harness.RunQEMU(t, []string{
				"-kernel", filepath.Join(dir, formats.PXEKernel),
				"-initrd", filepath.Join(dir, formats.PXEInitrd),
				"-append", "console=ttyS0 panic=-1",
			}, liveMarker, bootTimeout)
			checkLiveLog(t, log)
		})
	}
}

// initrdArchives counts the newc archives of an initramfs by their trailers.
func initrdArchives(t *testing.T, p string, alg compress.Algorithm) int {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := compress.NewReader(alg, f)
	if err != nil {
		t.Fatal(err)
	}
	var raw bytes.Buffer
	if _, err := raw.ReadFrom(r); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return bytes.Count(raw.Bytes(), []byte("TRAILER!!!\x00"))
}

// A recipe builds a cpio output and a pxe bundle from it; the build is the
// same byte for byte as root and as uid 65534, and the bundle boots through
// its iPXE script, fetched over qemu's built-in TFTP by the iPXE ROM.
func TestLiveBootIPXEFromRecipe(t *testing.T) {
	t.Parallel()
	harness.RequireSetpriv(t)
	k := harness.BootParts(t)
	dir := harness.TempDirFor65534(t)
	writeFiles(t, dir, map[string]string{"base.tar": liveBaseTar(t, k), "recipe.yaml": liveRecipe})
	out1 := filepath.Join(dir, "out-root")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out1, "--cache-dir", filepath.Join(dir, "cache-root"), "--work-dir", dir).mustSucceed(t)
	out2 := filepath.Join(dir, "out-nobody")
	work2 := filepath.Join(dir, "work-nobody")
	for _, d := range []string{out2, work2} {
		os.MkdirAll(d, 0o777)
		os.Chmod(d, 0o777)
	}
	stampAs65534(t, dir, []string{"TZ=Asia/Kathmandu"}, "build", "recipe.yaml", "-o", out2,
		"--cache-dir", filepath.Join(work2, "cache"), "--work-dir", work2).mustSucceed(t)

	sums, err := os.ReadFile(filepath.Join(out1, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"live.cpio.zst", "live.pxe/vmlinuz", "live.pxe/initrd.img", "live.pxe/boot.ipxe",
		"live.pxe/pxelinux.cfg/default", "live.pxe/SHA256SUMS"} {
		if !strings.Contains(string(sums), "  "+name+"\n") {
			t.Errorf("SHA256SUMS does not list %s:\n%s", name, sums)
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(string(sums)), "\n") {
		name := line[strings.Index(line, "  ")+2:]
		a, err1 := os.ReadFile(filepath.Join(out1, name))
		b, err2 := os.ReadFile(filepath.Join(out2, name))
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v %v", name, err1, err2)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between the root and the uid 65534 build", name)
		}
	}
	cmd := exec.Command("sha256sum", "--check", "--strict", "SHA256SUMS")
	cmd.Dir = filepath.Join(out1, "live.pxe")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the bundle's SHA256SUMS: %v\n%s", err, msg)
	}
	manifest, err := os.ReadFile(filepath.Join(out1, "manifest.txt"))
	if err != nil {
		t.Fatal(err)
	}
	_, pxeSection, _ := strings.Cut(string(manifest), "## output pxe live.pxe\n")
	for _, want := range []string{"initrd:/init type=file mode=0755 uid=0 gid=0 mtime=1700000000 size=", "# pxe file live.pxe/boot.ipxe type=file"} {
		if !strings.Contains(pxeSection, "\n"+want) && !strings.HasPrefix(pxeSection, want) {
			t.Errorf("the manifest's pxe section lacks %q:\n%s", want, pxeSection)
		}
	}
	checkCpioAgainstManifest(t, filepath.Join(out1, "live.cpio.zst"), string(manifest), "## output cpio live.cpio.zst\n")
	// The initramfs is the cpio output with the live /init appended.
	cpioData, _ := os.ReadFile(filepath.Join(out1, "live.cpio.zst"))
	initrd, _ := os.ReadFile(filepath.Join(out1, "live.pxe/initrd.img"))
	if !bytes.HasPrefix(initrd, cpioData) {
		t.Errorf("the bundle's initrd does not start with the cpio output")
	}
	script, _ := os.ReadFile(filepath.Join(out1, "live.pxe/boot.ipxe"))
	if !strings.Contains(string(script), "console=ttyS0") {
		t.Fatalf("boot.ipxe has no serial console, the boot could not be judged:\n%s", script)
	}
	// A panic would hang rather than end qemu: the default command line has
	// no panic=. The timeout then fails the test.
	log := harness.RunQEMU(t, []string{
		"-netdev", "user,id=n,tftp=" + filepath.Join(out1, "live.pxe") + ",bootfile=" + formats.PXEScript,
		"-device", "virtio-net-pci,netdev=n", "-boot", "n",
	}, liveMarker, bootTimeout)
	if !strings.Contains(log, "iPXE") {
		t.Errorf("the log shows no iPXE")
	}
	checkLiveLog(t, log)
}

// The boot initramfs finds an ext4 root on a virtio disk by PARTUUID, UUID
// and LABEL, and on virtio-scsi, NVMe and SATA disks by PARTUUID, mounts it
// read-only and runs the tree's init from it. The disk
// is made with sgdisk and mke2fs -d, so this tests the initramfs alone.
func TestBootInitramfsMountsExt4Root(t *testing.T) {
	t.Parallel()
	k := harness.BootParts(t)
	tools := harness.RequireTools(t, "sgdisk", "mke2fs")
	body := `mount -t proc proc /proc 2>/dev/null
echo "root-mount: $(awk '$2 == "/" {print $1, $3, substr($4, 1, 2)}' /proc/mounts)"
echo "stamp-disk-ok-$((6 * 7))"`
	tree := k.Tree(t, harness.BootTreeOptions{Init: body, Modules: harness.BootModuleGlobs})
	dir := t.TempDir()
	initrd := filepath.Join(dir, "initrd.img")
	f, err := os.Create(initrd)
	if err != nil {
		t.Fatal(err)
	}
	if err := formats.WriteBootInitramfs(context.Background(), tree.View(), f, formats.BootInitramfsOptions{}); err != nil {
		t.Fatal(err)
	}
	f.Close()

	const (
		partUUID = "5D3E6F12-0A1B-4C2D-9E8F-112233445566"
		fsUUID   = "0b4c7e2a-6f1d-4e8a-9c3b-5a6d7e8f9012"
		label    = "stamp-root"
	)
	disk := filepath.Join(dir, "disk.raw")
	part := filepath.Join(dir, "root.ext4")
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Env = append(os.Environ(), "E2FSPROGS_FAKE_TIME=1700000000")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	// 1 MiB of GPT and slack, a small first partition so the root is the
	// second (the init must read the right GPT entry), then 48 MiB of root.
	run(tools[1], "-q", "-t", "ext4", "-d", tree.Dir(), "-U", fsUUID, "-L", label, "-E", "root_owner=0:0", part, "48M")
	if err := os.WriteFile(disk, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(disk, 64<<20); err != nil {
		t.Fatal(err)
	}
	run(tools[0], "-o", "-n", "1:2048:+4M", "-t", "1:8300", "-n", "2:10240:+48M", "-t", "2:8304", "-u", "2:"+partUUID, disk)
	run("dd", "if="+part, "of="+disk, "bs=1M", "seek=5", "conv=notrunc", "status=none")

	for _, root := range []string{"PARTUUID=" + strings.ToLower(partUUID), "UUID=" + strings.ToUpper(fsUUID), "LABEL=" + label} {
		t.Run(strings.SplitN(root, "=", 2)[0], func(t *testing.T) {
			log := harness.RunQEMU(t, []string{
				"-kernel", k.Vmlinuz, "-initrd", initrd,
				"-drive", "file=" + disk + ",format=raw,if=virtio,snapshot=on",
				"-append", fmt.Sprintf("console=ttyS0 panic=-1 root=%s", root),
			}, "stamp-disk-ok-42", bootTimeout)
			if !strings.Contains(log, "root-mount: /dev/vda2 ext4 ro") {
				t.Errorf("the root is not /dev/vda2 mounted ext4 read-only")
			}
			if !strings.Contains(log, "stamp-initramfs: root="+root+" is /dev/vda2") {
				t.Errorf("the initramfs did not report finding the root")
			}
		})
	}

	// The same disk on the other buses a node's root may be on, found by
	// PARTUUID through the drivers of formats.DiskModules.
	for _, bus := range []struct {
		name, dev string
		args      []string
	}{
		{"virtio-scsi", "/dev/sda2", []string{"-device", "virtio-scsi-pci,id=scsi0", "-device", "scsi-hd,drive=d0,bus=scsi0.0"}},
		{"nvme", "/dev/nvme0n1p2", []string{"-device", "nvme,drive=d0,serial=stamp0"}},
		{"sata", "/dev/sda2", []string{"-device", "ahci,id=ahci0", "-device", "ide-hd,drive=d0,bus=ahci0.0"}},
	} {
		t.Run(bus.name, func(t *testing.T) {
			root := "PARTUUID=" + strings.ToLower(partUUID)
			args := append([]string{"-kernel", k.Vmlinuz, "-initrd", initrd,
				"-drive", "file=" + disk + ",format=raw,if=none,id=d0,snapshot=on",
				"-append", "console=ttyS0 panic=-1 root=" + root}, bus.args...)
			log := harness.RunQEMU(t, args, "stamp-disk-ok-42", bootTimeout)
			if !strings.Contains(log, "root-mount: "+bus.dev+" ext4 ro") {
				t.Errorf("the root is not %s mounted ext4 read-only", bus.dev)
			}
			if !strings.Contains(log, "stamp-initramfs: root="+root+" is "+bus.dev) {
				t.Errorf("the initramfs did not report finding the root on %s", bus.dev)
			}
		})
	}

	// A root that is not there ends in a panic after rootdelay, not a hang.
	t.Run("missing", func(t *testing.T) {
		b := harness.BootQEMU(t, []string{"-kernel", k.Vmlinuz, "-initrd", initrd,
			"-drive", "file=" + disk + ",format=raw,if=virtio,snapshot=on",
			"-append", "console=ttyS0 panic=-1 rootdelay=2 root=LABEL=no-such-label"}, bootTimeout)
		if b.TimedOut {
			t.Fatalf("qemu did not end; the initramfs hangs on a missing root:\n%s", b.Tail(30))
		}
		out := []byte(b.Log)
		for _, want := range []string{"stamp-initramfs: no device for root=LABEL=no-such-label after 2s", "Kernel panic"} {
			if !bytes.Contains(out, []byte(want)) {
				t.Errorf("log lacks %q:\n%s", want, out[max(0, len(out)-3000):])
			}
		}
	})
}

// checkCpioAgainstManifest lists a cpio output with GNU cpio -itv and
// compares every line with manifest.txt's tree entries plus the lines of
// the output's own section: name, type and mode, link count, owner, size or
// device number, symlink target.
func checkCpioAgainstManifest(t *testing.T, archive, manifest, section string) {
	t.Helper()
	cpioBin := harness.Tool(t, "cpio")
	treePart, rest, ok := strings.Cut(manifest, "## output ")
	if !ok {
		t.Fatalf("manifest.txt has no output sections")
	}
	_, sec, ok := strings.Cut("## output "+rest, section)
	if !ok {
		t.Fatalf("manifest.txt has no %q", section)
	}
	sec, _, _ = strings.Cut(sec, "## ")
	entries, err := rootfs.ParseManifest(strings.NewReader(treePart + sec))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, l := range harness.CpioListing(entries) {
		want[harness.CpioListingName(l)] = l
	}

	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err := compress.NewReaderAuto(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cpioBin, "-itv", "--numeric-uid-gid", "--quiet")
	cmd.Stdin = rc
	cmd.Env = append(os.Environ(), "LC_ALL=C", "TZ=UTC")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio -itv %s: %v", archive, err)
	}
	lines, err := harness.ParseCpioListing(string(out))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, l := range lines {
		got[harness.CpioListingName(l)] = l
	}
	if len(got) != len(want) {
		t.Errorf("cpio -itv lists %d entries, the manifest %d", len(got), len(want))
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s: cpio -itv says %q, the manifest %q", name, got[name], w)
		}
	}
	t.Logf("cpio -itv of %s agrees with the manifest's %d entries", filepath.Base(archive), len(want))
}
