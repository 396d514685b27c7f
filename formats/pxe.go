package formats

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// The files of a PXE bundle, relative to its directory. iPXE resolves the
// script's relative names against the script's own URL and PXELINUX against
// its TFTP prefix, so the directory can be served as it is.
const (
	PXEKernel   = "vmlinuz"
	PXEInitrd   = "initrd.img"
	PXEScript   = "boot.ipxe"
	PXELinuxCfg = "pxelinux.cfg/default"
	PXESums     = "SHA256SUMS"
)

// PXEDefaultCmdline is the kernel command line of a bundle when none is
// given: kernel messages on the screen and the first serial port, which
// is where the last console= sends init's output.
const PXEDefaultCmdline = "console=tty0 console=ttyS0,115200"

// bundleCmdline is the kernel command line a network or live bundle
// passes: cmdline, or the default for arch when it is empty.
func bundleCmdline(cmdline, arch string) (string, error) {
	if cmdline == "" {
		cmdline = PXEDefaultCmdline
		if arch == "arm64" {
			cmdline = PXEDefaultCmdlineARM64
		}
	}
	if strings.ContainsAny(cmdline, "\n\r") {
		return "", fmt.Errorf("the kernel command line holds a line break")
	}
	return cmdline, nil
}

// PXEDefaultCmdlineARM64 is the arm64 default: the first serial port of
// qemu's virt machine and of most arm64 servers is a PL011, ttyAMA0.
const PXEDefaultCmdlineARM64 = "console=tty0 console=ttyAMA0,115200"

// liveRoot is where the live init mounts the tmpfs it copies the tree into.
const liveRoot = "/.stamp-live"

// PXEOptions configure WritePXE.
type PXEOptions struct {
	// Compression of the initramfs made from the tree; empty means zstd.
	// An initramfs made from a cpio output keeps that output's compression.
	Compression compress.Algorithm
	// Cmdline is the kernel command line the iPXE script and the PXELINUX
	// config pass; empty means PXEDefaultCmdline.
	Cmdline string
	// FromCpio, when set, is a cpio output of the same tree (as WriteCpio
	// wrote it) that becomes the initramfs, with an archive holding the
	// live /init appended; otherwise the initramfs is written from the tree.
	FromCpio string
	// MTime is the mtime of what the bundle adds (/init); use the epoch.
	MTime time.Time
	// Name appears in the comments of the script and config.
	Name string
	// Arch is the recipe's architecture: the kernel must be one of it (an
	// arm64 kernel as an Image, decompressed when the tree's is gzip'd),
	// and it picks the default command line. Empty checks nothing.
	Arch string
	// Parts supplies the initramfs's parts as an earlier build compressed
	// them (PartStore); nil compresses them all.
	Parts PartStore
}

// PXEBundle says what WritePXE wrote.
type PXEBundle struct {
	// Files are the bundle's files, relative to its directory, sorted.
	Files []string
	// Adds are manifest lines for what the bundle adds beyond the tree: the
	// initramfs's /init (and its xattr list), then the bundle's own files
	// other than the kernel, named relative to the bundle directory.
	Adds []string
	// Warnings name what the live system loses.
	Warnings []string
	// Parts are the initramfs's compressed parts, File being PXEInitrd.
	Parts []FilePart
	// sums are the hex sha256 of Files, hashed as they were written, by
	// their names under the directory that holds the bundle's (what
	// Result.Sums wants).
	sums map[string]string
}

