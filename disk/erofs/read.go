package erofs

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/disk/erofs/lz4"
	"github.com/stamp-dev/stamp/rootfs"
)

// Fact is one named value of an image's structure.
type Fact struct{ Key, Value string }

// Region is a named byte range of an image. It has the shape of
// formats.Region, which converts from it.
type Region struct {
	Name         string
	Offset, Size int64
}

// Super is what a reader shows of an EROFS superblock, and what it needs to
// find the rest.
type Super struct {
	UUID, Label string
	// Facts are the superblock's fields by name, in on-disk order.
	Facts []Fact
	// Blocks is the image's size in blocks, as the superblock says.
	Blocks int64

	featureCompat, featureIncompat uint32
	rootNid                        uint64
	inos                           uint64
	buildTime                      time.Time
	metaBlkaddr, xattrBlkaddr      int64
}

// Features this reader knows; an image with another incompatible one is
// refused, as the kernel refuses it.
const readableIncompat = featureLZ4ZeroPadding

// ReadSuper reads and checks the superblock of the EROFS image r holds.
func ReadSuper(r io.ReaderAt) (*Super, error) {
	blk := make([]byte, blockSize)
	if _, err := r.ReadAt(blk, 0); err != nil {
		return nil, fmt.Errorf("erofs superblock: %w", err)
	}
	sb := blk[superOffset:]
	if le.Uint32(sb[0:]) != superMagic {
		return nil, errors.New("erofs superblock: no EROFS magic")
	}
	if sb[12] != blockBits {
		return nil, fmt.Errorf("erofs superblock: block size 2^%d; only 4 KiB blocks are read", sb[12])
	}
	s := &Super{
		featureCompat:   le.Uint32(sb[8:]),
		featureIncompat: le.Uint32(sb[80:]),
		rootNid:         uint64(le.Uint16(sb[14:])),
		inos:            le.Uint64(sb[16:]),
		buildTime:       time.Unix(int64(le.Uint64(sb[24:])), int64(le.Uint32(sb[32:]))).UTC(),
		Blocks:          int64(le.Uint32(sb[36:])),
		metaBlkaddr:     int64(le.Uint32(sb[40:])),
		xattrBlkaddr:    int64(le.Uint32(sb[44:])),
		UUID:            uuidString(sb[48:64]),
		Label:           strings.TrimRight(string(sb[64:80]), "\x00"),
	}
	if s.featureCompat&featureSBChecksum != 0 {
		want := le.Uint32(sb[4:])
		le.PutUint32(sb[4:], 0)
		if got := superChecksum(blk); got != want {
			return nil, fmt.Errorf("erofs superblock: checksum %#08x, the block sums to %#08x", want, got)
		}
		le.PutUint32(sb[4:], want)
	}
	if extra := s.featureIncompat &^ readableIncompat; extra != 0 {
		return nil, fmt.Errorf("erofs superblock: incompatible features %#x that this reader does not know", extra)
	}
	if sb[13] != 0 {
		return nil, fmt.Errorf("erofs superblock: %d extension slots, which this reader does not know", sb[13])
	}
	s.Facts = []Fact{
		{"checksum", fmt.Sprintf("%#08x", le.Uint32(sb[4:]))},
		{"features-compat", fmt.Sprintf("%#x", s.featureCompat)},
		{"block-size", strconv.Itoa(blockSize)},
		{"root-nid", strconv.FormatUint(s.rootNid, 10)},
		{"inodes", strconv.FormatUint(s.inos, 10)},
		{"build-time", strconv.FormatInt(s.buildTime.Unix(), 10)},
		{"build-time-nsec", strconv.Itoa(s.buildTime.Nanosecond())},
		{"blocks", strconv.FormatInt(s.Blocks, 10)},
		{"meta-blkaddr", strconv.FormatInt(s.metaBlkaddr, 10)},
		{"xattr-blkaddr", strconv.FormatInt(s.xattrBlkaddr, 10)},
		{"uuid", s.UUID},
		{"label", s.Label},
		{"features-incompat", fmt.Sprintf("%#x", s.featureIncompat)},
		{"lz4-max-distance", strconv.Itoa(int(le.Uint16(sb[84:])))},
	}
	return s, nil
}

