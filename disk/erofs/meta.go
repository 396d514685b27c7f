package erofs

import (
	"fmt"

	"github.com/stamp-dev/stamp/rootfs"
)

// slot is the unit inodes are placed in: an inode's nid is its offset in
// the metadata in slots.
const slot = 1 << slotBits

// recordSize is what a node takes in the metadata: the inode, its xattrs,
// then its indexes (8-byte aligned) or its tail.
func (n *node) recordSize() int64 {
	if n.index != nil {
		return align(n.headerSize(), 8) + int64(len(n.index))
	}
	return n.headerSize() + int64(len(n.tail))
}

// metaLayout places records in the metadata area.
type metaLayout struct {
	end int64 // the first free byte after every record, slot-aligned
	// gaps holds the starts of the free ends of blocks that a record did
	// not fit, by their size in slots, oldest first.
	gaps [blockSize / slot][]int64
}

// layoutMeta gives every node its place, and so its nid: the root first
// (after the empty slot 0, so no inode is number 0, which user space takes
// for a deleted entry), then the others in byte order of the path. A
// record of a block or less never crosses a block boundary, which a tail
// must not; it goes into the smallest gap left at the end of an earlier
// block that holds it, else at the end, in a new block when the current
// one has too little room left (leaving a gap). A longer record starts at
// the end.
func layoutMeta(p *plan) (*metaLayout, error) {
	m := &metaLayout{end: slot}
	for i, n := range p.nodes {
		off := m.place(n.recordSize())
		n.nid = uint64(off / slot)
		if i == 0 && n.nid > maxRootNid {
			return nil, fmt.Errorf("erofs: the root inode at nid %d is past the superblock's 16 bits", n.nid)
		}
	}
	return m, nil
}

func (m *metaLayout) place(size int64) int64 {
	need := align(size, slot)
	if need <= blockSize {
		for k := need / slot; k < int64(len(m.gaps)); k++ {
			if g := m.gaps[k]; len(g) > 0 {
				off := g[0]
				m.gaps[k] = g[1:]
				m.addGap(off+need, k*slot-need)
				return off
			}
		}
		if room := blockSize - m.end%blockSize; room < need {
			m.addGap(m.end, room)
			m.end += room
		}
	}
	off := m.end
	m.end += need
	return off
}

func (m *metaLayout) addGap(off, size int64) {
	if size >= slot && size < blockSize {
		m.gaps[size/slot] = append(m.gaps[size/slot], off)
	}
}

// encodeMeta encodes every node's record at its place, in whole blocks.
func encodeMeta(p *plan, end int64) []byte {
	buf := make([]byte, align(end, blockSize))
	for _, n := range p.nodes {
		b := buf[int64(n.nid)*slot:]
		n.encodeInode(b)
		h := n.headerSize()
		copy(b[n.isize:], n.xattrs)
		if n.index != nil {
			copy(b[align(h, 8):], n.index)
		} else {
			copy(b[h:], n.tail)
		}
	}
	return buf
}

// encodeInode writes the compact or extended inode.
func (n *node) encodeInode(b []byte) {
	in := n.in
	mode := uint16(unixType(in.Type) | in.Perm&0o7777)
	icount := uint16(0)
	if len(n.xattrs) > 0 {
		icount = uint16(1 + (len(n.xattrs)-xattrIbodyHeaderSize)/4)
	}
	var u uint32
	switch {
	case in.Type == rootfs.TypeChar || in.Type == rootfs.TypeBlock:
		u = encodeDev(in.Major, in.Minor)
	case in.Type == rootfs.TypeFifo || in.Type == rootfs.TypeSocket:
	case n.layout == layoutCompressionLegacy || n.layout == layoutCompression:
		u = uint32(n.blocks)
	case n.size > 0:
		u = n.blkaddr
	}
	if n.isize == compactInodeSize {
		le.PutUint16(b[0:], uint16(inodeCompact|n.layout<<1))
		le.PutUint16(b[2:], icount)
		le.PutUint16(b[4:], mode)
		le.PutUint16(b[6:], uint16(n.nlink))
		le.PutUint32(b[8:], uint32(n.size))
		le.PutUint32(b[16:], u)
		le.PutUint32(b[20:], n.ino)
		le.PutUint16(b[24:], uint16(in.UID))
		le.PutUint16(b[26:], uint16(in.GID))
		return
	}
	le.PutUint16(b[0:], uint16(inodeExtended|n.layout<<1))
	le.PutUint16(b[2:], icount)
	le.PutUint16(b[4:], mode)
	le.PutUint64(b[8:], uint64(n.size))
	le.PutUint32(b[16:], u)
	le.PutUint32(b[20:], n.ino)
	le.PutUint32(b[24:], in.UID)
	le.PutUint32(b[28:], in.GID)
	le.PutUint64(b[32:], uint64(in.MTime.Unix()))
	le.PutUint32(b[40:], uint32(in.MTime.Nanosecond()))
	le.PutUint32(b[44:], n.nlink)
}

// superblock is block 0: the superblock at byte 1024, checksummed.
func (w *writer) superblock(metaBlkaddr, blocks uint32) []byte {
	blk := make([]byte, blockSize)
	sb := blk[superOffset:]
	le.PutUint32(sb[0:], superMagic)
	le.PutUint32(sb[8:], featureSBChecksum|featureMTime)
	sb[12] = blockBits
	le.PutUint16(sb[14:], uint16(w.p.nodes[0].nid))
	le.PutUint64(sb[16:], uint64(len(w.p.nodes)))
	le.PutUint64(sb[24:], uint64(w.o.Epoch.Unix()))
	le.PutUint32(sb[32:], uint32(w.o.Epoch.Nanosecond()))
	le.PutUint32(sb[36:], blocks)
	le.PutUint32(sb[40:], metaBlkaddr)
	copy(sb[48:64], w.o.UUID[:])
	copy(sb[64:80], w.o.Label)
	if w.summary.Compressed > 0 {
		le.PutUint32(sb[80:], featureLZ4ZeroPadding)
	}
	le.PutUint32(sb[4:], superChecksum(blk))
	return blk
}
