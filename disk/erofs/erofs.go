// Package erofs writes an EROFS image (the kernel's read-only, compressed
// file system) from a sealed tree (rootfs.Sealed), without root, mounts or
// mkfs.erofs, byte for byte the same on every run; and reads one back.
//
// What the image holds comes from the tree's index: owners, modes, device
// numbers, xattrs (user., trusted., security. and POSIX ACLs, which EROFS
// stores as the xattr values the tree holds), hard links and mtimes. An
// inode whose mtime is the build's epoch, whose owner ids fit 16 bits and
// whose size fits 32 is stored in the 32-byte compact form, which takes its
// time from the superblock; any other in the 64-byte extended form.
//
// Layout, in blocks of 4 KiB:
//
//	0                 the superblock (at byte 1024)
//	1 ...             file data, in byte order of the path: each file's
//	                  blocks contiguous
//	...               directory blocks, in byte order of the path
//	meta_blkaddr ...  the metadata: every inode with its xattrs and either
//	                  its compression indexes or its last partial block of
//	                  data ("tail packing"); slot 0 is left empty so no
//	                  inode has number 0
//
// Data goes first so it can be written while it is compressed; the
// metadata, whose size depends on the compression, is laid out last.
//
// Compression is LZ4 in fixed 4 KiB physical clusters, with the data placed
// at the end of its cluster (the lz4_0padding feature) and compacted
// indexes (2 or 4 bytes per 4 KiB of the file, the form mkfs.erofs writes
// by default), which every kernel with EROFS's compression reads. Files are
// cut into segments of segmentSize that are compressed in parallel, each
// starting a new extent at a cluster boundary, so the bytes do not depend
// on the number of workers. A file whose compression does not save space
// is stored plain.
package erofs

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/disk/erofs/lz4"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// Compression names the codec of file data.
type Compression string

// The codecs: LZ4 blocks made by LZ4's fast mode (as mkfs.erofs -zlz4
// makes them; the default), or with a deeper match search (within 2% of
// the size mkfs.erofs -zlz4hc gives), or none. On the node's Debian tree
// the deeper search took 3.3 times the fast mode's CPU in the encoder (2.2
// times in the whole writer) for an image 6-7% smaller, so the default is
// the fast one, and lz4hc is for an image whose size matters more than its
// build.
const (
	LZ4HC Compression = "lz4hc"
	LZ4   Compression = "lz4"
	None  Compression = "none"
)

// encoderSettings are the match finder's settings of each codec.
func (c Compression) encoderSettings() (lz4.Settings, error) {
	switch c {
	case LZ4HC:
		return lz4.Settings{Depth: 8, Lazy: true, NiceLength: 64}, nil
	case LZ4:
		return lz4.Settings{Fast: true}, nil
	}
	return lz4.Settings{}, fmt.Errorf("erofs: unknown compression %q (lz4hc, lz4 or none)", c)
}

// Options say how to write the image.
type Options struct {
	// Compression is the codec of file data; "" means LZ4.
	Compression Compression
	// UUID is the file system UUID.
	UUID [16]byte
	// Label is the volume name, at most 16 bytes.
	Label string
	// Epoch is the build time the superblock records, which every compact
	// inode takes as its mtime.
	Epoch time.Time
	// Workers compress in parallel; 0 means GOMAXPROCS. The bytes do not
	// depend on it.
	Workers int
	// Progress is told the bytes of file content as they are written; nil
	// tells nothing.
	Progress func(n int64)
	// Log gets a summary line; nil logs nothing.
	Log logrus.FieldLogger
	// Segments, when set, supplies segments of files as an earlier image
	// compressed them (SegmentStore); Filed, when set, gets every segment
	// this image files for a later one. Neither changes a byte.
	Segments SegmentStore
	Filed    *[]FiledSegment
}

// Summary says what Write made.
type Summary struct {
	Size   int64 // bytes
	Blocks int64
	Inodes int64
	// DataBlocks hold file data, DirBlocks directories, MetaBlocks the
	// inodes.
	DataBlocks, DirBlocks, MetaBlocks int64
	// Compressed counts the files stored compressed.
	Compressed int
	// Content is the bytes of file content stored.
	Content int64
	// SHA256 is the image's hex sha256 when it was hashed as it was
	// written, which takes Options.Segments holding the superblock the
	// image came out with (streamhash.go); else "".
	SHA256 string
}

