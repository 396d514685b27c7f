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

// windowClusters is how much of the raw disk is mapped at a time: mapped
// pages count in the process's resident set, which a whole disk of
// gigabytes would swell for no gain.
const windowClusters = 1024

// rawWindows maps the raw disk a window at a time.
type rawWindows struct {
	fd   int
	size int64
	win  int64 // the window mapped, or -1
	m    []byte
	// release is called before a window is unmapped: nothing may still
	// read it.
	release func()
}

// mapRaw checks that the first size bytes of f can be mapped (past the
// end of the file a mapping faults instead of reading) and maps the first
// window.
func mapRaw(f *os.File, size int64) (*rawWindows, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, err
	}
	if size <= 0 || st.Size < size {
		return nil, fmt.Errorf("qcow2: %d bytes of a %d-byte file cannot be mapped", size, st.Size)
	}
	r := &rawWindows{fd: int(f.Fd()), size: size, win: -1, release: func() {}}
	if _, err := r.clusters(0, 0); err != nil {
		return nil, err
	}
	return r, nil
}

// clusters returns guest clusters first to last, which must be in one
// window; the last may be partial.
func (r *rawWindows) clusters(first, last uint64) ([]byte, error) {
	w := int64(first / windowClusters)
	if int64(last/windowClusters) != w {
		return nil, fmt.Errorf("qcow2: clusters %d to %d span two windows", first, last)
	}
	base := w * windowClusters * clusterSize
	if w != r.win {
		r.unmap()
		m, err := unix.Mmap(r.fd, base, int(min(windowClusters*clusterSize, r.size-base)), unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			return nil, fmt.Errorf("qcow2: mapping the raw disk at %d: %w", base, err)
		}
		r.win, r.m = w, m
	}
	return r.m[int64(first)*clusterSize-base : min(int64(last+1)*clusterSize, r.size)-base], nil
}

func (r *rawWindows) unmap() {
	if r.m != nil {
		r.release()
		unix.Munmap(r.m)
		r.win, r.m = -1, nil
	}
}

// writeHashed writes the uncompressed image of the raw disk r (whose holes
// src, the same file, tells), header first and in order, and hashes it as
// it goes.
func (wr *writer) writeHashed(ctx context.Context, w io.WriterAt, src io.ReaderAt, r *rawWindows) error {
	size := r.size
	var data []uint64
	var next uint64
	for _, e := range disk.DataExtents(src, size) {
		end := uint64((e.Off + e.Len + clusterSize - 1) / clusterSize)
		for c := max(uint64(e.Off/clusterSize), next); c < end; c++ {
			if c%runClusters == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			b, err := r.clusters(c, c)
			if err != nil {
				return err
			}
			if !disk.IsZero(b) {
				data = append(data, c)
			}
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
	r.release = func() { hw.h.Settle(0) }
	hw.write(t.header, 0)
	for i := 0; i < len(data) && hw.err == nil; {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := i + 1
		for k < len(data) && k-i < runClusters && data[k] == data[k-1]+1 && data[k]/windowClusters == data[i]/windowClusters {
			k++
		}
		// The k-th data cluster is host cluster k+1. A partial last
		// cluster needs no padding: the tables after it leave its rest a
		// hole, which reads, and hashes, as zeros.
		run, err := r.clusters(data[i], data[k-1])
		if err != nil {
			return err
		}
		hw.write(run, int64(i+1)*clusterSize)
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
