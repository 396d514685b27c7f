package formats

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/ext4"
	"github.com/stamp-dev/stamp/disk/fat"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// Disk images are read without mounting: the GPT with the disk package's
// reader (go-diskfs underneath), ext4 with the disk/ext4 reader, FAT with the
// disk/fat reader, qcow2 through the disk/qcow2 reader, which turns it into
// the guest disk a raw image is. The root file system's entries are the
// image's Tree; what other partitions hold is Extra, under the partition's
// name ("esp:/EFI/BOOT/BOOTX64.EFI").

// Plain streams an Image's Regions are measured in.
const (
	PlainDecompressed = "decompressed"
	PlainGuestDisk    = "guest disk"
)

// DiskOpener is a Reader of a format that holds a disk readable at any
// offset: a raw disk itself, or the guest disk of a qcow2, vhd, vmdk or
// ova. ReadTreeFile reads a file of its ext4 root through it, and
// OpenPlain its guest disk.
type DiskOpener interface {
	// OpenDisk opens the disk in f, a file of size bytes, and returns it
	// with the disk's size.
	OpenDisk(f *os.File, size int64) (io.ReaderAt, int64, error)
}

// PlainOpener is a Reader whose images' guest disk (Image.Plain is
// PlainGuestDisk) can only be streamed, such as a gce archive's gzipped
// disk.raw; OpenPlain opens it through the reader.
type PlainOpener interface {
	OpenPlain(f *os.File) (io.ReadCloser, error)
}

// OpenPlain opens the stream an image's Regions are measured in: the
// decompressed stream of a compressed file, the guest disk of a disk
// format (its reader's PlainOpener, else its DiskOpener), or the file
// itself.
func OpenPlain(im *Image) (io.ReadCloser, error) {
	f, err := os.Open(im.Path)
	if err != nil {
		return nil, err
	}
	switch im.Plain {
	case "":
		return f, nil
	case PlainDecompressed:
		rc, err := compress.NewReader(im.Compression, f)
		if err != nil {
			f.Close()
			return nil, err
		}
		return readCloser{rc, func() error { rc.Close(); return f.Close() }}, nil
	case PlainGuestDisk:
		rc, err := openGuestDisk(im, f)
		if err != nil {
			f.Close()
			return nil, err
		}
		return rc, nil
	}
	f.Close()
	return nil, fmt.Errorf("%s: unknown plain stream %q", im.Path, im.Plain)
}

// openGuestDisk streams the guest disk of the image in f, which the
// stream closes.
func openGuestDisk(im *Image, f *os.File) (io.ReadCloser, error) {
	switch r := readerOf(im.Format).(type) {
	case PlainOpener:
		rc, err := r.OpenPlain(f)
		if err != nil {
			return nil, err
		}
		return readCloser{rc, func() error { rc.Close(); return f.Close() }}, nil
	case DiskOpener:
		d, size, err := openDisk(r, f)
		if err != nil {
			return nil, err
		}
		return readCloser{io.NewSectionReader(d, 0, size), f.Close}, nil
	}
	return nil, fmt.Errorf("%s: format %q has no guest disk to open", im.Path, im.Format)
}

// openDisk opens the disk in f through its format's reader.
func openDisk(r DiskOpener, f *os.File) (io.ReaderAt, int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, err
	}
	return r.OpenDisk(f, fi.Size())
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

// rawImageReader reads a raw disk with a GPT.
type rawImageReader struct{}

func (rawImageReader) Format() string { return "raw" }

// OpenDisk implements DiskOpener: the file is the disk.
func (rawImageReader) OpenDisk(f *os.File, size int64) (io.ReaderAt, int64, error) {
	return f, size, nil
}

func (rawImageReader) Match(h *Head) bool {
	return !h.IsDir && h.Compression == compress.None && len(h.Raw) >= 520 && string(h.Raw[512:520]) == "EFI PART"
}

func (rawImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	im := &Image{Path: h.Path, Format: "raw", Compression: compress.None, Size: h.Size}
	if err := readDisk(ctx, f, h.Size, im); err != nil {
		return nil, err
	}
	return im, nil
}

