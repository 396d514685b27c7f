// Package lz4 reads and writes LZ4 blocks as EROFS stores them: each
// physical cluster is one raw LZ4 block (no frame, no dictionary) that
// decompresses to a known length.
//
// The encoder works the other way round from an ordinary one: it is given
// room for a fixed number of bytes and takes as much of its input as fits
// ("destination size" mode, as LZ4_compress_HC_destSize does), because EROFS
// fills fixed-size clusters with variable amounts of data. It has two match
// finders. The fast one is LZ4's fast mode: one candidate per position from
// a hash table, and only the position near a match's end filed, so the
// bytes inside a match cost nothing. The other is a hash chain with lazy
// evaluation, the approach of LZ4HC's middle levels, which files every
// position; the depth of the chain walk sets the speed and the ratio. Both
// step faster through long runs without a match, so incompressible data
// costs little. The output depends only on the input and the settings.
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
	// skipTrigger: after 2^skipTrigger positions without a match in a
	// row, the search steps two at a time, and so on.
	skipTrigger = 7
)

const (
	hashLog   = 15
	hashSize  = 1 << hashLog
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
	// NiceLength stops the search at a match this long, and takes it
	// without trying the next position; 0 means no limit.
	NiceLength int
	// Fast is LZ4's fast mode: one candidate per position, and the
	// positions inside a match left out of the table. Depth, Lazy and
	// NiceLength do not apply.
	Fast bool
}

// Encoder compresses blocks. Its tables are reused from block to block; it
// is not safe for concurrent use.
type Encoder struct {
	s Settings
	// head holds, per hash, the last position inserted; chain, per
	// position modulo chainSize, how far back the position inserted
	// before it with the same hash is (0: none within reach). Positions
	// are offsets from a base that grows from block to block, so the
	// entries of earlier blocks are below the current block's base and
	// never taken; 0 means none.
	head  *[hashSize]int32
	chain *[chainSize]uint16
	base  int32
}

// NewEncoder returns an encoder with the given settings.
func NewEncoder(s Settings) *Encoder {
	if s.Depth < 1 {
		s.Depth = 1
	}
	return &Encoder{s: s, head: new([hashSize]int32), chain: new([chainSize]uint16), base: 1}
}

func hash4(v uint32) uint32 { return (v * 2654435761) >> (32 - hashLog) }

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
// lastCost(n) grows with n by one per literal and one per 255 literals past
// runMask, so n is first estimated from that slope and then settled in a
// step or two (walking down from room-1 took room/255 steps per sequence).
func maxLast(room int) int {
	if room <= 0 {
		return 0
	}
	n := room - 1
	if n > runMask {
		// runMask + m literals cost m + m/255 + runMask + 2.
		n = min(n, runMask+(room-runMask-2)*255/256)
	}
	for n+1 <= room-1 && lastCost(n+1) <= room {
		n++
	}
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
		*e.head = [hashSize]int32{}
		*e.chain = [chainSize]uint16{}
		e.base = 1
	}
	b := block{e: e, src: src, base: e.base, head: e.head, chain: e.chain}
	if e.s.Fast {
		consumed, written = b.compressFast(dst)
	} else {
		consumed, written = b.compress(dst)
	}
	e.base += int32(b.next) + 1
	return consumed, written
}

// match is a candidate match: its length and distance back.
type match struct{ length, dist int }

// block is the state of one CompressDestSize.
type block struct {
	e     *Encoder
	src   []byte
	base  int32
	head  *[hashSize]int32
	chain *[chainSize]uint16
	next  int // the next position to insert into the tables
}

// insert adds the positions before p to the tables.
func (b *block) insert(p int) {
	if p <= b.next {
		return
	}
	src, head, chain, base := b.src, b.head, b.chain, b.base
	_ = src[p+minMatch-2]
	for i := b.next; i < p; i++ {
		h := hash4(binary.LittleEndian.Uint32(src[i:]))
		abs := base + int32(i)
		prev := head[h]
		d := abs - prev
		if d > maxDistance || prev < base {
			d = 0
		}
		chain[abs&chainMask] = uint16(d)
		head[h] = abs
	}
	b.next = p
}

