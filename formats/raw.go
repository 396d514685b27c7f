package formats

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/ext4"
	"github.com/stamp-dev/stamp/disk/fat"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// RawSpec is a raw disk output's options.
type RawSpec struct {
	// Size is the disk's size in bytes; 0 sizes it to its partitions.
	Size int64
	// FreeSpace is room added to auto-sized ext4 partitions, in bytes.
	FreeSpace  int64
	Partitions []PartitionSpec
	Boot       *BootSpec
	// Grow gives the disk's view of the tree a systemd-repart drop-in that
	// grows the root to fill a larger disk on first boot.
	Grow bool
}

// BootOptions implements Booter.
func (s *RawSpec) BootOptions() *BootSpec { return s.Boot }

// PartitionSpec is one GPT partition of a raw disk as the recipe asks for it.
type PartitionSpec struct {
	Name       string
	Type       string // esp | root | usr | usr-verity | xbootldr | swap | linux | bios
	Size       int64  // bytes; 0 is auto
	Filesystem string // vfat | ext4 | swap | none
	Label      string
}

// BootSpec places a boot loader on a raw disk.
type BootSpec struct {
	Loader  string // systemd-boot | shim (Secure Boot) | uki | none
	Cmdline string
	BIOS    bool
	// SystemdBoot, for loader uki, has systemd-boot boot the UKI as its
	// Type #2 entry; false makes the UKI the removable media boot file
	// alone. nil means true.
	SystemdBoot *bool
	// SecureBoot, for loader uki, signs the boot chain with the user's key
	// and lays out its enrolment.
	SecureBoot *SecureBootSpec
}

// Where systemd-boot finds its configuration, and what the raw disk calls
// the kernel and initramfs it copies onto the ESP.
const (
	espKernel    = "/vmlinuz"
	espInitrd    = "/initrd.img"
	loaderConf   = "/loader/loader.conf"
	loaderEntry  = "/loader/entries/node.conf"
	minAutoESP   = 64 << 20
	swapPageSize = 4096
)

// gptGrowFS is the partition attribute (bit 59) of the Discoverable
// Partitions Specification that asks for the file system to be grown to the
// partition on first mount.
const gptGrowFS = 1 << 59

// efiArch names the UEFI removable-media boot file and systemd-boot's
// binary for an architecture.
var efiArch = map[string]struct{ bootFile, systemdBoot string }{
	"amd64": {"BOOTX64.EFI", "systemd-bootx64.efi"},
	"arm64": {"BOOTAA64.EFI", "systemd-bootaa64.efi"},
}

type rawFormat struct{}

// ViewAdditions implements ViewAdder: the root file system's own, and the
// drop-in that grows it.
func (rawFormat) ViewAdditions() []ViewAddition {
	return []ViewAddition{
		{Path: "/lost+found", When: "the tree has none: the root file system's own"},
		{Path: GrowDropIn, When: "grow is true (the default) and the tree has none"},
		{Path: path.Dir(GrowDropIn), When: "grow is true and the tree has no such directory"},
	}
}

func (rawFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	rs, err := optionsOf[RawSpec](spec)
	if err != nil {
		return nil, err
	}
	p, err := planDisk(ctx, src, rs)
	if err != nil {
		return nil, err
	}
	defer p.close()
	name := base + ".raw"
	err = writeFile(filepath.Join(dir, name), func(f *os.File) error { return p.write(ctx, f) })
	if err != nil {
		return nil, err
	}
	return &Result{Files: []string{name}, Adds: p.adds, Facts: p.facts, Uncached: []string{name}}, nil
}

// diskPlan is a raw disk laid out and checked, before any byte is written.
type diskPlan struct {
	src      *Source
	size     int64
	diskGUID [16]byte
	parts    []*plannedPart
	adds     []string
	bios     *biosBoot // nil unless the disk also boots by BIOS
	// usr and usrVerity are /usr's partition and its hash partition.
	usr, usrVerity, esp *plannedPart
	uki                 *ukiPlan
	usrRootHash         []byte
	// facts are what the disk says of itself beyond its files (its UKI's
	// PCR 11, /usr's root hash), known once it is written.
	facts []Fact
	// cleanup releases what planning made (temporary trees).
	cleanup []func()
}

