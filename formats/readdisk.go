package formats

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/diskfs/go-diskfs/backend"
	dext4 "github.com/diskfs/go-diskfs/filesystem/ext4"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/fat"
	"github.com/stamp-dev/stamp/disk/qcow2"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// Disk images are read without mounting: the GPT with the disk package's
// reader (go-diskfs underneath), ext4 with go-diskfs's reader, FAT with the
// disk/fat reader, qcow2 through the disk/qcow2 reader, which turns it into
// the guest disk a raw image is. The root file system's entries are the
// image's Entries; what other partitions hold is Extra, under the
// partition's name ("esp:/EFI/BOOT/BOOTX64.EFI").

// Plain streams an Image's Regions are measured in.
const (
	PlainDecompressed = "decompressed"
	PlainGuestDisk    = "guest disk"
)

// OpenPlain opens the stream an image's Regions are measured in: the
// decompressed stream of a compressed file, the guest disk of a qcow2, or
// the file itself.
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
		q, err := qcow2.Open(f)
		if err != nil {
			f.Close()
			return nil, err
		}
		return readCloser{io.NewSectionReader(q, 0, q.Size()), f.Close}, nil
	}
	f.Close()
	return nil, fmt.Errorf("%s: unknown plain stream %q", im.Path, im.Plain)
}

type readCloser struct {
	io.Reader
	close func() error
}

func (r readCloser) Close() error { return r.close() }

// rawImageReader reads a raw disk with a GPT.
type rawImageReader struct{}

func (rawImageReader) Format() string { return "raw" }

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

// qcow2ImageReader reads a qcow2 image's guest disk as a raw one.
type qcow2ImageReader struct{}

func (qcow2ImageReader) Format() string { return "qcow2" }

func (qcow2ImageReader) Match(h *Head) bool {
	return !h.IsDir && len(h.Raw) >= 4 && string(h.Raw[:4]) == "QFI\xfb"
}

func (qcow2ImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	q, err := qcow2.Open(f)
	if err != nil {
		return nil, err
	}
	im := &Image{Path: h.Path, Format: "qcow2", Compression: compress.None, Size: h.Size, Plain: PlainGuestDisk}
	im.Facts = append(im.Facts, qcow2Facts(h.Raw)...)
	if err := readDisk(ctx, q, q.Size(), im); err != nil {
		return nil, err
	}
	return im, nil
}

// qcow2Facts are the header fields of a qcow2 image.
func qcow2Facts(b []byte) []Fact {
	if len(b) < 104 {
		return nil
	}
	be := binary.BigEndian
	u32 := func(o int) string { return strconv.FormatUint(uint64(be.Uint32(b[o:])), 10) }
	u64 := func(o int) string { return strconv.FormatUint(be.Uint64(b[o:]), 10) }
	return []Fact{
		{"qcow2.version", u32(4)},
		{"qcow2.cluster-bits", u32(20)},
		{"qcow2.size", u64(24)},
		{"qcow2.l1-size", u32(36)},
		{"qcow2.l1-offset", u64(40)},
		{"qcow2.refcount-table-offset", u64(48)},
		{"qcow2.refcount-table-clusters", u32(56)},
		{"qcow2.incompatible-features", u64(72)},
		{"qcow2.compatible-features", u64(80)},
		{"qcow2.refcount-order", u32(96)},
	}
}