// readDisk reads the partition table and every partition's file system of
// the disk in r.
func readDisk(ctx context.Context, r io.ReaderAt, size int64, im *Image) error {
	guid, parts, err := disk.ReadGPT(r, size)
	if err != nil {
		return err
	}
	im.Facts = append(im.Facts, Fact{"gpt.disk-guid", guid})
	im.Facts = append(im.Facts, biosFacts(r, size)...)
	im.Regions = append(im.Regions,
		Region{Name: "protective MBR", Offset: 0, Size: disk.SectorSize},
		Region{Name: "GPT header", Offset: disk.SectorSize, Size: disk.SectorSize},
		Region{Name: "GPT partition entries", Offset: 2 * disk.SectorSize, Size: 128 * 128},
		Region{Name: "backup GPT", Offset: disk.LastUsable(size), Size: size - disk.LastUsable(size)})
	d := classifyParts(r, size, parts, im)
	for i := range parts {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := d.readPartition(ctx, im, i); err != nil {
			return err
		}
	}
	if d.root < 0 {
		return errors.New("no ext4 root partition")
	}
	name, err := d.joinUsr(im)
	if err != nil {
		return err
	}
	if d.usr >= 0 {
		d.checkUsrVerity(ctx, im)
	}
	if err := d.splitRootTree(im, name); err != nil {
		return err
	}
	im.Complete = true
	sort.Slice(im.Extra, func(a, b int) bool { return im.Extra[a].Path < im.Extra[b].Path })
	sort.SliceStable(im.Regions, func(a, b int) bool { return im.Regions[a].Offset < im.Regions[b].Offset })
	return nil
}

// diskParts is a disk's partitions as readDisk reads them: the file system
// each holds, and which hold the root tree and /usr.
type diskParts struct {
	r        io.ReaderAt
	size     int64
	parts    []disk.Partition
	kinds    []string // each partition's file system, as fsKind says
	root     int      // the root tree's partition, or -1
	usr      int      // /usr's partition, or -1
	rootTree *rootfs.Sealed
	usrTree  *rootfs.Sealed
}

// classifyParts finds each partition's file system, lists the partitions
// in im, and picks the root and /usr partitions: the root is the partition
// of a root type holding ext4, or else the first ext4.
func classifyParts(r io.ReaderAt, size int64, parts []disk.Partition, im *Image) *diskParts {
	d := &diskParts{r: r, size: size, parts: parts, kinds: make([]string, len(parts)), root: -1, usr: -1}
	for i, p := range parts {
		d.kinds[i] = fsKind(r, p.Start)
		if (p.Type == disk.TypeUsrAMD64 || p.Type == disk.TypeUsrARM64) && d.kinds[i] == "ext4" {
			d.usr = i
		}
		im.Partitions = append(im.Partitions, Partition{Index: i + 1, Name: p.Name, Type: p.Type,
			GUID: strings.ToLower(disk.FormatUUID(p.GUID)), Start: p.Start, Size: p.Size, Filesystem: d.kinds[i]})
		im.Regions = append(im.Regions, Region{Name: fmt.Sprintf("partition %d (%s)", i+1, p.Name), Offset: p.Start, Size: p.Size})
		isRoot := p.Type == disk.TypeRootAMD64 || p.Type == disk.TypeRootARM64
		if d.kinds[i] == "ext4" && (d.root < 0 || isRoot) {
			d.root = i
		}
	}
	return d
}

// readPartition reads partition i's file system into im: its facts, and
// its entries as Extra unless it holds the root tree or /usr.
func (d *diskParts) readPartition(ctx context.Context, im *Image, i int) error {
	p := d.parts[i]
	sub := io.NewSectionReader(d.r, p.Start, p.Size)
	fsys := Filesystem{Partition: i + 1, Type: d.kinds[i], Size: p.Size}
	var entries []*rootfs.Entry
	var err error
	switch d.kinds[i] {
	case "ext4":
		entries, err = d.readExt4(ctx, im, i, sub, &fsys)
	case "vfat":
		entries, err = readVFAT(ctx, sub, p.Size, &fsys)
	}
	if err != nil {
		return fmt.Errorf("partition %d (%s): %w", i+1, p.Name, err)
	}
	// A file system's own root directory is not one of its entries, as
	// fsck counts them.
	fsys.Files = len(entries)
	if len(entries) > 0 && entries[0].Path == "/" {
		fsys.Files--
	}
	if d.kinds[i] == "verity" {
		fsys.Facts = verityFacts(sub)
	}
	im.Filesystems = append(im.Filesystems, fsys)
	if i == d.root || (i == d.usr && d.root >= 0) {
		return nil
	}
	for _, e := range entries {
		if e.Path == "/" {
			continue
		}
		im.Extra = append(im.Extra, &rootfs.Entry{Path: partName(p, i) + ":" + e.Path, Inode: e.Inode, Origin: e.Origin})
	}
	return nil
}

