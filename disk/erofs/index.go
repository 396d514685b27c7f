package erofs

// lcluster is what the index says of one logical cluster (4 KiB of a
// compressed file). The cluster where an extent starts is its head,
// pointing at its physical cluster, with the offset where it starts; the
// clusters after it, up to the next head, point back to it (delta[0]) and
// forward to the next (delta[1]). When the last extent ends inside a
// cluster where none starts, that cluster gets a plain head at the file's
// end, as mkfs.erofs writes it.
type lcluster struct {
	typ        int
	clusterofs int64  // heads: where the extent starts in the cluster
	block      uint32 // heads: the physical cluster
	back, next int64  // the others: delta[0] and delta[1]
}

// lclusters describes each logical cluster of a file of size bytes stored
// in the clusters exts, in order.
func lclusters(size int64, exts []extent) []lcluster {
	nl := (size + blockSize - 1) / blockSize
	out := make([]lcluster, nl)
	set := make([]bool, nl)
	for _, e := range exts {
		head, ofs := e.off/blockSize, e.off%blockSize
		typ := lclusterTypeHead
		if e.plain {
			typ = lclusterTypePlain
		}
		out[head], set[head] = lcluster{typ: typ, clusterofs: ofs, block: uint32(e.block)}, true
		next := (e.off + e.size) / blockSize
		for lc := head + 1; lc < next && lc < nl; lc++ {
			// A distance with bit 11 set would read as a big cluster's
			// block count.
			back := min(lc-head, d0CBlkCnt-1)
			out[lc], set[lc] = lcluster{typ: lclusterTypeNonhead, clusterofs: ofs, back: back, next: next - lc}, true
		}
	}
	if last := nl - 1; size%blockSize != 0 && !set[last] {
		out[last] = lcluster{typ: lclusterTypePlain, clusterofs: size % blockSize}
	}
	return out
}

// compactLayout is how compacted indexes of nl logical clusters are packed
// when they begin at byte ebase of the metadata: packs of 2 clusters in 4
// bytes each up to the first 32-byte boundary, then packs of 16 in 2 bytes
// each, then packs of 2 again for the rest (the kernel's
// compacted_load_cluster_from_disk).
func compactLayout(ebase, nl int64) (initial, twoB, end int64) {
	initial = (32 - ebase%32) / 4
	if initial == 32/4 {
		initial = 0
	}
	if initial > nl {
		return 0, 0, nl
	}
	twoB = (nl - initial) / 16 * 16
	return initial, twoB, nl - initial - twoB
}

// compactIndexBytes is the room a compressed file's map header and
// compacted indexes take when the header starts at byte hdr of the
// metadata (8-byte aligned).
func compactIndexBytes(size, hdr int64) int64 {
	nl := (size + blockSize - 1) / blockSize
	initial, twoB, end := compactLayout(hdr+mapHeaderSize, nl)
	return mapHeaderSize + 4*initial + 2*twoB + 4*(end+end%2)
}

// compactIndex is a compressed file's map header and its compacted
// indexes, the form mkfs.erofs writes by default: packs of vcnt clusters,
// each cluster its type and 12 bits (a head's offset, else delta[0], or
// delta[1] for the last cluster of a pack), the pack ending in a block
// address from which a head's physical cluster is counted: that address
// plus one for each head of the pack up to it. The heads' physical
// clusters must follow one another, as the writer lays them out. hdr is
// where the header starts in the metadata.
func compactIndex(size int64, exts []extent, hdr int64) []byte {
	lcs := lclusters(size, exts)
	nl := int64(len(lcs))
	b := make([]byte, 0, compactIndexBytes(size, hdr))
	var h [mapHeaderSize]byte
	le.PutUint16(h[4:], adviseCompacted2B)
	b = append(b, h[:]...)
	initial, twoB, end := compactLayout(hdr+mapHeaderSize, nl)
	// base is the block address a pack carries: one before the first
	// head's cluster, plus the heads before the pack.
	base := uint32(0)
	if len(exts) > 0 {
		base = uint32(exts[0].block) - 1
	}
	lc := int64(0)
	pack := func(vcnt, size int) {
		p := make([]byte, size)
		bits := (size*8 - 32) / vcnt
		stored := base
		for i := 0; i < vcnt; i++ {
			var v uint32
			if lc < nl {
				c := lcs[lc]
				lo := c.clusterofs
				if c.typ == lclusterTypeNonhead {
					lo = c.back
					if i == vcnt-1 {
						lo = c.next
					}
				} else {
					base++
				}
				v = uint32(c.typ)<<blockBits | uint32(lo)
			}
			// A cluster past the file's last (an odd count's padding) is
			// zero: a plain head at offset 0, never read.
			for k := 0; k < bits; k++ {
				if v>>k&1 != 0 {
					pos := i*bits + k
					p[pos/8] |= 1 << (pos % 8)
				}
			}
			lc++
		}
		le.PutUint32(p[size-4:], stored)
		b = append(b, p...)
	}
	for n := int64(0); n < initial; n += 2 {
		pack(2, 8)
	}
	for n := int64(0); n < twoB; n += 16 {
		pack(16, 32)
	}
	for n := int64(0); n < end; n += 2 {
		pack(2, 8)
	}
	return b
}