// readDisk reads the partition table and every partition's file system of
// the disk in r.
func readDisk(ctx context.Context, r io.ReaderAt, size int64, im *Image) error {
	guid, parts, err := disk.ReadGPT(r, size)
	if err != nil {
		return err
	}
	im.Facts = append(im.Facts, Fact{"gpt.disk-guid", guid})
	im.Regions = append(im.Regions,
		Region{Name: "protective MBR", Offset: 0, Size: disk.SectorSize},
		Region{Name: "GPT header", Offset: disk.SectorSize, Size: disk.SectorSize},
		Region{Name: "GPT partition entries", Offset: 2 * disk.SectorSize, Size: 128 * 128},
		Region{Name: "backup GPT", Offset: disk.LastUsable(size), Size: size - disk.LastUsable(size)})
	root := -1
	kinds := make([]string, len(parts))
	for i, p := range parts {
		kinds[i] = fsKind(r, p.Start)
		im.Partitions = append(im.Partitions, Partition{Index: i + 1, Name: p.Name, Type: p.Type,
			GUID: strings.ToLower(disk.FormatUUID(p.GUID)), Start: p.Start, Size: p.Size, Filesystem: kinds[i]})
		im.Regions = append(im.Regions, Region{Name: fmt.Sprintf("partition %d (%s)", i+1, p.Name), Offset: p.Start, Size: p.Size})
		isRoot := p.Type == disk.TypeRootAMD64 || p.Type == disk.TypeRootARM64
		if kinds[i] == "ext4" && (root < 0 || isRoot) {
			root = i
		}
	}
	for i, p := range parts {
		if err := ctx.Err(); err != nil {
			return err
		}
		sub := io.NewSectionReader(r, p.Start, p.Size)
		fsys := Filesystem{Partition: i + 1, Type: kinds[i], Size: p.Size}
		var entries []*rootfs.Entry
		switch kinds[i] {
		case "ext4":
			sb, err := readExt4Super(sub)
			if err != nil {
				return fmt.Errorf("partition %d (%s): %w", i+1, p.Name, err)
			}
			fsys.UUID, fsys.Label, fsys.Facts = sb.uuid, sb.label, sb.facts
			im.Regions = append(im.Regions, sb.regions(p.Start, fmt.Sprintf("partition %d ", i+1))...)
			var data []Region
			if entries, data, err = readExt4(ctx, r, size, p.Start, p.Size, sb); err != nil {
				return fmt.Errorf("partition %d (%s): ext4: %w", i+1, p.Name, err)
			}
			im.Regions = append(im.Regions, data...)
		case "vfat":
			ffs, err := fat.Open(sub, p.Size)
			if err != nil {
				return fmt.Errorf("partition %d (%s): %w", i+1, p.Name, err)
			}
			g := ffs.Geometry()
			fsys.UUID, fsys.Label = fmt.Sprintf("%04X-%04X", ffs.VolumeID>>16, ffs.VolumeID&0xffff), ffs.Label
			fsys.Facts = []Fact{{"type", fmt.Sprint(g.Type)}, {"clusters", fmt.Sprint(g.Clusters)},
				{"sectors-per-cluster", fmt.Sprint(g.SectorsPerCluster)}, {"volume-id", fsys.UUID}, {"label", ffs.Label}}
			if entries, err = readFAT(ctx, ffs); err != nil {
				return fmt.Errorf("partition %d (%s): %w", i+1, p.Name, err)
			}
		}
		// A file system's own root directory is not one of its entries, as
		// fsck counts them.
		fsys.Files = len(entries)
		if len(entries) > 0 && entries[0].Path == "/" {
			fsys.Files--
		}
		im.Filesystems = append(im.Filesystems, fsys)
		if i == root {
			im.Entries = entries
			continue
		}
		for _, e := range entries {
			if e.Path == "/" {
				continue
			}
			e.Path = partName(p, i) + ":" + e.Path
			im.Extra = append(im.Extra, e)
		}
	}
	if root < 0 {
		return errors.New("no ext4 root partition")
	}
	im.Record = recordOf(ctx, r, size, parts[root], im.Entries)
	if _, ok := treePaths(im.Record); ok {
		// What the root file system holds beyond the record is the
		// output's own (lost+found, a repart drop-in).
		splitRecorded(im, partName(parts[root], root))
	} else if lf := findEntry(im.Entries, "/lost+found"); lf != nil && !recordPaths(im.Record)["/lost+found"] {
		// Without a stamp record, lost+found is taken for the file
		// system's unless the record names it.
		im.Entries = removeEntry(im.Entries, lf)
		lf.Path = partName(parts[root], root) + ":/lost+found"
		im.Extra = append(im.Extra, lf)
	}
	im.Complete = true
	sort.Slice(im.Extra, func(a, b int) bool { return im.Extra[a].Path < im.Extra[b].Path })
	sort.SliceStable(im.Regions, func(a, b int) bool { return im.Regions[a].Offset < im.Regions[b].Offset })
	return nil
}

// partName is how Extra names a partition: its GPT name, or pN.
func partName(p disk.Partition, i int) string {
	if p.Name == "" {
		return fmt.Sprintf("p%d", i+1)
	}
	return p.Name
}