// find returns the longest match for position p that ends by end, found
// among the Depth latest positions with p's hash; length 0 for none. It
// inserts the positions up to p, p included: the hash it looks p up by is
// the one p is filed under.
func (b *block) find(p, end int) match {
	if p > b.next {
		b.insert(p)
	}
	src, head, chain, base := b.src, b.head, b.chain, b.base
	cur := binary.LittleEndian.Uint32(src[p:])
	h := hash4(cur)
	abs := base + int32(p)
	cand := head[h]
	lowest := max(base, abs-maxDistance)
	if cand >= lowest {
		chain[abs&chainMask] = uint16(abs - cand)
	} else {
		chain[abs&chainMask] = 0
	}
	head[h] = abs
	b.next = p + 1
	limit := end - p
	nice := limit
	if n := b.e.s.NiceLength; n > 0 && n < nice {
		nice = n
	}
	bestLen, bestDist := minMatch-1, 0
	for tries := b.e.s.Depth; tries > 0 && cand >= lowest; tries-- {
		c := int(cand - base)
		// The byte that would make this candidate the longest is checked
		// first: most candidates fail there.
		if src[c+bestLen] == src[p+bestLen] && binary.LittleEndian.Uint32(src[c:]) == cur {
			if l := minMatch + extend(src, c+minMatch, p+minMatch, p+limit); l > bestLen {
				bestLen, bestDist = l, p-c
				if l >= nice {
					break
				}
			}
		}
		d := chain[cand&chainMask]
		if d == 0 {
			break
		}
		cand -= int32(d)
	}
	if bestLen < minMatch {
		return match{}
	}
	return match{length: bestLen, dist: bestDist}
}

func (b *block) compress(dst []byte) (consumed, o int) {
	src := b.src
	n := len(src)
	capacity := len(dst)
	ip, anchor := 0, 0
	// A match ends at most lastLiterals before the input's end and starts
	// at most mfLimit before it; the block may end earlier than the input,
	// which the room reserved for the last literals takes care of.
	matchEnd := n - lastLiterals
	lastStart := n - mfLimit
	lazy := b.e.s.Lazy
	lazyBelow := b.e.s.NiceLength
	if lazyBelow == 0 {
		lazyBelow = n
	}
	// Past room literals from the anchor, no sequence fits any more.
	room := maxLast(capacity)
	misses := 0
	for ip <= lastStart && ip-anchor <= room {
		m := b.find(ip, matchEnd)
		if m.length == 0 {
			// Long runs without a match are likely incompressible: the
			// search then steps further and leaves the positions it
			// steps over out of the tables, as LZ4's fast mode does.
			misses++
			ip += 1 + misses>>skipTrigger
			b.next = max(b.next, min(ip, lastStart+1))
			continue
		}
		misses = 0
		for lazy && ip+1 <= lastStart && m.length < lazyBelow {
			m2 := b.find(ip+1, matchEnd)
			if m2.length <= m.length {
				break
			}
			ip++
			m = m2
		}
		lits := ip - anchor
		var ok bool
		if m, ok = fit(m, lits, o, capacity); !ok {
			break
		}
		o = emitSequence(dst, o, src[anchor:ip], m)
		b.insert(min(ip+m.length, n-minMatch+1))
		ip += m.length
		anchor = ip
		room = maxLast(capacity - o)
	}
	lits := min(n-anchor, maxLast(capacity-o))
	o = emitLast(dst, o, src[anchor:anchor+lits])
	return anchor + lits, o
}

// fit shortens m, when it must, so that the block can still end after it:
// the last sequence then holds at least the literals the end rules
// require, and those bytes exist (a match ends before the input's last
// lastLiterals bytes, and starts at most mfLimit before its end). lits
// literals come before m, and o of capacity bytes are written. false when
// not even the shortest match fits.
func fit(m match, lits, o, capacity int) (match, bool) {
	if o+seqCost(lits, m.length)+lastCost(max(lastLiterals, mfLimit-m.length)) <= capacity {
		return m, true
	}
	// A shorter match may still fit: its length bytes are what overflow
	// when the literals alone fit. avail bytes past the token hold lengths
	// up to 14+255*avail.
	avail := capacity - o - seqCost(lits, minMatch) - lastCost(lastLiterals)
	if avail < 0 {
		return m, false
	}
	short := min(m.length, minMatch+runMask-1+255*avail)
	for short >= minMatch && o+seqCost(lits, short)+lastCost(max(lastLiterals, mfLimit-short)) > capacity {
		short--
	}
	if short < minMatch {
		return m, false
	}
	m.length = short
	return m, true
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
