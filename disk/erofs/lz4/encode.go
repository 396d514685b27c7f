// Package lz4 reads and writes LZ4 blocks as EROFS stores them: each
// physical cluster is one raw LZ4 block (no frame, no dictionary) that
// decompresses to a known length.
//
// The encoder works the other way round from an ordinary one: it is given
// room for a fixed number of bytes and takes as much of its input as fits
// ("destination size" mode, as LZ4_compress_HC_destSize does), because EROFS
// fills fixed-size clusters with variable amounts of data. Its match finder
// is a hash chain with lazy evaluation, the approach of LZ4HC's middle
// levels; the depth of the chain walk sets the speed and the ratio. The
// output depends only on the input and the settings.
//
// The decoder checks the end-of-block rules the kernel's decompressor
// enforces, so a block it accepts is one the kernel accepts.
package lz4

import (
	"encoding/binary"
	"math/bits"
)

// The LZ4 block format's constants.
const (
	minMatch = 4
	// lastLiterals is how many bytes at the end of a block must be
	// literals.
	lastLiterals = 5
	// mfLimit is how far from the end of a block the last match must
	// start.
	mfLimit = 12
	// maxDistance is the farthest back a match can reach.
	maxDistance = 65535
	runMask     = 15
)

const (
	hashLog   = 16
	chainSize = 1 << 16 // covers maxDistance
	chainMask = chainSize - 1
	// baseLimit is where the positions the tables hold are renumbered
	// from zero, well before they overflow an int32.
	baseLimit = 1 << 30
)

// Settings say how hard the encoder looks for matches.
type Settings struct {
	// Depth is how many earlier positions of the same hash are tried for
	// each position; 1 is a plain hash table.
	Depth int
	// Lazy tries the next position before taking a match, and takes its
	// match instead when it is longer.
	Lazy bool
	// NiceLength stops the search at a match this long; 0 means no limit.
	NiceLength int
}

// Encoder compresses blocks. Its tables are reused from block to block; it
// is not safe for concurrent use.
type Encoder struct {
	s Settings
	// head holds, per hash, the last position inserted; chain, per
	// position modulo chainSize, the position inserted before it with the
	// same hash. Positions are offsets from a base that grows from block
	// to block, so the entries of earlier blocks are below the current
	// block's base and never taken; 0 means none.
	head  []int32
	chain []int32
	base  int32
}

// NewEncoder returns an encoder with the given settings.
func NewEncoder(s Settings) *Encoder {
	if s.Depth < 1 {
		s.Depth = 1
	}
	return &Encoder{s: s, head: make([]int32, 1<<hashLog), chain: make([]int32, chainSize), base: 1}
}

func hash4(v uint32) uint32 { return (v * 2654435761) >> (32 - hashLog) }

func load32(b []byte, i int) uint32 { return binary.LittleEndian.Uint32(b[i:]) }

// litExtra is how many bytes past the token a run length of n takes.
func litExtra(n int) int {
	if n < runMask {
		return 0
	}
	return 1 + (n-runMask)/255
}

// seqCost is the encoded size of a sequence of lits literals and a match of
// mlen bytes.
func seqCost(lits, mlen int) int {
	return 1 + litExtra(lits) + lits + 2 + litExtra(mlen-minMatch)
}

// lastCost is the encoded size of a last sequence of lits literals.
func lastCost(lits int) int { return 1 + litExtra(lits) + lits }

// maxLast is the most literals a last sequence of at most room bytes holds.
func maxLast(room int) int {
	if room <= 0 {
		return 0
	}
	n := room - 1
	for n > 0 && lastCost(n) > room {
		n--
	}
	return n
}

// CompressDestSize encodes as long a prefix of src as fits into dst as one
// LZ4 block, and returns how many bytes of src it took and how many of dst
// it wrote. The block decompresses to exactly src[:consumed].
func (e *Encoder) CompressDestSize(src, dst []byte) (consumed, written int) {
	if int(e.base)+len(src) >= baseLimit || len(src) >= baseLimit {
		clear(e.head)
		clear(e.chain)
		e.base = 1
	}
	consumed, written, inserted := e.compress(src, dst)
	e.base += int32(inserted) + 1
	return consumed, written
}

// match is a candidate match: its length and distance back.
type match struct{ length, dist int }