func uuidString(b []byte) string {
	h := hex.EncodeToString(b)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// Regions names the superblock and the metadata area.
func (s *Super) Regions(size int64) []Region {
	out := []Region{{Name: "erofs superblock", Offset: superOffset, Size: superSize}}
	if meta := s.metaBlkaddr * blockSize; meta < size {
		out = append(out, Region{Name: "erofs metadata (inodes, xattrs, indexes, tails)", Offset: meta, Size: min(size, s.Blocks*blockSize) - meta})
	}
	return out
}

// Limits of what a reader believes, so a damaged image fails rather than
// exhausts memory.
const (
	maxDepth   = 4096
	maxEntries = 1 << 26
)

// reader reads one image.
type reader struct {
	ctx   context.Context
	r     io.ReaderAt
	size  int64
	sb    *Super
	data  []Region
	buf   []byte
	dirs  map[uint64]bool
	count int
	// budget is how many more bytes of content the image can hold: a
	// cluster decompresses to at most 255 times its size, so a damaged
	// image whose indexes share clusters cannot make a reader hash
	// without end.
	budget int64
}

// spend takes n bytes of content from the budget.
func (rd *reader) spend(n int64) error {
	if rd.budget -= n; rd.budget < 0 {
		return fmt.Errorf("more content than an image of %d bytes can hold", rd.size)
	}
	return nil
}

// inode is an inode as read.
type inode struct {
	nid     uint64
	off     int64 // where it starts
	isize   int64
	xsize   int64
	layout  int
	mode    uint32
	nlink   uint32
	size    int64
	u       uint32
	uid     uint32
	gid     uint32
	mtime   time.Time
	rootfsT rootfs.Type
}

// Read reads every entry of the image, hashing file contents, and returns
// them as the read-only view a tree read back is (rootfs.SealedOf: its Open
// has no content to give). Hard links are the entries of one nid. It also
// returns where each file's data lies, so an offset names the file.
func Read(ctx context.Context, r io.ReaderAt, size int64, sb *Super) (*rootfs.Sealed, []Region, error) {
	rd := &reader{ctx: ctx, r: r, size: size, sb: sb, buf: make([]byte, blockSize), dirs: map[uint64]bool{}, budget: 256*size + 1<<20}
	if sb.Blocks*blockSize > size {
		return nil, nil, fmt.Errorf("erofs: the superblock says %d blocks, the image holds %d bytes", sb.Blocks, size)
	}
	byNid := map[uint64]*rootfs.Inode{}
	var out []*rootfs.Entry
	var walk func(dir string, nid, parent uint64, depth int) error
	walk = func(dir string, nid, parent uint64, depth int) error {
		if depth > maxDepth {
			return fmt.Errorf("erofs: %s: directories nested deeper than %d", dir, maxDepth)
		}
		if rd.dirs[nid] {
			return fmt.Errorf("erofs: %s: directory nid %d is reached twice", dir, nid)
		}
		rd.dirs[nid] = true
		ino, err := rd.inode(nid)
		if err != nil {
			return fmt.Errorf("erofs: %s: %w", dir, err)
		}
		if ino.rootfsT != rootfs.TypeDir {
			return fmt.Errorf("erofs: %s: nid %d is a %s, not a directory", dir, nid, ino.rootfsT)
		}
		in, err := rd.entryInode(dir, ino)
		if err != nil {
			return err
		}
		out = append(out, &rootfs.Entry{Path: dir, Inode: in})
		ents, err := rd.readDir(dir, ino)
		if err != nil {
			return err
		}
		for _, d := range ents {
			if err := ctx.Err(); err != nil {
				return err
			}
			switch d.name {
			case ".":
				if d.nid != nid {
					return fmt.Errorf("erofs: %s: \".\" names nid %d, not its own %d", dir, d.nid, nid)
				}
				continue
			case "..":
				if d.nid != parent {
					return fmt.Errorf("erofs: %s: \"..\" names nid %d, not its parent's %d", dir, d.nid, parent)
				}
				continue
			}
			p := path.Join(dir, d.name)
			if rd.count++; rd.count > maxEntries {
				return fmt.Errorf("erofs: more than %d entries", maxEntries)
			}
			if d.ftype == ftDir {
				if err := walk(p, d.nid, nid, depth+1); err != nil {
					return err
				}
				continue
			}
			if in := byNid[d.nid]; in != nil {
				out = append(out, &rootfs.Entry{Path: p, Inode: in})
				continue
			}
			ino, err := rd.inode(d.nid)
			if err != nil {
				return fmt.Errorf("erofs: %s: %w", p, err)
			}
			if fileType(ino.rootfsT) != d.ftype {
				return fmt.Errorf("erofs: %s: the directory says file type %d, the inode is a %s", p, d.ftype, ino.rootfsT)
			}
			in, err := rd.entryInode(p, ino)
			if err != nil {
				return err
			}
			byNid[d.nid] = in
			out = append(out, &rootfs.Entry{Path: p, Inode: in})
		}
		return nil
	}
	if err := walk("/", sb.rootNid, sb.rootNid, 0); err != nil {
		return nil, nil, err
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Path < out[b].Path })
	tree, err := rootfs.SealedOf(out)
	if err != nil {
		return nil, nil, err
	}
	return tree, rd.data, nil
}

