package ext4

import (
	"time"

	"github.com/stamp-dev/stamp/rootfs"
)

// Inode flags.
const (
	flagIndex   = 0x00001000 // hashed directory
	flagExtents = 0x00080000
)

// inodeFields is everything an on-disk inode holds, before encoding.
type inodeFields struct {
	mode     uint16
	uid, gid uint32
	size     uint64
	times    time.Time // atime, ctime, mtime and crtime alike
	links    uint16
	sectors  uint64 // i_blocks in 512-byte units
	flags    uint32
	iblock   [60]byte
	fileACL  uint64
	extra    bool // i_extra_isize and the fields after it
	ibodyXa  []xattr
	timeless bool // reserved inodes mke2fs leaves without times
}

// encodeInode renders an inode into b (inodeSize bytes) with its checksum.
func (w *writer) encodeInode(b []byte, ino uint32, f *inodeFields) {
	clear(b)
	le16(b[0x00:], f.mode)
	le16(b[0x02:], uint16(f.uid))
	le32(b[0x04:], uint32(f.size))
	if !f.timeless {
		t := timeWords(f.times)
		le32(b[0x08:], t[0]) // atime
		le32(b[0x0C:], t[0]) // ctime
		le32(b[0x10:], t[0]) // mtime
		if f.extra {
			le32(b[0x84:], t[1])
			le32(b[0x88:], t[1])
			le32(b[0x8C:], t[1])
			le32(b[0x90:], t[0]) // crtime
			le32(b[0x94:], t[1])
		}
	}
	le16(b[0x18:], uint16(f.gid))
	le16(b[0x1A:], f.links)
	le32(b[0x1C:], uint32(f.sectors))
	le32(b[0x20:], f.flags)
	copy(b[0x28:0x64], f.iblock[:])
	le32(b[0x68:], uint32(f.fileACL))
	le32(b[0x6C:], uint32(f.size>>32))
	le16(b[0x74:], uint16(f.sectors>>32))
	le16(b[0x76:], uint16(f.fileACL>>32))
	le16(b[0x78:], uint16(f.uid>>16))
	le16(b[0x7A:], uint16(f.gid>>16))
	if f.extra {
		le16(b[0x80:], extraIsize)
		if len(f.ibodyXa) > 0 {
			le32(b[0x80+extraIsize:], xattrMagic)
			encodeXattrs(b[0x80+extraIsize+4:], f.ibodyXa, 0, false)
		}
	}
	c := crc32cU32(crc32cU32(w.fsSeed, ino), 0)
	c = crc32c(c, b)
	le16(b[0x7C:], uint16(c))
	if f.extra {
		le16(b[0x82:], uint16(c>>16))
	}
}

// fields turns a planned and written node into inode fields.
func (n *node) fields() *inodeFields {
	f := &inodeFields{
		mode: modeBits(n.typ) | uint16(n.perm), uid: n.uid, gid: n.gid, times: n.mtime,
		links: uint16(n.links), sectors: n.blocks * (blockSize / 512), flags: n.flags,
		iblock: n.iblock, fileACL: n.fileACL, extra: true, size: n.size,
	}
	if n.xattrs != nil {
		f.ibodyXa = n.xattrs.ibody
	}
	switch n.typ {
	case rootfs.TypeChar, rootfs.TypeBlock:
		f.size = 0
	case rootfs.TypeFifo, rootfs.TypeSocket:
		f.size = 0
	}
	return f
}

// deviceBlock encodes device numbers as the kernel does: the old 16-bit
// form in i_block[0] when both fit in a byte, else the new form in
// i_block[1].
func deviceBlock(major, minor uint32) [60]byte {
	var b [60]byte
	if major < 256 && minor < 256 {
		le32(b[0:], major<<8|minor)
	} else {
		le32(b[4:], minor&0xFF|major<<8|(minor&^0xFF)<<12)
	}
	return b
}