type plannedPart struct {
	field   string // "partitions[1]", for errors
	spec    PartitionSpec
	gpt     disk.Partition
	vfat    *fat.Options
	files   []fat.File
	digests []string // hex sha256 of each of files
	ext4    *ext4.Options
	tree    *rootfs.Sealed
	swap    bool
	hash    bool // /usr's dm-verity hash partition
}

func (p *diskPlan) close() {
	for _, f := range p.cleanup {
		f()
	}
}

// planDisk works out every partition's size, identifiers and content, and
// checks that everything fits, so that a disk that cannot be made fails
// before its file exists.
func planDisk(ctx context.Context, src *Source, spec *RawSpec) (_ *diskPlan, err error) {
	p := &diskPlan{src: src, diskGUID: disk.DiskGUID(src.Seed)}
	defer func() {
		if err != nil {
			p.close()
		}
	}()
	if err := checkDiskSizes(spec); err != nil {
		return nil, err
	}
	loader, err := loaderOf(spec.Boot)
	if err != nil {
		return nil, err
	}
	root, err := p.planPartitions(src, spec)
	if err != nil {
		return nil, err
	}
	if err := p.checkUsr(src, loader); err != nil {
		return nil, err
	}
	var view *rootfs.Tree
	if spec.Grow {
		var done func()
		if view, done, err = growView(src); err != nil {
			return nil, fmt.Errorf("grow: %w", err)
		}
		p.cleanup = append(p.cleanup, done)
		root.tree = view.View()
	}
	if p.usr != nil {
		if err := p.splitUsr(src, view, root, p.usr); err != nil {
			return nil, err
		}
	}
	if err := p.planBoot(ctx, spec.Boot, loader, root); err != nil {
		return nil, err
	}
	if err := p.sizePartitions(spec.Size); err != nil {
		return nil, err
	}
	if p.bios != nil {
		if err := p.bios.place(); err != nil {
			return nil, err
		}
	}
	return p, nil
}

func checkDiskSizes(spec *RawSpec) error {
	if spec.Size < 0 {
		return fmt.Errorf("size: %d bytes is less than nothing", spec.Size)
	}
	if spec.FreeSpace < 0 {
		return fmt.Errorf("freeSpace: %d bytes is less than nothing", spec.FreeSpace)
	}
	if len(spec.Partitions) == 0 {
		return errors.New("partitions: a raw disk needs at least a root partition")
	}
	return nil
}

// loaderOf is the boot loader a disk gets: none without a boot section,
// systemd-boot when the section names none.
func loaderOf(boot *BootSpec) (string, error) {
	if boot == nil {
		return "none", nil
	}
	loader := ""
	switch {
	case boot.Loader == "systemd-boot" || boot.Loader == "shim" || boot.Loader == "uki" || boot.Loader == "none":
		loader = boot.Loader
	case boot.Loader == "":
		loader = "systemd-boot"
	default:
		return "", fmt.Errorf("boot.loader: %q is not supported; use systemd-boot, shim, uki or none", boot.Loader)
	}
	if loader != "uki" && boot.SecureBoot != nil {
		return "", fmt.Errorf("boot.secureBoot: signing with your own key is for loader uki, not %s", loader)
	}
	if loader != "uki" && boot.SystemdBoot != nil {
		return "", fmt.Errorf("boot.systemdBoot: applies to loader uki, not %s", loader)
	}
	return loader, nil
}

