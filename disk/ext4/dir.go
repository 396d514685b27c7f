package ext4

import (
	"fmt"
	"sort"
)

// Directory entry file types (filetype feature).
const (
	ftRegular = 1
	ftDir     = 2
	ftChar    = 3
	ftBlock   = 4
	ftFifo    = 5
	ftSocket  = 6
	ftSymlink = 7
)

const (
	dirTailSize = 12 // struct ext4_dir_entry_tail, holds the block checksum
	leafSpace   = blockSize - dirTailSize
	// htreeSlack is the share of each leaf left free for later inserts, as
	// e2fsck -D leaves it (indexed_dir_slack_percentage = 20).
	htreeSlack = leafSpace * 20 / 100
	// dx limits with the 8-byte dx_tail that metadata_csum adds.
	dxRootLimit = (blockSize-12-12-8)/8 - 1
	dxNodeLimit = (blockSize-8)/8 - 1
	// lostFoundBlocks is what mke2fs preallocates for lost+found (16 KiB).
	lostFoundBlocks = 4
)

type dirent struct {
	name  string
	ino   uint32
	ftype uint8
}

func recLen(nameLen int) int { return (8 + nameLen + 3) &^ 3 }

// dirLayout is how a directory's entries are spread over its blocks.
type dirLayout struct {
	// Linear directories: blocks[i] is the index into ents where block i
	// starts ("." and ".." come first in block 0 and are not in ents).
	// Indexed directories: leaves, with ents sorted by hash.
	ents   []dirent
	starts []int
	// Indexed directories only.
	indexed bool
	hashes  []uint32 // dx hash of each leaf (leaf 0's is implicit)
	nodes   int      // interior index blocks (0 or more, one level at most)
	nblocks int      // total blocks
}

// layoutDir decides the blocks of a directory: one linear block when it
// fits, an htree otherwise. minBlocks pads a linear directory with empty
// blocks (lost+found), which also keeps it linear whatever its size.
func layoutDir(ents []dirent, seed [4]uint32, minBlocks int) (*dirLayout, error) {
	dotSize := recLen(1) + recLen(2)
	size := dotSize
	for _, d := range ents {
		size += recLen(len(d.name))
	}
	if minBlocks > 1 || size <= leafSpace {
		l := &dirLayout{ents: ents, starts: []int{0}}
		off := dotSize
		for i, d := range ents {
			r := recLen(len(d.name))
			if off+r > leafSpace {
				l.starts = append(l.starts, i)
				off = 0
			}
			off += r
		}
		l.nblocks = max(len(l.starts), minBlocks)
		return l, nil
	}
	return layoutHtree(ents, seed)
}

type hashed struct {
	dirent
	hash, minor uint32
}

func layoutHtree(ents []dirent, seed [4]uint32) (*dirLayout, error) {
	hs := make([]hashed, len(ents))
	for i, d := range ents {
		h, m := dxHash(d.name, seed)
		hs[i] = hashed{d, h, m}
	}
	sort.Slice(hs, func(i, j int) bool {
		a, b := &hs[i], &hs[j]
		if a.hash != b.hash {
			return a.hash < b.hash
		}
		if a.minor != b.minor {
			return a.minor < b.minor
		}
		return a.name < b.name
	})
	l := &dirLayout{indexed: true, ents: make([]dirent, len(hs))}
	left := 0
	prev := uint32(1) // no hash has its low bit set, so nothing matches it
	for i := range hs {
		l.ents[i] = hs[i].dirent
		r := recLen(len(hs[i].name))
		if r > left {
			l.starts = append(l.starts, i)
			h := hs[i].hash
			if h == prev {
				// Entries of one hash span two leaves; the low bit tells
				// a lookup to continue into this one.
				h |= 1
			}
			l.hashes = append(l.hashes, h)
			left = leafSpace
		}
		left -= r
		if left < htreeSlack {
			left = 0
		}
		prev = hs[i].hash
	}
	leaves := len(l.starts)
	if leaves > dxRootLimit {
		l.nodes = (leaves + dxNodeLimit - 1) / dxNodeLimit
		if l.nodes > dxRootLimit {
			return nil, fmt.Errorf("directory with %d entries needs more than two index levels (large_dir)", len(ents))
		}
	}
	l.nblocks = 1 + l.nodes + leaves
	return l, nil
}