// readAt reads len(b) bytes at off, which must lie inside the image.
func (rd *reader) readAt(b []byte, off int64) error {
	if off < 0 || off+int64(len(b)) > rd.size {
		return fmt.Errorf("bytes %d to %d are outside the image of %d", off, off+int64(len(b)), rd.size)
	}
	if _, err := rd.r.ReadAt(b, off); err != nil {
		return fmt.Errorf("reading at %d: %w", off, err)
	}
	return nil
}

// inode reads the inode numbered nid.
func (rd *reader) inode(nid uint64) (*inode, error) {
	if nid > uint64(rd.size)/slot {
		return nil, fmt.Errorf("nid %d is past the image", nid)
	}
	off := rd.sb.metaBlkaddr*blockSize + int64(nid)*slot
	b := make([]byte, extendedInodeSize)
	if err := rd.readAt(b[:compactInodeSize], off); err != nil {
		return nil, fmt.Errorf("nid %d: %w", nid, err)
	}
	format := le.Uint16(b[0:])
	if format&^0xf != 0 {
		return nil, fmt.Errorf("nid %d: unknown inode format bits %#x", nid, format)
	}
	ino := &inode{nid: nid, off: off, layout: int(format >> 1 & 7), mode: uint32(le.Uint16(b[4:]))}
	if icount := int64(le.Uint16(b[2:])); icount > 0 {
		ino.xsize = xattrIbodyHeaderSize + 4*(icount-1)
	}
	switch format & 1 {
	case inodeCompact:
		ino.isize = compactInodeSize
		ino.nlink = uint32(le.Uint16(b[6:]))
		ino.size = int64(le.Uint32(b[8:]))
		ino.u = le.Uint32(b[16:])
		ino.uid, ino.gid = uint32(le.Uint16(b[24:])), uint32(le.Uint16(b[26:]))
		ino.mtime = rd.sb.buildTime
	default:
		ino.isize = extendedInodeSize
		if err := rd.readAt(b[compactInodeSize:], off+compactInodeSize); err != nil {
			return nil, fmt.Errorf("nid %d: %w", nid, err)
		}
		ino.size = int64(le.Uint64(b[8:]))
		ino.u = le.Uint32(b[16:])
		ino.uid, ino.gid = le.Uint32(b[24:]), le.Uint32(b[28:])
		nsec := le.Uint32(b[40:])
		if nsec >= 1e9 {
			return nil, fmt.Errorf("nid %d: mtime nanoseconds %d", nid, nsec)
		}
		ino.mtime = time.Unix(int64(le.Uint64(b[32:])), int64(nsec)).UTC()
		ino.nlink = le.Uint32(b[44:])
	}
	if ino.size < 0 || ino.size > rd.size*1024 && ino.size > 1<<40 {
		return nil, fmt.Errorf("nid %d: implausible size %d", nid, ino.size)
	}
	switch ino.mode & unixTypeMask {
	case unixRegular:
		ino.rootfsT = rootfs.TypeRegular
	case unixDir:
		ino.rootfsT = rootfs.TypeDir
	case unixSymlink:
		ino.rootfsT = rootfs.TypeSymlink
	case unixChar:
		ino.rootfsT = rootfs.TypeChar
	case unixBlock:
		ino.rootfsT = rootfs.TypeBlock
	case unixFifo:
		ino.rootfsT = rootfs.TypeFifo
	case unixSocket:
		ino.rootfsT = rootfs.TypeSocket
	default:
		return nil, fmt.Errorf("nid %d: unknown file type %#o", nid, ino.mode&unixTypeMask)
	}
	return ino, nil
}

