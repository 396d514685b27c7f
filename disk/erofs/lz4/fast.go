package lz4

import "encoding/binary"

// fastSkipTrigger: in the fast mode, after 2^fastSkipTrigger positions
// without a match in a row the search steps two at a time, and so on, as
// LZ4's fast mode does.
const fastSkipTrigger = 6

// compressFast is LZ4's fast mode in destination-size form: one candidate
// per position from a plain hash table, no chain; a match found is extended
// backwards over the literals before it, and only the position two bytes
// before its end is filed, so the bytes inside a match cost nothing.
func (b *block) compressFast(dst []byte) (consumed, o int) {
	src := b.src
	n := len(src)
	capacity := len(dst)
	head, base := b.head, b.base
	ip, anchor := 0, 0
	matchEnd := n - lastLiterals
	lastStart := n - mfLimit
	room := maxLast(capacity)
	misses := 0
	// filed is one past the furthest position filed: the next block's
	// positions start past it.
	filed := 0
	for ip <= lastStart && ip-anchor <= room {
		cur := binary.LittleEndian.Uint32(src[ip:])
		h := hash4(cur)
		abs := base + int32(ip)
		cand := head[h]
		head[h] = abs
		filed = max(filed, ip+1)
		if cand < base || abs-cand > maxDistance || binary.LittleEndian.Uint32(src[cand-base:]) != cur {
			misses++
			ip += 1 + misses>>fastSkipTrigger
			continue
		}
		misses = 0
		c := int(cand - base)
		for ip > anchor && c > 0 && src[ip-1] == src[c-1] {
			ip--
			c--
		}
		m := match{length: minMatch + extend(src, c+minMatch, ip+minMatch, matchEnd), dist: ip - c}
		var ok bool
		if m, ok = fit(m, ip-anchor, o, capacity); !ok {
			break
		}
		o = emitSequence(dst, o, src[anchor:ip], m)
		ip += m.length
		anchor = ip
		if p := ip - 2; p <= lastStart {
			head[hash4(binary.LittleEndian.Uint32(src[p:]))] = base + int32(p)
			filed = max(filed, p+1)
		}
		room = maxLast(capacity - o)
	}
	b.next = filed
	lits := min(n-anchor, maxLast(capacity-o))
	o = emitLast(dst, o, src[anchor:anchor+lits])
	return anchor + lits, o
}