// dirBlockWriter renders a directory's blocks in logical order.
type dirBlockWriter struct {
	ino, parent uint32
	seed        uint32 // the inode's checksum seed
	l           *dirLayout
	buf         [blockSize]byte
}

// block renders logical block i of the directory into the writer's buffer.
func (w *dirBlockWriter) block(i int) []byte {
	b := w.buf[:]
	clear(b)
	l := w.l
	if !l.indexed {
		end := len(l.ents)
		if i+1 < len(l.starts) {
			end = l.starts[i+1]
		}
		off := 0
		var last int
		if i == 0 {
			last = off
			off = putDirent(b, off, dirent{".", w.ino, ftDir})
			last = off
			off = putDirent(b, off, dirent{"..", w.parent, ftDir})
		}
		if i < len(l.starts) {
			for _, d := range l.ents[l.starts[i]:end] {
				last = off
				off = putDirent(b, off, d)
			}
		}
		if off == 0 {
			// An empty block: one unused entry spanning it.
			le16(b[4:], leafSpace)
		} else {
			le16(b[last+4:], uint16(leafSpace-last))
		}
		w.tail(b)
		return b
	}
	leaves := len(l.starts)
	switch {
	case i == 0:
		putDirent(b, 0, dirent{".", w.ino, ftDir})
		le32(b[12:], w.parent)
		le16(b[16:], blockSize-12)
		b[18], b[19] = 2, ftDir
		copy(b[20:], "..")
		// dx_root_info: reserved, hash version, info length, levels, flags
		b[28] = 1
		b[29] = 8
		if l.nodes > 0 {
			b[30] = 1
			children := make([]uint32, l.nodes)
			hashes := make([]uint32, l.nodes)
			for k := range children {
				children[k] = uint32(1 + k)
				hashes[k] = l.hashes[k*dxNodeLimit]
			}
			w.dx(b, 32, dxRootLimit, children, hashes)
		} else {
			children := make([]uint32, leaves)
			for k := range children {
				children[k] = uint32(1 + k)
			}
			w.dx(b, 32, dxRootLimit, children, l.hashes)
		}
	case i <= l.nodes:
		le16(b[4:], blockSize) // a fake empty entry covering the block
		first := (i - 1) * dxNodeLimit
		last := min(first+dxNodeLimit, leaves)
		children := make([]uint32, last-first)
		for k := range children {
			children[k] = uint32(1 + l.nodes + first + k)
		}
		w.dx(b, 8, dxNodeLimit, children, l.hashes[first:last])
	default:
		leaf := i - 1 - l.nodes
		end := len(l.ents)
		if leaf+1 < leaves {
			end = l.starts[leaf+1]
		}
		off, last := 0, 0
		for _, d := range l.ents[l.starts[leaf]:end] {
			last = off
			off = putDirent(b, off, d)
		}
		le16(b[last+4:], uint16(leafSpace-last))
		w.tail(b)
	}
	return b
}

// dx writes a count/limit header and entries at off, then the dx_tail
// checksum. hashes[0] is implicit (the count/limit takes its place).
func (w *dirBlockWriter) dx(b []byte, off, limit int, children, hashes []uint32) {
	le16(b[off:], uint16(limit))
	le16(b[off+2:], uint16(len(children)))
	le32(b[off+4:], children[0])
	for k := 1; k < len(children); k++ {
		le32(b[off+8*k:], hashes[k])
		le32(b[off+8*k+4:], children[k])
	}
	tail := off + limit*8
	c := crc32c(w.seed, b[:off+len(children)*8])
	c = crc32c(c, b[tail:tail+4])
	c = crc32c(c, []byte{0, 0, 0, 0})
	le32(b[tail+4:], c)
}

// tail writes the leaf checksum entry at the end of a block.
func (w *dirBlockWriter) tail(b []byte) {
	t := b[leafSpace:]
	le16(t[4:], dirTailSize)
	t[7] = 0xDE
	le32(t[8:], crc32c(w.seed, b[:leafSpace]))
}

func putDirent(b []byte, off int, d dirent) int {
	r := recLen(len(d.name))
	le32(b[off:], d.ino)
	le16(b[off+4:], uint16(r))
	b[off+6] = byte(len(d.name))
	b[off+7] = d.ftype
	copy(b[off+8:], d.name)
	return off + r
}
