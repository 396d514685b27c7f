package ext4

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"

	"github.com/stamp-dev/stamp/rootfs"
)

const (
	seekData = 3 // SEEK_DATA
	seekHole = 4 // SEEK_HOLE
	// chunk is how much of a file is read at once, and the largest write.
	chunk = 1 << 20
)

var zeroBlock [blockSize]byte

// writer holds the state of one Write.
type writer struct {
	ctx    context.Context
	t      *rootfs.Sealed
	o      *Options
	g      *geometry
	lay    *layout
	al     *allocator
	p      *plan
	out    *blockWriter
	fsSeed uint32
	buf    []byte

	journal *node
	dind    uint64
	summary struct {
		free       uint64
		freeInodes uint32
	}
}

// blockWriter gathers writes to consecutive blocks into large ones. It
// never writes anything it is not given, so holes stay holes.
type blockWriter struct {
	w       io.WriterAt
	start   uint64
	buf     []byte
	written uint64 // bytes
}

func (bw *blockWriter) write(blk uint64, b []byte) error {
	if len(bw.buf) > 0 && (bw.start+uint64(len(bw.buf))/blockSize != blk || len(bw.buf)+len(b) > chunk) {
		if err := bw.flush(); err != nil {
			return err
		}
	}
	if len(bw.buf) == 0 {
		bw.start = blk
		if len(b) >= chunk {
			return bw.writeAt(blk, b)
		}
	}
	bw.buf = append(bw.buf, b...)
	return nil
}

func (bw *blockWriter) flush() error {
	if len(bw.buf) == 0 {
		return nil
	}
	err := bw.writeAt(bw.start, bw.buf)
	bw.buf = bw.buf[:0]
	return err
}

func (bw *blockWriter) writeAt(blk uint64, b []byte) error {
	if _, err := bw.w.WriteAt(b, int64(blk)*blockSize); err != nil {
		return fmt.Errorf("ext4: writing block %d: %w", blk, err)
	}
	bw.written += uint64(len(b))
	return nil
}

func (w *writer) run() error {
	if err := w.writeJournal(); err != nil {
		return err
	}
	var err error
	if w.dind, err = w.al.one(); err != nil {
		return err
	}
	for i, n := range w.p.nodes {
		if i%256 == 0 {
			if err := w.ctx.Err(); err != nil {
				return err
			}
		}
		if err := w.writeNode(n); err != nil {
			return err
		}
	}
	if err := w.out.flush(); err != nil {
		return err
	}
	return w.writeMetadata()
}

// writeJournal places the journal and writes its superblock; the rest of
// an empty journal is zeros, which a sparse target already reads as.
func (w *writer) writeJournal() error {
	n := &node{ino: inoJournal, typ: rootfs.TypeRegular, perm: 0o600, mtime: w.o.Epoch, links: 1,
		size: uint64(w.g.journal) * blockSize, flags: flagExtents}
	var exts []extent
	for got := uint32(0); got < w.g.journal; {
		r, err := w.al.next(uint64(w.g.journal - got))
		if err != nil {
			return err
		}
		exts = addExtent(exts, got, r.start, uint32(r.n))
		got += uint32(r.n)
	}
	var sb [blockSize]byte
	w.journalSuper(sb[:])
	if err := w.out.write(exts[0].pblk, sb[:]); err != nil {
		return err
	}
	if err := w.finishExtents(n, exts); err != nil {
		return err
	}
	n.blocks += uint64(w.g.journal)
	w.journal = n
	return nil
}

func (w *writer) finishExtents(n *node, exts []extent) error {
	iblock, nodes, err := extentTree(exts, inodeSeed(w.fsSeed, n.ino), w.al.blocks, w.out.write)
	if err != nil {
		return fmt.Errorf("ext4: %s: %w", n.path, err)
	}
	n.iblock = iblock
	n.blocks += nodes
	n.flags |= flagExtents
	return nil
}

func (w *writer) writeNode(n *node) error {
	switch n.typ {
	case rootfs.TypeDir:
		if err := w.writeDir(n); err != nil {
			return err
		}
	case rootfs.TypeRegular:
		if err := w.writeFile(n); err != nil {
			return err
		}
	case rootfs.TypeSymlink:
		if n.size < 60 {
			copy(n.iblock[:], n.target)
		} else {
			blk, err := w.al.one()
			if err != nil {
				return err
			}
			var b [blockSize]byte
			copy(b[:], n.target)
			if err := w.out.write(blk, b[:]); err != nil {
				return err
			}
			n.blocks++
			if err := w.finishExtents(n, []extent{{0, 1, blk}}); err != nil {
				return err
			}
		}
	case rootfs.TypeChar, rootfs.TypeBlock:
		n.iblock = deviceBlock(n.entry.Major, n.entry.Minor)
	}
	if n.xattrs != nil && len(n.xattrs.block) > 0 {
		blk, err := w.al.one()
		if err != nil {
			return err
		}
		var b [blockSize]byte
		xattrBlock(b[:], n.xattrs.block, blk, w.fsSeed)
		if err := w.out.write(blk, b[:]); err != nil {
			return err
		}
		n.fileACL = blk
		n.blocks++
	}
	if n.blocks > n.bound {
		return fmt.Errorf("ext4: %s: used %d blocks, planned at most %d", n.path, n.blocks, n.bound)
	}
	return nil
}

