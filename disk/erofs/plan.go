package erofs

import (
	"fmt"
	"path"
	"sort"

	"github.com/stamp-dev/stamp/rootfs"
)

// node is one inode of the image: a directory, or a file and its hard
// links.
type node struct {
	in   *rootfs.Inode
	path string // the first path naming it, in byte order
	ino  uint32 // i_ino, numbered in byte order of the path from 1
	nid  uint64

	isize    int64  // compact or extended
	xattrs   []byte // the inline xattr body, nil for none
	nlink    uint32
	size     int64 // i_size
	layout   int
	blkaddr  uint32 // first data block of a flat layout; nullAddr for none
	blocks   int64  // data blocks: a flat layout's, or the compressed ones
	tail     []byte // the last partial block, packed after the inode
	index    []byte // a compressed file's map header and indexes
	children []dirent
}

// dirent is one entry of a directory.
type dirent struct {
	name string
	n    *node
}

// headerSize is the inode and its xattrs: where tail data or indexes
// begin.
func (n *node) headerSize() int64 { return n.isize + int64(len(n.xattrs)) }

// inlineable says whether a tail of size bytes fits the block after the
// inode and its xattrs, which tail packing needs.
func (n *node) inlineable(size int64) bool {
	return size > 0 && n.headerSize()+size <= blockSize
}

// plan is the tree as the image's inodes.
type plan struct {
	nodes []*node // in byte order of the first path; the root first
	dirs  []*node // directories, in byte order
	files []*node // regular files with content and symlinks, in byte order
}

