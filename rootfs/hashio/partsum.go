package hashio

import (
	"encoding/hex"
	"hash"
	"hash/crc32"
)

// A part sum checks a compressed part an output takes from the last build
// of it (an initramfs part, an EROFS segment): that the bytes at the filed
// offset are the ones filed there. The blob they come from is verified by
// its sha256 as a whole when the cache opens it, so a part's own check
// guards against bookkeeping, not tampering, and CRC-32C, which the CPU
// computes, costs nothing beside the gigabytes of sha256 a node's outputs
// already take.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// PartSum is the part sum of b, in hex.
func PartSum(b []byte) string { return sumHex(crc32.Checksum(b, castagnoli)) }

// NewPartSum hashes a part written in pieces; its Sum in hex is PartSum's.
func NewPartSum() hash.Hash32 { return crc32.New(castagnoli) }

// PartSumHex is the hex of a part sum's Sum32.
func PartSumHex(h hash.Hash32) string { return sumHex(h.Sum32()) }

func sumHex(v uint32) string {
	return hex.EncodeToString([]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
