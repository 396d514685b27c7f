package ext4

import (
	"encoding/binary"
	"hash/crc32"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// crc32c continues a CRC the way ext4 does (the kernel's crc32c_le): the
// state is used as given and never inverted, whereas hash/crc32 inverts on
// the way in and out. ext4 starts from ~0 and stores the raw state.
func crc32c(crc uint32, p []byte) uint32 {
	return ^crc32.Update(^crc, castagnoli, p)
}

func crc32cU32(crc, v uint32) uint32 {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return crc32c(crc, b[:])
}

func crc32cU64(crc uint32, v uint64) uint32 {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	return crc32c(crc, b[:])
}

// inodeSeed is the checksum seed of everything that belongs to one inode:
// its extent blocks and directory blocks. Generations are always 0 here.
func inodeSeed(fsSeed, ino uint32) uint32 {
	return crc32cU32(crc32cU32(fsSeed, ino), 0)
}

var (
	le16 = binary.LittleEndian.PutUint16
	le32 = binary.LittleEndian.PutUint32
	be32 = binary.BigEndian.PutUint32
)
