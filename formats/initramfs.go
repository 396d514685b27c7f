package formats

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// BootModules are the modules a boot initramfs always loads: what mounting
// an ext4 root from a virtio disk needs on Debian's kernel, where none of it
// is built in. crc32c_generic is named because ext4 and jbd2 only ask for
// "crc32c" through the crypto API (a softdep, not a dependency), and the
// generic one runs on every CPU: crc32c-intel needs SSE4.2, which qemu's
// default CPU lacks.
var BootModules = []string{"crc32c_generic", "ext4", "virtio_pci", "virtio_blk"}

// DiskModules are the drivers of the other disks a root may be on:
// virtio-scsi, NVMe and SATA (AHCI), with sd_mod for the SCSI disks the
// first and last present. Each is loaded when the kernel has it, as a
// module or built in, and left out when it has not (Debian's cloud kernel
// has no AHCI driver: that kernel cannot boot from SATA). crct10dif_generic
// and crc64_rocksoft_generic come first for the reason crc32c_generic
// does: sd_mod and nvme-core need T10 protection checksums, which their
// libraries ask the crypto API for by name.
var DiskModules = []string{"crct10dif_generic", "crc64_rocksoft_generic", "virtio_scsi", "sd_mod", "nvme", "ahci"}

// Where a boot initramfs puts things.
const (
	bootBusybox = "/bin/busybox"
	bootSysroot = "/sysroot"
)

// BootInitramfsOptions configure WriteBootInitramfs. The zero value loads
// BootModules of the newest kernel with the tree's own busybox.
type BootInitramfsOptions struct {
	// Compression of the archive; empty means zstd.
	Compression compress.Algorithm
	// KernelVersion picks the modules directory; empty means the version of
	// the newest /boot/vmlinuz-*.
	KernelVersion string
	// Modules are loaded after BootModules and DiskModules, with their
	// dependencies; each must be in the kernel.
	Modules []string
	// Busybox is the tree path of a static busybox; empty means /bin/busybox
	// or /usr/bin/busybox, as Debian's busybox-static installs it.
	Busybox string
	// MTime is the mtime of every entry; zero means the kernel's mtime, so
	// the archive depends on the tree alone.
	MTime time.Time
	// UsrVerity makes the initramfs able to open a dm-verity /usr
	// (usrhash= on the command line): it takes dm-verity's modules and the
	// tree's dmsetup (Debian's dmsetup package) with the libraries it
	// loads.
	UsrVerity bool
}

// Dmsetup is where Debian's dmsetup package installs the program an
// initramfs opens a dm-verity /usr with, and VerityModules the modules it
// needs.
const Dmsetup = "/usr/sbin/dmsetup"

var VerityModules = []string{"dm_verity"}

// KernelOf finds the kernel of a tree: the newest /boot/vmlinuz-VERSION
// (versions compare number by number, so 6.1.0-10 is newer than 6.1.0-9).
// It returns its tree path and VERSION.
func KernelOf(t *rootfs.Sealed) (kpath, version string, err error) {
	boot, err := t.Lookup("/boot", true)
	if err != nil || boot.Type != rootfs.TypeDir {
		return "", "", errors.New("no kernel: the tree has no /boot directory")
	}
	for _, name := range t.Children(boot.Path) {
		v, ok := strings.CutPrefix(name, "vmlinuz-")
		if !ok || v == "" {
			continue
		}
		e := t.Get(path.Join(boot.Path, name))
		if e == nil || e.Type != rootfs.TypeRegular {
			continue
		}
		if version == "" || versionLess(version, v) {
			kpath, version = e.Path, v
		}
	}
	if version == "" {
		return "", "", fmt.Errorf("no kernel: %s holds no vmlinuz-VERSION file", boot.Path)
	}
	return kpath, version, nil
}

