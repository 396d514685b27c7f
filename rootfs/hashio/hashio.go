// Package hashio moves SHA-256 hashing and bulk I/O onto goroutines of their
// own. Every byte stamp writes is hashed at least once (the index's content
// digest, the cache's verifying read, the output's sum); done in line, the
// hashing adds to the time the kernel spends copying the same bytes. On a
// machine with a second core these helpers overlap the two, which is what
// lets a build keep pace with a single-threaded `tar -x | tar -c`. The
// outputs of gigabytes are written, and read back (the raw disk, the parts
// taken from the last build's outputs), past the page cache (direct.go).
package hashio

import (
	"crypto/sha256"
	"hash"
)

// Hasher hashes the chunks handed to it on a goroutine of its own, in the
// order they were handed over. A chunk handed to Write must not change until
// Settle says it is done. Not safe for concurrent use by several feeders.
type Hasher struct {
	h       hash.Hash
	jobs    chan []byte
	acks    chan struct{}
	pending int
}

// MaxPending bounds the chunks in flight: once Write has handed a chunk
// over, every chunk handed over MaxPending or more Writes before it is
// hashed. A feeder that double-buffers needs two.
const MaxPending = 4

// NewHasher starts the hashing goroutine. Close stops it.
func NewHasher() *Hasher {
	h := &Hasher{
		h:    sha256.New(),
		jobs: make(chan []byte, MaxPending),
		acks: make(chan struct{}, MaxPending),
	}
	go func() {
		for p := range h.jobs {
			h.h.Write(p)
			h.acks <- struct{}{}
		}
	}()
	return h
}

// inlineMax is the largest chunk hashed on the caller's goroutine: waking
// another goroutine costs more than hashing a few kilobytes.
const inlineMax = 16 << 10

// Write hands p over for hashing and returns at once, unless MaxPending
// chunks are already in flight. Small chunks are hashed before Write
// returns.
func (h *Hasher) Write(p []byte) {
	if len(p) == 0 {
		return
	}
	if len(p) <= inlineMax {
		// The goroutine is idle after Settle(0), so its hash is ours.
		h.Settle(0)
		h.h.Write(p)
		return
	}
	h.Settle(MaxPending - 1)
	h.jobs <- p
	h.pending++
}

// Settle waits until at most n of the chunks handed over are still being
// hashed; the earliest are finished first. Settle(0) makes every chunk free
// to reuse.
func (h *Hasher) Settle(n int) {
	for h.pending > n {
		<-h.acks
		h.pending--
	}
}

// Sum waits for every chunk, returns the digest of all of them and starts
// afresh.
func (h *Hasher) Sum() [sha256.Size]byte {
	h.Settle(0)
	var s [sha256.Size]byte
	h.h.Sum(s[:0])
	h.h.Reset()
	return s
}

// Close waits for the chunks in flight and stops the goroutine.
func (h *Hasher) Close() {
	h.Settle(0)
	close(h.jobs)
}