// WritePXE writes a network-boot bundle of the tree into dir (created if
// missing; it must not hold the bundle's files already): the tree's kernel (KernelOf), an initramfs holding the whole
// tree plus a live /init, an iPXE script, a PXELINUX config and the
// SHA256SUMS of those four. An initramfs written from the tree is split
// (CpioOptions.Split): its parts compress on every core.
//
// The live /init, run by the tree's busybox, copies the tree from the
// initramfs into a tmpfs and switch_roots into it, then the tree's own init
// runs (init= on the command line, default /sbin/init). The initial rootfs
// cannot be pivot_root'ed, which container runtimes need, and switch_root
// frees it once the copy is made; until then the tree takes twice its size
// in memory. stamp.live.size= sets the tmpfs size (default half the RAM).
// Xattrs, which the kernel's unpacker drops, are put back from the list at
// XattrListPath when the tree has setfattr; sockets are not copied (their
// services make them).
func WritePXE(ctx context.Context, t *rootfs.Sealed, dir string, o PXEOptions) (*PXEBundle, error) {
	kpath, _, err := KernelOf(t)
	if err != nil {
		return nil, fmt.Errorf("pxe: %w", err)
	}
	img, err := kernelImage(t, kpath, o.Arch)
	if err != nil {
		return nil, fmt.Errorf("pxe: %w", err)
	}
	for _, p := range []string{"/init", liveRoot} {
		if t.Get(p) != nil {
			return nil, fmt.Errorf("pxe: the tree holds %s, which the live initramfs needs for itself", p)
		}
	}
	bb, err := liveBusybox(t)
	if err != nil {
		return nil, fmt.Errorf("pxe: %w", err)
	}
	cmdline, err := bundleCmdline(o.Cmdline, o.Arch)
	if err != nil {
		return nil, fmt.Errorf("pxe: %w", err)
	}
	var items []cpioItem
	t.Walk(func(e *rootfs.Entry) error {
		items = append(items, cpioItem{path: e.Path, in: e.Inode})
		return nil
	})
	_, xfiles := cpioXattrList(items)
	setfattr := ""
	for _, p := range []string{"/usr/bin/setfattr", "/bin/setfattr"} {
		if e, err := t.Lookup(p, true); err == nil && e.Type == rootfs.TypeRegular {
			setfattr = e.Path
			break
		}
	}
	init := liveInit(bb.Path, setfattr, t.Children("/"))

	if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(PXELinuxCfg)), 0o755); err != nil {
		return nil, fmt.Errorf("pxe: %w", err)
	}
	b := &PXEBundle{}
	bw := newBundleWriter(dir)
	err = bw.put(PXEKernel, func(w io.Writer) error { return writeKernel(ctx, w, t, kpath, img) })
	if err != nil {
		return nil, fmt.Errorf("pxe: %w", err)
	}
	extra := []CpioFile{{Path: "/init", Perm: 0o755, Content: init}}
	err = bw.put(PXEInitrd, func(w io.Writer) error {
		if o.FromCpio == "" {
			alg := o.Compression
			if alg == "" {
				alg = compress.Zstd
			}
			return WriteCpio(ctx, t, w, CpioOptions{Compression: alg, Extra: extra, MTime: o.MTime, Adds: &b.Adds, Split: true,
				Parts: o.Parts, Filed: &b.Parts})
		}
		return appendLive(ctx, w, o.FromCpio, extra, o.MTime, &b.Adds)
	})
	if err != nil {
		return nil, fmt.Errorf("pxe: %w", err)
	}
	for i := range b.Parts {
		b.Parts[i].File = PXEInitrd
	}
	generated := pxeConfigs(o.Name, cmdline)
	for _, g := range generated {
		if err := bw.putString(g.name, g.content); err != nil {
			return nil, fmt.Errorf("pxe: %w", err)
		}
	}
	sumText, err := bw.putSums(PXESums)
	if err != nil {
		return nil, fmt.Errorf("pxe: %w", err)
	}
	b.Files = bw.files
	b.sums = bw.sumsIn(filepath.Base(dir))
	for _, g := range append(generated, bundleText{PXESums, string(sumText)}) {
		b.Adds = append(b.Adds, manifestFileLine(g.name, 0o644, o.MTime, []byte(g.content)))
	}
	if img != nil {
		// The kernel is not the tree's file: say what it is made from.
		b.Adds = append(b.Adds, manifestFileLine(PXEKernel, 0o644, o.MTime, img)+" # decompressed from "+kpath)
	}
	if len(xfiles) > 0 && setfattr == "" {
		for _, p := range xfiles {
			b.Warnings = append(b.Warnings, fmt.Sprintf("%s: its xattrs are lost in the live system: the kernel's initramfs unpacker drops them and the tree has no setfattr (package attr) for the live init to put them back", p))
		}
	}
	return b, nil
}