func (w *writer) writeDir(n *node) error {
	dw := &dirBlockWriter{ino: n.ino, parent: n.parent, seed: inodeSeed(w.fsSeed, n.ino), l: n.dir}
	var exts []extent
	lblk := 0
	for lblk < n.dir.nblocks {
		r, err := w.al.next(uint64(n.dir.nblocks - lblk))
		if err != nil {
			return err
		}
		for k := uint64(0); k < r.n; k++ {
			if err := w.out.write(r.start+k, dw.block(lblk+int(k))); err != nil {
				return err
			}
		}
		exts = addExtent(exts, uint32(lblk), r.start, uint32(r.n))
		lblk += int(r.n)
	}
	n.blocks += uint64(n.dir.nblocks)
	if n.dir.indexed {
		n.flags |= flagIndex
	}
	return w.finishExtents(n, exts)
}

// writeFile copies a file's content block by block. Blocks of zeros become
// holes; holes in the tree's copy are skipped without reading them.
func (w *writer) writeFile(n *node) error {
	var exts []extent
	if n.size > 0 {
		f, err := w.t.Open(n.path)
		if err != nil {
			return fmt.Errorf("ext4: %w", err)
		}
		exts, err = w.copyFile(n, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return w.finishExtents(n, exts)
}

func (w *writer) copyFile(n *node, f *rootfs.File) ([]extent, error) {
	var exts []extent
	err := readData(w.ctx, f, n, w.buf, func(pos int64, buf []byte) error {
		var err error
		exts, err = w.putData(n, exts, uint32(pos/blockSize), buf)
		return err
	})
	return exts, err
}

// readData calls fn with the content of f in whole blocks (the last one
// zero padded), from block-aligned offsets, skipping what SEEK_DATA says
// are holes. buf is reused between calls. The sealed view has refused a
// file whose size is not the index's when it opened f.
func readData(ctx context.Context, f *rootfs.File, n *node, buf []byte, fn func(pos int64, buf []byte) error) error {
	size := int64(n.size)
	canSeek := true
	for off := int64(0); off < size; {
		start, end := off, size
		if canSeek {
			d, err := f.Seek(off, seekData)
			switch {
			case errors.Is(err, syscall.ENXIO):
				return nil // only a hole is left
			case err != nil:
				canSeek = false // no SEEK_DATA here: read everything
			default:
				h, err := f.Seek(d, seekHole)
				if err != nil {
					h = size
				}
				start = d &^ (blockSize - 1)
				end = min(size, (h+blockSize-1)&^(blockSize-1))
			}
		}
		for pos := start; pos < end; {
			if err := ctx.Err(); err != nil {
				return err
			}
			want := min(int64(len(buf)), end-pos)
			b := buf[:want]
			got, err := f.ReadAt(b, pos)
			if int64(got) != want {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return fmt.Errorf("ext4: %s: reading at %d: %w", n.path, pos, err)
			}
			if rem := want % blockSize; rem != 0 {
				b = buf[:want+blockSize-rem]
				clear(b[want:])
			}
			if err := fn(pos, b); err != nil {
				return err
			}
			pos += want
		}
		off = end
	}
	return nil
}

// putData writes the non-zero blocks of buf, which starts at logical block
// lblk, to newly allocated blocks.
func (w *writer) putData(n *node, exts []extent, lblk uint32, buf []byte) ([]extent, error) {
	nb := len(buf) / blockSize
	for i := 0; i < nb; {
		if bytes.Equal(buf[i*blockSize:(i+1)*blockSize], zeroBlock[:]) {
			i++
			continue
		}
		j := i + 1
		for j < nb && !bytes.Equal(buf[j*blockSize:(j+1)*blockSize], zeroBlock[:]) {
			j++
		}
		for i < j {
			r, err := w.al.next(uint64(j - i))
			if err != nil {
				return nil, fmt.Errorf("ext4: %s: %w", n.path, err)
			}
			if err := w.out.write(r.start, buf[i*blockSize:(i+int(r.n))*blockSize]); err != nil {
				return nil, err
			}
			exts = addExtent(exts, lblk+uint32(i), r.start, uint32(r.n))
			n.blocks += r.n
			i += int(r.n)
		}
	}
	return exts, nil
}
