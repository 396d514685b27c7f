package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
)

// bootFormat changes whenever BootParts would lay out its cache differently.
const bootFormat = "stamp-test-boot/1"

// OVMFPath is the UEFI firmware of Debian's ovmf package.
const OVMFPath = "/usr/share/ovmf/OVMF.fd"

// AAVMFPath is the arm64 UEFI firmware of Debian's qemu-efi-aarch64
// package, for qemu-system-aarch64 -M virt: its -bios pads it to the
// flash size itself.
const AAVMFPath = "/usr/share/AAVMF/AAVMF_CODE.fd"

// BootKit is what a boot test needs, all from real Debian packages: a
// kernel and its modules (linux-image-6.1.*-amd64, downloaded and unpacked,
// never installed), a static busybox, systemd-boot and the OVMF firmware.
type BootKit struct {
	// KernelVersion is the module directory name, e.g. "6.1.0-57-amd64".
	KernelVersion string
	// Vmlinuz is the kernel image.
	Vmlinuz string
	// Modules is the host directory lib/modules/KernelVersion, without a
	// modules.dep: Debian's package has none, depmod makes it on install.
	Modules string
	// Busybox is busybox-static's /bin/busybox.
	Busybox string
	// SystemdBoot is systemd-bootx64.efi and LinuxStub the UKI stub
	// linuxx64.efi.stub, both from systemd-boot-efi.
	SystemdBoot string
	LinuxStub   string
	// OVMF is the UEFI firmware for qemu's -bios: OVMF for amd64, AAVMF
	// for arm64.
	OVMF string
	// Arch is the Debian architecture of the parts, Debs the .debs they
	// were unpacked from.
	Arch string
	Debs []string
}

// BootParts downloads (once per machine, into the deb cache) and unpacks
// the amd64 boot parts. It fails, never skips, when they cannot be had: CI
// runs test/scripts/deps.sh first.
func BootParts(t testing.TB) *BootKit {
	t.Helper()
	return BootPartsFor(t, "amd64")
}

// bootArch is what differs between the architectures a boot kit is made
// for: the file names of systemd-boot and its stub, the firmware, and
// whether the host's own apt state gives the packages.
var bootArch = map[string]struct {
	sdboot, stub, firmware string
	hostApt                bool
}{
	"amd64": {"systemd-bootx64.efi", "linuxx64.efi.stub", OVMFPath, true},
	"arm64": {"systemd-bootaa64.efi", "linuxaa64.efi.stub", AAVMFPath, false},
}

// BootPartsFor is BootParts for an architecture, amd64 or arm64. The arm64
// packages come through a private apt state of their own (ForeignDebs), and
// the kit's firmware is AAVMF.
func BootPartsFor(t testing.TB, arch string) *BootKit {
	t.Helper()
	RequireTools(t, "apt-get", "apt-cache", "dpkg-deb", "dpkg")
	ba, ok := bootArch[arch]
	if !ok {
		t.Fatalf("boot parts: no boot kit for architecture %q", arch)
	}
	if _, err := os.Stat(ba.firmware); err != nil {
		t.Fatalf("boot parts: %v %s", err, bootHint)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var apt *ForeignApt
	if !ba.hostApt {
		var err error
		if apt, err = ForeignAptFor(ctx, arch); err != nil {
			t.Fatalf("boot parts: %v %s", err, bootHint)
		}
	}
	kpkg := kernelPackage(ctx, t, arch, apt)

	dir := filepath.Join(cacheRoot(), "boot")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("boot cache: %v", err)
	}
	debs := bootDebs(ctx, t, []string{kpkg, "busybox-static", "systemd-boot-efi"}, apt)
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		t.Fatalf("boot cache lock: %v", err)
	}
	defer unlock()
	root := unpackBootDebs(ctx, t, dir, debs)

	k := &BootKit{
		Arch:          arch,
		KernelVersion: strings.TrimPrefix(kpkg, "linux-image-"),
		Busybox:       filepath.Join(root, "bin/busybox"),
		SystemdBoot:   filepath.Join(root, "usr/lib/systemd/boot/efi", ba.sdboot),
		LinuxStub:     filepath.Join(root, "usr/lib/systemd/boot/efi", ba.stub),
		OVMF:          ba.firmware,
		Debs:          debs,
	}
	k.Vmlinuz = filepath.Join(root, "boot", "vmlinuz-"+k.KernelVersion)
	k.Modules = filepath.Join(root, "lib/modules", k.KernelVersion)
	for _, p := range []string{k.Vmlinuz, k.Modules, k.Busybox, k.SystemdBoot, k.LinuxStub} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("boot parts: %v (unpacked from %s)", err, strings.Join(debs, " "))
		}
	}
	return k
}

