package qcow2

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"

	"github.com/klauspost/compress/flate"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// Options configure Write.
type Options struct {
	// Compress stores each cluster deflate-compressed when that saves at
	// least a sector, as `qemu-img convert -c` does.
	Compress bool
	// Workers compress clusters in parallel; 0 means GOMAXPROCS. The
	// number never changes the output.
	Workers int
	// Progress, when set, is told how many raw bytes have been consumed.
	Progress func(n int64)
	// HashSource has an uncompressed image's first pass, which reads
	// every data extent of the raw disk in order, hash the raw disk too
	// (Stats.SourceSHA256): its writer need not read it back again.
	HashSource bool
}

// Stats say what Write stored.
type Stats struct {
	Clusters   int64 // guest clusters stored
	Compressed int64 // of those, stored compressed
	FileSize   int64
	// SHA256 is the image's hex sha256 when Write hashed it as it wrote
	// it (an uncompressed image), else "".
	SHA256 string
	// SourceSHA256 is the raw disk's hex sha256, its holes as zeros, when
	// Options.HashSource asked for it and the image is uncompressed.
	SourceSHA256 string
}

// chunkClusters is how many clusters are read, and compressed in parallel,
// at a time.
const chunkClusters = 64

// Write encodes the raw disk of size bytes in src as a qcow2 image written
// from offset 0 of w. Holes src tells of (disk.DataExtents) are skipped
// without reading them. An uncompressed image is hashed as it is written
// (Stats.SHA256), and src read twice (hashed.go).
func Write(ctx context.Context, w io.WriterAt, src io.ReaderAt, size int64, o Options) (*Stats, error) {
	if size < 0 || size%sector != 0 {
		return nil, fmt.Errorf("qcow2: a disk of %d bytes is not whole 512-byte sectors", size)
	}
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	wr := &writer{
		out:     &seqWriter{w: w, buf: make([]byte, 0, 4<<20)},
		pos:     clusterSize, // cluster 0 is the header
		refs:    []uint16{1},
		guest:   uint64((size + clusterSize - 1) / clusterSize),
		opts:    o,
		workers: workers,
	}
	wr.l2 = make([][]uint64, (wr.guest+l2Entries-1)/l2Entries)
	if o.Compress {
		wr.comp = make([]*compressor, workers)
		for i := range wr.comp {
			c, err := newCompressor()
			if err != nil {
				return nil, err
			}
			wr.comp[i] = c
		}
	}
	if !o.Compress {
		if of, ok := w.(*os.File); ok {
			// Nothing reads the image back, since it is hashed as it is
			// written: past the page cache.
			dw := hashio.NewDirectWriter(of)
			defer dw.Close()
			w = dw
		}
		if err := wr.writeHashed(ctx, w, src, size); err != nil {
			return nil, err
		}
		return &wr.stats, nil
	}
	extents := disk.DataExtents(src, size)
	buf := make([]byte, chunkClusters*clusterSize)
	var next uint64 // the first guest cluster not yet seen
	for _, e := range extents {
		first := max(uint64(e.Off/clusterSize), next)
		end := uint64((e.Off + e.Len + clusterSize - 1) / clusterSize)
		for c := first; c < end; c += chunkClusters {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			n := min(uint64(chunkClusters), end-c)
			run, err := readRun(src, buf, c, c+n-1, size)
			if err != nil {
				return nil, err
			}
			// A partial last cluster is compressed whole, padded.
			b := buf[:n*clusterSize]
			clear(b[len(run):])
			if err := wr.chunk(c, b); err != nil {
				return nil, err
			}
			if o.Progress != nil {
				o.Progress(int64(len(run)))
			}
		}
		next = max(next, end)
	}
	if err := wr.finish(size); err != nil {
		return nil, err
	}
	return &wr.stats, nil
}

type writer struct {
	out     *seqWriter
	pos     int64 // end of what has been placed in the image
	refs    []uint16
	guest   uint64
	l2      [][]uint64 // per L1 index; nil where no cluster is stored
	opts    Options
	workers int
	comp    []*compressor
	stats   Stats
}

