package qcow2

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Reader reads the guest disk of a qcow2 image. It is safe for concurrent
// use.
type Reader struct {
	r     io.ReaderAt
	size  int64
	cbits uint32
	cs    int64
	l1    []uint64

	mu      sync.Mutex
	l2      map[uint64][]uint64 // by L2 table offset; a small cache
	lastOff uint64              // the compressed descriptor decoded last
	last    []byte
}

// maxL1 bounds the L1 table a reader loads, as qemu does (32 MiB).
const maxL1 = 32 << 20

// Open reads the header and L1 table of the qcow2 image in r.
func Open(r io.ReaderAt) (*Reader, error) {
	b := make([]byte, headerLength)
	if k, err := r.ReadAt(b, 0); k < 104 {
		return nil, fmt.Errorf("qcow2: reading the header: %w", err)
	}
	h, bits, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	q := &Reader{r: r, size: int64(h.size), cbits: bits, cs: 1 << bits, l2: map[uint64][]uint64{}}
	entries := uint64(q.cs / 8)
	need := (uint64(h.size) + uint64(q.cs) - 1) / uint64(q.cs)
	need = (need + entries - 1) / entries
	if uint64(h.l1Size) < need {
		return nil, fmt.Errorf("qcow2: %d L1 entries cannot map %d bytes", h.l1Size, h.size)
	}
	if uint64(h.l1Size)*8 > maxL1 {
		return nil, fmt.Errorf("qcow2: an L1 table of %d entries is larger than this reader loads", h.l1Size)
	}
	raw := make([]byte, int(h.l1Size)*8)
	if _, err := r.ReadAt(raw, int64(h.l1Offset)); err != nil {
		return nil, fmt.Errorf("qcow2: reading the L1 table: %w", err)
	}
	q.l1 = make([]uint64, h.l1Size)
	for i := range q.l1 {
		q.l1[i] = binary.BigEndian.Uint64(raw[i*8:])
	}
	return q, nil
}

// Size is the size of the guest disk in bytes.
func (q *Reader) Size() int64 { return q.size }

// ReadAt reads the guest disk.
func (q *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("qcow2: negative offset")
	}
	n := 0
	for n < len(p) {
		at := off + int64(n)
		if at >= q.size {
			return n, io.EOF
		}
		in := at % q.cs
		k := int(min(int64(len(p)-n), q.cs-in, q.size-at))
		if err := q.readIn(p[n:n+k], at/q.cs, in); err != nil {
			return n, err
		}
		n += k
	}
	return n, nil
}

// readIn fills p from guest cluster c, starting in it at in.
func (q *Reader) readIn(p []byte, c, in int64) error {
	entries := q.cs / 8
	l1 := q.l1[c/entries] & offsetMask
	if l1 == 0 {
		clear(p)
		return nil
	}
	t, err := q.table(l1)
	if err != nil {
		return err
	}
	e := t[c%entries]
	if e&oflagCompressed != 0 {
		b, err := q.decompress(e)
		if err != nil {
			return fmt.Errorf("qcow2: guest cluster %d: %w", c, err)
		}
		copy(p, b[in:])
		return nil
	}
	host := e & offsetMask
	if host == 0 || e&oflagZero != 0 {
		clear(p)
		return nil
	}
	if _, err := q.r.ReadAt(p, int64(host)+in); err != nil {
		return fmt.Errorf("qcow2: guest cluster %d at %d: %w", c, host, err)
	}
	return nil
}

func (q *Reader) table(off uint64) ([]uint64, error) {
	q.mu.Lock()
	t := q.l2[off]
	q.mu.Unlock()
	if t != nil {
		return t, nil
	}
	raw := make([]byte, q.cs)
	if _, err := q.r.ReadAt(raw, int64(off)); err != nil {
		return nil, fmt.Errorf("qcow2: L2 table at %d: %w", off, err)
	}
	t = make([]uint64, q.cs/8)
	for i := range t {
		t[i] = binary.BigEndian.Uint64(raw[i*8:])
	}
	q.mu.Lock()
	if len(q.l2) >= 64 {
		clear(q.l2)
	}
	q.l2[off] = t
	q.mu.Unlock()
	return t, nil
}

func (q *Reader) decompress(e uint64) ([]byte, error) {
	shift := 62 - (q.cbits - 8)
	coff := e & (1<<shift - 1)
	nsect := (e>>shift)&(1<<(q.cbits-8)-1) + 1
	q.mu.Lock()
	if q.last != nil && q.lastOff == e {
		b := q.last
		q.mu.Unlock()
		return b, nil
	}
	q.mu.Unlock()
	// The descriptor covers whole sectors from the one holding coff; the
	// stream ends before that, and inflate stops at its end.
	raw := make([]byte, int64(nsect)*sector-int64(coff%sector))
	k, err := q.r.ReadAt(raw, int64(coff))
	if k == 0 && err != nil {
		return nil, fmt.Errorf("compressed data at %d: %w", coff, err)
	}
	out := make([]byte, q.cs)
	fr := flate.NewReader(bytes.NewReader(raw[:k]))
	if _, err := io.ReadFull(fr, out); err != nil {
		return nil, fmt.Errorf("compressed data at %d: %w", coff, err)
	}
	q.mu.Lock()
	q.lastOff, q.last = e, out
	q.mu.Unlock()
	return out, nil
}
