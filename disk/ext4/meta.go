package ext4

import (
	"bytes"
	"fmt"

	"github.com/stamp-dev/stamp/rootfs"
)

// writeMetadata writes what depends on every block being placed: inode
// tables, bitmaps, group descriptors, the resize inode's blocks and the
// superblocks.
func (w *writer) writeMetadata() error {
	g, lay := w.g, w.lay
	inodes := make([]*node, w.p.maxIno+1)
	for _, n := range w.p.nodes {
		inodes[n.ino] = n
	}
	inodes[inoJournal] = w.journal

	descs := make([]groupDesc, g.groups)
	used := mergeRanges(append(append([]rng(nil), lay.used...), w.al.allocs...))
	var si superInfo
	table := make([]byte, uint64(g.itb)*blockSize)
	var bitmap [blockSize]byte
	ri := 0
	for gi := uint32(0); gi < g.groups; gi++ {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		d := &descs[gi]
		first := gi*g.ipg + 1
		nUsed := uint32(0)
		if w.p.maxIno >= first {
			nUsed = min(g.ipg, w.p.maxIno-first+1)
		}
		d.freeInodes = g.ipg - nUsed
		d.itableUnused = g.ipg - nUsed
		d.flags = bgInodeZeroed
		if nUsed == 0 {
			d.flags |= bgInodeUninit
		}
		if err := w.writeInodeTable(gi, d, inodes, nUsed, table); err != nil {
			return err
		}

		// Inode bitmap, with the bits past the group's inodes set.
		clear(bitmap[:])
		setBits(bitmap[:], 0, uint64(nUsed))
		setBits(bitmap[:], uint64(g.ipg), blockSize*8)
		d.ibCsum = crc32c(w.fsSeed, bitmap[:g.ipg/8])
		if err := w.writeIfNonZero(lay.ib[gi], bitmap[:]); err != nil {
			return err
		}
		if err := w.writeBlockBitmap(gi, d, used, &ri, bitmap[:]); err != nil {
			return err
		}
		si.freeBlocks += uint64(d.freeBlocks)
		si.freeInodes += d.freeInodes
	}

	if err := w.writeResizeBlocks(); err != nil {
		return err
	}
	return w.writeSuperblocks(descs, &si)
}

// writeInodeTable writes the blocks of group gi's inode table that hold
// its nUsed used inodes, using table as its buffer. inodes holds the node
// of every inode number, nil for none.
func (w *writer) writeInodeTable(gi uint32, d *groupDesc, inodes []*node, nUsed uint32, table []byte) error {
	first := gi*w.g.ipg + 1
	tb := table[:ceilDiv(uint64(nUsed)*inodeSize, blockSize)*blockSize]
	clear(tb)
	for k := uint32(0); k < nUsed; k++ {
		ino := first + k
		b := tb[k*inodeSize : (k+1)*inodeSize]
		n := inodes[ino]
		if n != nil && n.typ == rootfs.TypeDir {
			d.usedDirs++
		}
		w.encodeInode(b, ino, w.inodeFields(ino, n))
	}
	if len(tb) > 0 {
		return w.out.write(w.lay.it[gi], tb)
	}
	return nil
}

// writeBlockBitmap writes group gi's block bitmap, from the merged used
// ranges, with the bits past the group's blocks set. *ri is the first
// range that may reach into the group, and moves on as groups do.
func (w *writer) writeBlockBitmap(gi uint32, d *groupDesc, used []rng, ri *int, bitmap []byte) error {
	g := w.g
	clear(bitmap)
	start, nblk := g.groupStart(gi), g.groupBlocks(gi)
	var inUse uint64
	for *ri < len(used) && used[*ri].end() <= start {
		*ri++
	}
	for k := *ri; k < len(used) && used[k].start < start+nblk; k++ {
		s := max(used[k].start, start)
		e := min(used[k].end(), start+nblk)
		setBits(bitmap, s-start, e-start)
		inUse += e - s
	}
	setBits(bitmap, nblk, blockSize*8)
	d.freeBlocks = uint32(nblk - inUse)
	d.bbCsum = crc32c(w.fsSeed, bitmap[:g.bpg/8])
	return w.writeIfNonZero(w.lay.bb[gi], bitmap)
}