// planPartitions plans every partition of spec in order, and returns the
// root one. The first partition of type esp is the one the loader goes on.
func (p *diskPlan) planPartitions(src *Source, spec *RawSpec) (*plannedPart, error) {
	var root *plannedPart
	for i, ps := range spec.Partitions {
		pp := &plannedPart{field: fmt.Sprintf("partitions[%d]", i), spec: ps}
		typ, err := disk.TypeGUID(ps.Type, src.Arch)
		if err != nil {
			return nil, fmt.Errorf("%s.type: %w", pp.field, err)
		}
		if n := len([]rune(ps.Name)); n == 0 || n > 36 {
			return nil, fmt.Errorf("%s.name: %q must be 1 to 36 characters, as a GPT partition name", pp.field, ps.Name)
		}
		pp.gpt = disk.Partition{Name: ps.Name, Type: typ, GUID: disk.PartitionGUID(src.Seed, ps.Name)}
		if err := p.assignRole(pp, &root); err != nil {
			return nil, err
		}
		if err := p.planFilesystem(src, pp, root, spec.FreeSpace); err != nil {
			return nil, err
		}
		p.parts = append(p.parts, pp)
	}
	if root == nil {
		return nil, errors.New("partitions: a raw disk needs a partition of type root")
	}
	return root, nil
}

// assignRole records pp as the disk's root, esp, usr or usr-verity
// partition by its type, and checks the filesystem that role holds.
func (p *diskPlan) assignRole(pp *plannedPart, root **plannedPart) error {
	ps := pp.spec
	switch ps.Type {
	case "root":
		if *root != nil {
			return fmt.Errorf("%s.type: a second root partition (the first is %s)", pp.field, (*root).field)
		}
		*root = pp
		pp.gpt.Attributes |= gptGrowFS
		if ps.Filesystem != "ext4" {
			return fmt.Errorf("%s.filesystem: the root partition holds ext4, not %q", pp.field, ps.Filesystem)
		}
	case "esp":
		if p.esp == nil {
			p.esp = pp
		}
	case "usr", "usr-verity":
		other := &p.usr
		if ps.Type == "usr-verity" {
			other = &p.usrVerity
		}
		if *other != nil {
			return fmt.Errorf("%s.type: a second %s partition (the first is %s)", pp.field, ps.Type, (*other).field)
		}
		*other = pp
		// The Discoverable Partitions Specification's read-only flag.
		pp.gpt.Attributes |= disk.AttrReadOnly
		switch {
		case ps.Type == "usr" && ps.Filesystem != "ext4":
			return fmt.Errorf("%s.filesystem: the usr partition holds ext4, not %q", pp.field, ps.Filesystem)
		case ps.Type == "usr-verity" && ps.Filesystem != "none":
			return fmt.Errorf("%s.filesystem: the usr-verity partition holds a hash tree, not %q", pp.field, ps.Filesystem)
		}
		pp.hash = ps.Type == "usr-verity"
	}
	return nil
}

// planFilesystem sets up the filesystem pp holds. root is the root
// partition if one has been seen by now.
func (p *diskPlan) planFilesystem(src *Source, pp, root *plannedPart, free int64) error {
	ps := pp.spec
	switch ps.Filesystem {
	case "vfat":
		pp.vfat = &fat.Options{VolumeID: disk.VolumeID(src.Seed, ps.Name), Label: ps.Label, Epoch: src.Epoch}
	case "ext4":
		pp.ext4 = &ext4.Options{UUID: disk.FilesystemUUID(src.Seed, ps.Name), HashSeed: disk.HashSeed(src.Seed, ps.Name),
			Label: ps.Label, Epoch: src.Epoch, Log: src.Log, FreeSpace: free}
		pp.tree = src.Tree
		if ps.Type == "usr" {
			// The usr partition holds /usr, made read-only: no room
			// is kept for writes that never come.
			pp.ext4.FreeSpace = -1
		}
		if pp != root && ps.Type != "usr" {
			// Only the root holds the tree; another ext4 partition starts empty.
			t, done, err := emptyTree(src.WorkDir, src.Epoch)
			if err != nil {
				return fmt.Errorf("%s: %w", pp.field, err)
			}
			p.cleanup = append(p.cleanup, done)
			pp.tree = t.View()
		}
		if len(ps.Label) > 16 {
			return fmt.Errorf("%s.label: an ext4 label holds at most 16 bytes", pp.field)
		}
	case "swap":
		pp.swap = true
		if len(ps.Label) > 15 {
			return fmt.Errorf("%s.label: a swap label holds at most 15 bytes", pp.field)
		}
	case "none":
	default:
		return fmt.Errorf("%s.filesystem: unknown filesystem %q (vfat, ext4, swap or none)", pp.field, ps.Filesystem)
	}
	return nil
}

