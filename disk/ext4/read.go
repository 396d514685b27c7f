package ext4

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	dext4 "github.com/diskfs/go-diskfs/filesystem/ext4"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/rootfs"
)

// Fact is one named value of a file system's structure.
type Fact struct{ Key, Value string }

// Region is a named byte range of a disk. A region made of equal items (an
// inode table) names the items, their size and the number of the first;
// ItemSize 0 means the region is not divided. It has the shape of
// formats.Region, which converts from it.
type Region struct {
	Name         string
	Offset, Size int64
	Item         string
	ItemSize     int64
	FirstItem    int64
}

// Super is what a reader shows of an ext4 superblock, and what locates
// offsets in its metadata.
type Super struct {
	UUID, Label string
	// Facts are the superblock's fields by name, in on-disk order.
	Facts           []Fact
	blockSize       int64
	inodeSize       int64
	inodesPerGroup  int64
	groups          int64
	descSize        int64
	gdtBlock        int64
	tables          [][3]int64 // per group: block bitmap, inode bitmap, inode table (blocks)
	inodeTableBytes int64
}

// ReadSuper reads the superblock and group descriptors of the ext4 file
// system r holds (a partition, from its first byte).
func ReadSuper(r io.ReaderAt) (*Super, error) {
	b := make([]byte, 1024)
	if _, err := r.ReadAt(b, 1024); err != nil {
		return nil, fmt.Errorf("ext4 superblock: %w", err)
	}
	le := binary.LittleEndian
	u32 := func(o int) uint64 { return uint64(le.Uint32(b[o:])) }
	u16 := func(o int) uint64 { return uint64(le.Uint16(b[o:])) }
	s := &Super{blockSize: 1024 << u32(24), inodeSize: int64(u16(88)), inodesPerGroup: int64(u32(40))}
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
	s.UUID = uuidString(b[104:120])
	s.Label = strings.TrimRight(string(b[120:136]), "\x00")
	s.inodeTableBytes = s.inodesPerGroup * s.inodeSize
	s.Facts = []Fact{
		{"uuid", s.UUID},
		{"label", s.Label},
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

// Regions names the superblock, group descriptors, bitmaps and inode tables
// of the file system that starts at base.
func (s *Super) Regions(base int64, prefix string) []Region {
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

// ReadFile reads the file at p (absolute) of the ext4 file system in the
// partition at start of the disk r of size bytes.
func ReadFile(r io.ReaderAt, size, start, psize int64, p string) ([]byte, error) {
	fsys, err := dext4.Read(disk.ReadOnly(r, size), psize, start, 512)
	if err != nil {
		return nil, err
	}
	return fsys.ReadFile(strings.TrimPrefix(p, "/"))
}

// Read reads every entry of the ext4 file system in the partition at
// start, hashing file contents, and returns them as the read-only view a
// tree read back is (rootfs.SealedOf: its Open has no content to give).
// Hard links are the non-directory entries that share an inode number. go-diskfs lists the directories; each inode is
// read here, once, straight from its table: go-diskfs's Stat walks the path
// from the root for every file, which is quadratic in a large directory, and
// it reads a file with a hole as if the hole were not there.
//
// It also returns where each file's data lies on the disk, so an offset in
// a data block names the file.
func Read(ctx context.Context, r io.ReaderAt, size, start, psize int64, sb *Super) (*rootfs.Sealed, []Region, error) {
	fsys, err := dext4.Read(disk.ReadOnly(r, size), psize, start, 512)
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
	tree, err := rootfs.SealedOf(out)
	if err != nil {
		return nil, nil, err
	}
	return tree, data, nil
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
	ext4MaxExtentLen    = 32768
)

// rawInode reads inode ino's bytes from its group's table.
func (s *Super) rawInode(r io.ReaderAt, ino uint32) ([]byte, error) {
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
func (s *Super) readInode(ctx context.Context, r io.ReaderAt, ino uint32, buf []byte, onRun func(block, blocks int64)) (*rootfs.Inode, error) {
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

// xattrPrefix is the name prefix of an ext4 name index, from the table the
// writer uses (fs/ext4/xattr.h).
func xattrPrefix(index uint8) (string, bool) {
	for _, p := range xattrPrefixes {
		if p.index == index {
			return p.prefix, true
		}
	}
	return "", false
}

// xattrs reads an inode's extended attributes: those in the inode after its
// extra fields, then those in its xattr block. ACLs are turned back into the
// xattr form the tree holds.
func (s *Super) xattrs(r io.ReaderAt, raw []byte, extra int64) (map[string]string, error) {
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
			prefix, ok := xattrPrefix(index)
			if !ok {
				return fmt.Errorf("unknown name index %d", index)
			}
			if off+vsize > len(values) {
				return errors.New("value runs past its area")
			}
			name := prefix + string(b[i+16:i+16+nameLen])
			v := values[off : off+vsize]
			if index == 2 || index == 3 {
				if pv, err := aclFromDisk(v); err == nil {
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
	if body := 128 + extra; extra > 0 && body+4 <= int64(len(raw)) && le.Uint32(raw[body:]) == xattrMagic {
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
		if le.Uint32(b) != xattrMagic {
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

// aclFromDisk turns an ACL as ext4 stores it (version 1, short entries
// for the owner, group, mask and other) into the POSIX ACL xattr form
// (version 2, every entry with an id) the tree holds.
func aclFromDisk(b []byte) ([]byte, error) {
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

// readFile writes the size bytes of inode ino (raw) to w, following its extent
// tree: holes and unwritten extents read as zeros, as the kernel reads them.
// onRun, when set, is told where each run of the file's blocks lies.
func (s *Super) readFile(ctx context.Context, r io.ReaderAt, ino uint32, raw []byte, size int64, w io.Writer, buf []byte, onRun func(block, blocks int64)) error {
	le := binary.LittleEndian
	if le.Uint32(raw[ext4InodeFlags:])&ext4ExtentsFlag == 0 {
		return fmt.Errorf("inode %d does not use extents", ino)
	}
	type run struct{ logical, physical, blocks int64 }
	var runs []run
	var walk func(node []byte, depth int) error
	walk = func(node []byte, depth int) error {
		if len(node) < 12 || le.Uint16(node) != extentMagic || depth > 5 {
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