const bootHint = "(needs apt reaching Debian and the packages of test/scripts/deps.sh)"

// kernelPackage is the kernel package linux-image-ARCH, a metapackage,
// depends on, through apt (the host's when nil).
func kernelPackage(ctx context.Context, t testing.TB, arch string, apt *ForeignApt) string {
	meta := "linux-image-" + arch
	var cacheArgs []string
	if apt != nil {
		cacheArgs = apt.Options()
	}
	out, err := exec.CommandContext(ctx, "apt-cache", append(cacheArgs, "depends", meta)...).CombinedOutput()
	if err != nil {
		t.Fatalf("boot parts: apt-cache depends %s: %v\n%s%s", meta, err, out, bootHint)
	}
	kernelDepRE := regexp.MustCompile(`(?m)^\s*Depends:\s*(linux-image-6\.1\.\S+-` + arch + `)\s*$`)
	m := kernelDepRE.FindSubmatch(out)
	if m == nil {
		t.Fatalf("boot parts: apt-cache depends %s names no linux-image-6.1.*-%s:\n%s", meta, arch, out)
	}
	return string(m[1])
}

// bootDebs downloads pkgs through apt (the host's when nil) and returns
// the .deb files.
func bootDebs(ctx context.Context, t testing.TB, pkgs []string, apt *ForeignApt) []string {
	var debs []string
	var err error
	if apt != nil {
		debs, err = apt.Debs(ctx, pkgs, t.Logf)
	} else {
		// The deb cache is shared with Base, so its lock is taken too.
		if err := os.MkdirAll(filepath.Join(cacheRoot(), "base"), 0o755); err != nil {
			t.Fatalf("boot cache: %v", err)
		}
		unlockDebs, lerr := lockFile(filepath.Join(cacheRoot(), "base", ".lock"))
		if lerr != nil {
			t.Fatalf("boot cache lock: %v", lerr)
		}
		debs, err = resolveDebs(ctx, BaseOptions{Packages: pkgs}, t.Logf)
		unlockDebs()
	}
	if err != nil {
		t.Fatalf("boot parts: %v %s", err, bootHint)
	}
	return debs
}

// unpackBootDebs returns the directory under dir that debs are unpacked
// into, named by what they are, unpacking them unless it is there. The
// caller holds dir's lock.
func unpackBootDebs(ctx context.Context, t testing.TB, dir string, debs []string) string {
	h := sha256.New()
	fmt.Fprint(h, bootFormat)
	for _, d := range debs {
		fmt.Fprintf(h, "\x00%s", filepath.Base(d))
	}
	root := filepath.Join(dir, hex.EncodeToString(h.Sum(nil)[:8]))
	if _, err := os.Stat(root); err == nil {
		return root
	}
	tmp, err := os.MkdirTemp(dir, ".unpack-")
	if err != nil {
		t.Fatalf("boot cache: %v", err)
	}
	defer os.RemoveAll(tmp)
	for _, d := range debs {
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", d, tmp).CombinedOutput(); err != nil {
			t.Fatalf("boot parts: dpkg-deb -x %s: %v\n%s", d, err, out)
		}
	}
	os.Chmod(tmp, 0o755)
	if err := os.Rename(tmp, root); err != nil {
		t.Fatalf("boot cache: %v", err)
	}
	return root
}