// versionLess compares kernel versions: runs of digits as numbers, the rest
// byte by byte.
func versionLess(a, b string) bool {
	for a != "" && b != "" {
		da, ra := versionDigits(a)
		db, rb := versionDigits(b)
		if da != "" && db != "" {
			na, nb := strings.TrimLeft(da, "0"), strings.TrimLeft(db, "0")
			if len(na) != len(nb) {
				return len(na) < len(nb)
			}
			if na != nb {
				return na < nb
			}
			a, b = ra, rb
			continue
		}
		if a[0] != b[0] {
			return a[0] < b[0]
		}
		a, b = a[1:], b[1:]
	}
	return len(a) < len(b)
}

func versionDigits(s string) (string, string) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return s[:i], s[i:]
}

var kernelVersionRE = regexp.MustCompile(`^[A-Za-z0-9._+~-]+$`)

// bootKernel is what a boot initramfs takes from the tree's kernel.
type bootKernel struct {
	kernel  *rootfs.Entry
	version string
	modDir  string // tree path of the modules directory
}

func findBootKernel(t *rootfs.Sealed, version string) (*bootKernel, error) {
	k := &bootKernel{version: version}
	if version == "" {
		kp, v, err := KernelOf(t)
		if err != nil {
			return nil, err
		}
		k.kernel, k.version = t.Get(kp), v
	} else {
		e, err := t.Lookup("/boot/vmlinuz-"+version, true)
		if err != nil || e.Type != rootfs.TypeRegular {
			return nil, fmt.Errorf("no kernel: /boot/vmlinuz-%s is not in the tree", version)
		}
		k.kernel = e
	}
	if !kernelVersionRE.MatchString(k.version) {
		return nil, fmt.Errorf("kernel version %q: unexpected characters", k.version)
	}
	// Merged /usr makes /lib/modules resolve to /usr/lib/modules; newer
	// packages ship /usr/lib/modules even on a split tree.
	for _, p := range []string{"/lib/modules/" + k.version, "/usr/lib/modules/" + k.version} {
		if e, err := t.Lookup(p, true); err == nil && e.Type == rootfs.TypeDir {
			k.modDir = e.Path
			return k, nil
		}
	}
	return nil, fmt.Errorf("kernel %s: no /lib/modules/%s or /usr/lib/modules/%s directory", k.version, k.version, k.version)
}

// kmodSuffixes are the module file names modprobe knows, with the
// compression of each.
var kmodSuffixes = []struct {
	ext string
	alg compress.Algorithm
}{{".ko", compress.None}, {".ko.xz", compress.XZ}, {".ko.zst", compress.Zstd}, {".ko.gz", compress.Gzip}}

// kmodName is the module name of a file name: no suffix, '-' as '_', as
// the kernel and modprobe treat them.
func kmodName(file string) (string, compress.Algorithm, bool) {
	for _, s := range kmodSuffixes {
		if n, ok := strings.CutSuffix(file, s.ext); ok && n != "" {
			return strings.ReplaceAll(n, "-", "_"), s.alg, true
		}
	}
	return "", "", false
}

// kmod is one module file of the tree.
type kmod struct {
	name string
	path string // tree path
	alg  compress.Algorithm
}

// moduleSet resolves module names to files and their dependencies.
type moduleSet struct {
	t       *rootfs.Sealed
	dir     string
	byName  map[string]*kmod
	builtin map[string]bool
	deps    map[string][]string // from modules.dep, when the tree has one
}