// splitRecorded moves every entry of im.Entries that the embedded record
// does not name (other than the record itself and the directories above
// it, which it cannot list) to im.Extra under prefix.
func splitRecorded(im *Image, prefix string) {
	recorded := recordPaths(im.Record)
	var tree []*rootfs.Entry
	for _, e := range im.Entries {
		if recorded[e.Path] || holdsRecordPath(e.Path) {
			tree = append(tree, e)
			continue
		}
		e.Path = prefix + ":" + e.Path
		im.Extra = append(im.Extra, e)
	}
	im.Entries = tree
	rootfs.SetNlink(im.Entries)
}

// fsKind names the file system at off by its magic.
func fsKind(r io.ReaderAt, off int64) string {
	b := make([]byte, 2048)
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
	}
	return ""
}

// ext4Super is what inspect shows of an ext4 superblock, and what locates
// offsets in its metadata.
type ext4Super struct {
	uuid, label     string
	facts           []Fact
	blockSize       int64
	inodeSize       int64
	inodesPerGroup  int64
	groups          int64
	descSize        int64
	gdtBlock        int64
	tables          [][3]int64 // per group: block bitmap, inode bitmap, inode table (blocks)
	inodeTableBytes int64
}

func readExt4Super(r io.ReaderAt) (*ext4Super, error) {
	b := make([]byte, 1024)
	if _, err := r.ReadAt(b, 1024); err != nil {
		return nil, fmt.Errorf("ext4 superblock: %w", err)
	}
	le := binary.LittleEndian
	u32 := func(o int) uint64 { return uint64(le.Uint32(b[o:])) }
	u16 := func(o int) uint64 { return uint64(le.Uint16(b[o:])) }
	s := &ext4Super{blockSize: 1024 << u32(24), inodeSize: int64(u16(88)), inodesPerGroup: int64(u32(40))}
	incompat := u32(96)
	blocks := u32(4) | u32(0x150)<<32*(incompat>>7&1)
	bpg := u32(32)
	if bpg == 0 || s.blockSize > 65536 || s.inodeSize == 0 || s.inodesPerGroup == 0 {
		return nil, errors.New("ext4 superblock: implausible geometry")
	}
	s.groups = int64((blocks - u32(20) + bpg - 1) / bpg)
	s.descSize = 32
	if incompat&0x80 != 0 && u16(254) >= 64 {
		s.descSize = int64(u16(254))
	}
	s.gdtBlock = 1
	if s.blockSize == 1024 {
		s.gdtBlock = 2
	}
	s.uuid = uuidString(b[104:120])
	s.label = strings.TrimRight(string(b[120:136]), "\x00")
	s.inodeTableBytes = s.inodesPerGroup * s.inodeSize
	s.facts = []Fact{
		{"uuid", s.uuid},
		{"label", s.label},
		{"blocks", strconv.FormatUint(blocks, 10)},
		{"inodes", strconv.FormatUint(u32(0), 10)},
		{"free-blocks", strconv.FormatUint(u32(12)|u32(0x158)<<32*(incompat>>7&1), 10)},
		{"free-inodes", strconv.FormatUint(u32(16), 10)},
		{"block-size", strconv.FormatInt(s.blockSize, 10)},
		{"blocks-per-group", strconv.FormatUint(bpg, 10)},
		{"inodes-per-group", strconv.FormatInt(s.inodesPerGroup, 10)},
		{"inode-size", strconv.FormatInt(s.inodeSize, 10)},
		{"first-data-block", strconv.FormatUint(u32(20), 10)},
		{"reserved-gdt-blocks", strconv.FormatUint(u16(206), 10)},
		{"features-compat", fmt.Sprintf("%#x", u32(92))},
		{"features-incompat", fmt.Sprintf("%#x", incompat)},
		{"features-ro-compat", fmt.Sprintf("%#x", u32(100))},
		{"hash-seed", uuidString(b[236:252])},
		{"default-hash-version", strconv.FormatUint(uint64(b[252]), 10)},
		{"journal-inode", strconv.FormatUint(u32(224), 10)},
		{"mkfs-time", strconv.FormatUint(u32(264), 10)},
		{"mount-time", strconv.FormatUint(u32(44), 10)},
		{"write-time", strconv.FormatUint(u32(48), 10)},
		{"last-check", strconv.FormatUint(u32(64), 10)},
		{"mount-count", strconv.FormatUint(u16(52), 10)},
		{"state", strconv.FormatUint(u16(58), 10)},
		{"errors", strconv.FormatUint(u16(60), 10)},
		{"creator-os", strconv.FormatUint(u32(72), 10)},
		{"rev-level", strconv.FormatUint(u32(76), 10)},
		{"flags", strconv.FormatUint(u32(0x160), 10)},
		{"checksum-type", strconv.FormatUint(uint64(b[0x175]), 10)},
		{"checksum", fmt.Sprintf("%#08x", u32(0x3FC))},
	}
	// The group descriptors place each group's bitmaps and inode table.
	if s.groups > 0 && s.groups < 1<<24 {
		gdt := make([]byte, s.groups*s.descSize)
		if _, err := r.ReadAt(gdt, s.gdtBlock*s.blockSize); err == nil {
			for g := int64(0); g < s.groups; g++ {
				d := gdt[g*s.descSize:]
				lo := func(o int) int64 { return int64(le.Uint32(d[o:])) }
				hi := func(o int) int64 {
					if s.descSize < 64 {
						return 0
					}
					return int64(le.Uint32(d[o:])) << 32
				}
				s.tables = append(s.tables, [3]int64{lo(0) | hi(0x20), lo(4) | hi(0x24), lo(8) | hi(0x28)})
			}
		}
	}
	return s, nil
}