// BootModuleGlobs are the module files (relative to the modules directory)
// a tree needs for an initramfs that mounts an ext4 root from a virtio-blk,
// virtio-scsi, NVMe or SATA disk, dependencies included:
// formats.BootModules, formats.DiskModules and what they need.
var BootModuleGlobs = []string{
	"kernel/crypto/crc32c_generic.ko", "kernel/lib/crc16.ko", "kernel/fs/mbcache.ko",
	"kernel/fs/jbd2", "kernel/fs/ext4", "kernel/drivers/virtio", "kernel/drivers/block/virtio_blk.ko",
	"kernel/crypto/crct10dif_*.ko", "kernel/crypto/crc64_rocksoft_generic.ko", "kernel/lib/crc-t10dif.ko",
	"kernel/lib/crc64.ko", "kernel/lib/crc64-rocksoft.ko", "kernel/block/t10-pi.ko",
	"kernel/drivers/scsi/scsi_common.ko", "kernel/drivers/scsi/scsi_mod.ko", "kernel/drivers/scsi/sd_mod.ko",
	"kernel/drivers/scsi/virtio_scsi.ko", "kernel/drivers/nvme/host/nvme-core.ko", "kernel/drivers/nvme/host/nvme.ko",
	"kernel/drivers/ata/libata.ko", "kernel/drivers/ata/libahci.ko", "kernel/drivers/ata/ahci.ko",
}

// BootTreeOptions say what a test tree holds.
type BootTreeOptions struct {
	// Marker is what /sbin/init prints before it powers the machine off.
	Marker string
	// Init replaces the body of /sbin/init (run by busybox sh; busybox's
	// applets are on its PATH). Empty means: print Marker, power off.
	Init string
	// Modules are globs, relative to the modules directory, of the modules
	// the tree gets (e.g. "kernel/fs/ext4/*"); modules.builtin and
	// modules.order always come along. None by default: the whole set is
	// 400 MB.
	Modules []string
	// Epoch is every mtime; zero means DefaultEpoch.
	Epoch time.Time
	// SplitUsr keeps /bin, /sbin and /lib real directories (busybox in
	// /bin, modules in /lib/modules). By default they are symlinks into
	// /usr, as on Debian since bookworm.
	SplitUsr bool
}

// Tree builds a small bootable root file system in a temp dir: the kernel
// in /boot, the chosen modules, busybox-static as /bin/busybox and an
// /sbin/init that prints the marker and powers off. Owners are 0:0.
func (k *BootKit) Tree(t testing.TB, o BootTreeOptions) *rootfs.Tree {
	t.Helper()
	if o.Epoch.IsZero() {
		o.Epoch = DefaultEpoch
	}
	tree, err := rootfs.New(t.TempDir(), rootfs.Options{DefaultMTime: o.Epoch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tree.Close() })
	mk := func(p string, h rootfs.Header, content []byte) {
		t.Helper()
		h.MTime = o.Epoch
		if _, err := tree.Create(p, h, bytes.NewReader(content)); err != nil {
			t.Fatalf("boot tree: %s: %v", p, err)
		}
	}
	file := func(p string, perm uint32, content []byte) {
		mk(p, rootfs.Header{Type: rootfs.TypeRegular, Perm: perm}, content)
	}
	hostFile := func(p string, perm uint32, host string) {
		data, err := os.ReadFile(host)
		if err != nil {
			t.Fatalf("boot tree: %v", err)
		}
		file(p, perm, data)
	}
	dir := func(p string, perm uint32) { mk(p, rootfs.Header{Type: rootfs.TypeDir, Perm: perm}, nil) }

	bin, sbin, lib := "/bin", "/sbin", "/lib"
	if !o.SplitUsr {
		bin, sbin, lib = "/usr/bin", "/usr/sbin", "/usr/lib"
		dir("/usr", 0o755)
		for _, d := range []string{"bin", "sbin", "lib"} {
			dir("/usr/"+d, 0o755)
			mk("/"+d, rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "usr/" + d}, nil)
		}
	}
	for _, d := range []string{"/boot", "/dev", "/etc", "/proc", "/run", "/sys", "/root", "/var"} {
		dir(d, 0o755)
	}
	dir("/tmp", 0o1777)
	hostFile("/boot/vmlinuz-"+k.KernelVersion, 0o644, k.Vmlinuz)
	hostFile(bin+"/busybox", 0o755, k.Busybox)
	// Every applet gets its link in the tree, since a root mounted
	// read-only leaves no room for busybox --install at boot.
	// An arm64 busybox lists its applets under qemu's user emulation,
	// named on the command line: the host needs no binfmt handler.
	list := exec.Command(k.Busybox, "--list")
	if k.Arch == "arm64" {
		list = exec.Command(Tool(t, "qemu-aarch64-static"), k.Busybox, "--list")
	}
	applets, err := list.Output()
	if err != nil {
		t.Fatalf("boot tree: busybox --list: %v", err)
	}
	for _, a := range strings.Fields(string(applets)) {
		if a != "busybox" && a != "init" && a != "linuxrc" {
			mk(bin+"/"+a, rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "busybox"}, nil)
		}
	}
	body := o.Init
	if body == "" {
		body = fmt.Sprintf("echo %s", shQuote(o.Marker))
	}
	init := "#!/bin/busybox sh\n# stamp boot test init\nexport PATH=/usr/sbin:/usr/bin:/sbin:/bin\n" + body + "\npoweroff -f\n"
	file(sbin+"/init", 0o755, []byte(init))
	file("/etc/os-release", 0o644, []byte("ID=stamp-test\nNAME=\"stamp boot test\"\n"))

	mods := path.Join(lib, "modules", k.KernelVersion)
	var rels []string
	for _, g := range append([]string{"modules.builtin", "modules.builtin.modinfo", "modules.order"}, o.Modules...) {
		found, err := filepath.Glob(filepath.Join(k.Modules, g))
		if err != nil || len(found) == 0 {
			t.Fatalf("boot tree: no module matches %q in %s (%v)", g, k.Modules, err)
		}
		for _, f := range found {
			err := filepath.WalkDir(f, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				rel, _ := filepath.Rel(k.Modules, p)
				rels = append(rels, rel)
				return nil
			})
			if err != nil {
				t.Fatalf("boot tree: %v", err)
			}
		}
	}
	sort.Strings(rels)
	for i, rel := range rels {
		if i > 0 && rels[i-1] == rel {
			continue
		}
		hostFile(path.Join(mods, filepath.ToSlash(rel)), 0o644, filepath.Join(k.Modules, rel))
	}
	return tree
}