// chunk stores the clusters of b, the first of which is guest cluster c,
// each compressed where that saves a sector.
func (wr *writer) chunk(c uint64, b []byte) error {
	n := len(b) / clusterSize
	data := make([]int, 0, n) // indexes of the clusters that hold data
	for i := range n {
		if !disk.IsZero(b[i*clusterSize : (i+1)*clusterSize]) {
			data = append(data, i)
		}
	}
	if len(data) == 0 {
		return nil
	}
	packed := make([][]byte, len(data))
	var wg sync.WaitGroup
	errs := make([]error, wr.workers)
	for w := range wr.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cw := wr.comp[w]
			for j := w; j < len(data); j += wr.workers {
				i := data[j]
				out, err := cw.compress(b[i*clusterSize : (i+1)*clusterSize])
				if err != nil {
					errs[w] = err
					return
				}
				packed[j] = out
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("qcow2: compressing: %w", err)
	}
	for j, i := range data {
		if len(packed[j]) <= clusterSize-sector {
			wr.set(c+uint64(i), wr.placeCompressed(packed[j]))
			wr.stats.Compressed++
			continue
		}
		wr.set(c+uint64(i), wr.placeCluster(b[i*clusterSize:(i+1)*clusterSize]))
	}
	return wr.out.err
}

// set records the L2 entry of guest cluster g.
func (wr *writer) set(g, entry uint64) {
	if wr.l2[g/l2Entries] == nil {
		wr.l2[g/l2Entries] = make([]uint64, l2Entries)
	}
	wr.l2[g/l2Entries][g%l2Entries] = entry
	wr.stats.Clusters++
}

// ref counts one more reference to every host cluster in [off, end).
func (wr *writer) ref(off, end int64) {
	for hc := off / clusterSize; hc*clusterSize < end; hc++ {
		for int64(len(wr.refs)) <= hc {
			wr.refs = append(wr.refs, 0)
		}
		wr.refs[hc]++
	}
}

func (wr *writer) alignPos() { wr.pos = (wr.pos + clusterSize - 1) / clusterSize * clusterSize }

// placeCluster puts a whole cluster at the next cluster boundary.
func (wr *writer) placeCluster(b []byte) uint64 {
	wr.alignPos()
	off := wr.pos
	wr.out.writeAt(b, off)
	wr.ref(off, off+clusterSize)
	wr.pos += clusterSize
	return oflagCopied | uint64(off)
}

// placeCompressed packs compressed data right after what came before, as
// qemu does; it may share a sector and a host cluster with its neighbours.
func (wr *writer) placeCompressed(b []byte) uint64 {
	off := wr.pos
	wr.out.writeAt(b, off)
	wr.pos += int64(len(b))
	extra := uint64((off+int64(len(b))-1)/sector - off/sector)
	// qemu counts a compressed cluster as covering whole sectors, from the
	// offset to the end of its last sector; refcounts must agree with that.
	wr.ref(off, off/sector*sector+int64(extra+1)*sector)
	return oflagCompressed | extra<<csizeShift | uint64(off)
}

// finish writes the tables after the data and the header before it.
func (wr *writer) finish(size int64) error {
	t, err := wr.layoutTables(size)
	if err != nil {
		return err
	}
	for _, p := range t.pieces {
		wr.out.writeAt(p.b, p.off)
	}
	wr.out.writeAt(t.header, 0)
	if err := wr.out.flush(); err != nil {
		return err
	}
	wr.stats.FileSize = wr.pos
	return nil
}

// tables are what follows the data, each piece at its offset in
// increasing order, and the header, which goes at offset 0.
type tables struct {
	pieces []piece
	header []byte
}

type piece struct {
	b   []byte
	off int64
}

