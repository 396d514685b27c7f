package qcow2

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// An uncompressed image's layout follows from which guest clusters hold
// data alone: the k-th of them in guest order is host cluster k+1, and the
// tables come after. So the header can be written first and the image
// hashed as it is written, once a first pass has found those clusters.
// The raw disk is mapped rather than read, so that the two passes cost no
// copy: the first only looks at the pages, the second hands them to the
// kernel to write and to the hasher.

// runClusters bounds one write of consecutive clusters, so that hashing
// overlaps writing.
const runClusters = 64

// mappedRaw is the raw disk mapped whole. Mapped pages count in the
// process's resident set as they are touched, so each pass lets go of
// what it is done with (MADV_DONTNEED: the pages stay in the page cache):
// a disk of gigabytes would otherwise swell it by as much.
type mappedRaw struct {
	m    []byte
	size int64
}

// mapRaw maps the first size bytes of f, or says why it cannot: past the
// end of the file a mapping faults instead of reading.
func mapRaw(f *os.File, size int64) (*mappedRaw, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if size <= 0 || st.Size < size || int64(int(size)) != size {
		return nil, fmt.Errorf("qcow2: %d bytes of a %d-byte file cannot be mapped", size, st.Size)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, err
	}
	return &mappedRaw{m: m, size: size}, nil
}

// clusters returns guest clusters first to last; the last may be partial.
func (r *mappedRaw) clusters(first, last uint64) []byte {
	return r.m[int64(first)*clusterSize : min(int64(last+1)*clusterSize, r.size)]
}

// done lets go of the pages of b, a slice of the mapping nothing reads any
// more.
func (r *mappedRaw) done(b []byte) {
	if len(b) > 0 {
		unix.Madvise(b, unix.MADV_DONTNEED)
	}
}

// populate maps the pages of b, a slice of the mapping, before they are
// written out. The kernel copies a write's source without taking a fault;
// where a page is not mapped it gives up, zeroes the page cache it was
// filling, halves its chunk, faults the page in and copies again. The
// hasher, reading the same run, maps the pages too, but on two busy cores
// it lags behind the write. In a node rebuild populating first took the
// qcow2's kernel time from 4.05 to 3.12 s of CPU (perf), the zeroing from
// 0.66 to 0.1 s of it. Before Linux 5.14, which lacks MADV_POPULATE_READ, the
// write faults the pages in as before.
func (r *mappedRaw) populate(b []byte) {
	if len(b) > 0 {
		unix.Madvise(b, unix.MADV_POPULATE_READ)
	}
}

func (r *mappedRaw) unmap() { unix.Munmap(r.m) }

// writeHashed writes the uncompressed image of the raw disk r (whose holes
// src, the same file, tells), header first and in order, and hashes it as
// it goes.
func (wr *writer) writeHashed(ctx context.Context, w io.WriterAt, src io.ReaderAt, r *mappedRaw) error {
	size := r.size
	var data []uint64
	var next uint64
	for _, e := range disk.DataExtents(src, size) {
		end := uint64((e.Off + e.Len + clusterSize - 1) / clusterSize)
		for c := max(uint64(e.Off/clusterSize), next); c < end; c += runClusters {
			if err := ctx.Err(); err != nil {
				return err
			}
			last := min(c+runClusters, end) - 1
			for g := c; g <= last; g++ {
				if !disk.IsZero(r.clusters(g, g)) {
					data = append(data, g)
				}
			}
			r.done(r.clusters(c, last))
		}
		next = max(next, end)
	}
	for _, c := range data {
		wr.set(c, oflagCopied|uint64(wr.pos))
		wr.ref(wr.pos, wr.pos+clusterSize)
		wr.pos += clusterSize
	}
	t, err := wr.layoutTables(size)
	if err != nil {
		return err
	}

	hw := &hashingWriter{w: w, h: hashio.NewHasher(), zeros: make([]byte, clusterSize)}
	defer hw.h.Close()
	hw.write(t.header, 0)
	// Once a run is handed to the hasher, those before the last
	// hashio's in-flight bound are hashed: their pages can go.
	var handed [][]byte
	for i := 0; i < len(data) && hw.err == nil; {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := i + 1
		for k < len(data) && k-i < runClusters && data[k] == data[k-1]+1 {
			k++
		}
		// The k-th data cluster is host cluster k+1. A partial last
		// cluster needs no padding: the tables after it leave its rest a
		// hole, which reads, and hashes, as zeros.
		run := r.clusters(data[i], data[k-1])
		r.populate(run)
		hw.write(run, int64(i+1)*clusterSize)
		if handed = append(handed, run); len(handed) > hashio.MaxPending {
			r.done(handed[0])
			handed = handed[1:]
		}
		if wr.opts.Progress != nil {
			wr.opts.Progress(int64(len(run)))
		}
		i = k
	}
	for _, p := range t.pieces {
		hw.write(p.b, p.off)
	}
	if hw.err != nil {
		return hw.err
	}
	sum := hw.h.Sum()
	wr.stats.FileSize = wr.pos
	wr.stats.SHA256 = hex.EncodeToString(sum[:])
	return nil
}

// hashingWriter writes at increasing offsets and hashes the file it makes,
// the holes it leaves between writes as zeros. What it writes must not
// change until the hash is summed: the hasher reads it on its own
// goroutine.
type hashingWriter struct {
	w     io.WriterAt
	h     *hashio.Hasher
	pos   int64
	zeros []byte // never written to
	err   error
}

func (hw *hashingWriter) write(b []byte, off int64) {
	if hw.err != nil {
		return
	}
	if off < hw.pos {
		hw.err = fmt.Errorf("qcow2: a write at %d after one that ended at %d", off, hw.pos)
		return
	}
	for gap := off - hw.pos; gap > 0; {
		n := min(gap, int64(len(hw.zeros)))
		hw.h.Write(hw.zeros[:n])
		gap -= n
	}
	hw.h.Write(b)
	if _, err := hw.w.WriteAt(b, off); err != nil {
		hw.err = fmt.Errorf("qcow2: writing at %d: %w", off, err)
		return
	}
	hw.pos = off + int64(len(b))
}