// shQuote quotes s for sh.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// RunQEMU boots qemu-system-x86_64 under TCG (no KVM needed) with the fixed
// flags -accel tcg -nographic -no-reboot (and -m 512 unless args set -m),
// plus args, bounded by timeout. The test passes only if the marker appears
// in the serial log and "Kernel panic" does not: with -no-reboot qemu exits
// 0 even after a panic. It returns the log.
func RunQEMU(t testing.TB, args []string, marker string, timeout time.Duration) string {
	t.Helper()
	return RunQEMUFor(t, "amd64", args, marker, timeout)
}

// RunQEMUFor is RunQEMU for a machine of another architecture: for arm64,
// qemu-system-aarch64 -M virt with a Cortex-A57 (TCG emulates it faster
// than -cpu max, whose pointer authentication it computes in software),
// where the serial console is ttyAMA0.
func RunQEMUFor(t testing.TB, arch string, args []string, marker string, timeout time.Duration) string {
	t.Helper()
	if marker == "" {
		t.Fatal("RunQEMU: empty marker")
	}
	for _, a := range args {
		if strings.Contains(a, marker) {
			t.Fatalf("RunQEMU: the marker %q is in the argument %q, so the kernel would print it itself", marker, a)
		}
	}
	b := BootQEMUFor(t, arch, args, timeout)
	tail := b.Tail(60)
	switch {
	case b.TimedOut:
		t.Fatalf("qemu did not finish within %s (marker seen: %t); log %s ends:\n%s",
			timeout, strings.Contains(b.Log, marker), b.LogPath, tail)
	case strings.Contains(b.Log, "Kernel panic"):
		t.Fatalf("the kernel panicked after %s; log ends:\n%s", b.Took, tail)
	case b.Err != nil:
		t.Fatalf("qemu %s: %v after %s; log ends:\n%s", strings.Join(args, " "), b.Err, b.Took, tail)
	case !strings.Contains(b.Log, marker):
		t.Fatalf("no %q in the serial log after %s; log ends:\n%s", marker, b.Took, tail)
	}
	t.Logf("booted in %s (qemu %s)", b.Took, strings.Join(args, " "))
	return b.Log
}

// Boot is one qemu run.
type Boot struct {
	Log      string // serial console and qemu's own messages
	LogPath  string // where Log is kept, in the test's temp dir
	Took     time.Duration
	TimedOut bool
	Err      error // qemu's exit status
}

