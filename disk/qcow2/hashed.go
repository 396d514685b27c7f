package qcow2

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// An uncompressed image's layout follows from which guest clusters hold
// data alone: the k-th of them in guest order is host cluster k+1, and the
// tables come after. So the header can be written first and the image
// hashed as it is written, once a first pass has found those clusters.
// Both passes read the raw disk in runs of clusters into buffers of their
// own: given a hashio.DirectReader, past the page cache, since a raw disk
// of gigabytes is written past it too and read twice here, at some 3 GB/s
// from the device.

// runClusters bounds one read, and one write, of consecutive clusters, so
// that hashing overlaps writing.
const runClusters = 64

// readRun reads guest clusters first to last of the raw disk src of size
// bytes into buf; the last may be partial.
func readRun(src io.ReaderAt, buf []byte, first, last uint64, size int64) ([]byte, error) {
	off := int64(first) * clusterSize
	run := buf[:min(int64(last+1)*clusterSize, size)-off]
	if n, err := src.ReadAt(run, off); n < len(run) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("qcow2: reading the raw disk at %d: %w", off, err)
	}
	return run, nil
}

// writeHashed writes the uncompressed image of the raw disk src of size
// bytes, header first and in order, and hashes it as it goes.
func (wr *writer) writeHashed(ctx context.Context, w io.WriterAt, src io.ReaderAt, size int64) error {
	extents := disk.DataExtents(src, size)
	// The hasher reads a run on its own goroutine while the next ones are
	// read: each buffer is read into again only once the hasher is done
	// with it.
	ring := make([][]byte, hashio.MaxPending+1)
	for i := range ring {
		ring[i] = hashio.AlignedBuffer(runClusters * clusterSize)
	}
	var sh *sourceHash
	if wr.opts.HashSource {
		sh = newSourceHash(size)
		defer sh.close()
	}
	var data []uint64
	var next uint64
	for _, e := range extents {
		end := uint64((e.Off + e.Len + clusterSize - 1) / clusterSize)
		for c := max(uint64(e.Off/clusterSize), next); c < end; c += runClusters {
			if err := ctx.Err(); err != nil {
				return err
			}
			last := min(c+runClusters, end) - 1
			buf := ring[0]
			if sh != nil {
				buf = sh.buffer()
			}
			run, err := readRun(src, buf, c, last, size)
			if err != nil {
				return err
			}
			for g := c; g <= last; g++ {
				if !disk.IsZero(run[(g-c)*clusterSize : min((g-c+1)*clusterSize, uint64(len(run)))]) {
					data = append(data, g)
				}
			}
			if sh != nil {
				sh.add(int64(c)*clusterSize, run, buf)
			}
		}
		next = max(next, end)
	}
	if sh != nil {
		// The rest, holes to the end, is hashed while the image is
		// written.
		sh.end()
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
	for i, k := 0, 0; i < len(data) && hw.err == nil; k = (k + 1) % len(ring) {
		if err := ctx.Err(); err != nil {
			return err
		}
		j := i + 1
		for j < len(data) && j-i < runClusters && data[j] == data[j-1]+1 {
			j++
		}
		// Every run writes at least once to the hasher, so the one
		// len(ring) runs back is done once at most len(ring)-1 are not.
		hw.h.Settle(len(ring) - 1)
		run, err := readRun(src, ring[k], data[i], data[j-1], size)
		if err != nil {
			return err
		}
		// The i-th data cluster is host cluster i+1. A partial last
		// cluster needs no padding: the tables after it leave its rest a
		// hole, which reads, and hashes, as zeros.
		hw.write(run, int64(i+1)*clusterSize)
		if wr.opts.Progress != nil {
			wr.opts.Progress(int64(len(run)))
		}
		i = j
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
	if sh != nil {
		wr.stats.SourceSHA256 = sh.sum()
	}
	return nil
}

// sourceHash hashes the raw disk from what the first pass reads, on a
// goroutine of its own, its holes as zeros: the runs come in increasing
// order, and what lies between them is holes. A raw disk is mostly holes
// (the node's: 4.3 GB, 1.9 GB of data), so hashing it takes longer than
// reading it, and the goroutine goes on with the holes at the end while
// the image is written.
type sourceHash struct {
	size   int64
	pieces chan sourcePiece
	free   chan []byte // buffers the first pass may read into
	done   chan struct{}
	hex    string
}

type sourcePiece struct {
	off int64
	b   []byte // nil for the end
	buf []byte // what b is read into, handed back once hashed
}

func newSourceHash(size int64) *sourceHash {
	n := hashio.MaxPending + 1
	sh := &sourceHash{size: size, pieces: make(chan sourcePiece, n), free: make(chan []byte, n), done: make(chan struct{})}
	for range n {
		sh.free <- hashio.AlignedBuffer(runClusters * clusterSize)
	}
	go sh.run()
	return sh
}

func (sh *sourceHash) run() {
	defer close(sh.done)
	h := sha256.New()
	zeros := make([]byte, 1<<20)
	var pos int64
	fill := func(to int64) {
		for pos < to {
			n := min(to-pos, int64(len(zeros)))
			h.Write(zeros[:n])
			pos += n
		}
	}
	ok := true
	for p := range sh.pieces {
		if p.b == nil {
			if ok && pos <= sh.size {
				fill(sh.size)
				sh.hex = hex.EncodeToString(h.Sum(nil))
			}
			continue
		}
		// Runs overlap nothing before them; one that did would leave the
		// sum unknown, not wrong.
		ok = ok && p.off >= pos
		if ok {
			fill(p.off)
			h.Write(p.b)
			pos += int64(len(p.b))
		}
		sh.free <- p.buf
	}
}

// buffer is a buffer to read the next run into.
func (sh *sourceHash) buffer() []byte { return <-sh.free }

// add hands over the run b read at off into buf.
func (sh *sourceHash) add(off int64, b, buf []byte) {
	sh.pieces <- sourcePiece{off: off, b: b, buf: buf}
}

// end says every run has been handed over.
func (sh *sourceHash) end() { sh.pieces <- sourcePiece{} }

// sum waits for the hash: "" when the runs did not make a whole disk.
func (sh *sourceHash) sum() string {
	sh.close()
	return sh.hex
}

// close stops the goroutine once it is done with what it was handed.
func (sh *sourceHash) close() {
	select {
	case <-sh.done:
	default:
		close(sh.pieces)
		<-sh.done
	}
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
