package ext4

import "time"

// Feature bits of the ext4 Debian bookworm's mke2fs makes (orphan_file and
// metadata_csum_seed are off in its mke2fs.conf).
const (
	compatHasJournal  = 0x0004
	compatExtAttr     = 0x0008
	compatResizeInode = 0x0010
	compatDirIndex    = 0x0020

	incompatFiletype = 0x0002
	incompatExtents  = 0x0040
	incompat64bit    = 0x0080
	incompatFlexBG   = 0x0200

	roSparseSuper  = 0x0001
	roLargeFile    = 0x0002
	roHugeFile     = 0x0008
	roDirNlink     = 0x0020
	roExtraIsize   = 0x0040
	roMetadataCsum = 0x0400

	featCompat   = compatHasJournal | compatExtAttr | compatResizeInode | compatDirIndex
	featIncompat = incompatFiletype | incompatExtents | incompat64bit | incompatFlexBG
	featRoCompat = roSparseSuper | roLargeFile | roHugeFile | roDirNlink | roExtraIsize | roMetadataCsum
)

// featureNames is the feature list in the order dumpe2fs prints it.
var featureNames = []string{"has_journal", "ext_attr", "resize_inode", "dir_index", "filetype",
	"extent", "64bit", "flex_bg", "sparse_super", "large_file", "huge_file", "dir_nlink",
	"extra_isize", "metadata_csum"}

// Group descriptor flags.
const (
	bgInodeUninit = 0x0001
	bgInodeZeroed = 0x0004
)

// superInfo is what the superblock says beyond the geometry.
type superInfo struct {
	freeBlocks  uint64
	freeInodes  uint32
	overhead    uint64
	journalBlks [60]byte // the journal inode's i_block
	journalSize uint64
}

// superblock renders the 1024-byte superblock as stored in group grp.
func (w *writer) superblock(b []byte, grp uint32, si *superInfo) {
	clear(b)
	g, o := w.g, w.o
	epoch := timeWords(o.Epoch)
	le32(b[0x00:], g.inodes)
	le32(b[0x04:], uint32(g.blocks))
	le32(b[0x08:], uint32(g.rBlocks))
	le32(b[0x0C:], uint32(si.freeBlocks))
	le32(b[0x10:], si.freeInodes)
	le32(b[0x14:], 0) // first data block
	le32(b[0x18:], logBlockSize)
	le32(b[0x1C:], logBlockSize) // cluster size = block size
	le32(b[0x20:], g.bpg)
	le32(b[0x24:], g.bpg)
	le32(b[0x28:], g.ipg)
	le32(b[0x30:], epoch[0]) // s_wtime
	le16(b[0x36:], 0xFFFF)   // s_max_mnt_count -1: no mount-count checks
	le16(b[0x38:], 0xEF53)
	le16(b[0x3A:], 1) // clean
	le16(b[0x3C:], 1) // errors: continue
	le32(b[0x40:], epoch[0])
	le32(b[0x4C:], 1) // dynamic revision
	le32(b[0x54:], firstIno)
	le16(b[0x58:], inodeSize)
	le16(b[0x5A:], uint16(grp))
	le32(b[0x5C:], featCompat)
	le32(b[0x60:], featIncompat)
	le32(b[0x64:], featRoCompat)
	copy(b[0x68:0x78], o.UUID[:])
	copy(b[0x78:0x88], o.Label)
	le16(b[0xCE:], uint16(g.rsvGDT))
	le32(b[0xE0:], inoJournal)
	copy(b[0xEC:0xFC], o.HashSeed[:])
	b[0xFC] = 1 // half_md4
	b[0xFD] = 1 // s_jnl_blocks holds the journal inode's blocks
	le16(b[0xFE:], descSize)
	le32(b[0x100:], 0x000C) // default mount options: user_xattr, acl
	le32(b[0x108:], epoch[0])
	copy(b[0x10C:0x148], si.journalBlks[:])
	le32(b[0x148:], uint32(si.journalSize>>32))
	le32(b[0x14C:], uint32(si.journalSize))
	le32(b[0x150:], uint32(g.blocks>>32))
	le32(b[0x154:], uint32(g.rBlocks>>32))
	le32(b[0x158:], uint32(si.freeBlocks>>32))
	le16(b[0x15C:], extraIsize)
	le16(b[0x15E:], extraIsize)
	le32(b[0x160:], 1) // signed directory hash
	b[0x174] = logFlex
	b[0x175] = 1 // crc32c
	le32(b[0x248:], uint32(si.overhead))
	hi := byte(epoch[1] & 3)
	b[0x274] = hi // s_wtime_hi
	b[0x276] = hi // s_mkfs_time_hi
	b[0x277] = hi // s_lastcheck_hi
	le32(b[0x3FC:], crc32c(^uint32(0), b[:0x3FC]))
}

// timeWords is encodeTime for times already checked.
func timeWords(t time.Time) [2]uint32 {
	v, _ := encodeTime(t)
	return v
}

type groupDesc struct {
	freeBlocks, freeInodes, usedDirs, itableUnused uint32
	flags                                          uint16
	bbCsum, ibCsum                                 uint32
}

// descriptor renders group i's 64-byte descriptor.
func (w *writer) descriptor(b []byte, i uint32, d *groupDesc) {
	clear(b[:descSize])
	l := w.lay
	le32(b[0x00:], uint32(l.bb[i]))
	le32(b[0x04:], uint32(l.ib[i]))
	le32(b[0x08:], uint32(l.it[i]))
	le16(b[0x0C:], uint16(d.freeBlocks))
	le16(b[0x0E:], uint16(d.freeInodes))
	le16(b[0x10:], uint16(d.usedDirs))
	le16(b[0x12:], d.flags)
	le16(b[0x18:], uint16(d.bbCsum))
	le16(b[0x1A:], uint16(d.ibCsum))
	le16(b[0x1C:], uint16(d.itableUnused))
	le32(b[0x20:], uint32(l.bb[i]>>32))
	le32(b[0x24:], uint32(l.ib[i]>>32))
	le32(b[0x28:], uint32(l.it[i]>>32))
	le16(b[0x2C:], uint16(d.freeBlocks>>16))
	le16(b[0x2E:], uint16(d.freeInodes>>16))
	le16(b[0x30:], uint16(d.usedDirs>>16))
	le16(b[0x32:], uint16(d.itableUnused>>16))
	le16(b[0x38:], uint16(d.bbCsum>>16))
	le16(b[0x3A:], uint16(d.ibCsum>>16))
	c := crc32cU32(w.fsSeed, i)
	c = crc32c(c, b[:descSize])
	le16(b[0x1E:], uint16(c))
}

// journalSuper renders the superblock of an empty internal journal (jbd2
// v2, big-endian), as mke2fs leaves it.
func (w *writer) journalSuper(b []byte) {
	clear(b)
	be32(b[0x00:], 0xC03B3998)
	be32(b[0x04:], 4) // superblock v2
	be32(b[0x0C:], blockSize)
	be32(b[0x10:], w.g.journal)
	be32(b[0x14:], 1) // first log block
	be32(b[0x18:], 1) // first expected commit ID
	copy(b[0x30:0x40], w.o.UUID[:])
	be32(b[0x40:], 1) // one filesystem uses it
}
