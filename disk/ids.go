package disk

import (
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// namespace is the RFC 4122 namespace every stamp identifier is derived in.
// It is fixed forever: changing it would change every identifier of every
// image, which is exactly what deriving them from the seed avoids.
var namespace = [16]byte{
	0x9b, 0x0e, 0x5a, 0x43, 0x6c, 0x2d, 0x4f, 0x1e,
	0x8a, 0x5d, 0x73, 0x74, 0x61, 0x6d, 0x70, 0x21,
}

// UUID is the RFC 4122 name-based (version 5, SHA-1) UUID of name under seed,
// in the byte order RFC 4122 prints it. The seed and the name are separated
// by a NUL so that no two (seed, name) pairs share an input.
func UUID(seed, name string) [16]byte {
	h := sha1.New()
	h.Write(namespace[:])
	h.Write([]byte(seed))
	h.Write([]byte{0})
	h.Write([]byte(name))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50 // version 5
	u[8] = u[8]&0x3f | 0x80 // RFC 4122 variant
	return u
}

// The names each identifier is derived from. They live here, in one place,
// because a change to any of them changes every image.

// DiskGUID is the GPT disk GUID.
func DiskGUID(seed string) [16]byte { return UUID(seed, "gpt-disk") }

// PartitionGUID is the unique GUID of the GPT partition named part.
func PartitionGUID(seed, part string) [16]byte { return UUID(seed, "gpt-partition/"+part) }

// FilesystemUUID is the UUID of the file system in the partition named part.
func FilesystemUUID(seed, part string) [16]byte { return UUID(seed, "filesystem/"+part) }

// HashSeed is the ext4 directory hash seed of the partition named part.
func HashSeed(seed, part string) [16]byte { return UUID(seed, "ext4-hash-seed/"+part) }

// VolumeID is the FAT volume serial number of the partition named part: the
// first four bytes of its file system UUID, so `blkid` shows the UUID's first
// eight hex digits (as XXXX-XXXX).
func VolumeID(seed, part string) uint32 {
	u := FilesystemUUID(seed, part)
	return binary.BigEndian.Uint32(u[:4])
}

// FormatUUID prints u in the canonical lowercase 8-4-4-4-12 form.
func FormatUUID(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// GUIDBytes is u as GPT and EFI store a GUID: the first three fields little
// endian, the last two as printed. FormatUUID(u) is the text tools such as
// sgdisk and blkid show for these bytes.
func GUIDBytes(u [16]byte) [16]byte {
	g := u
	g[0], g[1], g[2], g[3] = u[3], u[2], u[1], u[0]
	g[4], g[5] = u[5], u[4]
	g[6], g[7] = u[7], u[6]
	return g
}

// VHDUniqueID is the unique ID in the footer of the VHD output named output.
func VHDUniqueID(seed, output string) [16]byte { return UUID(seed, "vhd/"+output) }

// VMDKID seeds the content IDs and disk UUID in the descriptor of the VMDK
// output named output (and of the disk inside an OVA output).
func VMDKID(seed, output string) [16]byte { return UUID(seed, "vmdk/"+output) }

// SignatureOwner is the owner GUID of the entries stamp writes into EFI
// signature lists (the Secure Boot keys it lays out for enrolment).
func SignatureOwner(seed string) [16]byte { return UUID(seed, "efi-signature-owner") }

// VeritySalt is the dm-verity salt of the hash partition named part: 32
// bytes, as veritysetup and systemd-repart choose, derived like every other
// identifier so the hash tree and its root hash are the same on every build.
func VeritySalt(seed, part string) []byte {
	h := sha256.New()
	h.Write(namespace[:])
	h.Write([]byte(seed))
	h.Write([]byte{0})
	h.Write([]byte("verity-salt/" + part))
	return h.Sum(nil)
}

// VerityUUID is the UUID in the dm-verity superblock of the hash partition
// named part.
func VerityUUID(seed, part string) [16]byte { return UUID(seed, "verity/"+part) }