func loadModuleSet(t *rootfs.Sealed, dir string) (*moduleSet, error) {
	s := &moduleSet{t: t, dir: dir, byName: map[string]*kmod{}, builtin: map[string]bool{}}
	prefix := dir + "/"
	for _, p := range t.Paths() {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		e := t.Get(p)
		name, alg, ok := kmodName(path.Base(p))
		if !ok || e.Type != rootfs.TypeRegular {
			continue
		}
		// Paths come in byte order, so a duplicate name resolves the same
		// way every time.
		if s.byName[name] == nil {
			s.byName[name] = &kmod{name: name, path: p, alg: alg}
		}
	}
	if data, err := s.readSmall(prefix + "modules.builtin"); err == nil {
		for _, l := range strings.Split(string(data), "\n") {
			if name, _, ok := kmodName(path.Base(strings.TrimSpace(l))); ok {
				s.builtin[name] = true
			}
		}
	}
	data, err := s.readSmall(prefix + "modules.dep")
	if err != nil {
		return s, nil
	}
	s.deps = map[string][]string{}
	for n, l := range strings.Split(string(data), "\n") {
		mod, rest, ok := strings.Cut(l, ":")
		if !ok {
			if strings.TrimSpace(l) != "" {
				return nil, fmt.Errorf("%smodules.dep line %d: no ':'", prefix, n+1)
			}
			continue
		}
		name, _, ok := kmodName(path.Base(mod))
		if !ok {
			return nil, fmt.Errorf("%smodules.dep line %d: %q is not a module file", prefix, n+1, mod)
		}
		var deps []string
		for _, d := range strings.Fields(rest) {
			dn, _, ok := kmodName(path.Base(d))
			if !ok {
				return nil, fmt.Errorf("%smodules.dep line %d: %q is not a module file", prefix, n+1, d)
			}
			deps = append(deps, dn)
		}
		// modules.dep lists every dependency, the indirect ones too, in
		// the reverse of the order modprobe loads them.
		for i, j := 0, len(deps)-1; i < j; i, j = i+1, j-1 {
			deps[i], deps[j] = deps[j], deps[i]
		}
		s.deps[name] = deps
	}
	return s, nil
}

// readSmall reads a tree file of at most 64 MiB.
func (s *moduleSet) readSmall(p string) ([]byte, error) {
	e := s.t.Get(p)
	if e == nil || e.Type != rootfs.TypeRegular {
		return nil, fmt.Errorf("%s: not a file in the tree", p)
	}
	if e.Size > 64<<20 {
		return nil, fmt.Errorf("%s: %d bytes, more than expected", p, e.Size)
	}
	f, err := s.t.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// content returns a module's bytes, decompressed.
func (s *moduleSet) content(m *kmod) ([]byte, error) {
	f, err := s.t.Open(m.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := compress.NewReader(m.alg, f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.path, err)
	}
	defer r.Close()
	// The largest modules (amdgpu) are tens of megabytes; cap far above.
	data, err := io.ReadAll(io.LimitReader(r, 512<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.path, err)
	}
	return data, nil
}

// depends returns the modules m needs loaded first: from modules.dep when
// the tree has one, else from the module's own .modinfo "depends=" string,
// which is what depmod reads. Debian's kernel package ships no modules.dep.
func (s *moduleSet) depends(m *kmod) ([]string, error) {
	if s.deps != nil {
		d, ok := s.deps[m.name]
		if !ok {
			return nil, fmt.Errorf("module %s (%s) is not in modules.dep", m.name, m.path)
		}
		return d, nil
	}
	data, err := s.content(m)
	if err != nil {
		return nil, err
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.path, err)
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("%s: no .modinfo section", m.path)
	}
	info, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: .modinfo: %w", m.path, err)
	}
	for _, kv := range bytes.Split(info, []byte{0}) {
		if v, ok := bytes.CutPrefix(kv, []byte("depends=")); ok {
			var deps []string
			for _, d := range strings.Split(string(v), ",") {
				if d != "" {
					deps = append(deps, strings.ReplaceAll(d, "-", "_"))
				}
			}
			return deps, nil
		}
	}
	return nil, nil
}

// has reports whether the kernel has the module name, as a module or built in.
func (s *moduleSet) has(name string) bool {
	name = strings.ReplaceAll(name, "-", "_")
	return s.byName[name] != nil || s.builtin[name]
}

