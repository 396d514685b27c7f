package erofs

import (
	"context"
	"fmt"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// writer writes one image.
type writer struct {
	ctx     context.Context
	t       *rootfs.Sealed
	o       *Options
	p       *plan
	out     *blockWriter
	next    int64 // the next free block
	summary Summary
	// the file whose segments are being written, and its clusters so far
	cur     *node
	curExts []extent
	curRaw  bool
	// filed holds the keys already given to Options.Filed: files of the
	// same content (a node has hundreds) are filed once.
	filed map[string]bool
	super []byte // block 0, once written
}

func (w *writer) run() error {
	if err := compressAll(w.ctx, w.t, w.o, w.p.segments(), w.writeSegment); err != nil {
		return err
	}
	for _, n := range w.p.files {
		if n.in.Type == rootfs.TypeSymlink {
			if err := w.writeFlat(n, []byte(n.in.Target)); err != nil {
				return err
			}
		}
	}
	w.summary.DataBlocks = w.next - 1
	// Directories take their blocks now; their entries, which hold the
	// nids, are written once the metadata is laid out.
	dirStart := w.next
	for _, d := range w.p.dirs {
		d.blkaddr = uint32(w.next)
		full := d.size / blockSize
		d.layout = layoutFlatPlain
		if tail := d.size % blockSize; tail > 0 {
			if d.inlineable(tail) {
				d.layout = layoutFlatInline
				d.tail = make([]byte, tail) // filled once the nids are known
			} else {
				full++
			}
		}
		d.blocks = full
		if full == 0 {
			d.blkaddr = nullAddr
		}
		w.next += full
	}
	w.summary.DirBlocks = w.next - dirStart
	metaStart := w.next
	if metaStart > 1<<32-1 {
		return fmt.Errorf("erofs: %d blocks of data: more than 32-bit block numbers address", metaStart)
	}
	meta, err := layoutMeta(w.p)
	if err != nil {
		return err
	}
	for _, d := range w.p.dirs {
		data := dirBlocks(d.children, d.size)
		full := d.size / blockSize * blockSize
		if d.layout == layoutFlatInline {
			copy(d.tail, data[full:])
			data = data[:full]
		}
		if len(data) > 0 {
			if err := w.out.write(int64(d.blkaddr), data); err != nil {
				return err
			}
		}
	}
	buf := encodeMeta(w.p, meta.end)
	if err := w.out.write(metaStart, buf); err != nil {
		return err
	}
	metaBlocks := int64(len(buf)) / blockSize
	blocks := metaStart + metaBlocks
	if blocks > 1<<32-1 {
		return fmt.Errorf("erofs: an image of %d blocks: more than 32-bit block numbers address", blocks)
	}
	w.super = w.superblock(uint32(metaStart), uint32(blocks))
	if err := w.out.write(0, w.super); err != nil {
		return err
	}
	if err := w.out.flush(); err != nil {
		return err
	}
	w.summary.MetaBlocks = metaBlocks
	w.summary.Blocks = blocks
	w.summary.Size = blocks * blockSize
	w.summary.Inodes = int64(len(w.p.nodes))
	return nil
}

// writeSegment writes a segment's blocks at the next free block, and once
// a file's last segment is written, settles how the file is stored.
func (w *writer) writeSegment(s *segment) error {
	n := s.n
	if s.off == 0 {
		w.cur, w.curExts, w.curRaw = n, nil, !s.compressed
		n.blkaddr = uint32(w.next)
	}
	if w.o.Progress != nil {
		w.o.Progress(s.size)
	}
	w.summary.Content += s.size
	data := s.blocks
	if !s.compressed && s.last {
		// The last partial block of a plain file is packed after its
		// inode where it fits.
		if tail := n.size % blockSize; tail > 0 && n.inlineable(tail) {
			cut := int64(len(data)) - tail
			n.tail = append([]byte(nil), data[cut:]...)
			data = data[:cut]
		}
	}
	if w.o.Filed != nil && s.key != "" && !w.filed[s.key] && (s.compressed || s.plain) {
		if w.filed == nil {
			w.filed = map[string]bool{}
		}
		w.filed[s.key] = true
		switch {
		case s.compressed:
			*w.o.Filed = append(*w.o.Filed, FiledSegment{Key: s.key, Offset: w.next * blockSize, Size: int64(len(data)), Sum: s.sum, Meta: encodeExtents(s.extents)})
		case s.plain:
			*w.o.Filed = append(*w.o.Filed, FiledSegment{Key: s.key, Sum: hashio.PartSum(nil), Meta: metaPlain})
		}
	}
	if len(data) > 0 {
		if err := w.out.write(w.next, data); err != nil {
			return err
		}
	}
	for _, e := range s.extents {
		e.block += w.next
		w.curExts = append(w.curExts, e)
	}
	w.next += align(int64(len(data)), blockSize) / blockSize
	if !s.last {
		return nil
	}
	n.blocks = w.next - int64(n.blkaddr)
	allPlain := true
	for _, e := range w.curExts {
		allPlain = allPlain && e.plain
	}
	switch {
	case w.curRaw || allPlain:
		// Clusters stored as they are, one after another from the
		// file's start, are the blocks of a plain file.
		n.layout = layoutFlatPlain
		if n.tail != nil {
			n.layout = layoutFlatInline
		}
		if n.blocks == 0 {
			n.blkaddr = nullAddr
		}
	default:
		n.layout = layoutCompression
		n.index = compactIndex(n.size, w.curExts, align(n.headerSize(), 8))
		w.summary.Compressed++
	}
	w.cur, w.curExts = nil, nil
	return nil
}

// writeFlat stores content uncompressed: whole blocks at the next free
// block, the last partial one packed after the inode where it fits.
func (w *writer) writeFlat(n *node, content []byte) error {
	full := int64(len(content)) / blockSize * blockSize
	n.layout = layoutFlatPlain
	if tail := int64(len(content)) - full; tail > 0 {
		if n.inlineable(tail) {
			n.layout = layoutFlatInline
			n.tail = content[full:]
		} else {
			full = int64(len(content))
		}
	}
	n.blocks = align(full, blockSize) / blockSize
	if n.blocks == 0 {
		return nil
	}
	n.blkaddr = uint32(w.next)
	if err := w.out.write(w.next, content[:full]); err != nil {
		return err
	}
	w.next += n.blocks
	return nil
}