// checkUsr checks that a /usr partition of its own has what it needs: a
// partition to hash, a loader that mounts it, and a tree laid out for it.
func (p *diskPlan) checkUsr(src *Source, loader string) error {
	if p.usrVerity != nil && p.usr == nil {
		return fmt.Errorf("%s.type: a usr-verity partition hashes a partition of type usr, and there is none", p.usrVerity.field)
	}
	if p.usr != nil && loader != "uki" {
		return fmt.Errorf("%s.type: /usr on a partition of its own is booted by loader uki, whose initramfs mounts it; not by %s", p.usr.field, loader)
	}
	if p.usr != nil {
		if err := checkUsrLayout(src.Tree, p.usr.field); err != nil {
			return err
		}
	}
	return nil
}

// planBoot puts loader's files on the ESP and, when boot asks for it,
// plans the BIOS boot too.
func (p *diskPlan) planBoot(ctx context.Context, boot *BootSpec, loader string, root *plannedPart) error {
	if loader == "none" {
		if boot != nil && boot.BIOS {
			return errors.New("boot.bios: BIOS boot needs loader systemd-boot or shim: GRUB boots BIOS machines from the kernel and initramfs they put on the ESP")
		}
		return nil
	}
	esp, src := p.esp, p.src
	if esp == nil || esp.vfat == nil {
		return fmt.Errorf("boot.loader: %s needs a partition of type esp with filesystem vfat", loader)
	}
	cmdline := ""
	if boot != nil {
		cmdline = boot.Cmdline
	}
	rootUUID := disk.FormatUUID(root.gpt.GUID)
	var files []espFile
	var err error
	switch loader {
	case "shim":
		files, err = shimESPFiles(ctx, src, rootUUID, cmdline)
	case "uki":
		usrOption := ""
		if p.usr != nil && p.usrVerity == nil {
			usrOption = "mount.usr=PARTUUID=" + disk.FormatUUID(p.usr.gpt.GUID)
		}
		if boot.BIOS {
			return errors.New("boot.bios: BIOS boot needs loader systemd-boot or shim: a UKI boots from UEFI alone")
		}
		files, p.uki, err = ukiESPFiles(ctx, src, boot, rootUUID, usrOption, p.usrVerity != nil, p.usr != nil)
	default:
		files, err = espFiles(ctx, src, rootUUID, cmdline)
	}
	if err != nil {
		return err
	}
	for _, f := range files {
		esp.files = append(esp.files, f.File)
		esp.digests = append(esp.digests, f.digest)
	}
	if boot != nil && boot.BIOS {
		if p.bios, err = planBIOS(ctx, src, p.parts, esp, kernelOptions(rootUUID, cmdline)); err != nil {
			return err
		}
	}
	return nil
}