func newPlan(t *rootfs.Sealed, o *Options) (*plan, error) {
	p := &plan{}
	byInode := map[*rootfs.Inode]*node{}
	byPath := map[string]*node{}
	epochSec, epochNsec := o.Epoch.Unix(), o.Epoch.Nanosecond()
	err := t.Walk(func(e *rootfs.Entry) error {
		if e.Path != "/" {
			if len(path.Base(e.Path)) > maxNameLen {
				return fmt.Errorf("erofs: %s: a name of %d bytes is longer than %d", e.Path, len(path.Base(e.Path)), maxNameLen)
			}
			parent := byPath[path.Dir(e.Path)]
			if parent == nil || parent.in.Type != rootfs.TypeDir {
				return fmt.Errorf("erofs: %s: its directory is not in the tree", e.Path)
			}
		} else if e.Type != rootfs.TypeDir {
			return fmt.Errorf("erofs: the root is a %s, not a directory", e.Type)
		}
		n := byInode[e.Inode]
		if n == nil || e.Type == rootfs.TypeDir {
			var err error
			if n, err = newNode(e, epochSec, epochNsec); err != nil {
				return err
			}
			n.ino = uint32(len(p.nodes) + 1)
			byInode[e.Inode] = n
			p.nodes = append(p.nodes, n)
			switch e.Type {
			case rootfs.TypeDir:
				p.dirs = append(p.dirs, n)
			case rootfs.TypeRegular, rootfs.TypeSymlink:
				if n.size > 0 {
					p.files = append(p.files, n)
				}
			}
		}
		byPath[e.Path] = n
		if e.Path != "/" {
			parent := byPath[path.Dir(e.Path)]
			parent.children = append(parent.children, dirent{name: path.Base(e.Path), n: n})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(p.nodes) == 0 {
		return nil, fmt.Errorf("erofs: the tree has no root")
	}
	for _, d := range p.dirs {
		subdirs := 0
		for _, c := range d.children {
			if c.n.in.Type == rootfs.TypeDir {
				subdirs++
			}
		}
		parent := byPath[path.Dir(d.path)]
		d.children = append(d.children, dirent{".", d}, dirent{"..", parent})
		sort.Slice(d.children, func(a, b int) bool { return d.children[a].name < d.children[b].name })
		d.nlink = uint32(2 + subdirs)
		d.size = dirSize(d.children)
		if err := d.chooseForm(epochSec, epochNsec); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// newNode makes the node of an entry: its size, inode form and xattrs.
func newNode(e *rootfs.Entry, epochSec int64, epochNsec int) (*node, error) {
	n := &node{in: e.Inode, path: e.Path, blkaddr: nullAddr, nlink: uint32(max(1, e.Nlink()))}
	switch e.Type {
	case rootfs.TypeRegular:
		n.size = e.Size
	case rootfs.TypeSymlink:
		n.size = int64(len(e.Target))
		if n.size == 0 || n.size > maxSymlinkTarget {
			return nil, fmt.Errorf("erofs: %s: a symlink target of %d bytes (1 to %d)", e.Path, n.size, maxSymlinkTarget)
		}
	case rootfs.TypeChar, rootfs.TypeBlock:
		if e.Major > maxDeviceMajor || e.Minor > maxDeviceMinor {
			return nil, fmt.Errorf("erofs: %s: device %d:%d does not fit the kernel's device numbers", e.Path, e.Major, e.Minor)
		}
	case rootfs.TypeDir, rootfs.TypeFifo, rootfs.TypeSocket:
	default:
		return nil, fmt.Errorf("erofs: %s: entry of type %s", e.Path, e.Type)
	}
	xattrs, err := xattrBody(e.Inode)
	if err != nil {
		return nil, fmt.Errorf("erofs: %s: %w", e.Path, err)
	}
	n.xattrs = xattrs
	if e.Type != rootfs.TypeDir {
		if err := n.chooseForm(epochSec, epochNsec); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// chooseForm picks the compact inode where it holds everything, else the
// extended one.
func (n *node) chooseForm(epochSec int64, epochNsec int) error {
	in := n.in
	n.isize = compactInodeSize
	if in.UID > maxCompactID || in.GID > maxCompactID || n.size > maxCompactSize || n.nlink > maxCompactNlink ||
		in.MTime.Unix() != epochSec || in.MTime.Nanosecond() != epochNsec {
		n.isize = extendedInodeSize
	}
	return nil
}

// xattrBody encodes an inode's xattrs as the inline body that follows the
// inode: a 12-byte header, then each entry (its name index, the rest of its
// name and its value), 4-byte aligned, in byte order of the name.
func xattrBody(in *rootfs.Inode) ([]byte, error) {
	if len(in.Xattrs) == 0 {
		return nil, nil
	}
	b := make([]byte, xattrIbodyHeaderSize)
	for _, name := range in.XattrNames() {
		index, rest, err := xattrIndex(name)
		if err != nil {
			return nil, err
		}
		v := in.Xattrs[name]
		if len(rest) > maxNameLen {
			return nil, fmt.Errorf("xattr %q: a name of %d bytes after its prefix (at most %d)", name, len(rest), maxNameLen)
		}
		if len(v) > maxXattrValue {
			return nil, fmt.Errorf("xattr %q: a value of %d bytes (at most %d)", name, len(v), maxXattrValue)
		}
		var h [xattrEntryHeaderSize]byte
		h[0], h[1] = byte(len(rest)), index
		le.PutUint16(h[2:], uint16(len(v)))
		b = append(b, h[:]...)
		b = append(b, rest...)
		b = append(b, v...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	if (len(b)-xattrIbodyHeaderSize)/4+1 > maxXattrIcount {
		return nil, fmt.Errorf("xattrs of %d bytes: more than an inode holds", len(b))
	}
	return b, nil
}

// dirSize is the size of a directory's data: its entries and names packed
// block by block, an entry never split between blocks.
func dirSize(children []dirent) int64 {
	var size int64
	for _, c := range children {
		l := int64(direntSize + len(c.name))
		if size%blockSize+l > blockSize {
			size = align(size, blockSize)
		}
		size += l
	}
	return size
}

// dirBlocks encodes a directory's data, each block (the last one partial)
// holding its entries, then their names. The entries must have their nids.
func dirBlocks(children []dirent, size int64) []byte {
	out := make([]byte, 0, align(size, blockSize))
	for i := 0; i < len(children); {
		// The entries of this block.
		used, j := 0, i
		for j < len(children) && used+direntSize+len(children[j].name) <= blockSize {
			used += direntSize + len(children[j].name)
			j++
		}
		blk := make([]byte, used)
		nameOff := direntSize * (j - i)
		for k := i; k < j; k++ {
			d := blk[direntSize*(k-i):]
			le.PutUint64(d[0:], children[k].n.nid)
			le.PutUint16(d[8:], uint16(nameOff))
			d[10] = fileType(children[k].n.in.Type)
			nameOff += copy(blk[nameOff:], children[k].name)
		}
		out = append(out, blk...)
		if j < len(children) {
			out = append(out, make([]byte, blockSize-used)...)
		}
		i = j
	}
	return out
}