// bundleText is a file a bundle writer makes up, by its name in the bundle.
type bundleText struct{ name, content string }

// pxeConfigs are the bundle's iPXE script and PXELINUX config, which boot
// the image called name (the recipe's) with cmdline.
func pxeConfigs(name, cmdline string) []bundleText {
	if name == "" {
		name = "the image"
	}
	script := fmt.Sprintf("#!ipxe\n# stamp live boot of %s: the kernel and initramfs beside this script\nkernel %s initrd=%s %s\ninitrd %s\nboot\n",
		name, PXEKernel, PXEInitrd, cmdline, PXEInitrd)
	cfg := fmt.Sprintf("# stamp live boot of %s\nDEFAULT stamp\nPROMPT 0\nTIMEOUT 0\nLABEL stamp\n\tKERNEL %s\n\tINITRD %s\n\tAPPEND %s\n",
		name, PXEKernel, PXEInitrd, cmdline)
	return []bundleText{{PXEScript, script}, {PXELinuxCfg, cfg}}
}

// manifestFileLine is the manifest line of a file a format adds.
func manifestFileLine(p string, perm uint32, mtime time.Time, content []byte) string {
	sum := sha256.Sum256(content)
	e := &rootfs.Entry{Path: p, Inode: &rootfs.Inode{Type: rootfs.TypeRegular, Perm: perm, MTime: mtime,
		Size: int64(len(content)), Digest: hex.EncodeToString(sum[:])}}
	return rootfs.ManifestLine(e, nil, false)
}

// appendLive copies a cpio output and appends an archive of extra,
// compressed the same way: the kernel unpacks archives one after another.
func appendLive(ctx context.Context, w io.Writer, from string, extra []CpioFile, mtime time.Time, adds *[]string) error {
	f, err := os.Open(from)
	if err != nil {
		return err
	}
	defer f.Close()
	alg, r, err := compress.Detect(f)
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	n, err := io.Copy(w, &tarCtxReader{ctx: ctx, r: r})
	if err != nil {
		return fmt.Errorf("%s: %w", from, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: empty", from)
	}
	// An uncompressed archive must start on a 4-byte boundary.
	if alg == compress.None && n%4 != 0 {
		if _, err := w.Write(make([]byte, 4-n%4)); err != nil {
			return err
		}
	}
	var items []cpioItem
	for _, x := range extra {
		it := cpioGenerated(x, mtime)
		items = append(items, it)
		*adds = append(*adds, rootfs.ManifestLine(&rootfs.Entry{Path: it.path, Inode: it.in}, nil, false))
	}
	return writeCpioItems(ctx, w, alg, items)
}

// liveBusybox finds the busybox the live init runs with. It need not be
// static: the whole tree, its libraries included, is in the initramfs.
func liveBusybox(t *rootfs.Sealed) (*rootfs.Entry, error) {
	for _, c := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		if e, err := t.Lookup(c, true); err == nil && e.Type == rootfs.TypeRegular {
			return e, nil
		}
	}
	return nil, fmt.Errorf("no /bin/busybox or /usr/bin/busybox: the live init runs the tree's busybox (install busybox-static or busybox)")
}