// layoutTables places the tables after the data placed so far and counts
// their references, without writing anything.
func (wr *writer) layoutTables(size int64) (*tables, error) {
	t := &tables{}
	// Each table takes whole clusters at the next cluster boundary, so
	// holes remain holes and nothing is written twice.
	place := func(b []byte) int64 {
		wr.alignPos()
		off := wr.pos
		t.pieces = append(t.pieces, piece{b, off})
		wr.ref(off, off+clusterSize)
		wr.pos += clusterSize
		return off
	}
	wr.alignPos()
	l1 := make([]uint64, len(wr.l2))
	for i, l2 := range wr.l2 {
		if l2 == nil {
			continue
		}
		tbl := make([]byte, clusterSize)
		for k, e := range l2 {
			binary.BigEndian.PutUint64(tbl[k*8:], e)
		}
		l1[i] = oflagCopied | uint64(place(tbl))
	}
	l1Off := wr.pos
	// An empty disk has an empty L1 table that takes no cluster; qemu
	// counts none for it.
	l1Clusters := (int64(len(l1))*8 + clusterSize - 1) / clusterSize
	l1Bytes := make([]byte, l1Clusters*clusterSize)
	for i, e := range l1 {
		binary.BigEndian.PutUint64(l1Bytes[i*8:], e)
	}
	for i := int64(0); i < l1Clusters; i++ {
		place(l1Bytes[i*clusterSize : (i+1)*clusterSize])
	}
	// The refcount structures count themselves: find the fixed point.
	before := wr.pos / clusterSize
	rt, rb := int64(1), int64(1)
	for {
		total := before + rt + rb
		nb := (total + rbEntries - 1) / rbEntries
		nt := (nb*8 + clusterSize - 1) / clusterSize
		if nb == rb && nt == rt {
			break
		}
		rt, rb = max(rt, nt), max(rb, nb)
	}
	rtOff := wr.pos
	wr.ref(rtOff, rtOff+(rt+rb)*clusterSize)
	for _, r := range wr.refs {
		if r == 0xFFFF {
			return nil, errors.New("qcow2: a host cluster is shared by too many compressed clusters")
		}
	}
	rtBytes := make([]byte, rt*clusterSize)
	for i := int64(0); i < rb; i++ {
		binary.BigEndian.PutUint64(rtBytes[i*8:], uint64(rtOff+(rt+i)*clusterSize))
	}
	t.pieces = append(t.pieces, piece{rtBytes, rtOff})
	for i := int64(0); i < rb; i++ {
		rbBytes := make([]byte, clusterSize)
		for k := int64(0); k < rbEntries; k++ {
			if hc := i*rbEntries + k; hc < int64(len(wr.refs)) {
				binary.BigEndian.PutUint16(rbBytes[k*2:], wr.refs[hc])
			}
		}
		t.pieces = append(t.pieces, piece{rbBytes, rtOff + (rt+i)*clusterSize})
	}
	wr.pos = rtOff + (rt+rb)*clusterSize
	h := header{size: uint64(size), l1Size: uint32(len(l1)), l1Offset: uint64(l1Off),
		refTableOffset: uint64(rtOff), refTableClusters: uint32(rt)}
	t.header = h.marshal()
	return t, nil
}

// seqWriter gathers writes at increasing offsets into large ones. A write
// that does not continue the last one starts a new run; what lies between
// is left unwritten.
type seqWriter struct {
	w    io.WriterAt
	base int64
	buf  []byte
	err  error
}

func (s *seqWriter) writeAt(b []byte, off int64) {
	if s.err != nil {
		return
	}
	if off != s.base+int64(len(s.buf)) || len(s.buf)+len(b) > cap(s.buf) {
		if s.flush() != nil {
			return
		}
		s.base = off
	}
	if len(b) > cap(s.buf) {
		if _, err := s.w.WriteAt(b, off); err != nil {
			s.err = fmt.Errorf("qcow2: writing at %d: %w", off, err)
		}
		s.base = off + int64(len(b))
		return
	}
	s.buf = append(s.buf, b...)
}

func (s *seqWriter) flush() error {
	if s.err == nil && len(s.buf) > 0 {
		if _, err := s.w.WriteAt(s.buf, s.base); err != nil {
			s.err = fmt.Errorf("qcow2: writing at %d: %w", s.base, err)
		}
	}
	s.base += int64(len(s.buf))
	s.buf = s.buf[:0]
	return s.err
}

type compressor struct {
	buf bytes.Buffer
	fw  *flate.Writer
}

func newCompressor() (*compressor, error) {
	c := &compressor{}
	fw, err := flate.NewWriterWindow(&c.buf, deflateWindow)
	if err != nil {
		return nil, err
	}
	c.fw = fw
	return c, nil
}

// compress returns the raw deflate stream of one cluster. The slice is the
// caller's to keep.
func (c *compressor) compress(b []byte) ([]byte, error) {
	c.buf.Reset()
	c.fw.Reset(&c.buf)
	if _, err := c.fw.Write(b); err != nil {
		return nil, err
	}
	if err := c.fw.Close(); err != nil {
		return nil, err
	}
	return bytes.Clone(c.buf.Bytes()), nil
}