// sizePartitions gives every partition its size and start, and the disk its
// size. A fixed size that is too small is an error naming its field.
func (p *diskPlan) sizePartitions(diskSize int64) error {
	var fixedSum int64
	var autoRoot *plannedPart
	for _, pp := range p.parts {
		if pp.spec.Size < 0 {
			return fmt.Errorf("%s.size: %d bytes is less than nothing", pp.field, pp.spec.Size)
		}
		if pp.hash {
			continue // sized below, from /usr's size
		}
		size := disk.AlignUp(pp.spec.Size)
		switch {
		case pp.vfat != nil:
			need, err := fat.MinSize(pp.files, pp.vfat.Label)
			if err != nil {
				return fmt.Errorf("%s: %w", pp.field, err)
			}
			if size == 0 {
				// Room for the content twice over, so a kernel update fits
				// beside the old one.
				size = disk.AlignUp(max(minAutoESP, 2*need))
			} else if size < need {
				return fmt.Errorf("%s.size: %s is too small for the %d files of the ESP; they need %s", pp.field, human(pp.spec.Size), len(pp.files), human(need))
			}
			if _, err := fat.ChooseGeometry(size, 0); err != nil {
				return fmt.Errorf("%s.size: %w", pp.field, err)
			}
		case pp.ext4 != nil:
			if size == 0 && diskSize != 0 && pp.spec.Type == "root" {
				autoRoot = pp
				continue
			}
			o := *pp.ext4
			o.Size = size
			got, err := ext4.Plan(pp.tree, o)
			if err != nil {
				return fmt.Errorf("%s.size: %w", pp.field, err)
			}
			size = disk.AlignUp(got)
		case size == 0:
			return fmt.Errorf("%s.size: a partition with filesystem %s needs a size", pp.field, pp.spec.Filesystem)
		case pp.swap && size < 10*swapPageSize:
			return fmt.Errorf("%s.size: a swap partition needs at least 40 KiB", pp.field)
		}
		pp.gpt.Size = size
		fixedSum += size
	}
	if p.usrVerity != nil {
		size, err := p.sizeVerity()
		if err != nil {
			return err
		}
		fixedSum += size
	}
	if autoRoot != nil {
		// The root takes whatever the fixed disk leaves.
		avail := (disk.LastUsable(disk.AlignUp(diskSize))/disk.Alignment)*disk.Alignment - disk.Alignment - fixedSum
		o := *autoRoot.ext4
		o.FreeSpace = -1
		need, err := ext4.Plan(autoRoot.tree, o)
		if err != nil {
			return fmt.Errorf("%s: %w", autoRoot.field, err)
		}
		if avail < disk.AlignUp(need) {
			return fmt.Errorf("size: %s leaves %s for the root partition; the tree needs %s", human(diskSize), human(max(avail, 0)), human(disk.AlignUp(need)))
		}
		autoRoot.gpt.Size = avail
	}
	gparts := make([]disk.Partition, len(p.parts))
	for i, pp := range p.parts {
		gparts[i] = pp.gpt
	}
	end, err := disk.Place(gparts)
	if err != nil {
		return err
	}
	for i, pp := range p.parts {
		pp.gpt = gparts[i]
	}
	p.size = disk.DiskSize(end)
	if diskSize != 0 {
		if p.size > disk.AlignUp(diskSize) {
			return fmt.Errorf("size: %s is smaller than the partitions need (%s)", human(diskSize), human(p.size))
		}
		p.size = disk.AlignUp(diskSize)
	}
	return nil
}

// write lays the disk into f, which is new and empty: it is first made its
// full size as one hole, and every writer below leaves zeros unwritten.
func (p *diskPlan) write(ctx context.Context, f *os.File) error {
	if err := f.Truncate(p.size); err != nil {
		return err
	}
	// /usr and its hash tree come first: the root hash names both
	// partitions and goes into the UKI's command line, so the ESP and the
	// partition table wait for it.
	var first []*plannedPart
	if p.usr != nil {
		first = append(first, p.usr)
	}
	if err := p.writeParts(ctx, f, first); err != nil {
		return err
	}
	if p.usrVerity != nil {
		r, err := p.writeVerity(ctx, f)
		if err != nil {
			return err
		}
		p.usrRootHash = r.RootHash
		p.facts = append(p.facts, Fact{"verity.usr.roothash", r.RootHashHex()},
			Fact{"verity.usr.partitions", p.usr.spec.Name + " " + p.usrVerity.spec.Name})
	}
	if p.uki != nil {
		// Without a verified /usr, the UKI laid out at planning is final.
		if p.uki.verity {
			if err := p.uki.build(hex.EncodeToString(p.usrRootHash)); err != nil {
				return err
			}
		}
		p.esp.digests[p.uki.index] = p.uki.digest
		p.facts = append(p.uki.facts(p.esp.spec.Name), p.facts...)
	}
	var rest []*plannedPart
	for _, pp := range p.parts {
		if pp != p.usr && !pp.hash {
			rest = append(rest, pp)
		}
	}
	if err := p.writeParts(ctx, f, rest); err != nil {
		return err
	}
	gparts := make([]disk.Partition, len(p.parts))
	for i, pp := range p.parts {
		gparts[i] = pp.gpt
	}
	if err := disk.WriteGPT(f, p.size, p.diskGUID, gparts); err != nil {
		return err
	}
	if p.bios != nil {
		if err := p.bios.write(f); err != nil {
			return err
		}
	}
	p.adds = p.manifestAdds()
	return nil
}