// liveInit is the /init of a live initramfs. top are the names directly
// under the tree's root, which is what it copies.
func liveInit(busybox, setfattr string, top []string) []byte {
	var names []string
	for _, n := range top {
		names = append(names, shellQuote("./"+n))
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, liveInitScript, busybox, busybox, liveRoot, strings.Join(names, " "))
	list := strings.TrimPrefix(XattrListPath, "/")
	if setfattr != "" {
		fmt.Fprintf(&b, "if [ -f /%s ]; then\n\t(cd \"$new\" && %s -h --restore=/%s) || say \"some xattrs could not be restored\"\nfi\n", list, setfattr, list)
	} else {
		fmt.Fprintf(&b, "[ -f /%s ] && say \"the tree has no setfattr: the xattrs in /%s are lost\"\n", list, list)
	}
	b.WriteString("say \"starting $init\"\nexec $bb switch_root \"$new\" \"$init\" \"$@\"\n")
	return b.Bytes()
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

const liveInitScript = `#!%s sh
# stamp live init: copies the tree from the initramfs into a tmpfs and
# switch_roots into it (the initramfs itself cannot be pivot_root'ed, which
# container runtimes need), puts back the xattrs the kernel's unpacker
# dropped, then runs the tree's init (init=, default /sbin/init).
# stamp.live.size= sets the size of the tmpfs (default half the RAM).
bb=%s
new=%s
say() { echo "stamp-live: $*"; }
fail() { say "$*"; exit 1; }
set -o pipefail
$bb mkdir -p /proc
$bb mount -t proc proc /proc || fail "cannot mount /proc"
init=/sbin/init
size=
set -f
for arg in $($bb cat /proc/cmdline); do
	case "$arg" in
	init=*) init=${arg#init=} ;;
	stamp.live.size=*) size=,size=${arg#stamp.live.size=} ;;
	esac
done
set +f
$bb umount /proc
$bb mkdir -p "$new"
$bb mount -t tmpfs -o "mode=0755,uid=0,gid=0$size" tmpfs "$new" || fail "cannot mount a tmpfs on $new"
say "copying the tree into a tmpfs"
cd / && $bb tar -c -f - %s | $bb tar -x -f - -C "$new" || fail "copying the tree into $new failed"
`

// PXESpec is a pxe output's options.
type PXESpec struct {
	// Compression is the initramfs's; "" is zstd.
	Compression compress.Algorithm
	// Cmdline is the kernel command line the bundle boots with.
	Cmdline string
}

// pxeFormat is "format: pxe": a directory BASE.pxe holding the bundle.
type pxeFormat struct{}

// ViewAdditions implements ViewAdder: the initramfs's own.
func (pxeFormat) ViewAdditions() []ViewAddition {
	return []ViewAddition{
		{Path: "/init", When: "always: the live init of the initramfs"},
		{Path: XattrListPath, When: "entries carry xattrs the kernel's unpacker drops"},
	}
}

func (pxeFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	so, err := optionsOf[PXESpec](spec)
	if err != nil {
		return nil, err
	}
	o := PXEOptions{Compression: cpioCompression(so.Compression), FromCpio: src.From, MTime: src.Epoch, Name: src.Name, Cmdline: so.Cmdline, Arch: src.Arch,
		Parts: src.Parts}
	name := base + ".pxe"
	bdir := filepath.Join(dir, name)
	if err := os.Mkdir(bdir, 0o755); err != nil {
		return nil, fmt.Errorf("pxe: %w", err)
	}
	b, err := WritePXE(ctx, src.Tree, bdir, o)
	if err != nil {
		os.RemoveAll(bdir)
		return nil, err
	}
	res := &Result{Files: []string{name}, Warnings: b.Warnings, Sums: b.sums}
	for _, p := range b.Parts {
		p.File = name + "/" + p.File
		res.Parts = append(res.Parts, p)
	}
	for _, a := range b.Adds {
		// The initramfs's additions are named as a reader names them; the
		// bundle's own files, like an OCI image's blobs, are its structure,
		// not entries: comments.
		if strings.HasPrefix(a, "/") {
			a = "initrd:" + a
		} else {
			a = "# pxe file " + name + "/" + a
		}
		res.Adds = append(res.Adds, a)
	}
	return res, nil
}