// entryInode turns an inode into the tree's terms, reading its xattrs and
// content (hashed, for a regular file).
func (rd *reader) entryInode(p string, ino *inode) (*rootfs.Inode, error) {
	in := &rootfs.Inode{Type: ino.rootfsT, Perm: ino.mode & 0o7777, UID: ino.uid, GID: ino.gid, MTime: ino.mtime}
	xs, err := rd.xattrs(ino)
	if err != nil {
		return nil, fmt.Errorf("erofs: %s: xattrs: %w", p, err)
	}
	in.Xattrs = xs
	switch ino.rootfsT {
	case rootfs.TypeRegular:
		h := sha256.New()
		if err := rd.content(p, ino, h); err != nil {
			return nil, fmt.Errorf("erofs: %s: %w", p, err)
		}
		in.Size, in.Digest = ino.size, hex.EncodeToString(h.Sum(nil))
	case rootfs.TypeSymlink:
		if ino.size == 0 || ino.size > maxSymlinkTarget {
			return nil, fmt.Errorf("erofs: %s: a symlink target of %d bytes", p, ino.size)
		}
		var t strings.Builder
		if err := rd.content(p, ino, &t); err != nil {
			return nil, fmt.Errorf("erofs: %s: %w", p, err)
		}
		in.Target = t.String()
	case rootfs.TypeChar, rootfs.TypeBlock:
		in.Major, in.Minor = decodeDev(ino.u)
	}
	return in, nil
}

// xattrs reads an inode's xattrs: the shared ones its body names, then its
// own.
func (rd *reader) xattrs(ino *inode) (map[string]string, error) {
	if ino.xsize == 0 {
		return nil, nil
	}
	body := make([]byte, ino.xsize)
	if err := rd.readAt(body, ino.off+ino.isize); err != nil {
		return nil, err
	}
	out := map[string]string{}
	add := func(b []byte) (int, error) {
		if len(b) < xattrEntryHeaderSize {
			return 0, errors.New("an entry runs past its area")
		}
		nameLen, index, vsize := int(b[0]), b[1], int(le.Uint16(b[2:]))
		n := xattrEntryHeaderSize + nameLen + vsize
		if n > len(b) {
			return 0, errors.New("an entry runs past its area")
		}
		prefix, ok := xattrPrefix(index)
		if !ok {
			return 0, fmt.Errorf("unknown name index %d", index)
		}
		name := prefix + string(b[xattrEntryHeaderSize:xattrEntryHeaderSize+nameLen])
		if _, dup := out[name]; dup {
			return 0, fmt.Errorf("xattr %q twice", name)
		}
		out[name] = string(b[xattrEntryHeaderSize+nameLen : n])
		return int(align(int64(n), 4)), nil
	}
	shared := int(body[4])
	if xattrIbodyHeaderSize+4*shared > len(body) {
		return nil, fmt.Errorf("%d shared xattrs do not fit a body of %d bytes", shared, len(body))
	}
	for i := range shared {
		id := int64(le.Uint32(body[xattrIbodyHeaderSize+4*i:]))
		b := make([]byte, xattrEntryHeaderSize+maxNameLen+maxXattrValue)
		off := rd.sb.xattrBlkaddr*blockSize + id*4
		n := min(int64(len(b)), rd.size-off)
		if n < xattrEntryHeaderSize {
			return nil, fmt.Errorf("shared xattr %d is past the image", id)
		}
		if err := rd.readAt(b[:n], off); err != nil {
			return nil, err
		}
		if _, err := add(b[:n]); err != nil {
			return nil, fmt.Errorf("shared xattr %d: %w", id, err)
		}
	}
	for rest := body[xattrIbodyHeaderSize+4*shared:]; len(rest) > 0; {
		n, err := add(rest)
		if err != nil {
			return nil, err
		}
		rest = rest[min(n, len(rest)):]
	}
	return out, nil
}

// content writes an inode's data to w, whatever its layout.
func (rd *reader) content(p string, ino *inode, w io.Writer) error {
	if err := rd.spend(ino.size); err != nil {
		return err
	}
	switch ino.layout {
	case layoutFlatPlain, layoutFlatInline:
		return rd.flat(p, ino, w)
	case layoutCompressionLegacy, layoutCompression:
		return rd.compressed(p, ino, w)
	}
	return fmt.Errorf("data layout %d is not read", ino.layout)
}

