package lz4

import (
	"errors"
	"fmt"
)

// ErrCorrupt is returned for a block that does not decode, or that breaks
// the end-of-block rules.
var ErrCorrupt = errors.New("lz4: corrupt block")

// Decompress decodes the block src into dst, which must be exactly the
// decompressed length, as EROFS knows it from its indexes. Like the
// kernel's LZ4_decompress_safe, it requires the block to fill dst exactly,
// to use all of src, to end in literals, and to keep every match out of the
// last bytes of the output.
func Decompress(src, dst []byte) error { return decompress(src, dst, false) }

// DecompressPrefix decodes the block at the start of src until dst is
// full, ignoring what follows in src and the end-of-block rules: how EROFS
// reads a cluster without the lz4_0padding feature, whose block starts at
// the cluster's start and whose end only the output's length marks (the
// kernel's LZ4_decompress_safe_partial, which also stops inside a match).
func DecompressPrefix(src, dst []byte) error { return decompress(src, dst, true) }

func decompress(src, dst []byte, prefix bool) error {
	ip, op := 0, 0
	iend, oend := len(src), len(dst)
	for {
		if ip >= iend {
			return fmt.Errorf("%w: input ends inside a sequence", ErrCorrupt)
		}
		tok := src[ip]
		ip++
		lits := int(tok >> 4)
		if lits == runMask {
			for {
				if ip >= iend {
					return fmt.Errorf("%w: input ends inside a literal length", ErrCorrupt)
				}
				b := src[ip]
				ip++
				lits += int(b)
				if lits > iend {
					return fmt.Errorf("%w: literal run longer than the input", ErrCorrupt)
				}
				if b != 255 {
					break
				}
			}
		}
		if prefix && lits > oend-op {
			lits = oend - op
		}
		if lits > iend-ip || lits > oend-op {
			return fmt.Errorf("%w: literal run past the end", ErrCorrupt)
		}
		copy(dst[op:], src[ip:ip+lits])
		ip += lits
		op += lits
		if prefix && op == oend {
			return nil
		}
		// The last sequence is literals alone and ends both buffers; a
		// sequence whose literals come that near the end must be it.
		if ip == iend {
			if op != oend {
				return fmt.Errorf("%w: decompresses to %d bytes, not %d", ErrCorrupt, op, oend)
			}
			return nil
		}
		if op > oend-mfLimit && !prefix {
			return fmt.Errorf("%w: a match starts within %d bytes of the end", ErrCorrupt, mfLimit)
		}
		if ip+2 > iend {
			return fmt.Errorf("%w: input ends inside an offset", ErrCorrupt)
		}
		dist := int(src[ip]) | int(src[ip+1])<<8
		ip += 2
		if dist == 0 || dist > op {
			return fmt.Errorf("%w: match offset %d at output byte %d", ErrCorrupt, dist, op)
		}
		ml := int(tok & runMask)
		if ml == runMask {
			for {
				if ip >= iend {
					return fmt.Errorf("%w: input ends inside a match length", ErrCorrupt)
				}
				b := src[ip]
				ip++
				ml += int(b)
				if (!prefix && ml > oend) || ml > 1<<30 {
					return fmt.Errorf("%w: match longer than the output", ErrCorrupt)
				}
				if b != 255 {
					break
				}
			}
		}
		ml += minMatch
		if prefix {
			ml = min(ml, oend-op)
		} else if ml > oend-lastLiterals-op {
			return fmt.Errorf("%w: a match reaches into the last %d bytes", ErrCorrupt, lastLiterals)
		}
		from := op - dist
		if dist >= ml {
			copy(dst[op:op+ml], dst[from:from+ml])
		} else {
			// An overlapping match repeats the last dist bytes.
			for i := 0; i < ml; i++ {
				dst[op+i] = dst[from+i]
			}
		}
		op += ml
		if prefix && op == oend {
			return nil
		}
	}
}