// readExt4 reads the ext4 file system of partition i, keeping its tree if
// it is the root's or /usr's.
func (d *diskParts) readExt4(ctx context.Context, im *Image, i int, sub *io.SectionReader, fsys *Filesystem) ([]*rootfs.Entry, error) {
	p := d.parts[i]
	sb, err := ext4.ReadSuper(sub)
	if err != nil {
		return nil, err
	}
	fsys.UUID, fsys.Label = sb.UUID, sb.Label
	for _, f := range sb.Facts {
		fsys.Facts = append(fsys.Facts, Fact(f))
	}
	im.Regions = appendRegions(im.Regions, sb.Regions(p.Start, fmt.Sprintf("partition %d ", i+1)))
	tree, data, err := ext4.Read(ctx, d.r, d.size, p.Start, p.Size, sb)
	if err != nil {
		return nil, fmt.Errorf("ext4: %w", err)
	}
	im.Regions = appendRegions(im.Regions, data)
	switch i {
	case d.root:
		d.rootTree = tree
	case d.usr:
		d.usrTree = tree
	}
	return tree.Entries(), nil
}

// readVFAT reads a FAT file system of size bytes in sub.
func readVFAT(ctx context.Context, sub io.ReaderAt, size int64, fsys *Filesystem) ([]*rootfs.Entry, error) {
	ffs, err := fat.Open(sub, size)
	if err != nil {
		return nil, err
	}
	g := ffs.Geometry()
	fsys.UUID, fsys.Label = fmt.Sprintf("%04X-%04X", ffs.VolumeID>>16, ffs.VolumeID&0xffff), ffs.Label
	fsys.Facts = []Fact{{"type", fmt.Sprint(g.Type)}, {"clusters", fmt.Sprint(g.Clusters)},
		{"sectors-per-cluster", fmt.Sprint(g.SectorsPerCluster)}, {"volume-id", fsys.UUID}, {"label", ffs.Label}}
	fsys.Facts = append(fsys.Facts, secureBootFacts(ffs)...)
	fsys.Facts = append(fsys.Facts, ukiFacts(ffs)...)
	return readFAT(ctx, ffs)
}

// joinUsr makes a /usr partition's entries join the root's, which holds
// /usr empty, where it is mounted; it reads the stamp record, and returns
// how Extra names a path of the merged tree.
func (d *diskParts) joinUsr(im *Image) (func(string) string, error) {
	parts, root, usr := d.parts, d.root, d.usr
	name := func(p string) string { return partName(parts[root], root) + ":" + p }
	recordPart, recordTree := parts[root], d.rootTree
	if usr >= 0 {
		merged, lf, err := mergeUsr(d.rootTree, d.usrTree)
		if err != nil {
			return nil, fmt.Errorf("partition %d (%s): %w", usr+1, parts[usr].Name, err)
		}
		usrName := partName(parts[usr], usr)
		if lf != nil {
			im.Extra = append(im.Extra, &rootfs.Entry{Path: usrName + ":/lost+found", Inode: lf.Inode, Origin: lf.Origin})
		}
		d.rootTree = merged
		name = func(p string) string {
			if rest, ok := strings.CutPrefix(p, "/usr"); ok && (rest == "" || rest[0] == '/') {
				return usrName + ":" + cmp.Or(rest, "/")
			}
			return partName(parts[root], root) + ":" + p
		}
		if strings.HasPrefix(rootfs.RecordPath, "/usr/") {
			recordPart, recordTree = parts[usr], d.usrTree
		}
	}
	im.Record = recordOf(d.r, d.size, recordPart, recordTree)
	return name, nil
}

// checkUsrVerity checks /usr against each usr-verity partition, with the
// root hash a UKI's command line names.
func (d *diskParts) checkUsrVerity(ctx context.Context, im *Image) {
	for i, p := range d.parts {
		if d.kinds[i] == "verity" && (p.Type == disk.TypeUsrVerityAMD64 || p.Type == disk.TypeUsrVerityARM64) {
			var cmdline string
			for _, fsys := range im.Filesystems {
				for _, f := range fsys.Facts {
					if f.Key == "uki.cmdline" {
						cmdline = f.Value
					}
				}
			}
			u := d.parts[d.usr]
			im.Facts = append(im.Facts, checkVerity(ctx, io.NewSectionReader(d.r, u.Start, u.Size), u.Size,
				io.NewSectionReader(d.r, p.Start, p.Size), p.Size, cmdline))
		}
	}
}

