package ext4

import (
	"bytes"
	"context"
	"fmt"

	"github.com/stamp-dev/stamp/rootfs"
)

// exactBlocks counts the blocks the tree's inodes need with zero blocks
// left out, reading every file (holes in the tree's copies are skipped
// unread). splits bounds how many extents the placement can add to any
// one file by stepping over metadata.
func exactBlocks(t *rootfs.Sealed, p *plan, splits uint64) (uint64, error) {
	buf := make([]byte, chunk)
	var total uint64
	for _, n := range p.nodes {
		if n.typ != rootfs.TypeRegular || n.size == 0 {
			total += n.bound
			continue
		}
		f, err := t.Open(n.path)
		if err != nil {
			return 0, fmt.Errorf("ext4: %w", err)
		}
		var data, runs uint64
		next := int64(-1) // block after the last non-zero one
		err = readData(context.Background(), f, n, buf, func(pos int64, b []byte) error {
			for i := 0; i < len(b); i += blockSize {
				if bytes.Equal(b[i:i+blockSize], zeroBlock[:]) {
					continue
				}
				blk := (pos + int64(i)) / blockSize
				if blk != next {
					runs++
				}
				next = blk + 1
				data++
			}
			return nil
		})
		f.Close()
		if err != nil {
			return 0, err
		}
		ext := min(data, runs+ceilDiv(data, maxExtentLen)+splits)
		total += data + treeBlocks(ext)
		if n.xattrs != nil && len(n.xattrs.block) > 0 {
			total++
		}
	}
	return total, nil
}
