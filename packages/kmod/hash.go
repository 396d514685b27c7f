package kmod

import (
	"slices"
	"strings"
)

// kmod keeps its modules and symbols in hash tables and writes
// modules.symbols, and orders modules that modules.order does not name, in
// the order it walks those tables: bucket by bucket, and by strcmp inside a
// bucket. hashOrder reproduces that order from the keys alone.

// Bucket counts of depmod's tables (a power of two already, so kmod's
// rounding changes nothing).
const (
	moduleBuckets = 512
	symbolBuckets = 2048
)

// superFastHash is Paul Hsieh's hash as kmod's shared/hash.c computes it on
// a little-endian machine whose char is signed (x86, where the oracle runs).
func superFastHash(key string) uint32 {
	n := len(key)
	h := uint32(n)
	rem := n & 3
	i := 0
	u16 := func(j int) uint32 { return uint32(key[j]) | uint32(key[j+1])<<8 }
	for k := n / 4; k > 0; k-- {
		h += u16(i)
		tmp := (u16(i+2) << 11) ^ h
		h = (h << 16) ^ tmp
		i += 4
		h += h >> 11
	}
	switch rem {
	case 3:
		h += u16(i)
		h ^= h << 16
		h ^= uint32(int32(int8(key[i+2])) << 18)
		h += h >> 11
	case 2:
		h += u16(i)
		h ^= h << 11
		h += h >> 17
	case 1:
		h += uint32(int32(int8(key[i])))
		h ^= h << 10
		h += h >> 1
	}
	h ^= h << 3
	h += h >> 5
	h ^= h << 4
	h += h >> 17
	h ^= h << 25
	h += h >> 6
	return h
}

// hashOrder sorts keys as kmod's hash_iter visits a table of n buckets
// holding them. The keys must be distinct.
func hashOrder[T any](items []T, key func(T) string, n uint32) {
	type keyed struct {
		bucket uint32
		item   T
	}
	ks := make([]keyed, len(items))
	for i, it := range items {
		ks[i] = keyed{superFastHash(key(it)) & (n - 1), it}
	}
	slices.SortFunc(ks, func(a, b keyed) int {
		if a.bucket != b.bucket {
			if a.bucket < b.bucket {
				return -1
			}
			return 1
		}
		return strings.Compare(key(a.item), key(b.item))
	})
	for i := range ks {
		items[i] = ks[i].item
	}
}
