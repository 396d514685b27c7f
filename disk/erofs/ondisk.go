package erofs

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
)

// The on-disk format, as the Linux kernel's fs/erofs/erofs_fs.h defines it.
const (
	blockBits = 12
	blockSize = 1 << blockBits

	superMagic  = 0xE0F5E1E2
	superOffset = 1024
	superSize   = 128

	// feature_compat
	featureSBChecksum = 0x1
	featureMTime      = 0x2
	// feature_incompat
	featureLZ4ZeroPadding = 0x1

	// i_format: bit 0 is the inode version, bits 1-3 the data layout.
	inodeCompact  = 0
	inodeExtended = 1

	layoutFlatPlain         = 0
	layoutCompressionLegacy = 1
	layoutFlatInline        = 2
	layoutCompression       = 3
	compactInodeSize        = 32
	extendedInodeSize       = 64
	slotBits                = 5 // an inode's nid counts 32-byte slots
	xattrIbodyHeaderSize    = 12
	xattrEntryHeaderSize    = 4
	direntSize              = 12
	maxNameLen              = 255
	mapHeaderSize           = 8
	legacyIndexSize         = 8
	legacyHeaderPadding     = 8
	compressionLZ4          = 0
	lclusterTypePlain       = 0
	lclusterTypeHead        = 1
	lclusterTypeNonhead     = 2
	d0CBlkCnt               = 1 << 11
	adviseCompacted2B       = 0x1
	nullAddr                = 0xffffffff
	maxRootNid              = 0xffff
	unixTypeMask            = 0o170000
	unixRegular             = 0o100000
	unixDir                 = 0o040000
	unixSymlink             = 0o120000
	unixChar                = 0o020000
	unixBlock               = 0o060000
	unixFifo                = 0o010000
	unixSocket              = 0o140000
	maxCompactNlink         = 0xffff
	maxCompactID            = 0xffff
	maxCompactSize          = 0xffffffff
	maxXattrValue           = 0xffff
	maxXattrIcount          = 0xffff
	maxDeviceMajor          = 0xfff
	maxDeviceMinor          = 0xfffff
	maxSymlinkTarget        = blockSize - 1
)

// File types of a directory entry.
const (
	ftUnknown = iota
	ftRegular
	ftDir
	ftChar
	ftBlock
	ftFifo
	ftSocket
	ftSymlink
)

var le = binary.LittleEndian

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// superChecksum is the checksum of the superblock's block from the
// superblock on, with its checksum field zero: the kernel's crc32c seeded
// with ~0 and not inverted at the end, which is the inverse of Go's.
func superChecksum(block []byte) uint32 {
	return ^crc32.Checksum(block[superOffset:blockSize], castagnoli)
}

// unixType is the file type bits of a mode for an entry type.
func unixType(t rootfs.Type) uint32 {
	switch t {
	case rootfs.TypeRegular:
		return unixRegular
	case rootfs.TypeDir:
		return unixDir
	case rootfs.TypeSymlink:
		return unixSymlink
	case rootfs.TypeChar:
		return unixChar
	case rootfs.TypeBlock:
		return unixBlock
	case rootfs.TypeFifo:
		return unixFifo
	case rootfs.TypeSocket:
		return unixSocket
	}
	return 0
}

// fileType is a directory entry's type for an entry type.
func fileType(t rootfs.Type) uint8 {
	switch t {
	case rootfs.TypeRegular:
		return ftRegular
	case rootfs.TypeDir:
		return ftDir
	case rootfs.TypeSymlink:
		return ftSymlink
	case rootfs.TypeChar:
		return ftChar
	case rootfs.TypeBlock:
		return ftBlock
	case rootfs.TypeFifo:
		return ftFifo
	case rootfs.TypeSocket:
		return ftSocket
	}
	return ftUnknown
}

// encodeDev is the kernel's new_encode_dev: how i_u holds a device number.
func encodeDev(major, minor uint32) uint32 {
	return minor&0xff | major<<8 | (minor&^0xff)<<12
}

// decodeDev is the inverse of encodeDev.
func decodeDev(v uint32) (major, minor uint32) {
	return (v & 0xfff00) >> 8, v&0xff | (v>>12)&0xfff00
}

// xattrPrefixes are the name indexes of erofs_fs.h: an xattr's name is
// stored as its index and the rest of the name. The ACLs are whole names.
var xattrPrefixes = []struct {
	index  uint8
	prefix string
}{
	{1, "user."},
	{2, "system.posix_acl_access"},
	{3, "system.posix_acl_default"},
	{4, "trusted."},
	{5, "lustre."},
	{6, "security."},
}

// xattrIndex splits an xattr name into its name index and the stored rest.
func xattrIndex(name string) (uint8, string, error) {
	for _, p := range xattrPrefixes {
		if p.index == 2 || p.index == 3 {
			if name == p.prefix {
				return p.index, "", nil
			}
			continue
		}
		if rest, ok := strings.CutPrefix(name, p.prefix); ok && rest != "" {
			return p.index, rest, nil
		}
	}
	return 0, "", fmt.Errorf("xattr %q: EROFS stores only user., trusted., security., lustre. and POSIX ACL xattrs", name)
}

// xattrPrefix is the name prefix of a name index.
func xattrPrefix(index uint8) (string, bool) {
	for _, p := range xattrPrefixes {
		if p.index == index {
			return p.prefix, true
		}
	}
	return "", false
}

func align(n, a int64) int64 { return (n + a - 1) / a * a }