// regions names the superblock, group descriptors, bitmaps and inode tables
// of the file system that starts at base.
func (s *ext4Super) regions(base int64, prefix string) []Region {
	out := []Region{
		{Name: prefix + "ext4 superblock", Offset: base + 1024, Size: 1024},
		{Name: prefix + "ext4 group descriptors", Offset: base + s.gdtBlock*s.blockSize, Size: s.groups * s.descSize},
	}
	for g, t := range s.tables {
		out = append(out,
			Region{Name: fmt.Sprintf("%sext4 block bitmap of group %d", prefix, g), Offset: base + t[0]*s.blockSize, Size: s.blockSize},
			Region{Name: fmt.Sprintf("%sext4 inode bitmap of group %d", prefix, g), Offset: base + t[1]*s.blockSize, Size: s.blockSize},
			Region{Name: fmt.Sprintf("%sext4 inode table of group %d", prefix, g), Offset: base + t[2]*s.blockSize, Size: s.inodeTableBytes,
				Item: "inode", ItemSize: s.inodeSize, FirstItem: int64(g)*s.inodesPerGroup + 1})
	}
	return out
}

func uuidString(b []byte) string {
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// storage adapts an io.ReaderAt to go-diskfs's read-only backend.
type storage struct {
	r    io.ReaderAt
	size int64
	off  int64
}

func (s *storage) Stat() (fs.FileInfo, error) { return nil, errors.New("disk image: no file info") }
func (s *storage) Close() error               { return nil }
func (s *storage) Read(b []byte) (int, error) {
	n, err := s.ReadAt(b, s.off)
	s.off += int64(n)
	return n, err
}
func (s *storage) ReadAt(b []byte, off int64) (int, error) { return s.r.ReadAt(b, off) }
func (s *storage) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		s.off = off
	case io.SeekCurrent:
		s.off += off
	case io.SeekEnd:
		s.off = s.size + off
	}
	return s.off, nil
}
func (s *storage) Sys() (*os.File, error) { return nil, errors.New("disk image: not an os.File") }
func (s *storage) Writable() (backend.WritableFile, error) {
	return nil, errors.New("disk image: read only")
}
func (s *storage) Path() string { return "" }