func (e *Encoder) compress(src, dst []byte) (consumed, o, inserted int) {
	n := len(src)
	capacity := len(dst)
	ip, anchor := 0, 0
	// A match ends at most lastLiterals before the input's end and starts
	// at most mfLimit before it; the block may end earlier than the input,
	// which the room reserved for the last literals takes care of.
	matchEnd := n - lastLiterals
	lastStart := n - mfLimit
	next := 0 // the next position to insert into the tables
	insertTo := func(p int) {
		for ; next < p; next++ {
			h := hash4(load32(src, next))
			abs := e.base + int32(next)
			e.chain[abs&chainMask] = e.head[h]
			e.head[h] = abs
		}
	}
	find := func(p int) match {
		insertTo(p)
		best := match{length: minMatch - 1}
		cur := load32(src, p)
		limit := matchEnd - p
		nice := limit
		if e.s.NiceLength > 0 && e.s.NiceLength < nice {
			nice = e.s.NiceLength
		}
		abs := e.base + int32(p)
		cand := e.head[hash4(cur)]
		for tries := e.s.Depth; tries > 0 && cand >= e.base && abs-cand <= maxDistance; tries-- {
			c := int(cand - e.base)
			// The byte that would make this candidate the longest is
			// checked first: most candidates fail there.
			if best.length < limit && src[c+best.length] == src[p+best.length] && load32(src, c) == cur {
				l := minMatch + extend(src, c+minMatch, p+minMatch, p+limit)
				if l > best.length {
					best = match{length: l, dist: p - c}
					if l >= nice {
						break
					}
				}
			}
			cand = e.chain[cand&chainMask]
		}
		if best.length < minMatch {
			return match{}
		}
		return best
	}
	// Past room literals from the anchor, no sequence fits any more.
	room := maxLast(capacity)
	for ip <= lastStart && ip-anchor <= room {
		m := find(ip)
		if m.length == 0 {
			ip++
			continue
		}
		if e.s.Lazy {
			for ip+1 <= lastStart {
				m2 := find(ip + 1)
				if m2.length <= m.length {
					break
				}
				ip++
				m = m2
			}
		}
		lits := ip - anchor
		// The block must be able to end after this match: the last
		// sequence then holds at least the literals the end rules
		// require, and those bytes exist (the match ends before
		// matchEnd, and starts at most mfLimit before the input's end).
		tail := max(lastLiterals, mfLimit-m.length)
		if o+seqCost(lits, m.length)+lastCost(tail) > capacity {
			// A shorter match may still fit: its length bytes are what
			// overflow when the literals alone fit.
			// Room for the length's bytes past the token, with the
			// shortest last sequence: n bytes hold lengths up to
			// 14+255n.
			avail := capacity - o - seqCost(lits, minMatch) - lastCost(lastLiterals)
			if avail < 0 {
				break
			}
			short := min(m.length, minMatch+runMask-1+255*avail)
			for short >= minMatch && o+seqCost(lits, short)+lastCost(max(lastLiterals, mfLimit-short)) > capacity {
				short--
			}
			if short < minMatch {
				break
			}
			m.length = short
		}
		o = emitSequence(dst, o, src[anchor:ip], m)
		insertTo(min(ip+m.length, n-minMatch+1))
		ip += m.length
		anchor = ip
		room = maxLast(capacity - o)
	}
	lits := min(n-anchor, maxLast(capacity-o))
	o = emitLast(dst, o, src[anchor:anchor+lits])
	return anchor + lits, o, next
}

// extend counts how many bytes from a and b on are equal, b stopping at
// limit (a < b).
func extend(src []byte, a, b, limit int) int {
	start := b
	for b+8 <= limit {
		x := binary.LittleEndian.Uint64(src[a:]) ^ binary.LittleEndian.Uint64(src[b:])
		if x != 0 {
			return b - start + bits.TrailingZeros64(x)/8
		}
		a += 8
		b += 8
	}
	for b < limit && src[a] == src[b] {
		a++
		b++
	}
	return b - start
}

// putLength writes the bytes past the token of a run length n (n >= 15).
func putLength(dst []byte, o, n int) int {
	n -= runMask
	for n >= 255 {
		dst[o] = 255
		o++
		n -= 255
	}
	dst[o] = byte(n)
	return o + 1
}

func emitSequence(dst []byte, o int, lits []byte, m match) int {
	tok := o
	o++
	ml := m.length - minMatch
	t := byte(0)
	if len(lits) >= runMask {
		t = runMask << 4
		o = putLength(dst, o, len(lits))
	} else {
		t = byte(len(lits)) << 4
	}
	o += copy(dst[o:], lits)
	dst[o] = byte(m.dist)
	dst[o+1] = byte(m.dist >> 8)
	o += 2
	if ml >= runMask {
		t |= runMask
		o = putLength(dst, o, ml)
	} else {
		t |= byte(ml)
	}
	dst[tok] = t
	return o
}

func emitLast(dst []byte, o int, lits []byte) int {
	if len(lits) >= runMask {
		dst[o] = runMask << 4
		o = putLength(dst, o+1, len(lits))
	} else {
		dst[o] = byte(len(lits)) << 4
		o++
	}
	return o + copy(dst[o:], lits)
}