// flat copies a flat inode's blocks, then, inline, its tail.
func (rd *reader) flat(p string, ino *inode, w io.Writer) error {
	full := ino.size / blockSize
	tail := ino.size % blockSize
	if ino.layout == layoutFlatPlain && tail > 0 {
		full, tail = full+1, 0
	}
	if full > 0 {
		start := int64(ino.u) * blockSize
		if int64(ino.u) >= rd.sb.Blocks || full > rd.sb.Blocks-int64(ino.u) {
			return fmt.Errorf("blocks %d to %d are past the image's %d", ino.u, int64(ino.u)+full, rd.sb.Blocks)
		}
		rd.data = append(rd.data, Region{Name: "erofs data of " + p, Offset: start, Size: full * blockSize})
		remain := ino.size - tail
		for off := int64(0); remain > 0; off += blockSize {
			if err := rd.ctx.Err(); err != nil {
				return err
			}
			n := min(remain, blockSize)
			if err := rd.readAt(rd.buf[:n], start+off); err != nil {
				return err
			}
			if _, err := w.Write(rd.buf[:n]); err != nil {
				return err
			}
			remain -= n
		}
	}
	if tail > 0 {
		at := ino.off + ino.isize + ino.xsize
		if at%blockSize+tail > blockSize {
			return fmt.Errorf("inline data of %d bytes crosses a block boundary", tail)
		}
		if err := rd.readAt(rd.buf[:tail], at); err != nil {
			return err
		}
		if _, err := w.Write(rd.buf[:tail]); err != nil {
			return err
		}
	}
	return nil
}

// head is where an extent of a compressed file starts, as its logical
// cluster's index says.
type head struct {
	start int64 // in the file
	plain bool
	pblk  int64
}

// compressed decompresses a compressed inode: its heads, in order, each
// extent running to the next head's start or the file's end.
func (rd *reader) compressed(p string, ino *inode, w io.Writer) error {
	if ino.size == 0 {
		return nil
	}
	heads, err := rd.heads(ino)
	if err != nil {
		return err
	}
	cluster := make([]byte, blockSize)
	var out []byte
	pos := int64(0)
	for i, h := range heads {
		if err := rd.ctx.Err(); err != nil {
			return err
		}
		if h.start != pos {
			return fmt.Errorf("an extent starts at %d, the one before ends at %d", h.start, pos)
		}
		end := ino.size
		if i+1 < len(heads) {
			end = min(heads[i+1].start, ino.size)
		}
		if end <= h.start {
			if h.start == ino.size {
				break
			}
			return fmt.Errorf("extent at %d is empty", h.start)
		}
		n := end - h.start
		if h.pblk < 0 || h.pblk >= rd.sb.Blocks {
			return fmt.Errorf("the cluster of the extent at %d is block %d, past the image's %d", h.start, h.pblk, rd.sb.Blocks)
		}
		if err := rd.readAt(cluster, h.pblk*blockSize); err != nil {
			return err
		}
		rd.data = append(rd.data, Region{Name: "erofs data of " + p, Offset: h.pblk * blockSize, Size: blockSize})
		if h.plain {
			if n > blockSize {
				return fmt.Errorf("a plain extent of %d bytes at %d is longer than its cluster", n, h.start)
			}
			if _, err := w.Write(cluster[:n]); err != nil {
				return err
			}
		} else {
			if n > 255*blockSize {
				return fmt.Errorf("an extent of %d bytes at %d is more than one cluster decompresses to", n, h.start)
			}
			if cap(out) < int(n) {
				out = make([]byte, n)
			}
			// With zero padding the block ends the cluster and the zeros
			// before it are skipped; without, it starts the cluster and
			// ends where the output is full.
			decode := lz4.DecompressPrefix
			src := cluster
			if rd.sb.featureIncompat&featureLZ4ZeroPadding != 0 {
				k := 0
				for k < len(src) && src[k] == 0 {
					k++
				}
				src, decode = src[k:], lz4.Decompress
			}
			if err := decode(src, out[:n]); err != nil {
				return fmt.Errorf("the extent at %d: %w", h.start, err)
			}
			if _, err := w.Write(out[:n]); err != nil {
				return err
			}
		}
		pos = end
	}
	if pos != ino.size {
		return fmt.Errorf("the extents end at %d, the file at %d", pos, ino.size)
	}
	return nil
}