// readExt4 reads every entry of the ext4 file system in the partition at
// start, hashing file contents. Hard links are the non-directory entries
// that share an inode number. go-diskfs lists the directories; each inode is
// read here, once, straight from its table: go-diskfs's Stat walks the path
// from the root for every file, which is quadratic in a large directory, and
// it reads a file with a hole as if the hole were not there.
//
// It also returns where each file's data lies on the disk, so an offset in
// a data block names the file.
func readExt4(ctx context.Context, r io.ReaderAt, size, start, psize int64, sb *ext4Super) ([]*rootfs.Entry, []Region, error) {
	fsys, err := dext4.Read(&storage{r: r, size: size}, psize, start, 512)
	if err != nil {
		return nil, nil, err
	}
	part := io.NewSectionReader(r, start, psize)
	var data []Region
	byIno := map[uint32]*rootfs.Inode{}
	var out []*rootfs.Entry
	buf := make([]byte, 256<<10)
	add := func(p string, ino uint32) (*rootfs.Entry, error) {
		if in := byIno[ino]; in != nil {
			return &rootfs.Entry{Path: p, Inode: in}, nil
		}
		in, err := sb.readInode(ctx, part, ino, buf, func(block, blocks int64) {
			data = append(data, Region{Name: fmt.Sprintf("ext4 data of %s (inode %d)", p, ino),
				Offset: start + block*sb.blockSize, Size: blocks * sb.blockSize})
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		if in.Type != rootfs.TypeDir {
			byIno[ino] = in
		}
		return &rootfs.Entry{Path: p, Inode: in}, nil
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		fp := strings.TrimPrefix(dir, "/")
		if fp == "" {
			fp = "."
		}
		ents, err := fsys.ReadDir(fp)
		if err != nil {
			return err
		}
		type child struct {
			name string
			ino  uint32
		}
		children := make([]child, 0, len(ents))
		for _, de := range ents {
			fi, err := de.Info()
			if err != nil {
				return err
			}
			st, ok := fi.Sys().(*dext4.StatT)
			if !ok {
				return fmt.Errorf("%s: no inode number", path.Join(dir, de.Name()))
			}
			children = append(children, child{de.Name(), st.Ino})
		}
		sort.Slice(children, func(a, b int) bool { return children[a].name < children[b].name })
		for _, c := range children {
			p := path.Join(dir, c.name)
			e, err := add(p, c.ino)
			if err != nil {
				return err
			}
			out = append(out, e)
			if e.Type == rootfs.TypeDir {
				if err := walk(p); err != nil {
					return err
				}
			}
		}
		return nil
	}
	const rootIno = 2
	rootEntry, err := add("/", rootIno)
	if err != nil {
		return nil, nil, err
	}
	out = append(out, rootEntry)
	if err := walk("/"); err != nil {
		return nil, nil, err
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Path < out[b].Path })
	rootfs.SetNlink(out)
	return out, data, nil
}

// Inode fields, as the ext4 disk layout documents them.
const (
	ext4InodeMode       = 0x00
	ext4InodeUID        = 0x02
	ext4InodeSize       = 0x04
	ext4InodeMTime      = 0x10
	ext4InodeGID        = 0x18
	ext4InodeFlags      = 0x20
	ext4InodeBlock      = 0x28
	ext4InodeFileACL    = 0x68
	ext4InodeSizeHigh   = 0x6C
	ext4InodeFileACLHi  = 0x76
	ext4InodeUIDHigh    = 0x78
	ext4InodeGIDHigh    = 0x7A
	ext4InodeExtraISize = 0x80
	ext4InodeMTimeExtra = 0x88
	ext4ExtentsFlag     = 0x80000
	ext4ExtentMagic     = 0xF30A
	ext4MaxExtentLen    = 32768
	ext4XattrMagic      = 0xEA020000
)

// rawInode reads inode ino's bytes from its group's table.
func (s *ext4Super) rawInode(r io.ReaderAt, ino uint32) ([]byte, error) {
	if ino == 0 {
		return nil, errors.New("inode 0")
	}
	g, idx := int64(ino-1)/s.inodesPerGroup, int64(ino-1)%s.inodesPerGroup
	if g >= int64(len(s.tables)) {
		return nil, fmt.Errorf("inode %d is beyond the group descriptors", ino)
	}
	raw := make([]byte, max(s.inodeSize, 128))
	if _, err := r.ReadAt(raw, s.tables[g][2]*s.blockSize+idx*s.inodeSize); err != nil {
		return nil, fmt.Errorf("inode %d: %w", ino, err)
	}
	return raw, nil
}

// readInode reads inode ino into the tree's terms: type, permission bits,
// owner, mtime, symlink target, device numbers, xattrs, and for a regular
// file its size and sha256 (read through the extent tree).
func (s *ext4Super) readInode(ctx context.Context, r io.ReaderAt, ino uint32, buf []byte, onRun func(block, blocks int64)) (*rootfs.Inode, error) {
	raw, err := s.rawInode(r, ino)
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	mode := le.Uint16(raw[ext4InodeMode:])
	in := &rootfs.Inode{
		Perm: uint32(mode & 0o7777),
		UID:  uint32(le.Uint16(raw[ext4InodeUID:])) | uint32(le.Uint16(raw[ext4InodeUIDHigh:]))<<16,
		GID:  uint32(le.Uint16(raw[ext4InodeGID:])) | uint32(le.Uint16(raw[ext4InodeGIDHigh:]))<<16,
	}
	size := int64(le.Uint32(raw[ext4InodeSize:])) | int64(le.Uint32(raw[ext4InodeSizeHigh:]))<<32
	mtime := int64(int32(le.Uint32(raw[ext4InodeMTime:])))
	extra := int64(0)
	if len(raw) > ext4InodeExtraISize+2 {
		extra = int64(le.Uint16(raw[ext4InodeExtraISize:]))
	}
	if 128+extra >= ext4InodeMTimeExtra+4 {
		// The low two bits extend the seconds beyond 2038.
		mtime += int64(le.Uint32(raw[ext4InodeMTimeExtra:])&3) << 32
	}
	in.MTime = time.Unix(mtime, 0).UTC()
	block := raw[ext4InodeBlock : ext4InodeBlock+60]
	switch mode & 0xF000 {
	case 0x4000:
		in.Type = rootfs.TypeDir
	case 0x8000:
		in.Type = rootfs.TypeRegular
		h := sha256.New()
		if err := s.readFile(ctx, r, ino, raw, size, h, buf, onRun); err != nil {
			return nil, err
		}
		in.Size, in.Digest = size, hex.EncodeToString(h.Sum(nil))
	case 0xA000:
		in.Type = rootfs.TypeSymlink
		if le.Uint32(raw[ext4InodeFlags:])&ext4ExtentsFlag == 0 && size < 60 {
			// A fast symlink keeps its target in the block map's place.
			in.Target = string(block[:size])
		} else {
			var t strings.Builder
			if err := s.readFile(ctx, r, ino, raw, size, &t, buf, nil); err != nil {
				return nil, err
			}
			in.Target = t.String()
		}
	case 0x2000, 0x6000:
		in.Type = rootfs.TypeChar
		if mode&0xF000 == 0x6000 {
			in.Type = rootfs.TypeBlock
		}
		if old := le.Uint32(block[0:]); old != 0 {
			in.Major, in.Minor = old>>8&0xff, old&0xff
		} else {
			neu := le.Uint32(block[4:])
			in.Major, in.Minor = neu>>8&0xfff, neu&0xff|neu>>12&0xfff00
		}
	case 0x1000:
		in.Type = rootfs.TypeFifo
	case 0xC000:
		in.Type = rootfs.TypeSocket
	default:
		return nil, fmt.Errorf("inode %d: unknown file type %#o", ino, mode&0xF000)
	}
	xs, err := s.xattrs(r, raw, extra)
	if err != nil {
		return nil, fmt.Errorf("inode %d: xattrs: %w", ino, err)
	}
	in.Xattrs = xs
	return in, nil
}

// xattrPrefixes are the ext4 name indexes (fs/ext4/xattr.h).
var xattrPrefixes = map[uint8]string{1: "user.", 2: "system.posix_acl_access", 3: "system.posix_acl_default",
	4: "trusted.", 6: "security.", 7: "system.", 8: "system.richacl"}

// xattrs reads an inode's extended attributes: those in the inode after its
// extra fields, then those in its xattr block. ACLs are turned back into the
// xattr form the tree holds.
func (s *ext4Super) xattrs(r io.ReaderAt, raw []byte, extra int64) (map[string]string, error) {
	le := binary.LittleEndian
	out := map[string]string{}
	// entries parses a list of entries at b; values sit at base+offset.
	entries := func(b, values []byte) error {
		for i := 0; i+16 <= len(b) && le.Uint32(b[i:]) != 0; {
			nameLen, index := int(b[i]), b[i+1]
			off, inum, vsize := int(le.Uint16(b[i+2:])), le.Uint32(b[i+4:]), int(le.Uint32(b[i+8:]))
			if i+16+nameLen > len(b) {
				return errors.New("entry runs past its area")
			}
			if inum != 0 {
				return errors.New("values in separate inodes (ea_inode) are not read")
			}
			prefix, ok := xattrPrefixes[index]
			if !ok {
				return fmt.Errorf("unknown name index %d", index)
			}
			if off+vsize > len(values) {
				return errors.New("value runs past its area")
			}
			name := prefix + string(b[i+16:i+16+nameLen])
			v := values[off : off+vsize]
			if index == 2 || index == 3 {
				if pv, err := ext4ACLToXattr(v); err == nil {
					v = pv
				}
			}
			if _, seen := out[name]; !seen {
				out[name] = string(v)
			}
			i += (16 + nameLen + 3) &^ 3
		}
		return nil
	}
	if body := 128 + extra; extra > 0 && body+4 <= int64(len(raw)) && le.Uint32(raw[body:]) == ext4XattrMagic {
		area := raw[body+4:]
		if err := entries(area, area); err != nil {
			return nil, err
		}
	}
	blk := int64(le.Uint32(raw[ext4InodeFileACL:])) | int64(le.Uint16(raw[ext4InodeFileACLHi:]))<<32
	if blk != 0 {
		b := make([]byte, s.blockSize)
		if _, err := r.ReadAt(b, blk*s.blockSize); err != nil {
			return nil, fmt.Errorf("block %d: %w", blk, err)
		}
		if le.Uint32(b) != ext4XattrMagic {
			return nil, fmt.Errorf("block %d is not an xattr block", blk)
		}
		if err := entries(b[32:], b); err != nil {
			return nil, err
		}
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}

// ext4ACLToXattr turns an ACL as ext4 stores it (version 1, short entries
// for the owner, group, mask and other) into the POSIX ACL xattr form
// (version 2, every entry with an id) the tree holds.
func ext4ACLToXattr(b []byte) ([]byte, error) {
	le := binary.LittleEndian
	if len(b) < 4 || le.Uint32(b) != 1 {
		return nil, errors.New("not an ext4 ACL")
	}
	out := make([]byte, 4, len(b)*2)
	le.PutUint32(out, 2)
	for i := 4; i < len(b); {
		if i+4 > len(b) {
			return nil, errors.New("truncated ext4 ACL")
		}
		tag, perm := le.Uint16(b[i:]), le.Uint16(b[i+2:])
		id := uint32(0xFFFFFFFF)
		i += 4
		if tag == 0x02 || tag == 0x08 { // ACL_USER, ACL_GROUP carry an id
			if i+4 > len(b) {
				return nil, errors.New("truncated ext4 ACL")
			}
			id = le.Uint32(b[i:])
			i += 4
		}
		var e [8]byte
		le.PutUint16(e[0:], tag)
		le.PutUint16(e[2:], perm)
		le.PutUint32(e[4:], id)
		out = append(out, e[:]...)
	}
	return out, nil
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

// recordOf reads the embedded record from the root file system.
func recordOf(ctx context.Context, r io.ReaderAt, size int64, root disk.Partition, entries []*rootfs.Entry) []byte {
	e := findEntry(entries, rootfs.RecordPath)
	if e == nil || e.Type != rootfs.TypeRegular || e.Size > maxRecord {
		return nil
	}
	fsys, err := dext4.Read(&storage{r: r, size: size}, root.Size, root.Start, 512)
	if err != nil {
		return nil
	}
	data, err := fsys.ReadFile(strings.TrimPrefix(rootfs.RecordPath, "/"))
	if err != nil {
		return nil
	}
	return data
}

func findEntry(entries []*rootfs.Entry, p string) *rootfs.Entry {
	i := sort.Search(len(entries), func(i int) bool { return entries[i].Path >= p })
	if i < len(entries) && entries[i].Path == p {
		return entries[i]
	}
	return nil
}

func removeEntry(entries []*rootfs.Entry, e *rootfs.Entry) []*rootfs.Entry {
	out := entries[:0:0]
	for _, x := range entries {
		if x != e {
			out = append(out, x)
		}
	}
	rootfs.SetNlink(out)
	return out
}

// recordPaths is the set of paths the record names; empty when there is
// no record or it does not parse.
func recordPaths(record []byte) map[string]bool {
	out, _ := treePaths(record)
	return out
}

// treePaths is the set of paths a stamp record names, and whether record
// is one: only then does it list the whole tree, so that what an image
// holds beyond it is the output's own.
func treePaths(record []byte) (map[string]bool, bool) {
	var r struct {
		APIVersion string
		Entries    []struct{ Path string }
	}
	out := map[string]bool{}
	if json.Unmarshal(record, &r) != nil {
		return out, false
	}
	for _, e := range r.Entries {
		out[e.Path] = true
	}
	return out, strings.HasPrefix(r.APIVersion, "stamp.dev/")
}

// readFile writes the size bytes of inode ino (raw) to w, following its extent
// tree: holes and unwritten extents read as zeros, as the kernel reads them.
// onRun, when set, is told where each run of the file's blocks lies.
func (s *ext4Super) readFile(ctx context.Context, r io.ReaderAt, ino uint32, raw []byte, size int64, w io.Writer, buf []byte, onRun func(block, blocks int64)) error {
	le := binary.LittleEndian
	if le.Uint32(raw[ext4InodeFlags:])&ext4ExtentsFlag == 0 {
		return fmt.Errorf("inode %d does not use extents", ino)
	}
	type run struct{ logical, physical, blocks int64 }
	var runs []run
	var walk func(node []byte, depth int) error
	walk = func(node []byte, depth int) error {
		if len(node) < 12 || le.Uint16(node) != ext4ExtentMagic || depth > 5 {
			return fmt.Errorf("inode %d: bad extent tree node", ino)
		}
		n, d := int(le.Uint16(node[2:])), int(le.Uint16(node[6:]))
		if 12+12*n > len(node) {
			return fmt.Errorf("inode %d: extent node holds more entries than fit", ino)
		}
		for i := 0; i < n; i++ {
			e := node[12+12*i:]
			if d == 0 {
				l := int64(le.Uint16(e[4:]))
				if l > ext4MaxExtentLen {
					// An unwritten extent reads as zeros, like a hole.
					continue
				}
				phys := int64(le.Uint16(e[6:]))<<32 | int64(le.Uint32(e[8:]))
				runs = append(runs, run{int64(le.Uint32(e[0:])), phys, l})
				continue
			}
			leaf := int64(le.Uint32(e[4:])) | int64(le.Uint16(e[8:]))<<32
			child := make([]byte, s.blockSize)
			if _, err := r.ReadAt(child, leaf*s.blockSize); err != nil {
				return fmt.Errorf("inode %d: extent block %d: %w", ino, leaf, err)
			}
			if err := walk(child, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(raw[ext4InodeBlock:ext4InodeBlock+60], 0); err != nil {
		return err
	}
	sort.Slice(runs, func(a, b int) bool { return runs[a].logical < runs[b].logical })
	var pos int64 // bytes written so far
	emit := func(src io.Reader, n int64) error {
		for n > 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			k := min(n, int64(len(buf)))
			if _, err := io.ReadFull(src, buf[:k]); err != nil {
				return err
			}
			if _, err := w.Write(buf[:k]); err != nil {
				return err
			}
			n -= k
			pos += k
		}
		return nil
	}
	for _, rn := range runs {
		at := rn.logical * s.blockSize
		if at >= size {
			break
		}
		if at > pos {
			if err := emit(zeroReader{}, at-pos); err != nil {
				return err
			}
		} else if at < pos {
			return fmt.Errorf("inode %d: extents overlap at block %d", ino, rn.logical)
		}
		if onRun != nil {
			onRun(rn.physical, rn.blocks)
		}
		n := min(rn.blocks*s.blockSize, size-pos)
		if err := emit(io.NewSectionReader(r, rn.physical*s.blockSize, n), n); err != nil {
			return fmt.Errorf("inode %d: %w", ino, err)
		}
	}
	if pos < size {
		return emit(zeroReader{}, size-pos)
	}
	return nil
}

// zeroReader reads zeros without end: the content of a hole.
type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