// writeParts writes the file systems of parts, past the page cache: a disk
// of gigabytes in fresh cache pages costs more than the writing itself on
// a virtual machine (hashio.DirectWriter), and what reads the disk back
// (its hash, the verity tree, the encoders made from it) reads past it too.
func (p *diskPlan) writeParts(ctx context.Context, f *os.File, parts []*plannedPart) error {
	dw := hashio.NewDirectWriter(f)
	defer dw.Close()
	for _, pp := range parts {
		if err := ctx.Err(); err != nil {
			return err
		}
		w := &partWriter{w: dw, off: pp.gpt.Start, size: pp.gpt.Size, name: pp.spec.Name}
		var err error
		switch {
		case pp.vfat != nil:
			o := *pp.vfat
			o.Size, o.HiddenSectors = pp.gpt.Size, uint32(pp.gpt.Start/disk.SectorSize)
			_, err = fat.Write(ctx, pp.files, w, o)
		case pp.ext4 != nil:
			o := *pp.ext4
			o.Size = pp.gpt.Size
			_, err = ext4.Write(ctx, pp.tree, w, o)
		case pp.swap:
			err = writeSwap(w, pp.gpt.Size, disk.FilesystemUUID(p.src.Seed, pp.spec.Name), pp.spec.Label)
		}
		if err != nil {
			return fmt.Errorf("%s (%s): %w", pp.field, pp.spec.Name, err)
		}
	}
	return nil
}

// partWriter confines a file system writer to its partition.
type partWriter struct {
	w         io.WriterAt
	off, size int64
	name      string
}

func (w *partWriter) WriteAt(b []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(b)) > w.size {
		return 0, fmt.Errorf("write of %d bytes at %d is outside partition %s (%d bytes)", len(b), off, w.name, w.size)
	}
	return w.w.WriteAt(b, w.off+off)
}

// espFiles is what systemd-boot needs on the ESP: itself as the removable
// media boot file, its configuration, and the newest kernel of the tree with
// its initramfs.
func espFiles(ctx context.Context, src *Source, rootPartUUID, cmdline string) ([]espFile, error) {
	t := src.Tree
	arch, ok := efiArch[src.Arch]
	if !ok {
		return nil, fmt.Errorf("boot.loader: systemd-boot on architecture %q is not supported (amd64 or arm64)", src.Arch)
	}
	sdboot := "/usr/lib/systemd/boot/efi/" + arch.systemdBoot
	boot, err := treeFile(t, sdboot)
	if err != nil {
		return nil, fmt.Errorf("boot.loader: systemd-boot needs %s in the tree (Debian's systemd-boot-efi package): %w", sdboot, err)
	}
	kernel, initrd, err := espKernelFiles(ctx, src, "systemd-boot")
	if err != nil {
		return nil, err
	}
	entry := fmt.Sprintf("title %s\nlinux %s\ninitrd %s\noptions %s\n", src.Name, espKernel, espInitrd, kernelOptions(rootPartUUID, cmdline))
	return []espFile{
		treeFATFile("/EFI/BOOT/"+arch.bootFile, t, boot),
		bytesFATFile(loaderConf, []byte("default node.conf\ntimeout 0\nconsole-mode keep\n")),
		bytesFATFile(loaderEntry, []byte(entry)),
		kernel,
		initrd,
	}, nil
}

