package formats

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/erofs"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// The files of a live bundle, relative to its directory, which can be
// served as it is: iPXE resolves the script's relative names against the
// script's own URL.
const (
	LiveKernel = "vmlinuz"
	LiveInitrd = "initrd.img"
	LiveRoot   = "root.erofs"
	LiveScript = "boot.ipxe"
	LiveSums   = "SHA256SUMS"
)

// LiveRootInInitrd is where the live init looks for the root image when
// the boot loader appended it to the initramfs (iPXE's `initrd root.erofs
// /stamp/root.erofs` wraps it in an archive of that name).
const LiveRootInInitrd = "/stamp/root.erofs"

// LiveModules are what the live initramfs loads besides the network
// drivers: a loop device for the image, EROFS (and the crc32c it checks
// its superblock with), and overlayfs for the writable layer.
var LiveModules = []string{"loop", "crc32c_generic", "erofs", "overlay"}

// LiveNetModules are the network drivers the live initramfs carries, each
// when the kernel has it, so stamp.root=URL can fetch the image: virtio and
// the Ethernet controllers of common servers (Intel, Broadcom, Realtek,
// Mellanox). af_packet is what the DHCP client sends through.
var LiveNetModules = []string{"af_packet", "virtio_pci", "virtio_net", "e1000", "e1000e", "igb", "igc", "ixgbe", "i40e", "ice",
	"bnxt_en", "tg3", "r8169", "mlx4_en", "mlx5_core"}

// LiveSpec is a live output's options.
type LiveSpec struct {
	// Compression is the initramfs's; "" is zstd.
	Compression compress.Algorithm
	// Cmdline is the kernel command line the iPXE script passes, after the
	// bundle's own arguments; "" is PXEDefaultCmdline (the arm64 one for
	// arm64).
	Cmdline string
}

// liveFormat is "format: live": a directory BASE.live to boot the tree from
// the network with the tree in RAM, the way Fedora CoreOS and Talos boot:
// the tree's kernel, a small initramfs of stamp's, the tree as an EROFS
// image (the erofs output it is made from, or one it writes) and an iPXE
// script that loads all three. The initramfs checks the image's sha256,
// mounts it under a tmpfs overlay and switch_roots into it (see liveRootInit).
type liveFormat struct{}

func (liveFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	so, err := optionsOf[LiveSpec](spec)
	if err != nil {
		return nil, err
	}
	name := base + ".live"
	bdir := filepath.Join(dir, name)
	if err := os.Mkdir(bdir, 0o755); err != nil {
		return nil, fmt.Errorf("live: %w", err)
	}
	b, err := writeLive(ctx, src, spec, so, bdir)
	if err != nil {
		os.RemoveAll(bdir)
		return nil, fmt.Errorf("live: %w", err)
	}
	// The bundle's own files, like a pxe bundle's, are its structure, not
	// entries: comments. Its root image holds the tree and nothing else.
	res := &Result{Files: []string{name}, Sums: b.sums}
	for _, a := range b.adds {
		res.Adds = append(res.Adds, "# live file "+name+"/"+a)
	}
	for _, p := range b.parts {
		p.File = name + "/" + p.File
		res.Parts = append(res.Parts, p)
	}
	return res, nil
}

// liveBundle is what writeLive wrote.
type liveBundle struct {
	files []string
	adds  []string
	sums  map[string]string // as Result.Sums wants them
	parts []FilePart        // the root image's segments, in the bundle
}

