package erofs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// An image is written in order from block 1 to its end, and its superblock,
// block 0, last: the superblock names where the metadata starts and how
// many blocks there are, which only the end of the writing knows. So the
// image cannot be hashed as it is written unless block 0 is known first.
// After a change that moves no block (a file edited in place of the same
// size class, the common rebuild) block 0 comes out as the last image of
// the same output had it: the writer files it as a part, takes it from the
// SegmentStore as its guess, hashes it and then every block as it goes, and
// keeps the sum only if the superblock it writes is the one it guessed.
// Otherwise the caller hashes the file as before.

// metaSuperblock is the Meta of a filed superblock.
const metaSuperblock = "superblock"

// superblockKey is the key block 0 of an image is filed under: the
// image's UUID, its label and codec name the output it is the superblock of.
func superblockKey(o *Options) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "stamp erofs superblock 1 %x %q %s", o.UUID, o.Label, o.Compression))
	return hex.EncodeToString(sum[:])
}

// guessSuperblock is block 0 as the last image the store knows had it, or
// nil.
func guessSuperblock(o *Options) []byte {
	if o.Segments == nil {
		return nil
	}
	var b bytes.Buffer
	meta, ok := o.Segments.Part(superblockKey(o), &b)
	if !ok || meta != metaSuperblock || b.Len() != blockSize {
		return nil
	}
	return b.Bytes()
}

// streamHash hashes what a blockWriter writes, block 0 taken as guessed.
type streamHash struct {
	h     *hashio.Hasher
	guess []byte
	next  int64 // the next block to hash
	// inOrder says every write after block 0's guess came at the block
	// after the last; super that the written superblock was the guess.
	inOrder, super bool
	// ring holds the buffers handed to the hasher: one is written into
	// again only once the hasher is done with it (hashio.MaxPending).
	ring [hashio.MaxPending + 1][]byte
	k    int
}

func newStreamHash(guess []byte) *streamHash {
	sh := &streamHash{h: hashio.NewHasher(), guess: guess, next: 1, inOrder: true}
	sh.h.Write(guess)
	return sh
}

// add hashes b, written at block blk, and returns a buffer to gather the
// next blocks into in place of b, which the hasher may still be reading.
func (sh *streamHash) add(blk int64, b []byte) []byte {
	switch {
	case sh.inOrder && blk == sh.next:
		sh.h.Write(b)
		sh.next += int64(len(b)) / blockSize
	case blk == 0:
		sh.super = bytes.Equal(b, sh.guess)
		fallthrough
	default:
		sh.inOrder = sh.inOrder && blk == 0
		// b was not handed over, so the ring's next buffer may have
		// been handed fewer than MaxPending Writes ago.
		sh.h.Settle(0)
	}
	sh.ring[sh.k] = b
	sh.k = (sh.k + 1) % len(sh.ring)
	if sh.ring[sh.k] == nil {
		sh.ring[sh.k] = make([]byte, 0, writeChunk)
	}
	return sh.ring[sh.k][:0]
}

// sum is the image's hex sha256 if it was hashed whole, block 0 as it was
// written: blocks in all, the last of them written (a file that long).
func (sh *streamHash) sum(blocks, end int64) string {
	if !sh.inOrder || !sh.super || sh.next != blocks || end != blocks*blockSize {
		return ""
	}
	s := sh.h.Sum()
	return hex.EncodeToString(s[:])
}

func (sh *streamHash) close() { sh.h.Close() }