// Tail is the last n lines of the log.
func (b *Boot) Tail(n int) string {
	lines := strings.Split(b.Log, "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// BootQEMU runs qemu as RunQEMU does and returns what happened, for tests
// that expect a boot to fail. Boots from every test binary on the machine
// take turns, no more at once than the machine has cores, since each wants
// a whole one (qemuSlot).
func BootQEMU(t testing.TB, args []string, timeout time.Duration) *Boot {
	t.Helper()
	return BootQEMUFor(t, "amd64", args, timeout)
}

// qemuMachines are the qemu binary and machine flags per architecture.
var qemuMachines = map[string][]string{
	"amd64": {"qemu-system-x86_64"},
	"arm64": {"qemu-system-aarch64", "-M", "virt", "-cpu", "cortex-a57"},
}

// BootQEMUFor is BootQEMU for an architecture of qemuMachines.
func BootQEMUFor(t testing.TB, arch string, args []string, timeout time.Duration) *Boot {
	t.Helper()
	return bootQEMU(t, arch, args, timeout, nil)
}

// BootQEMUUntil is BootQEMU that ends qemu as soon as the serial log shows
// until: a firmware that refuses every boot option waits in its menu for
// ever, and its last words say when there is nothing more to see.
func BootQEMUUntil(t testing.TB, args []string, until string, timeout time.Duration) *Boot {
	t.Helper()
	return bootQEMU(t, "amd64", args, timeout, func(log []byte) bool { return bytes.Contains(log, []byte(until)) })
}

// BootQEMUWatching is BootQEMU that shows watch the serial log so far,
// twice a second, from a goroutine of its own, and ends qemu once watch
// answers true: a test that starts a second machine only when the first
// has got somewhere, as Cluster API starts a worker only once the control
// plane is initialised.
func BootQEMUWatching(t testing.TB, args []string, watch func(log []byte) bool, timeout time.Duration) *Boot {
	t.Helper()
	return bootQEMU(t, "amd64", args, timeout, watch)
}

func bootQEMU(t testing.TB, arch string, args []string, timeout time.Duration, watch func([]byte) bool) *Boot {
	t.Helper()
	machine, ok := qemuMachines[arch]
	if !ok {
		t.Fatalf("BootQEMU: no qemu machine for architecture %q", arch)
	}
	qemu := Tool(t, machine[0])
	unlock, err := qemuSlot()
	if err != nil {
		t.Fatalf("qemu slot: %v", err)
	}
	defer unlock()

	full := append(append([]string{}, machine[1:]...), "-accel", "tcg", "-nographic", "-no-reboot")
	if !hasFlag(args, "-m") {
		full = append(full, "-m", "512")
	}
	full = append(full, args...)
	b := &Boot{LogPath: filepath.Join(t.TempDir(), "serial.log")}
	logFile, err := os.Create(b.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, qemu, full...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	start := time.Now()
	var watching sync.WaitGroup
	if watch != nil {
		stop := make(chan struct{})
		// Stopped and waited for before bootQEMU returns, so watch never
		// runs after its caller has moved on.
		defer watching.Wait()
		defer close(stop)
		watching.Add(1)
		go func() {
			defer watching.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(500 * time.Millisecond):
				}
				if log, err := os.ReadFile(b.LogPath); err == nil && watch(log) {
					cancel()
					return
				}
			}
		}()
	}
	b.Err = cmd.Run()
	logFile.Close()
	b.Took = time.Since(start).Round(100 * time.Millisecond)
	b.TimedOut = ctx.Err() != nil && time.Since(start) >= timeout
	log, err := os.ReadFile(b.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	b.Log = string(log)
	return b
}

func hasFlag(args []string, flag string) bool {
	for _, a := range args {
		if a == flag {
			return true
		}
	}
	return false
}

// qemuSlot waits for one of as many slots as the machine has cores, which
// every test binary on the machine shares through a lock file in the cache
// root for each, and returns its release. A TCG guest keeps one core busy:
// two boots on two cores take the time of one, where one at a time left a
// core idle through every boot of make test (some 420 s of them).
func qemuSlot() (func(), error) {
	if err := os.MkdirAll(cacheRoot(), 0o755); err != nil {
		return nil, err
	}
	n := max(1, runtime.NumCPU())
	for {
		for i := range n {
			name := filepath.Join(cacheRoot(), fmt.Sprintf("qemu-%d.lock", i))
			f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
			if err != nil {
				return nil, err
			}
			err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
			if err == nil {
				return func() {
					_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
					f.Close()
				}, nil
			}
			f.Close()
			if !errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
}
