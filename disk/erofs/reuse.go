package erofs

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
)

// SegmentStore holds the compressed segments of images written before,
// under the key of what each holds (segmentKey): after a small change to a
// tree nearly every file's clusters are the ones the last image holds, and
// compressing them again is most of the image's time. It is
// formats.PartStore: Part writes the segment's clusters into w and returns
// the Meta it was filed with, or false (the caller discards what w got).
type SegmentStore interface {
	Part(key string, w io.Writer) (meta string, ok bool)
}

// FiledSegment is a segment of the image as a SegmentStore files it: Size
// bytes at Offset of the image, with part sum Sum (hashio.PartSum), and the extents of its
// clusters in Meta. A file kept plain because compressing it gains nothing
// is filed with no bytes and Meta metaPlain, so that a later image need not
// compress it to find that out again.
type FiledSegment struct {
	Key    string
	Offset int64
	Size   int64
	Sum    string
	Meta   string
}

const metaPlain = "plain"

// segmentKey names what a segment holds: the file's content by its sha256,
// where the segment lies in it, and the codec. "" when the content has no
// digest to name it by, or nothing to compress. Small files are filed too:
// a node's ten thousand files under 64 KiB took more of a rebuild (2.6 s of
// LZ4HC) than all its large ones once those were filed, and their entries
// make the record a few megabytes. The key's version moves when a codec's
// bytes do (2: lz4 became LZ4's fast mode), so no part of an older encoder
// is taken for one of the new.
func segmentKey(digest string, off, size int64, codec Compression) string {
	if digest == "" || size <= 0 || codec == None {
		return ""
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "stamp erofs segment 2 %s %s %d %d", codec, digest, off, size))
	return hex.EncodeToString(sum[:])
}

// encodeExtents writes a segment's extents as Meta: each cluster's size of
// content, doubled, plus one when it is stored plain. The rest (where each
// starts in the file, which cluster it is) follows from the order.
func encodeExtents(exts []extent) string {
	b := make([]byte, 0, 3*len(exts))
	for _, e := range exts {
		v := uint64(e.size) << 1
		if e.plain {
			v |= 1
		}
		b = binary.AppendUvarint(b, v)
	}
	return base64.RawStdEncoding.EncodeToString(b)
}

// decodeExtents reads Meta back into the extents of a segment of size
// bytes at off stored in blocks clusters, checking that they are what the
// compressor could have made of it.
func decodeExtents(meta string, off, size, blocks int64) ([]extent, error) {
	b, err := base64.RawStdEncoding.DecodeString(meta)
	if err != nil {
		return nil, err
	}
	exts := make([]extent, 0, blocks)
	pos := off
	for len(b) > 0 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return nil, fmt.Errorf("bad extent")
		}
		b = b[n:]
		e := extent{off: pos, size: int64(v >> 1), plain: v&1 == 1, block: int64(len(exts))}
		if e.size <= 0 || (e.plain && e.size > blockSize) || (!e.plain && e.size <= blockSize) {
			return nil, fmt.Errorf("bad extent of %d bytes", e.size)
		}
		exts = append(exts, e)
		pos += e.size
	}
	if int64(len(exts)) != blocks || pos != off+size {
		return nil, fmt.Errorf("%d extents of %d bytes for %d clusters of %d", len(exts), pos-off, blocks, size)
	}
	return exts, nil
}

// reuse fills s from the store if it holds s's key: its clusters and
// extents, or, for a file filed as plain, its content read as it is. It
// reports whether it did.
func (c *compressor) reuse(s *segment, key string) bool {
	buf := bytes.NewBuffer(c.bufs.get(int(align(s.size, blockSize)))[:0])
	meta, ok := c.store.Part(key, buf)
	if !ok {
		c.bufs.put(buf.Bytes())
		return false
	}
	if meta == metaPlain {
		c.bufs.put(buf.Bytes())
		if buf.Len() != 0 || s.off != 0 || !s.last {
			return false
		}
		in, err := c.read(s)
		if err != nil {
			s.err = err
			return true
		}
		s.blocks, s.plain = append(c.bufs.get(len(in))[:0], in...), true
		return true
	}
	blocks := buf.Bytes()
	exts, err := decodeExtents(meta, s.off, s.size, int64(len(blocks))/blockSize)
	if err != nil || len(blocks)%blockSize != 0 || (s.off == 0 && s.last && s.keepPlain(len(blocks))) {
		c.bufs.put(blocks)
		return false
	}
	s.blocks, s.extents, s.compressed = blocks, exts, true
	return true
}