// order returns the modules to load for names, each after everything it
// depends on; built-in ones are left out.
func (s *moduleSet) order(names []string) ([]*kmod, error) {
	var out []*kmod
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(name, why string) error
	visit = func(name, why string) error {
		name = strings.ReplaceAll(name, "-", "_")
		switch {
		case state[name] == 2 || s.builtin[name]:
			return nil
		case state[name] == 1:
			return fmt.Errorf("module %s depends on itself (%s)", name, why)
		}
		m := s.byName[name]
		if m == nil {
			return fmt.Errorf("module %s (%s) is neither under %s nor built in", name, why, s.dir)
		}
		state[name] = 1
		deps, err := s.depends(m)
		if err != nil {
			return err
		}
		for _, d := range deps {
			if err := visit(d, "needed by "+name); err != nil {
				return err
			}
		}
		state[name] = 2
		out = append(out, m)
		return nil
	}
	for _, n := range names {
		if err := visit(n, "asked for"); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// staticBusybox finds the tree's busybox and checks it runs without a
// dynamic loader, since the initramfs holds nothing else.
func staticBusybox(t *rootfs.Sealed, want string) (*rootfs.Entry, error) {
	candidates := []string{"/bin/busybox", "/usr/bin/busybox"}
	if want != "" {
		candidates = []string{want}
	}
	var e *rootfs.Entry
	for _, c := range candidates {
		if f, err := t.Lookup(c, true); err == nil && f.Type == rootfs.TypeRegular {
			e = f
			break
		}
	}
	if e == nil {
		return nil, fmt.Errorf("no busybox at %s: a boot initramfs runs the tree's static busybox (install busybox-static)", strings.Join(candidates, " or "))
	}
	f, err := t.Open(e.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil {
		return nil, fmt.Errorf("busybox %s: not an ELF executable: %w", e.Path, err)
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("busybox %s is dynamically linked; a boot initramfs needs a static one (install busybox-static)", e.Path)
		}
	}
	return e, nil
}

// WriteBootInitramfs writes a small initramfs that boots the tree from a
// disk: busybox (the tree's own, which must be static), the kernel modules
// BootModules, DiskModules and o.Modules need, resolved from the tree, and an /init that
// loads them, finds the root the kernel command line names (root=PARTUUID=,
// UUID= or LABEL= of an ext2/3/4 file system, or a /dev path), mounts it
// read-only (rw when the command line says so) and switch_roots into the
// tree's init (init=, default /sbin/init). rootfstype=, rootflags=,
// rootdelay= (default 30 s) and rootwait are honoured; with stamp.shell on
// the command line a failure starts a shell instead of ending init, which
// makes the kernel panic. The same tree always gives the same bytes.
func WriteBootInitramfs(ctx context.Context, t *rootfs.Sealed, w io.Writer, o BootInitramfsOptions) error {
	items, err := bootInitramfsItems(t, o)
	if err != nil {
		return fmt.Errorf("boot initramfs: %w", err)
	}
	alg := o.Compression
	if alg == "" {
		alg = compress.Zstd
	}
	if err := writeCpioItems(ctx, w, alg, items); err != nil {
		return fmt.Errorf("boot initramfs: %w", err)
	}
	return nil
}

func bootInitramfsItems(t *rootfs.Sealed, o BootInitramfsOptions) ([]cpioItem, error) {
	k, err := findBootKernel(t, o.KernelVersion)
	if err != nil {
		return nil, err
	}
	bb, err := staticBusybox(t, o.Busybox)
	if err != nil {
		return nil, err
	}
	set, err := loadModuleSet(t, k.modDir)
	if err != nil {
		return nil, err
	}
	want := append([]string{}, BootModules...)
	for _, m := range DiskModules {
		if set.has(m) {
			want = append(want, m)
		}
	}
	extra := o.Modules
	var dmsetup []elfFile
	if o.UsrVerity {
		extra = append(append([]string{}, VerityModules...), extra...)
		if dmsetup, err = elfClosure(t, Dmsetup, "/bin/dmsetup"); err != nil {
			return nil, fmt.Errorf("a verified /usr is opened with the tree's dmsetup (Debian's dmsetup package): %w", err)
		}
	}
	mods, err := set.order(append(want, extra...))
	if err != nil {
		return nil, fmt.Errorf("kernel %s: %w", k.version, err)
	}
	mtime := o.MTime
	if mtime.IsZero() {
		mtime = k.kernel.MTime
	}
	modDir := "/lib/modules/" + k.version
	var items []cpioItem
	dir := func(p string) {
		items = append(items, cpioItem{path: p, in: &rootfs.Inode{Type: rootfs.TypeDir, Perm: 0o755, MTime: mtime}})
	}
	dirs := map[string]bool{}
	for _, d := range []string{"/", "/bin", "/dev", "/lib", "/lib/modules", modDir, "/proc", "/sys", bootSysroot} {
		dirs[d] = true
	}
	for _, f := range dmsetup {
		for d := path.Dir(f.at); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
		items = append(items, cpioItem{path: f.at, tree: t, src: f.entry.Path,
			in: &rootfs.Inode{Type: rootfs.TypeRegular, Perm: 0o755, MTime: mtime, Size: f.entry.Size, Digest: f.entry.Digest}})
	}
	for d := range dirs {
		dir(d)
	}
	items = append(items, cpioItem{path: bootBusybox, tree: t, src: bb.Path,
		in: &rootfs.Inode{Type: rootfs.TypeRegular, Perm: 0o755, MTime: mtime, Size: bb.Size, Digest: bb.Digest}})
	var loads []string
	for _, m := range mods {
		p := modDir + "/" + m.name + ".ko"
		loads = append(loads, p)
		e := t.Get(m.path)
		if m.alg == compress.None {
			items = append(items, cpioItem{path: p, tree: t, src: m.path,
				in: &rootfs.Inode{Type: rootfs.TypeRegular, Perm: 0o644, MTime: mtime, Size: e.Size, Digest: e.Digest}})
			continue
		}
		// busybox insmod hands the file to the kernel as it is, so a
		// compressed module is stored decompressed.
		data, err := set.content(m)
		if err != nil {
			return nil, err
		}
		items = append(items, cpioGenerated(CpioFile{Path: p, Perm: 0o644, Content: data}, mtime))
	}
	items = append(items, cpioGenerated(CpioFile{Path: "/init", Perm: 0o755, Content: bootInit(k.version, loads)}, mtime))
	sort.Slice(items, func(i, j int) bool { return items[i].path < items[j].path })
	return items, nil
}

// bootInit is the /init script of a boot initramfs.
func bootInit(version string, modules []string) []byte {
	var b bytes.Buffer
	w := bufio.NewWriter(&b)
	fmt.Fprintf(w, bootInitHead, version)
	for _, m := range modules {
		fmt.Fprintf(w, "load %s\n", m)
	}
	w.WriteString(bootInitTail)
	w.Flush()
	return b.Bytes()
}

const bootInitHead = `#!/bin/busybox sh
# stamp boot initramfs for kernel %s: loads the modules the root needs,
# finds root= (PARTUUID=, UUID=, LABEL= of ext2/3/4, or a /dev path), mounts
# it read-only (rw if asked) on /sysroot and switch_roots into init= (default
# /sbin/init). stamp.shell on the command line: a shell instead of a panic.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t devtmpfs -o nosuid,mode=0755 devtmpfs /dev
mount -t proc -o nosuid,nodev,noexec proc /proc
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys

say() { echo "stamp-initramfs: $*"; }
fail() {
	say "$*"
	case " $(cat /proc/cmdline) " in
	*" stamp.shell "*) say "starting a shell (stamp.shell)"; exec sh ;;
	esac
	say "giving up; add stamp.shell to the kernel command line for a shell"
	exit 1
}

root= init=/sbin/init fstype=ext4 flags= mode=ro wait=30 usrhash= usr= usrfstype=ext4
set -f
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	root=*) root=${arg#root=} ;;
	init=*) init=${arg#init=} ;;
	rootfstype=*) fstype=${arg#rootfstype=} ;;
	rootflags=*) flags=${arg#rootflags=} ;;
	rootdelay=*) wait=${arg#rootdelay=} ;;
	rootwait) wait=-1 ;;
	rw) mode=rw ;;
	ro) mode=ro ;;
	usrhash=*) usrhash=${arg#usrhash=} ;;
	mount.usr=*) usr=${arg#mount.usr=} ;;
	mount.usrfstype=*) usrfstype=${arg#mount.usrfstype=} ;;
	esac
done
set +f
case "$root" in
/dev/* | PARTUUID=* | UUID=* | LABEL=*) ;;
"") fail "no root= on the kernel command line" ;;
*) fail "root=$root: want PARTUUID=, UUID=, LABEL= or a /dev path" ;;
esac

load() { insmod "$1" || fail "insmod $1 failed"; }
`

const bootInitTail = `
# hex DEV OFFSET COUNT: COUNT bytes of DEV at OFFSET as hex pairs
hex() { dd if="$1" bs=1 skip="$2" count="$3" 2>/dev/null | od -An -tx1 -v; }
lower() { echo "$1" | tr A-Z a-z; }

# partuuid DEV: the PARTUUID of partition DEV, from its disk's GPT (or MBR)
partuuid() {
	local sys=/sys/class/block/${1#/dev/} n disk ss lba esz
	[ -f "$sys/partition" ] || return 1
	n=$(cat "$sys/partition")
	disk=$(readlink -f "$sys")
	disk=${disk%/*}
	disk=/dev/${disk##*/}
	ss=$(cat "/sys/class/block/${disk#/dev/}/queue/logical_block_size" 2>/dev/null || echo 512)
	set -- $(hex "$disk" "$ss" 8)
	if [ "$*" = "45 46 49 20 50 41 52 54" ]; then
		set -- $(hex "$disk" $((ss + 72)) 8)
		lba=$((0x$8$7$6$5$4$3$2$1))
		set -- $(hex "$disk" $((ss + 84)) 4)
		esz=$((0x$4$3$2$1))
		set -- $(hex "$disk" $((lba * ss + (n - 1) * esz + 16)) 16)
		[ $# -eq 16 ] || return 1
		echo "$4$3$2$1-$6$5-$8$7-$9${10}-${11}${12}${13}${14}${15}${16}"
	else
		set -- $(hex "$disk" 440 4)
		[ $# -eq 4 ] || return 1
		printf '%s-%02x\n' "$4$3$2$1" "$n"
	fi
}

# ext_uuid DEV, ext_label DEV: from an ext2/3/4 superblock
ext_magic() { [ "$(hex "$1" 1080 2 | tr -d ' \n')" = 53ef ]; }
ext_uuid() {
	ext_magic "$1" || return 1
	set -- $(hex "$1" 1128 16)
	echo "$1$2$3$4-$5$6-$7$8-$9${10}-${11}${12}${13}${14}${15}${16}"
}
ext_label() {
	ext_magic "$1" || return 1
	dd if="$1" bs=1 skip=1144 count=16 2>/dev/null | tr -d '\000'
}

# uuid_of HEX32: the UUID written as 8-4-4-4-12
uuid_of() {
	echo "$1" | sed 's/^\(........\)\(....\)\(....\)\(....\)\(............\)$/\1-\2-\3-\4-\5/'
}

# le DEV OFFSET COUNT: the little-endian number of COUNT bytes at OFFSET
le() {
	local v= b
	for b in $(hex "$1" "$2" "$3"); do v=$b$v; done
	echo $((0x$v))
}

# verity_open NAME DATA HASH ROOTHASH: the device-mapper verity target over
# DATA, its tree on HASH after the superblock veritysetup format writes
verity_open() {
	[ -x /bin/dmsetup ] || fail "usrhash= given, but this initramfs has no dmsetup"
	[ "$(hex "$3" 0 8 | tr -d ' \n')" = 7665726974790000 ] || fail "$3 holds no dm-verity superblock"
	[ "$(le "$3" 8 4)" = 1 ] && [ "$(le "$3" 12 4)" = 1 ] || fail "$3: a dm-verity superblock of another version or hash type"
	local alg dbs hbs blocks saltlen salt table
	alg=$(dd if="$3" bs=1 skip=32 count=32 2>/dev/null | tr -d '\000')
	dbs=$(le "$3" 64 4)
	hbs=$(le "$3" 68 4)
	blocks=$(le "$3" 72 8)
	saltlen=$(le "$3" 80 2)
	salt=-
	[ "$saltlen" -gt 0 ] && salt=$(hex "$3" 88 "$saltlen" | tr -d ' \n')
	table="0 $((blocks * dbs / 512)) verity 1 $2 $3 $dbs $hbs $blocks $(((512 + hbs - 1) / hbs)) $alg $4 $salt"
	DM_DISABLE_UDEV=1 dmsetup create "$1" --readonly --noudevsync --table "$table" ||
		fail "dmsetup cannot open the verity device: $table"
}

# find_dev SPEC: the block device SPEC names (PARTUUID=, UUID=, LABEL= or a
# /dev path), if it is there yet
find_dev() {
	case "$1" in
	/dev/*) [ -b "$1" ] && echo "$1"; return ;;
	esac
	local sys dev
	for sys in /sys/class/block/*; do
		dev=/dev/${sys##*/}
		[ -b "$dev" ] || continue
		case "$1" in
		PARTUUID=*) [ "$(partuuid "$dev")" = "$(lower "${1#PARTUUID=}")" ] ;;
		UUID=*) [ "$(ext_uuid "$dev")" = "$(lower "${1#UUID=}")" ] ;;
		LABEL=*) [ "$(ext_label "$dev")" = "${1#LABEL=}" ] ;;
		*) false ;;
		esac && { echo "$dev"; return; }
	done
}

# wait_dev SPEC WHAT: sets found to SPEC's device, waiting for it as long as
# rootdelay= (or rootwait) says
wait_dev() {
	local tries=0
	while :; do
		found=$(find_dev "$1")
		[ -n "$found" ] && return
		if [ "$wait" -ge 0 ] && [ $tries -ge $((wait * 5)) ]; then
			fail "no device for $2 after ${wait}s; block devices: $(ls /sys/class/block | tr '\n' ' ')"
		fi
		usleep 200000
		tries=$((tries + 1))
	done
}

wait_dev "$root" "root=$root"
dev=$found

mount -t "$fstype" -o "$mode${flags:+,$flags}" "$dev" /sysroot || fail "cannot mount $dev (root=$root) as $fstype"

# /usr on a partition of its own, mounted read-only: usrhash= opens it as a
# dm-verity device whose data and hash partitions are those whose PARTUUIDs
# are the hash's first and last 128 bits (as systemd's verity generator
# finds them); mount.usr= names a plain one.
if [ -n "$usrhash" ]; then
	h=$(lower "$usrhash")
	case "$h" in *[!0-9a-f]*) fail "usrhash=$usrhash is not hexadecimal" ;; esac
	[ ${#h} -eq 64 ] || fail "usrhash=$usrhash is not a SHA-256 (64 hex digits)"
	wait_dev "PARTUUID=$(uuid_of "$(echo "$h" | cut -c1-32)")" "the /usr partition of usrhash="
	data=$found
	wait_dev "PARTUUID=$(uuid_of "$(echo "$h" | cut -c33-64)")" "the /usr verity partition of usrhash="
	verity_open usr "$data" "$found" "$h"
	mount -t "$usrfstype" -o ro /dev/mapper/usr /sysroot/usr || fail "cannot mount the verified /usr ($data, hashes on $found)"
	say "/usr is $data, verified by dm-verity against usrhash=$h (hashes on $found)"
elif [ -n "$usr" ]; then
	wait_dev "$usr" "mount.usr=$usr"
	mount -t "$usrfstype" -o ro "$found" /sysroot/usr || fail "cannot mount $found (mount.usr=$usr) on /usr"
	say "/usr is $found, read-only"
fi
[ -e "/sysroot$init" ] || [ -L "/sysroot$init" ] || fail "$init is not on $dev (root=$root)"
for d in dev proc sys; do
	mount -o move "/$d" "/sysroot/$d" 2>/dev/null || umount -l "/$d"
done
say "root=$root is $dev, mounted $mode; starting $init"
exec switch_root /sysroot "$init" "$@"
`
