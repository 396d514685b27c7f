package ext4

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
)

const (
	xattrMagic = 0xEA020000
	// ibodySpace is what an inode has for xattrs after i_extra_isize,
	// less the 4-byte magic that starts the area.
	ibodySpace = inodeSize - 128 - extraIsize - 4
	// blockXattrSpace is an xattr block less its 32-byte header.
	blockXattrSpace = blockSize - 32
	xattrEntryHead  = 16 // struct ext4_xattr_entry before the name
)

// Name indexes: ext4 stores a number for the namespace prefix. The ACL
// names are whole names (the stored suffix is empty).
var xattrPrefixes = []struct {
	prefix string
	index  uint8
	whole  bool
}{
	{"system.posix_acl_access", 2, true},
	{"system.posix_acl_default", 3, true},
	{"system.richacl", 8, true},
	{"user.", 1, false},
	{"trusted.", 4, false},
	{"security.", 6, false},
	{"system.", 7, false},
	{"gnu.", 10, false},
}

type xattr struct {
	index uint8
	name  string // after the prefix
	value []byte // as stored on disk
}

func (x *xattr) entrySize() int { return (xattrEntryHead + len(x.name) + 3) &^ 3 }
func (x *xattr) valueSize() int { return (len(x.value) + 3) &^ 3 }

// xattrSet is an inode's xattrs split between the inode body and an
// external block.
type xattrSet struct {
	ibody []xattr
	block []xattr
}

// splitXattrs converts the index's xattrs to ext4's form and decides where
// each goes: in the inode while it fits, the rest in one external block.
func splitXattrs(names []string, values map[string]string) (*xattrSet, error) {
	if len(names) == 0 {
		return nil, nil
	}
	xs := make([]xattr, 0, len(names))
	for _, full := range names {
		x, err := convertXattr(full, []byte(values[full]))
		if err != nil {
			return nil, err
		}
		xs = append(xs, x)
	}
	// Block entries must be sorted by index, name length and name: the
	// kernel stops searching a block at the first greater entry.
	sort.Slice(xs, func(i, j int) bool {
		a, b := &xs[i], &xs[j]
		if a.index != b.index {
			return a.index < b.index
		}
		if len(a.name) != len(b.name) {
			return len(a.name) < len(b.name)
		}
		return a.name < b.name
	})
	s := &xattrSet{}
	ibody, block := 4, 4 // the terminating zero word
	for _, x := range xs {
		need := x.entrySize() + x.valueSize()
		if ibody+need <= ibodySpace {
			s.ibody = append(s.ibody, x)
			ibody += need
			continue
		}
		if block+need > blockXattrSpace {
			return nil, fmt.Errorf("xattrs need more than one %d-byte block (ea_inode is not supported)", blockSize)
		}
		s.block = append(s.block, x)
		block += need
	}
	return s, nil
}

func convertXattr(full string, value []byte) (xattr, error) {
	for _, p := range xattrPrefixes {
		if p.whole {
			if full != p.prefix {
				continue
			}
			x := xattr{index: p.index, value: value}
			if p.index == 2 || p.index == 3 {
				v, err := aclToDisk(value)
				if err != nil {
					return xattr{}, fmt.Errorf("xattr %s: %w", full, err)
				}
				x.value = v
			}
			return x, nil
		}
		if strings.HasPrefix(full, p.prefix) {
			name := full[len(p.prefix):]
			if name == "" || len(name) > 255 {
				return xattr{}, fmt.Errorf("xattr %q: bad name length", full)
			}
			return xattr{index: p.index, name: name, value: value}, nil
		}
	}
	return xattr{}, fmt.Errorf("xattr %q: namespace not supported by ext4", full)
}

// POSIX ACL tags.
const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20
)

// aclToDisk converts an ACL from the form getxattr returns (version 2
// header, 8-byte entries) to ext4's on-disk form (version 1 header, 4-byte
// entries for the owner, group, mask and other, 8-byte ones for named
// users and groups).
func aclToDisk(v []byte) ([]byte, error) {
	if len(v) < 4 || (len(v)-4)%8 != 0 {
		return nil, fmt.Errorf("POSIX ACL of %d bytes is malformed", len(v))
	}
	if ver := binary.LittleEndian.Uint32(v); ver != 2 {
		return nil, fmt.Errorf("POSIX ACL version %d, want 2", ver)
	}
	if len(v) == 4 {
		return nil, fmt.Errorf("POSIX ACL without entries")
	}
	out := make([]byte, 4, len(v))
	le32(out, 1)
	for off := 4; off < len(v); off += 8 {
		tag := binary.LittleEndian.Uint16(v[off:])
		switch tag {
		case aclUserObj, aclGroupObj, aclMask, aclOther:
			out = append(out, v[off:off+4]...)
		case aclUser, aclGroup:
			out = append(out, v[off:off+8]...)
		default:
			return nil, fmt.Errorf("POSIX ACL entry with unknown tag %#x", tag)
		}
	}
	return out, nil
}

// encodeXattrs lays entries out from the start of area and values from its
// end. base is added to value offsets (the block header for blocks, 0 in
// the inode, where offsets count from the first entry). withHash fills
// e_hash, which blocks need and inodes may leave 0, as e2fsprogs does.
func encodeXattrs(area []byte, xs []xattr, base int, withHash bool) []uint32 {
	var hashes []uint32
	off, end := 0, len(area)
	for i := range xs {
		x := &xs[i]
		vs := x.valueSize()
		end -= vs
		copy(area[end:], x.value)
		e := area[off:]
		e[0] = byte(len(x.name))
		e[1] = x.index
		le16(e[2:], uint16(end+base))
		le32(e[4:], 0) // e_value_inum
		le32(e[8:], uint32(len(x.value)))
		copy(e[xattrEntryHead:], x.name)
		if withHash {
			h := xattrHash(x.name, area[end:end+vs])
			le32(e[12:], h)
			hashes = append(hashes, h)
		}
		off += x.entrySize()
	}
	return hashes
}

// xattrHash is ext4_xattr_hash_entry: name bytes, then the value as
// little-endian words (zero padded).
func xattrHash(name string, padded []byte) uint32 {
	var h uint32
	for i := 0; i < len(name); i++ {
		h = h<<5 ^ h>>27 ^ uint32(name[i])
	}
	for i := 0; i+4 <= len(padded); i += 4 {
		h = h<<16 ^ h>>16 ^ binary.LittleEndian.Uint32(padded[i:])
	}
	return h
}

// xattrBlock renders the external xattr block that lives at block blk.
func xattrBlock(b []byte, xs []xattr, blk uint64, fsSeed uint32) {
	clear(b)
	le32(b[0:], xattrMagic)
	le32(b[4:], 1) // h_refcount
	le32(b[8:], 1) // h_blocks
	var h uint32
	for _, eh := range encodeXattrs(b[32:], xs, 32, true) {
		if eh == 0 {
			// An entry without a hash marks the block as not shareable.
			h = 0
			break
		}
		h = h<<16 ^ h>>16 ^ eh
	}
	le32(b[12:], h)
	c := crc32cU64(fsSeed, blk)
	le32(b[16:], crc32c(c, b))
}
