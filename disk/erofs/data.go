package erofs

import (
	"context"
	"fmt"
	"io"
	"sync"

	"github.com/stamp-dev/stamp/disk/erofs/lz4"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// segmentSize is how much of a file one worker compresses at a time; a
// multiple of the block size, and short enough that no extent spans the
// 2,048 clusters an index can point back over.
const segmentSize = 4 << 20

// segment is one piece of a file's content, compressed (or read) by a
// worker and written in order by the writer.
type segment struct {
	n          *node
	off, size  int64
	last       bool
	done       chan struct{}
	blocks     []byte   // the blocks to write: compressed clusters, or raw data
	extents    []extent // for compressed clusters
	compressed bool     // blocks are clusters; else raw content
	// key is segmentKey's, when segments are filed or reused; sum the
	// sha256 of the clusters, when filed; plain says a file of one
	// segment was kept plain because compressing it gains nothing.
	key, sum string
	plain    bool
	err      error
}

// extent is a run of a file's content stored in one physical cluster.
type extent struct {
	off, size int64 // in the file
	plain     bool  // stored as it is
	block     int64 // the cluster, counted from the segment's first block
}

// segments cuts the files with content into segments, in order.
func (p *plan) segments() []*segment {
	var out []*segment
	for _, n := range p.files {
		if n.in.Type != rootfs.TypeRegular {
			continue
		}
		for off := int64(0); off < n.size; off += segmentSize {
			size := min(segmentSize, n.size-off)
			out = append(out, &segment{n: n, off: off, size: size, last: off+size == n.size, done: make(chan struct{})})
		}
	}
	return out
}

// compressor is one worker's state.
type compressor struct {
	t    *rootfs.Sealed
	bufs *bufPool
	enc  *lz4.Encoder
	in   []byte
	// store supplies segments compressed before; keyed computes each
	// segment's key, summed the sha256 of its clusters.
	store         SegmentStore
	keyed, summed bool
}

// read reads a segment's content into the worker's buffer.
func (c *compressor) read(s *segment) ([]byte, error) {
	f, err := c.t.Open(s.n.path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if cap(c.in) < int(s.size) {
		c.in = make([]byte, s.size)
	}
	in := c.in[:s.size]
	if n, err := f.ReadAt(in, s.off); n < len(in) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("%s: reading at %d: %w", s.n.path, s.off, err)
	}
	return in, nil
}

// work reads a segment and, unless the image is uncompressed, compresses
// it into clusters, or takes it from the segment store. A file of one
// segment whose clusters would take more room than its plain blocks and
// tail is kept plain.
func (c *compressor) work(s *segment, codec Compression) {
	if c.keyed {
		s.key = segmentKey(s.n.in.Digest, s.off, s.size, codec)
	}
	if c.store == nil || s.key == "" || !c.reuse(s, s.key) {
		c.compress(s, codec)
	}
	if c.summed && s.compressed && s.err == nil {
		s.sum = hashio.PartSum(s.blocks)
	}
}

// keepPlain says whether a file of one segment is better stored plain than
// as clusters of n bytes and their indexes.
func (s *segment) keepPlain(n int) bool {
	plain := s.size / blockSize * blockSize
	if tail := s.size % blockSize; tail > 0 {
		if s.n.inlineable(tail) {
			plain += tail
		} else {
			plain += blockSize
		}
	}
	return int64(n)+compactIndexBytes(s.size, align(s.n.headerSize(), 8)) >= plain
}

func (c *compressor) compress(s *segment, codec Compression) {
	in, err := c.read(s)
	if err != nil {
		s.err = err
		return
	}
	if codec == None {
		s.blocks = append(c.bufs.get(len(in))[:0], in...)
		return
	}
	out := c.bufs.get(int(align(s.size, blockSize)))
	var exts []extent
	at := 0 // bytes of out used
	for pos := 0; pos < len(in); {
		rem := len(in) - pos
		e := extent{off: s.off + int64(pos), block: int64(at / blockSize)}
		cluster := out[at : at+blockSize]
		if rem > blockSize {
			took, w := c.enc.CompressDestSize(in[pos:], cluster)
			if took > blockSize {
				// The cluster's data ends at its end; the zeros before
				// it are the lz4_0padding feature's.
				copy(cluster[blockSize-w:], cluster[:w])
				clear(cluster[:blockSize-w])
				e.size = int64(took)
				exts = append(exts, e)
				pos += took
				at += blockSize
				continue
			}
		}
		// Too little to gain from: the next block as it is.
		n := copy(cluster, in[pos:min(len(in), pos+blockSize)])
		clear(cluster[n:])
		e.size, e.plain = int64(n), true
		exts = append(exts, e)
		pos += n
		at += blockSize
	}
	out = out[:at]
	if s.off == 0 && s.last && s.keepPlain(len(out)) {
		s.blocks, s.plain = append(out[:0], in...), true
		return
	}
	s.blocks, s.extents, s.compressed = out, exts, true
}

// bufPool holds the buffers segments are written from, handed back once
// written, so a write does not allocate (and collect) one per segment.
type bufPool struct{ p sync.Pool }

// get returns a buffer of n bytes, of any content.
func (bp *bufPool) get(n int) []byte {
	if p, ok := bp.p.Get().(*[]byte); ok && cap(*p) >= n {
		return (*p)[:n]
	}
	return make([]byte, n, max(n, 64<<10))
}

// put hands a buffer back.
func (bp *bufPool) put(b []byte) { bp.p.Put(&b) }

// compressAll runs the workers over the segments and hands each segment,
// in order, to write as soon as it and those before it are done. At most a
// few segments per worker are in memory at once.
func compressAll(ctx context.Context, t *rootfs.Sealed, o *Options, segs []*segment, write func(*segment) error) error {
	ctx, cancel := context.WithCancel(ctx)
	settings, _ := o.Compression.encoderSettings()
	work := make(chan *segment)
	window := make(chan struct{}, 2*o.Workers+2)
	bufs := &bufPool{}
	var wg sync.WaitGroup
	for range o.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &compressor{t: t, bufs: bufs, store: o.Segments, keyed: o.Segments != nil || o.Filed != nil, summed: o.Filed != nil}
			if o.Compression != None {
				c.enc = lz4.NewEncoder(settings)
			}
			for s := range work {
				c.work(s, o.Compression)
				close(s.done)
			}
		}()
	}
	go func() {
		defer close(work)
		for _, s := range segs {
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case work <- s:
			case <-ctx.Done():
				return
			}
		}
	}()
	// Stop the feeder before waiting for the workers it feeds.
	defer func() {
		cancel()
		wg.Wait()
	}()
	for _, s := range segs {
		select {
		case <-s.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if s.err != nil {
			return fmt.Errorf("erofs: %w", s.err)
		}
		if err := write(s); err != nil {
			return err
		}
		bufs.put(s.blocks)
		s.blocks, s.extents = nil, nil
		<-window
	}
	return nil
}