// writeSuperblocks writes the superblock and the group descriptors, and
// their copies in the backup groups.
func (w *writer) writeSuperblocks(descs []groupDesc, si *superInfo) error {
	g := w.g
	gdt := make([]byte, uint64(g.descBlocks)*blockSize)
	for gi := uint32(0); gi < g.groups; gi++ {
		w.descriptor(gdt[gi*descSize:], gi, &descs[gi])
	}
	si.overhead = w.lay.metaBlocks + uint64(g.journal)
	si.journalBlks = w.journal.iblock
	si.journalSize = w.journal.size
	w.summary.free = si.freeBlocks
	w.summary.freeInodes = si.freeInodes
	var sb [blockSize]byte
	for _, gi := range append([]uint32{0}, g.backupGroups()...) {
		clear(sb[:])
		w.superblock(sb[1024:2048], gi, si)
		at := g.groupStart(gi)
		if gi == 0 {
			// The primary superblock sits 1024 bytes into block 0, after
			// the boot sector space, which stays untouched.
			if err := w.out.flush(); err != nil {
				return err
			}
			if _, err := w.out.w.WriteAt(sb[1024:2048], 1024); err != nil {
				return fmt.Errorf("ext4: writing the superblock: %w", err)
			}
		} else {
			// Copies start at their group's first block.
			if err := w.out.write(at, append(append([]byte(nil), sb[1024:2048]...), make([]byte, blockSize-1024)...)); err != nil {
				return err
			}
		}
		if err := w.out.write(at+1, gdt); err != nil {
			return err
		}
	}
	return w.out.flush()
}

func (w *writer) writeIfNonZero(blk uint64, b []byte) error {
	if bytes.Equal(b, zeroBlock[:]) {
		return nil
	}
	return w.out.write(blk, b)
}

// inodeFields gives the fields of inode ino: a tree node, or one of the
// reserved inodes mke2fs fills the same way.
func (w *writer) inodeFields(ino uint32, n *node) *inodeFields {
	if n != nil {
		return n.fields()
	}
	switch ino {
	case inoBad:
		return &inodeFields{times: w.o.Epoch}
	case inoResize:
		f := &inodeFields{mode: 0x8000 | 0o600, links: 1, times: w.o.Epoch, extra: true,
			size:    (addrPerBlock*addrPerBlock + addrPerBlock + 12) * blockSize,
			sectors: (1 + uint64(w.g.rsvGDT)*uint64(1+len(w.g.backupGroups()))) * (blockSize / 512)}
		le32(f.iblock[13*4:], uint32(w.dind))
		return f
	}
	return &inodeFields{timeless: true}
}

// writeResizeBlocks writes the resize inode's double-indirect block and,
// in each reserved GDT block of group 0, the list of its copies in the
// backup groups: the map resize2fs follows to grow the GDT.
func (w *writer) writeResizeBlocks() error {
	g := w.g
	var dind, ind [blockSize]byte
	backups := g.backupGroups()
	for j := uint32(0); j < g.rsvGDT; j++ {
		pblk := uint64(1 + g.descBlocks + j)
		le32(dind[((g.descBlocks+j)%addrPerBlock)*4:], uint32(pblk))
		clear(ind[:])
		for k, grp := range backups {
			le32(ind[k*4:], uint32(pblk+g.groupStart(grp)))
		}
		if err := w.writeIfNonZero(pblk, ind[:]); err != nil {
			return err
		}
	}
	return w.out.write(w.dind, dind[:])
}

// setBits sets bits [from, to) of a little-endian bitmap.
func setBits(b []byte, from, to uint64) {
	for from < to && from%8 != 0 {
		b[from/8] |= 1 << (from % 8)
		from++
	}
	for ; from+8 <= to; from += 8 {
		b[from/8] = 0xFF
	}
	for ; from < to; from++ {
		b[from/8] |= 1 << (from % 8)
	}
}
