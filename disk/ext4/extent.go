package ext4

const (
	extentMagic    = 0xF30A
	maxExtentLen   = 32768 // longest initialized extent
	inodeExtents   = 4     // entries in i_block
	nodeExtents    = (blockSize - 12) / 12
	extentTailOffs = 12 + nodeExtents*12
)

// extent maps n logical blocks from lblk onto physical blocks from pblk.
type extent struct {
	lblk uint32
	n    uint32
	pblk uint64
}

// addExtent appends a mapping, merging it into the last extent when both
// are contiguous.
func addExtent(exts []extent, lblk uint32, pblk uint64, n uint32) []extent {
	for n > 0 {
		if k := len(exts); k > 0 {
			l := &exts[k-1]
			if l.lblk+l.n == lblk && l.pblk+uint64(l.n) == pblk && l.n < maxExtentLen {
				take := min(n, maxExtentLen-l.n)
				l.n += take
				lblk, pblk, n = lblk+take, pblk+uint64(take), n-take
				continue
			}
		}
		take := min(n, maxExtentLen)
		exts = append(exts, extent{lblk, take, pblk})
		lblk, pblk, n = lblk+take, pblk+uint64(take), n-take
	}
	return exts
}

// treeBlocks is the number of blocks an extent tree over e extents needs
// beyond the inode: full nodes, and no more levels than necessary, which is
// what e2fsck expects (it offers to narrow or shorten anything else).
func treeBlocks(e uint64) uint64 {
	var total uint64
	for e > inodeExtents {
		e = ceilDiv(e, nodeExtents)
		total += e
	}
	return total
}

type nodeRef struct {
	lblk uint32
	blk  uint64
}

// extentTree builds the tree for exts: the i_block contents, and through
// write every node block, at the blocks alloc hands out (leaves first).
func extentTree(exts []extent, seed uint32, alloc func(n uint64) ([]uint64, error), write func(blk uint64, b []byte) error) (iblock [60]byte, nodes uint64, err error) {
	if len(exts) <= inodeExtents {
		extentHeader(iblock[:], len(exts), inodeExtents, 0)
		for i, e := range exts {
			putExtent(iblock[12+12*i:], e)
		}
		return iblock, 0, nil
	}
	nodes = treeBlocks(uint64(len(exts)))
	blks, err := alloc(nodes)
	if err != nil {
		return iblock, 0, err
	}
	var b [blockSize]byte
	next := 0
	var refs []nodeRef
	for i := 0; i < len(exts); i += nodeExtents {
		chunk := exts[i:min(i+nodeExtents, len(exts))]
		clear(b[:])
		extentHeader(b[:], len(chunk), nodeExtents, 0)
		for k, e := range chunk {
			putExtent(b[12+12*k:], e)
		}
		blk := blks[next]
		next++
		if err := writeNode(b[:], seed, blk, write); err != nil {
			return iblock, 0, err
		}
		refs = append(refs, nodeRef{chunk[0].lblk, blk})
	}
	depth := 1
	for len(refs) > inodeExtents {
		var up []nodeRef
		for i := 0; i < len(refs); i += nodeExtents {
			chunk := refs[i:min(i+nodeExtents, len(refs))]
			clear(b[:])
			extentHeader(b[:], len(chunk), nodeExtents, depth)
			for k, r := range chunk {
				putIndex(b[12+12*k:], r)
			}
			blk := blks[next]
			next++
			if err := writeNode(b[:], seed, blk, write); err != nil {
				return iblock, 0, err
			}
			up = append(up, nodeRef{chunk[0].lblk, blk})
		}
		refs = up
		depth++
	}
	extentHeader(iblock[:], len(refs), inodeExtents, depth)
	for i, r := range refs {
		putIndex(iblock[12+12*i:], r)
	}
	return iblock, nodes, nil
}

func writeNode(b []byte, seed uint32, blk uint64, write func(uint64, []byte) error) error {
	le32(b[extentTailOffs:], crc32c(seed, b[:extentTailOffs]))
	return write(blk, b)
}

func extentHeader(b []byte, entries, max, depth int) {
	le16(b[0:], extentMagic)
	le16(b[2:], uint16(entries))
	le16(b[4:], uint16(max))
	le16(b[6:], uint16(depth))
	le32(b[8:], 0)
}

func putExtent(b []byte, e extent) {
	le32(b[0:], e.lblk)
	le16(b[4:], uint16(e.n))
	le16(b[6:], uint16(e.pblk>>32))
	le32(b[8:], uint32(e.pblk))
}

func putIndex(b []byte, r nodeRef) {
	le32(b[0:], r.lblk)
	le32(b[4:], uint32(r.blk))
	le16(b[8:], uint16(r.blk>>32))
	le16(b[10:], 0)
}
