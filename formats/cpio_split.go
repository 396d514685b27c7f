package formats

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"runtime"
	"slices"
	"sync"

	"github.com/u-root/u-root/pkg/cpio"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// cpioPartSize is about how many bytes of archive (headers, names and
// content) each part of a split initramfs holds before the next part
// starts. Each part's compression starts without the history of the parts
// before it: measured on the node's tree (1.8 GB), parts of 16 MiB make
// the zstd initramfs 0.2% to 0.4% larger than one stream, parts of 8 MiB
// 0.8%.
const cpioPartSize = 16 << 20

// cpioPart is the items [start, end) of an archive, written as an archive
// of their own.
type cpioPart struct {
	start, end int
	size       int64    // bytes of archive, before compression
	out        *partBuf // the part, compressed
	key        string   // cpioPartKey, when parts are filed or reused
	sum        string   // part sum of out (hashio.PartSum), when parts are filed
	err        error
	done       chan struct{}
}

// cpioParts cuts items, sorted and planned, into parts of about
// partSize. A cut never separates the paths of a hard-link group: the
// kernel forgets the inode numbers it has seen at each archive's trailer.
// Where the cuts fall depends only on the items.
func cpioParts(items []cpioItem, plan *cpioPlan, partSize int64) []*cpioPart {
	var parts []*cpioPart
	start, reach := 0, -1 // reach: the last index of any inode seen so far
	var size int64
	for i, it := range items {
		if i > start && size >= partSize && reach < i {
			parts = append(parts, &cpioPart{start: start, end: i, size: size, done: make(chan struct{})})
			start, size = i, 0
		}
		size += cpioHeaderLen + int64(len(it.path)) + 1
		if it.in.Type == rootfs.TypeRegular && plan.last[it.in] == i {
			size += it.in.Size
		}
		reach = max(reach, plan.last[it.in])
	}
	return append(parts, &cpioPart{start: start, end: len(items), size: size, done: make(chan struct{})})
}

// writeCpioSplit writes items, which must be sorted by path and unique, as
// a series of complete newc archives (cpioParts), each compressed with alg
// as a stream of its own, one after another (0 for workers means one per
// core, for partSize cpioPartSize): what the kernel's initramfs
// unpacker reads as it reads one archive (it unpacks concatenated archives
// in turn, and a hard-link group never spans two). The parts are written
// and compressed on every core; each part's bytes depend only on its items
// and alg, and the parts are joined in order, so the output depends on
// neither the number of cores nor the timing. Inode numbers are counted
// over the whole series, as in one archive.
//
// A part store, when given, supplies each part it holds under the part's
// key (cpioPartKey) instead of its being compressed; filed, when set, gets
// every part with its key, its offset in w's stream and its sha256.
func writeCpioSplit(ctx context.Context, w io.Writer, alg compress.Algorithm, items []cpioItem, workers int, partSize int64, store PartStore, filed *[]FilePart) error {
	plan, err := planCpio(items)
	if err != nil {
		return err
	}
	if workers < 1 {
		workers = runtime.GOMAXPROCS(0)
	}
	if partSize <= 0 {
		partSize = cpioPartSize
	}
	parts := cpioParts(items, plan, partSize)
	ctx, cancel := context.WithCancel(ctx)
	// Parts of at most budget bytes together (or a single larger one) are
	// in the workers' hands or held, compressed, at once: a part holding
	// an already compressed file (an image layer) is as large compressed.
	// They are held in chunks that later parts use again.
	budget := int64(workers+1) * partSize
	released := make(chan int64, len(parts))
	chunks := &chunkPool{free: make(chan []byte, budget/partChunk)}
	work := make(chan *cpioPart)
	var wg sync.WaitGroup
	// Cancel before waiting: on an early return (a part failed, the
	// output refused a write) the feeder may be waiting for parts to be
	// released, and the workers for it.
	defer func() {
		cancel()
		wg.Wait()
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pw := &cpioPartWriter{alg: alg, items: items, plan: plan, probe: make([]byte, 1),
				store: store, keyed: store != nil || filed != nil, summed: filed != nil}
			for p := range work {
				p.out = &partBuf{pool: chunks}
				p.err = pw.write(ctx, p)
				close(p.done)
			}
		}()
	}
	go func() {
		defer close(work)
		var held int64
		for _, p := range parts {
			for held > 0 && held+p.size > budget {
				select {
				case n := <-released:
					held -= n
				case <-ctx.Done():
					return
				}
			}
			held += p.size
			select {
			case work <- p:
			case <-ctx.Done():
				return
			}
		}
	}()
	var off int64
	for _, p := range parts {
		select {
		case <-p.done:
		case <-ctx.Done():
			return ctx.Err()
		}
		if p.err != nil {
			return p.err
		}
		n := p.out.len()
		if filed != nil && p.key != "" {
			*filed = append(*filed, FilePart{Key: p.key, Offset: off, Size: n, Sum: p.sum})
		}
		off += n
		for _, c := range p.out.chunks {
			if _, err := w.Write(c); err != nil {
				return fmt.Errorf("cpio: %w", err)
			}
			chunks.put(c)
		}
		p.out = nil
		released <- p.size
	}
	return nil
}