// heads reads a compressed inode's indexes into the heads of its extents.
func (rd *reader) heads(ino *inode) ([]head, error) {
	hdrAt := align(ino.off+ino.isize+ino.xsize, 8)
	hdr := make([]byte, mapHeaderSize)
	if err := rd.readAt(hdr, hdrAt); err != nil {
		return nil, err
	}
	advise := le.Uint16(hdr[4:])
	if ino.layout == layoutCompressionLegacy && rd.sb.featureIncompat&^featureLZ4ZeroPadding == 0 {
		// Without big clusters or tail packing in the image, the kernel
		// takes a legacy inode's header as all defaults.
		advise, hdr[6], hdr[7] = 0, 0, 0
	}
	if hdr[6]&0xf != compressionLZ4 {
		return nil, fmt.Errorf("compression algorithm %d; only LZ4 is read", hdr[6]&0xf)
	}
	if hdr[7]&7 != 0 {
		return nil, fmt.Errorf("logical clusters of 2^%d bytes; only 4 KiB ones are read", 12+hdr[7]&7)
	}
	if advise&^adviseCompacted2B != 0 {
		return nil, fmt.Errorf("compression options %#x (big or inline clusters) are not read", advise)
	}
	nl := (ino.size + blockSize - 1) / blockSize
	if nl > rd.size/2 {
		return nil, fmt.Errorf("%d logical clusters cannot have indexes in an image of %d bytes", nl, rd.size)
	}
	var heads []head
	if ino.layout == layoutCompressionLegacy {
		idx := make([]byte, legacyIndexSize*nl)
		if err := rd.readAt(idx, hdrAt+mapHeaderSize+legacyHeaderPadding); err != nil {
			return nil, err
		}
		for lc := int64(0); lc < nl; lc++ {
			d := idx[legacyIndexSize*lc:]
			switch typ := le.Uint16(d[0:]) & 3; typ {
			case lclusterTypePlain, lclusterTypeHead:
				ofs := int64(le.Uint16(d[2:]))
				if ofs >= blockSize {
					return nil, fmt.Errorf("logical cluster %d: offset %d", lc, ofs)
				}
				heads = append(heads, head{start: lc*blockSize + ofs, plain: typ == lclusterTypePlain, pblk: int64(le.Uint32(d[4:]))})
			case lclusterTypeNonhead:
				if le.Uint16(d[4:])&d0CBlkCnt != 0 {
					return nil, fmt.Errorf("logical cluster %d: a big cluster's count without big clusters", lc)
				}
			default:
				return nil, fmt.Errorf("logical cluster %d: type %d", lc, typ)
			}
		}
	} else {
		var err error
		if heads, err = rd.compactHeads(hdrAt+mapHeaderSize, nl, advise&adviseCompacted2B != 0); err != nil {
			return nil, err
		}
	}
	if len(heads) == 0 || heads[0].start != 0 {
		return nil, errors.New("no extent starts at the file's start")
	}
	return heads, nil
}

// compactHeads decodes compacted indexes: packs of 2 logical clusters in 8
// bytes (16 bits each) or of 16 in 32 bytes (14 bits each), each pack
// ending in a block address; a head's physical cluster is that address
// plus one for itself and one for every head before it in the pack.
func (rd *reader) compactHeads(at, nl int64, twoB bool) ([]head, error) {
	initial4b := (32 - at%32) / 4
	if initial4b == 8 {
		initial4b = 0
	}
	var n2b int64
	if initial4b > nl {
		initial4b = 0
	} else if twoB {
		n2b = (nl - initial4b) / 16 * 16
	}
	end4b := nl - initial4b - n2b
	var heads []head
	lc := int64(0)
	pack := func(vcnt, bytes int64) error {
		b := make([]byte, bytes)
		if err := rd.readAt(b, at); err != nil {
			return err
		}
		at += bytes
		bits := (bytes*8 - 32) / vcnt
		base := int64(le.Uint32(b[bytes-4:]))
		nblk := int64(0)
		for i := int64(0); i < vcnt && lc < nl; i, lc = i+1, lc+1 {
			pos := bits * i
			v := uint32(b[pos/8]) | uint32(b[pos/8+1])<<8 | uint32(b[min(pos/8+2, bytes-1)])<<16
			v >>= pos % 8
			lo, typ := int64(v&(blockSize-1)), (v>>blockBits)&3
			switch typ {
			case lclusterTypePlain, lclusterTypeHead:
				nblk++
				heads = append(heads, head{start: lc*blockSize + lo, plain: typ == lclusterTypePlain, pblk: base + nblk})
			case lclusterTypeNonhead:
			default:
				return fmt.Errorf("logical cluster %d: type %d", lc, typ)
			}
		}
		return nil
	}
	for ; initial4b > 0; initial4b -= 2 {
		if err := pack(2, 8); err != nil {
			return nil, err
		}
	}
	for ; n2b > 0; n2b -= 16 {
		if err := pack(16, 32); err != nil {
			return nil, err
		}
	}
	for ; end4b > 0; end4b -= 2 {
		if err := pack(2, 8); err != nil {
			return nil, err
		}
	}
	return heads, nil
}