// Write writes the image into w from offset 0, and returns its size. w must
// read as zeros wherever Write writes nothing (a new file): blocks of zeros
// are left unwritten.
func Write(ctx context.Context, t *rootfs.Sealed, w io.WriterAt, o Options) (*Summary, error) {
	if o.Compression == "" {
		o.Compression = LZ4
	}
	if o.Compression != None {
		if _, err := o.Compression.encoderSettings(); err != nil {
			return nil, err
		}
	}
	if len(o.Label) > 16 {
		return nil, fmt.Errorf("erofs: label %q is longer than 16 bytes", o.Label)
	}
	if o.Epoch.IsZero() {
		return nil, fmt.Errorf("erofs: no epoch given")
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	p, err := newPlan(t, &o)
	if err != nil {
		return nil, err
	}
	out := &blockWriter{w: w, buf: make([]byte, 0, writeChunk)}
	if guess := guessSuperblock(&o); guess != nil {
		out.hash = newStreamHash(guess)
		defer out.hash.close()
	}
	wr := &writer{ctx: ctx, t: t, o: &o, p: p, out: out, next: 1}
	if err := wr.run(); err != nil {
		return nil, err
	}
	sum := wr.summary
	if out.hash != nil {
		sum.SHA256 = out.hash.sum(sum.Blocks, out.end)
	}
	if o.Filed != nil {
		*o.Filed = append(*o.Filed, FiledSegment{Key: superblockKey(&o), Offset: 0, Size: blockSize,
			Sum: hashio.PartSum(wr.super), Meta: metaSuperblock})
	}
	if o.Log != nil {
		o.Log.WithFields(logrus.Fields{
			"size": sum.Size, "inodes": sum.Inodes, "data_blocks": sum.DataBlocks, "dir_blocks": sum.DirBlocks,
			"meta_blocks": sum.MetaBlocks, "compressed_files": sum.Compressed, "compression": o.Compression,
			"hashed_as_written": sum.SHA256 != "",
		}).Info("erofs: image written")
	}
	return &sum, nil
}

// writeChunk is how much the block writer gathers before it writes.
const writeChunk = 1 << 20

// blockWriter gathers consecutive blocks and writes them in large pieces,
// leaving out the whole blocks of zeros.
type blockWriter struct {
	w     io.WriterAt
	start int64 // block of buf[0]
	buf   []byte
	end   int64 // the end of the last block written
	// hash, when set, hashes the image as it is written (streamhash.go).
	hash *streamHash
}

func (bw *blockWriter) write(blk int64, b []byte) error {
	if len(bw.buf) > 0 && (bw.start+int64(len(bw.buf))/blockSize != blk || len(bw.buf)+len(b) > writeChunk) {
		if err := bw.flush(); err != nil {
			return err
		}
	}
	if len(bw.buf) == 0 {
		bw.start = blk
	}
	bw.buf = append(bw.buf, b...)
	if pad := len(bw.buf) % blockSize; pad != 0 {
		bw.buf = append(bw.buf, make([]byte, blockSize-pad)...)
	}
	return nil
}

func (bw *blockWriter) flush() error {
	if len(bw.buf) == 0 {
		return nil
	}
	b := bw.buf
	for i := 0; i < len(b); {
		j := i
		for j < len(b) && !isZero(b[j:j+blockSize]) {
			j += blockSize
		}
		if j > i {
			off := bw.start*blockSize + int64(i)
			if _, err := bw.w.WriteAt(b[i:j], off); err != nil {
				return fmt.Errorf("erofs: writing block %d: %w", bw.start+int64(i)/blockSize, err)
			}
			bw.end = max(bw.end, off+int64(j-i))
		}
		for j < len(b) && isZero(b[j:j+blockSize]) {
			j += blockSize
		}
		i = j
	}
	if bw.hash != nil {
		bw.buf = bw.hash.add(bw.start, b)
		return nil
	}
	bw.buf = bw.buf[:0]
	return nil
}

var zeroBlock [blockSize]byte

func isZero(b []byte) bool { return string(b) == string(zeroBlock[:len(b)]) }