// splitRootTree sets im.Tree. What the root file system holds beyond the
// record is the output's own (lost+found, a repart drop-in), and goes to
// Extra. Without a stamp record, lost+found is taken for the file system's
// unless the record names it.
func (d *diskParts) splitRootTree(im *Image, name func(string) string) error {
	tree, extra := d.rootTree.Entries(), []*rootfs.Entry(nil)
	if _, ok := treePaths(im.Record); ok {
		tree, extra = splitRecordedBy(tree, im.Record, name)
	} else if lf := d.rootTree.Get("/lost+found"); lf != nil && !recordPaths(im.Record)["/lost+found"] {
		tree = removeEntry(tree, lf)
		extra = []*rootfs.Entry{{Path: name("/lost+found"), Inode: lf.Inode, Origin: lf.Origin}}
	}
	im.Tree = d.rootTree
	if len(extra) > 0 {
		im.Extra = append(im.Extra, extra...)
		var err error
		if im.Tree, err = rootfs.SealedOf(tree); err != nil {
			return fmt.Errorf("partition %d (%s): %w", d.root+1, d.parts[d.root].Name, err)
		}
	}
	return nil
}

// partName is how Extra names a partition: its GPT name, or pN.
func partName(p disk.Partition, i int) string {
	if p.Name == "" {
		return fmt.Sprintf("p%d", i+1)
	}
	return p.Name
}

// fsKind names the file system at off by its magic.
func fsKind(r io.ReaderAt, off int64) string {
	b := make([]byte, 4096)
	if n, _ := r.ReadAt(b, off); n < len(b) {
		return ""
	}
	switch {
	case binary.LittleEndian.Uint16(b[1024+56:]) == 0xEF53:
		return "ext4"
	case b[510] == 0x55 && b[511] == 0xAA && (string(b[54:57]) == "FAT" || string(b[82:85]) == "FAT"):
		return "vfat"
	case string(b[4086:4096]) == "SWAPSPACE2" || string(b[4086:4096]) == "SWAP-SPACE":
		return "swap"
	case string(b[:8]) == "verity\x00\x00":
		return "verity"
	}
	return ""
}

// mergeUsr is the tree of a disk whose /usr is a partition of its own:
// root's entries with usr's moved below /usr. It returns usr's lost+found
// apart, as the file system's own.
func mergeUsr(root, usr *rootfs.Sealed) (*rootfs.Sealed, *rootfs.Entry, error) {
	if u := root.Get("/usr"); u == nil || u.Type != rootfs.TypeDir || len(root.Children("/usr")) > 0 {
		return nil, nil, errors.New("the root file system has no empty /usr to mount the usr partition on")
	}
	entries := root.Entries()
	lf := usr.Get("/lost+found")
	for _, e := range usr.Entries() {
		if e.Path == "/" || e == lf {
			continue
		}
		entries = append(entries, &rootfs.Entry{Path: "/usr" + e.Path, Inode: e.Inode, Origin: e.Origin})
	}
	sort.Slice(entries, func(a, b int) bool { return entries[a].Path < entries[b].Path })
	t, err := rootfs.SealedOf(entries)
	return t, lf, err
}

// readFAT reads every entry of a FAT file system. FAT has no owners or
// modes: directories read as 0755, files as 0644, owned by root.
func readFAT(ctx context.Context, ffs *fat.FS) ([]*rootfs.Entry, error) {
	var out []*rootfs.Entry
	err := fs.WalkDir(ffs, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		tp := "/" + p
		if p == "." {
			tp = "/"
		}
		in := &rootfs.Inode{Type: rootfs.TypeDir, Perm: 0o755, MTime: fi.ModTime().UTC()}
		if !d.IsDir() {
			in.Type, in.Perm = rootfs.TypeRegular, 0o644
			f, err := ffs.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			n, err := io.Copy(h, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", tp, err)
			}
			in.Size, in.Digest = n, hex.EncodeToString(h.Sum(nil))
		}
		out = append(out, &rootfs.Entry{Path: tp, Inode: in})
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Path < out[b].Path })
	rootfs.SetNlink(out)
	return out, nil
}

// recordOf reads the embedded record from the file system in part whose
// tree is tree: the root's, or /usr's.
func recordOf(r io.ReaderAt, size int64, part disk.Partition, tree *rootfs.Sealed) []byte {
	p := rootfs.RecordPath
	if tree.Get(p) == nil {
		p = strings.TrimPrefix(p, "/usr")
	}
	e := tree.Get(p)
	if e == nil || e.Type != rootfs.TypeRegular || e.Size > maxRecord {
		return nil
	}
	data, err := ext4.ReadFile(r, size, part.Start, part.Size, p)
	if err != nil {
		return nil
	}
	return data
}

// appendRegions appends what the ext4 reader names of a disk to regions.
func appendRegions(regions []Region, rs []ext4.Region) []Region {
	for _, r := range rs {
		regions = append(regions, Region(r))
	}
	return regions
}