func writeLive(ctx context.Context, src *Source, spec *Spec, so *LiveSpec, dir string) (*liveBundle, error) {
	t := src.Tree
	kpath, _, err := KernelOf(t)
	if err != nil {
		return nil, err
	}
	img, err := kernelImage(t, kpath, src.Arch)
	if err != nil {
		return nil, err
	}
	cmdline, err := bundleCmdline(so.Cmdline, src.Arch)
	if err != nil {
		return nil, err
	}
	// Everything the initramfs needs is checked before the image is
	// written.
	initrd, err := planLiveInitramfs(t, src.Epoch)
	if err != nil {
		return nil, err
	}
	b := &liveBundle{}
	bw := newBundleWriter(dir)

	// The root image: the erofs output's, linked (or copied) in, else one
	// written here with the codec's default.
	rootPath := filepath.Join(dir, LiveRoot)
	if src.From != "" {
		sum, err := linkOrCopy(ctx, src.From, rootPath)
		if err != nil {
			return nil, fmt.Errorf("from: %w", err)
		}
		bw.sums[LiveRoot] = sum
		bw.files = append(bw.files, LiveRoot)
	} else {
		var filed []erofs.FiledSegment
		var sum string
		err := writeFile(rootPath, func(f *os.File) error {
			// Past the page cache: nothing reads the image back, unless
			// it could not be hashed as it was written, and then that
			// read goes past it too.
			w := hashio.NewDirectWriter(f)
			defer w.Close()
			st, err := erofs.Write(ctx, t, w, erofs.Options{UUID: disk.ErofsUUID(src.Seed, spec.Name), Epoch: src.Epoch, Log: src.Log,
				Segments: src.Parts, Filed: &filed})
			if err == nil {
				sum = st.SHA256
			}
			return err
		})
		if err != nil {
			return nil, err
		}
		b.parts = erofsParts(LiveRoot, filed)
		if sum == "" {
			if sum, _, err = hashio.FileUncached(rootPath); err != nil {
				return nil, err
			}
		}
		bw.sums[LiveRoot] = sum
		bw.files = append(bw.files, LiveRoot)
	}

	err = bw.put(LiveKernel, func(w io.Writer) error { return writeKernel(ctx, w, t, kpath, img) })
	if err != nil {
		return nil, err
	}
	alg := so.Compression
	if alg == "" {
		alg = compress.Zstd
	}
	err = bw.put(LiveInitrd, func(w io.Writer) error {
		return initrd.write(ctx, w, LiveInitramfsOptions{Compression: alg, RootSHA256: bw.sums[LiveRoot], MTime: src.Epoch})
	})
	if err != nil {
		return nil, err
	}
	script := liveScript(src.Name, bw.sums[LiveRoot], cmdline)
	if err := bw.putString(LiveScript, script); err != nil {
		return nil, err
	}
	sumText, err := bw.putSums(LiveSums)
	if err != nil {
		return nil, err
	}
	b.files = bw.files
	b.sums = bw.sumsIn(filepath.Base(dir))
	b.adds = append(b.adds, manifestFileLine(LiveScript, 0o644, src.Epoch, []byte(script)),
		manifestFileLine(LiveSums, 0o644, src.Epoch, sumText))
	if img != nil {
		b.adds = append(b.adds, manifestFileLine(LiveKernel, 0o644, src.Epoch, img)+" # decompressed from "+kpath)
	}
	return b, nil
}

// liveScript is the bundle's iPXE script. iPXE fetches the root image
// beside the script and hands it to the kernel as one more initramfs
// archive holding LiveRootInInitrd (its `initrd IMAGE NAME` form), where
// the live init finds it; its sha256 is on the command line.
func liveScript(name, rootSum, cmdline string) string {
	if name == "" {
		name = "the image"
	}
	return fmt.Sprintf(`#!ipxe
# stamp live boot of %s: the kernel, stamp's initramfs and the root image
# beside this script. The initramfs checks the image's sha256 and runs the
# tree from RAM. To have the initramfs fetch the image itself instead (over
# HTTP or HTTPS, from anywhere), drop the root.erofs initrd and add
# stamp.root=URL to the kernel line.
kernel %s initrd=%s initrd=%s stamp.root.sha256=%s %s
initrd %s
initrd %s %s
boot
`, name, LiveKernel, LiveInitrd, LiveRoot, rootSum, cmdline, LiveInitrd, LiveRoot, LiveRootInInitrd)
}