// partChunk is the size of the chunks a compressed part is held in.
const partChunk = 1 << 20

// chunkPool keeps chunks for later parts, up to a bound.
type chunkPool struct{ free chan []byte }

func (cp *chunkPool) get() []byte {
	select {
	case c := <-cp.free:
		return c[:0]
	default:
		return make([]byte, 0, partChunk)
	}
}

func (cp *chunkPool) put(c []byte) {
	select {
	case cp.free <- c:
	default:
	}
}

// partBuf holds a compressed part in chunks: it grows without copying.
type partBuf struct {
	pool   *chunkPool
	chunks [][]byte
}

func (pb *partBuf) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		last := len(pb.chunks) - 1
		if last < 0 || len(pb.chunks[last]) == cap(pb.chunks[last]) {
			pb.chunks = append(pb.chunks, pb.pool.get())
			last++
		}
		c := pb.chunks[last]
		k := min(len(p), cap(c)-len(c))
		pb.chunks[last] = append(c, p[:k]...)
		p = p[k:]
	}
	return n, nil
}

// len is how many bytes the part holds.
func (pb *partBuf) len() int64 {
	var n int64
	for _, c := range pb.chunks {
		n += int64(len(c))
	}
	return n
}

// reset discards what the part holds.
func (pb *partBuf) reset() {
	for _, c := range pb.chunks {
		pb.pool.put(c)
	}
	pb.chunks = nil
}

// sum is the part sum of what the part holds.
func (pb *partBuf) sum() string {
	h := hashio.NewPartSum()
	for _, c := range pb.chunks {
		h.Write(c)
	}
	return hashio.PartSumHex(h)
}

// bytes is the part, joined (for tests).
func (pb *partBuf) bytes() []byte { return slices.Concat(pb.chunks...) }

// cpioPartWriter is one worker's: it writes parts one after another.
type cpioPartWriter struct {
	alg   compress.Algorithm
	items []cpioItem
	plan  *cpioPlan
	probe []byte
	// zw is the zstd encoder of the last part, which Reset makes a new
	// one's equal ("a new, independent stream"), without its tables and
	// window allocated again for every part.
	zw io.WriteCloser
	// store supplies parts compressed before; keyed computes each part's
	// key, summed its part sum.
	store         PartStore
	keyed, summed bool
}

// write writes the items of p as one compressed archive into p.out, or
// takes it from the part store.
func (pw *cpioPartWriter) write(ctx context.Context, p *cpioPart) error {
	if pw.keyed {
		p.key = cpioPartKey(pw.alg, pw.items, p.start, p.end, pw.plan)
	}
	if pw.store != nil && p.key != "" {
		if _, ok := pw.store.Part(p.key, p.out); ok {
			if pw.summed {
				p.sum = p.out.sum()
			}
			return nil
		}
		p.out.reset()
	}
	if err := pw.compress(ctx, p); err != nil {
		return err
	}
	if pw.summed {
		p.sum = p.out.sum()
	}
	return nil
}

// cpioPartKey names what the part [start, end) of items holds before
// compression: every header as the archive holds it, each file's content
// by its sha256, and the codec. Compression is deterministic, so two parts
// with one key compress to the same bytes (under one stamp: the conductor
// keeps parts apart by stamp's own digest). "" when a file's content has
// no digest to name it by.
func cpioPartKey(alg compress.Algorithm, items []cpioItem, start, end int, plan *cpioPlan) string {
	h := sha256.New()
	fmt.Fprintf(h, "stamp cpio part 1 %s\n", alg)
	for i := start; i < end; i++ {
		it := &items[i]
		last := i == plan.last[it.in]
		r := cpioHeader(it, plan, last)
		var content string
		switch {
		case it.in.Type == rootfs.TypeSymlink:
			content = it.in.Target
		case it.in.Type == rootfs.TypeRegular && last:
			if it.in.Digest == "" {
				return ""
			}
			content = it.in.Digest
		}
		fmt.Fprintf(h, "%d %o %d %d %d %d %d %d %d %q %q\n", r.Ino, r.Mode, r.UID, r.GID, r.NLink, r.MTime, r.FileSize, r.Rmajor, r.Rminor, r.Name, content)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// compress writes the items of p as one compressed archive into p.out.
func (pw *cpioPartWriter) compress(ctx context.Context, p *cpioPart) error {
	var cw io.WriteCloser
	if r, ok := pw.zw.(interface{ Reset(io.Writer) }); ok {
		r.Reset(p.out)
		cw = pw.zw
	} else {
		var err error
		if cw, err = compress.NewWriter(pw.alg, p.out, compress.WriterOptions{XZCheckCRC32: true}); err != nil {
			return fmt.Errorf("cpio: %w", err)
		}
		if pw.alg == compress.Zstd {
			pw.zw = cw
		}
	}
	if err := writeCpioRecords(ctx, cpio.Newc.Writer(cw), pw.items, p.start, p.end, pw.plan, pw.probe); err != nil {
		return err
	}
	if err := cw.Close(); err != nil {
		return fmt.Errorf("cpio: %s: %w", pw.alg, err)
	}
	return nil
}