// dirEntry is one entry of a directory as read.
type dirEntry struct {
	name  string
	nid   uint64
	ftype uint8
}

// readDir reads a directory's entries, checking they are sorted.
func (rd *reader) readDir(p string, ino *inode) ([]dirEntry, error) {
	if ino.size > 1<<30 || ino.size > rd.size {
		return nil, fmt.Errorf("erofs: %s: a directory of %d bytes", p, ino.size)
	}
	var b strings.Builder
	if err := rd.content(p, ino, &b); err != nil {
		return nil, fmt.Errorf("erofs: %s: %w", p, err)
	}
	data := b.String()
	var out []dirEntry
	for blk := 0; blk < len(data); blk += blockSize {
		d := data[blk:min(blk+blockSize, len(data))]
		if len(d) < direntSize {
			return nil, fmt.Errorf("erofs: %s: a directory block of %d bytes", p, len(d))
		}
		first := int(le.Uint16([]byte(d[8:10])))
		if first < direntSize || first%direntSize != 0 || first > len(d) {
			return nil, fmt.Errorf("erofs: %s: directory block %d: first name at %d", p, blk/blockSize, first)
		}
		n := first / direntSize
		for i := range n {
			e := []byte(d[direntSize*i : direntSize*(i+1)])
			off := int(le.Uint16(e[8:]))
			end := len(d)
			if i+1 < n {
				end = int(le.Uint16([]byte(d[direntSize*(i+1)+8:])))
			}
			if off < first || end < off || end > len(d) {
				return nil, fmt.Errorf("erofs: %s: directory block %d: entry %d's name at %d to %d", p, blk/blockSize, i, off, end)
			}
			name := d[off:end]
			if i+1 == n {
				if z := strings.IndexByte(name, 0); z >= 0 {
					name = name[:z]
				}
			}
			if name == "" || len(name) > maxNameLen || strings.ContainsAny(name, "/\x00") {
				return nil, fmt.Errorf("erofs: %s: directory entry %q", p, name)
			}
			if len(out) > 0 && out[len(out)-1].name >= name {
				return nil, fmt.Errorf("erofs: %s: entry %q after %q: not sorted", p, name, out[len(out)-1].name)
			}
			out = append(out, dirEntry{name: name, nid: le.Uint64(e[0:]), ftype: e[10]})
		}
	}
	return out, nil
}

// ReadFile reads the content of the regular file at p (absolute), following
// no symlinks.
func ReadFile(r io.ReaderAt, size int64, sb *Super, p string) ([]byte, error) {
	rd := &reader{ctx: context.Background(), r: r, size: size, sb: sb, buf: make([]byte, blockSize), budget: 256*size + 1<<20}
	nid := sb.rootNid
	for _, name := range strings.Split(strings.Trim(path.Clean(p), "/"), "/") {
		if name == "" {
			continue
		}
		ino, err := rd.inode(nid)
		if err != nil {
			return nil, err
		}
		if ino.rootfsT != rootfs.TypeDir {
			return nil, fmt.Errorf("%s: not a directory on the way", p)
		}
		ents, err := rd.readDir(p, ino)
		if err != nil {
			return nil, err
		}
		i := sort.Search(len(ents), func(i int) bool { return ents[i].name >= name })
		if i == len(ents) || ents[i].name != name {
			return nil, fmt.Errorf("%s: %w", p, rootfs.ErrNotExist)
		}
		nid = ents[i].nid
	}
	ino, err := rd.inode(nid)
	if err != nil {
		return nil, err
	}
	if ino.rootfsT != rootfs.TypeRegular {
		return nil, fmt.Errorf("%s: a %s, not a file", p, ino.rootfsT)
	}
	var b bytes.Buffer
	if err := rd.content(p, ino, &b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