// espKernelFiles are the tree's newest kernel and its initramfs for the
// ESP, where loader boots them.
func espKernelFiles(ctx context.Context, src *Source, loader string) (kernel, initrd espFile, err error) {
	t := src.Tree
	kpath, ver, err := KernelOf(t)
	if err != nil {
		return kernel, initrd, fmt.Errorf("boot.loader: %s needs a kernel in /boot: %w", loader, err)
	}
	img, err := kernelImage(t, kpath, src.Arch)
	if err != nil {
		return kernel, initrd, fmt.Errorf("boot.loader: %w", err)
	}
	kernel = treeFATFile(espKernel, t, t.Get(kpath))
	if img != nil {
		kernel = bytesFATFile(espKernel, img)
	}
	if e, err := treeFile(t, "/boot/initrd.img-"+ver); err == nil {
		return kernel, treeFATFile(espInitrd, t, e), nil
	}
	// No initramfs of the tree's own: make the small one that finds the
	// root by the PARTUUID the loader entry names.
	var b bytes.Buffer
	if err := WriteBootInitramfs(ctx, t, &b, BootInitramfsOptions{KernelVersion: ver}); err != nil {
		return kernel, initrd, fmt.Errorf("boot.loader: the tree has no /boot/initrd.img-%s, and making one failed: %w", ver, err)
	}
	return kernel, bytesFATFile(espInitrd, b.Bytes()), nil
}

// treeFile finds the regular file at p, following symlinks as the image
// would.
func treeFile(t *rootfs.Sealed, p string) (*rootfs.Entry, error) {
	e, err := t.Lookup(p, true)
	if err != nil {
		return nil, err
	}
	if e.Type != rootfs.TypeRegular {
		return nil, fmt.Errorf("%s is a %s, not a file", p, e.Type)
	}
	return e, nil
}

// espFile is a file for the ESP and the sha256 of its content, for the
// manifest.
type espFile struct {
	fat.File
	digest string
}

func treeFATFile(p string, t *rootfs.Sealed, e *rootfs.Entry) espFile {
	return espFile{fat.File{Path: p, Size: e.Size, Open: func() (io.ReadCloser, error) { return t.Open(e.Path) }}, e.Digest}
}

func bytesFATFile(p string, b []byte) espFile {
	sum := sha256.Sum256(b)
	return espFile{fat.File{Path: p, Size: int64(len(b)), Open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}}, hex.EncodeToString(sum[:])}
}

// manifestAdds lists what the disk holds beyond the tree, as manifest lines
// named "PARTITION:/path": the files and directories of FAT partitions as a
// reader gets them back (owner 0, mode 0755/0644, FAT's time), and the
// lost+found the ext4 writer adds to a root that has none.
func (p *diskPlan) manifestAdds() []string {
	var adds []string
	for _, pp := range p.parts {
		prefix := pp.spec.Name + ":"
		switch {
		case pp.vfat != nil:
			mt := fat.Timestamp(p.src.Epoch)
			dirs := map[string]bool{}
			var lines []*rootfs.Entry
			for i, f := range pp.files {
				for d := path.Dir(f.Path); d != "/" && !dirs[d]; d = path.Dir(d) {
					dirs[d] = true
					lines = append(lines, &rootfs.Entry{Path: prefix + d, Inode: &rootfs.Inode{Type: rootfs.TypeDir, Perm: 0o755, MTime: mt}})
				}
				lines = append(lines, &rootfs.Entry{Path: prefix + f.Path, Inode: &rootfs.Inode{Type: rootfs.TypeRegular, Perm: 0o644,
					MTime: mt, Size: f.Size, Digest: pp.digests[i]}})
			}
			sort.Slice(lines, func(i, j int) bool { return lines[i].Path < lines[j].Path })
			for _, e := range lines {
				adds = append(adds, rootfs.ManifestLine(e, nil, false))
			}
		case pp == p.usr:
			lines := p.usrAdds()
			sort.Slice(lines, func(i, j int) bool { return lines[i].Path < lines[j].Path })
			for _, e := range lines {
				adds = append(adds, rootfs.ManifestLine(e, nil, false))
			}
		case pp.ext4 != nil:
			// The partition's view of the tree: what this disk added to it,
			// and the lost+found the ext4 writer adds to a tree without one.
			var lines []*rootfs.Entry
			for _, e := range pp.tree.Added() {
				lines = append(lines, &rootfs.Entry{Path: prefix + e.Path, Inode: e.Inode})
			}
			if pp.tree.Get("/lost+found") == nil {
				lines = append(lines, &rootfs.Entry{Path: prefix + "/lost+found", Inode: &rootfs.Inode{Type: rootfs.TypeDir, Perm: 0o700, MTime: p.src.Epoch}})
			}
			sort.Slice(lines, func(i, j int) bool { return lines[i].Path < lines[j].Path })
			for _, e := range lines {
				adds = append(adds, rootfs.ManifestLine(e, nil, false))
			}
		}
	}
	return adds
}