// linkOrCopy puts the file from at to, as a hard link where the file
// system allows, else as a copy, and returns its sha256.
func linkOrCopy(ctx context.Context, from, to string) (string, error) {
	if err := os.Link(from, to); err == nil {
		sum, _, err := hashio.File(to, false)
		return sum, err
	}
	in, err := os.Open(from)
	if err != nil {
		return "", err
	}
	defer in.Close()
	h := sha256.New()
	err = writeFile(to, func(f *os.File) error {
		_, err := io.Copy(io.MultiWriter(f, h), &tarCtxReader{ctx: ctx, r: in})
		return err
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// LiveInitramfsOptions configure WriteLiveInitramfs.
type LiveInitramfsOptions struct {
	// Compression of the archive; "" is zstd.
	Compression compress.Algorithm
	// RootSHA256 is the hex sha256 the root image must have unless the
	// command line names another (stamp.root.sha256=).
	RootSHA256 string
	// MTime is every entry's mtime; use the epoch.
	MTime time.Time
}

// WriteLiveInitramfs writes the live bundle's initramfs: the tree's static
// busybox, the modules of LiveModules and of LiveNetModules the kernel has
// (with what they depend on), the expected sha256 of the root image, a DHCP
// client script and the live /init (liveRootInit).
func WriteLiveInitramfs(ctx context.Context, t *rootfs.Sealed, w io.Writer, o LiveInitramfsOptions) error {
	p, err := planLiveInitramfs(t, o.MTime)
	if err != nil {
		return err
	}
	return p.write(ctx, w, o)
}

// liveInitramfs is a live initramfs but for the root image's sha256, which
// planLiveInitramfs checks can be made before the image is written.
type liveInitramfs struct {
	items []cpioItem
}

func planLiveInitramfs(t *rootfs.Sealed, mtime time.Time) (*liveInitramfs, error) {
	bb, err := staticBusybox(t, "")
	if err != nil {
		return nil, fmt.Errorf("live initramfs: %w", err)
	}
	k, err := findBootKernel(t, "")
	if err != nil {
		return nil, fmt.Errorf("live initramfs: %w", err)
	}
	set, err := loadModuleSet(t, k.modDir)
	if err != nil {
		return nil, fmt.Errorf("live initramfs: %w", err)
	}
	want := append([]string{}, LiveModules...)
	for _, m := range LiveNetModules {
		if set.has(m) {
			want = append(want, m)
		}
	}
	mods, err := set.order(want)
	if err != nil {
		return nil, fmt.Errorf("live initramfs: kernel %s: %w", k.version, err)
	}
	modDir := "/lib/modules/" + k.version
	p := &liveInitramfs{}
	// /stamp is where an appended archive puts the image: the kernel's
	// unpacker makes no directories for it.
	for _, d := range []string{"/", "/bin", "/dev", "/etc", "/etc/stamp", "/lib", "/lib/modules", modDir, "/proc", "/run", path.Dir(LiveRootInInitrd), "/sys", bootSysroot} {
		p.items = append(p.items, cpioItem{path: d, in: &rootfs.Inode{Type: rootfs.TypeDir, Perm: 0o755, MTime: mtime}})
	}
	p.items = append(p.items, busyboxItem(t, bb, mtime))
	mitems, loads, err := moduleItems(t, set, mods, modDir, mtime)
	if err != nil {
		return nil, fmt.Errorf("live initramfs: %w", err)
	}
	p.items = append(p.items, mitems...)
	for _, f := range []CpioFile{
		{Path: "/init", Perm: 0o755, Content: liveRootInit(k.version, loads)},
		{Path: "/etc/stamp/udhcpc.script", Perm: 0o755, Content: []byte(liveDHCPScript)},
	} {
		p.items = append(p.items, cpioGenerated(f, mtime))
	}
	return p, nil
}

// write writes the archive, with the root image's sha256.
func (p *liveInitramfs) write(ctx context.Context, w io.Writer, o LiveInitramfsOptions) error {
	if len(o.RootSHA256) != 64 {
		return fmt.Errorf("live initramfs: the root image's sha256 %q is not 64 hex digits", o.RootSHA256)
	}
	items := append(slices.Clone(p.items), cpioGenerated(CpioFile{Path: "/etc/stamp/root.sha256", Perm: 0o644,
		Content: []byte(o.RootSHA256 + "\n")}, o.MTime))
	sort.Slice(items, func(i, j int) bool { return items[i].path < items[j].path })
	alg := o.Compression
	if alg == "" {
		alg = compress.Zstd
	}
	if err := writeCpioItems(ctx, w, alg, items); err != nil {
		return fmt.Errorf("live initramfs: %w", err)
	}
	return nil
}

// liveRootInit is the live initramfs's /init.
func liveRootInit(version string, modules []string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, liveInitHead, version)
	for _, m := range modules {
		fmt.Fprintf(&b, "load %s\n", m)
	}
	b.WriteString(liveInitTail)
	return b.Bytes()
}

const liveInitHead = `#!/bin/busybox sh
# stamp live initramfs for kernel %s: finds the root image (fetched from
# stamp.root=URL, or appended to the initramfs at /stamp/root.erofs), checks
# its sha256 (stamp.root.sha256=, else the one this initramfs was built
# with) and refuses any other, mounts it read-only under a tmpfs overlay on
# /sysroot (stamp.live.size= bounds the tmpfs), puts the paths of
# stamp.live.tmpfs= (default /var/lib/containerd and /var/lib/kubelet: a
# container runtime needs its snapshots on a file system overlayfs can use
# as an upper layer) on tmpfs with what the image holds there, and
# switch_roots into init= (default
# /sbin/init). stamp.shell: a shell instead of giving up.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t devtmpfs -o nosuid,mode=0755 devtmpfs /dev
mount -t proc -o nosuid,nodev,noexec proc /proc
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys

say() { echo "stamp-live: $*"; }
fail() {
	say "$*"
	case " $(cat /proc/cmdline) " in
	*" stamp.shell "*) say "starting a shell (stamp.shell)"; exec sh ;;
	esac
	say "giving up: powering off (add stamp.shell to the kernel command line for a shell)"
	sync
	poweroff -f
}

url= sum= init=/sbin/init size= keep="/var/lib/containerd /var/lib/kubelet"
set -f
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	stamp.root=*) url=${arg#stamp.root=} ;;
	stamp.root.sha256=*) sum=${arg#stamp.root.sha256=} ;;
	stamp.live.size=*) size=,size=${arg#stamp.live.size=} ;;
	stamp.live.tmpfs=*) keep=$(echo "${arg#stamp.live.tmpfs=}" | tr , ' ') ;;
	init=*) init=${arg#init=} ;;
	esac
done
set +f
[ -n "$sum" ] || sum=$(cat /etc/stamp/root.sha256)

load() { insmod "$1" || say "insmod $1 failed"; }
`

const liveInitTail = `
now() { cut -d " " -f 1 /proc/uptime; }
start=$(now)
img=/stamp/root.erofs
if [ -n "$url" ]; then
	mkdir -p /stamp
	got=
	for i in 1 2 3 4 5 6 7 8 9 10; do
		for n in /sys/class/net/*; do
			n=${n##*/}
			[ "$n" = lo ] && continue
			ip link set "$n" up
			udhcpc -i "$n" -s /etc/stamp/udhcpc.script -n -q -t 3 -T 2 >/dev/null 2>&1 && { got=$n; break; }
		done
		[ -n "$got" ] && break
		sleep 1
	done
	[ -n "$got" ] || fail "no network interface got a DHCP lease, so $url cannot be fetched; interfaces: $(ls /sys/class/net | tr '\n' ' ')"
	say "fetching $url through $got"
	wget -q -O "$img" "$url" || fail "fetching $url failed"
elif [ ! -f "$img" ]; then
	fail "no root image: stamp.root=URL is not on the kernel command line and none is appended to the initramfs at $img"
fi
say "checking the root image's sha256"
have=$(sha256sum "$img" | cut -d ' ' -f 1)
if [ "$have" != "$sum" ]; then
	fail "the root image's sha256 is $have, not the $sum it must be: refusing to boot it"
fi

mkdir -p /run/stamp/ro /run/stamp/rw
mount -t erofs -o ro,loop "$img" /run/stamp/ro || fail "cannot mount the root image (EROFS) from $img"
mount -t tmpfs -o "mode=0755$size" tmpfs /run/stamp/rw || fail "cannot mount a tmpfs for the writable layer"
mkdir -p /run/stamp/rw/upper /run/stamp/rw/work
mount -t overlay -o lowerdir=/run/stamp/ro,upperdir=/run/stamp/rw/upper,workdir=/run/stamp/rw/work overlay /sysroot ||
	fail "cannot mount the overlay of the root image and a tmpfs"
for p in $keep; do
	[ -d "/sysroot$p" ] || continue
	t=/run/stamp/keep$(echo "$p" | tr / _)
	mkdir -p "$t"
	mount -t tmpfs -o "mode=0755$size" tmpfs "$t" && cp -a "/sysroot$p/." "$t/" &&
		mount -o move "$t" "/sysroot$p" || fail "cannot put $p on a tmpfs"
done
[ -e "/sysroot$init" ] || [ -L "/sysroot$init" ] || fail "$init is not in the root image"
# Timed while /proc is still here.
took=$(awk -v a="$start" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
for d in dev proc sys; do
	mount -o move "/$d" "/sysroot/$d" 2>/dev/null || umount -l "/$d"
done
say "running from RAM (the image found, checked and mounted in $took s); starting $init"
exec switch_root /sysroot "$init" "$@"
`

// liveDHCPScript is the udhcpc script: it sets the interface's address,
// default route and DNS servers from the lease.
const liveDHCPScript = `#!/bin/busybox sh
case "$1" in
bound | renew)
	ip addr flush dev "$interface"
	ip addr add "$ip/${mask:-24}" dev "$interface"
	for r in $router; do
		ip route add default via "$r" dev "$interface" && break
	done
	: >/etc/resolv.conf
	for d in $dns; do
		echo "nameserver $d" >>/etc/resolv.conf
	done
	;;
esac
`