// GrowDropIn is where a raw disk's view of the tree gets its
// systemd-repart drop-in.
const GrowDropIn = "/usr/lib/repart.d/50-stamp-root.conf"

// growDropIn makes the root partition grow to the end of a larger disk at
// first boot (systemd-repart), and its filesystem with it. The partition
// also carries the grow-file-system attribute, for systemd's gpt-auto and
// growfs.
const growDropIn = `# Written by stamp: grow the root partition and its filesystem to fill the
# disk on first boot. Remove this file to keep the partition as built.
[Partition]
Type=root
GrowFileSystem=yes
`

// growView is the disk's own view of the sealed tree: the tree with the
// repart drop-in added, unless the tree already has one. The tree itself,
// and so every other output, never sees the file. done closes the view and
// removes its directory.
func growView(src *Source) (*rootfs.Tree, func(), error) {
	dir, err := os.MkdirTemp(src.WorkDir, "grow-")
	if err != nil {
		return nil, nil, err
	}
	view, err := src.Tree.Overlay(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	done := func() { view.Close(); os.RemoveAll(dir) }
	if view.Get(GrowDropIn) != nil {
		return view, done, nil
	}
	origin := rootfs.Origin{Layer: "stamp", Member: "raw.grow"}
	if _, err := view.MkdirAll(path.Dir(GrowDropIn), rootfs.Header{Perm: 0o755, MTime: src.Epoch, Origin: origin}); err != nil {
		done()
		return nil, nil, err
	}
	_, err = view.Create(GrowDropIn, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: src.Epoch, Origin: origin},
		strings.NewReader(growDropIn))
	if err != nil {
		done()
		return nil, nil, err
	}
	return view, done, nil
}

// emptyTree is a tree holding only its root, for an ext4 partition other
// than the root.
func emptyTree(workDir string, epoch time.Time) (*rootfs.Tree, func(), error) {
	dir, err := os.MkdirTemp(workDir, "empty-")
	if err != nil {
		return nil, nil, err
	}
	t, err := rootfs.New(filepath.Join(dir, "root"), rootfs.Options{DefaultMTime: epoch})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return t, func() { t.Close(); os.RemoveAll(dir) }, nil
}

// writeSwap writes the header mkswap writes (version 1, 4 KiB pages) so
// the partition is swap the kernel accepts as it is.
func writeSwap(w io.WriterAt, size int64, uuid [16]byte, label string) error {
	b := make([]byte, swapPageSize)
	pages := size / swapPageSize
	if pages > math.MaxUint32 {
		pages = math.MaxUint32
	}
	binary.LittleEndian.PutUint32(b[1024:], 1)
	binary.LittleEndian.PutUint32(b[1028:], uint32(pages-1))
	copy(b[1036:1052], uuid[:])
	copy(b[1052:1068], label)
	copy(b[swapPageSize-10:], "SWAPSPACE2")
	_, err := w.WriteAt(b, 0)
	return err
}

// human prints a byte count in the largest binary unit that keeps it exact
// to a tenth.
func human(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	f, u := float64(n), 0
	for f >= 1024 && u < len(units)-1 {
		f /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%d B", n)
	}
	return fmt.Sprintf("%.1f %s", f, units[u])
}
