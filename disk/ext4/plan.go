package ext4

import (
	"encoding/binary"
	"fmt"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
)

// Reserved inode numbers.
const (
	inoBad     = 1
	inoRoot    = 2
	inoResize  = 7
	inoJournal = 8
)

// node is one inode of the image.
type node struct {
	ino      uint32
	path     string        // first path in byte order, for errors
	entry    *rootfs.Entry // nil for what the writer adds itself
	typ      rootfs.Type
	perm     uint32
	uid, gid uint32
	mtime    time.Time
	links    uint32
	// directories
	parent  uint32
	ents    []dirent
	subdirs uint32
	dir     *dirLayout
	// regular files: content size; symlinks: len(target)
	size   uint64
	target string
	xattrs *xattrSet
	bound  uint64 // most blocks the inode can own

	// Filled in while writing.
	iblock  [60]byte
	flags   uint32
	blocks  uint64 // filesystem blocks owned: data, extent tree, xattr block
	fileACL uint64
}

// plan is the tree turned into inodes, before any block is placed.
type plan struct {
	nodes  []*node // in inode number order, from the root (2) and lost+found (11)
	maxIno uint32
	bound  uint64 // most blocks all inodes can own together
	seed   [4]uint32
}

func hashSeedWords(b [16]byte) [4]uint32 {
	var s [4]uint32
	for i := range s {
		s[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return s
}

// newPlan numbers the inodes in byte order of path (root 2, lost+found 11,
// the rest from 12) and works out every directory's blocks and every
// inode's xattrs. Hard links share the number of their first path.
func newPlan(t *rootfs.Sealed, o *Options) (*plan, error) {
	entries := t.Entries()
	if len(entries) == 0 || entries[0].Path != "/" || entries[0].Type != rootfs.TypeDir {
		return nil, fmt.Errorf("ext4: the tree has no root directory")
	}
	p := &plan{seed: hashSeedWords(o.HashSeed)}
	byInode := make(map[*rootfs.Inode]*node, len(entries)) // looked up, never iterated
	dirs := make(map[string]*node)                         // looked up, never iterated

	newNode := func(e *rootfs.Entry, ino uint32) *node {
		n := &node{ino: ino, path: e.Path, entry: e, typ: e.Type, perm: e.Perm & 07777,
			uid: e.UID, gid: e.GID, mtime: e.MTime, links: 1}
		byInode[e.Inode] = n
		p.nodes = append(p.nodes, n)
		if e.Type == rootfs.TypeDir {
			dirs[e.Path] = n
		}
		return n
	}
	root := newNode(entries[0], inoRoot)
	root.parent = inoRoot

	lf := t.Get("/lost+found")
	var lfNode *node
	if lf != nil {
		if lf.Type != rootfs.TypeDir {
			return nil, fmt.Errorf("ext4: /lost+found is a %s in the tree; e2fsck needs a directory there", lf.Type)
		}
		lfNode = newNode(lf, firstIno)
	} else {
		lfNode = &node{ino: firstIno, path: "/lost+found", typ: rootfs.TypeDir, perm: 0o700, mtime: o.Epoch, links: 1}
		p.nodes = append(p.nodes, lfNode)
		dirs[lfNode.path] = lfNode
		root.ents = append(root.ents, dirent{"lost+found", firstIno, ftDir})
		root.subdirs++
		lfNode.parent = inoRoot
	}

	next := uint32(firstIno + 1)
	for _, e := range entries[1:] {
		parent := dirs[path.Dir(e.Path)]
		if parent == nil {
			return nil, fmt.Errorf("ext4: %s: parent is not a directory in the tree", e.Path)
		}
		n := byInode[e.Inode]
		switch {
		case n != nil && e.Path != "/lost+found":
			if e.Type == rootfs.TypeDir {
				return nil, fmt.Errorf("ext4: %s: directory hard link", e.Path)
			}
			n.links++
			if n.links > linkMax {
				return nil, fmt.Errorf("ext4: %s: more than %d hard links", n.path, linkMax)
			}
		case n == nil:
			if next == 0 {
				return nil, fmt.Errorf("ext4: more than 2^32 inodes")
			}
			n = newNode(e, next)
			next++
		}
		ft, err := fileType(e.Type)
		if err != nil {
			return nil, fmt.Errorf("ext4: %s: %w", e.Path, err)
		}
		parent.ents = append(parent.ents, dirent{path.Base(e.Path), n.ino, ft})
		if e.Type == rootfs.TypeDir {
			parent.subdirs++
			n.parent = parent.ino
		}
	}
	p.maxIno = next - 1
	if lf == nil {
		// Keep the root's entries in name order with the added lost+found.
		slices.SortStableFunc(root.ents, func(a, b dirent) int { return strings.Compare(a.name, b.name) })
	}

	for _, n := range p.nodes {
		if err := p.prepare(n, n == lfNode); err != nil {
			return nil, fmt.Errorf("ext4: %s: %w", n.path, err)
		}
		p.bound += n.bound
	}
	return p, nil
}

// prepare works out what an inode needs beyond its entry: directory
// layout, xattrs, link count and the most blocks it can own.
func (p *plan) prepare(n *node, lostFound bool) error {
	if n.entry != nil && len(n.entry.Xattrs) > 0 {
		xs, err := splitXattrs(n.entry.XattrNames(), n.entry.Xattrs)
		if err != nil {
			return err
		}
		n.xattrs = xs
		if len(xs.block) > 0 {
			n.bound++
		}
	}
	if _, err := encodeTime(n.mtime); err != nil {
		return err
	}
	switch n.typ {
	case rootfs.TypeDir:
		n.links = 2 + n.subdirs
		if n.links > linkMax {
			n.links = 1 // dir_nlink: too many to count
		}
		minBlocks := 1
		if lostFound {
			minBlocks = lostFoundBlocks
		}
		l, err := layoutDir(n.ents, p.seed, minBlocks)
		if err != nil {
			return err
		}
		n.dir = l
		n.size = uint64(l.nblocks) * blockSize
		n.bound += uint64(l.nblocks) + treeBlocks(uint64(l.nblocks))
	case rootfs.TypeRegular:
		if n.entry.Size < 0 {
			return fmt.Errorf("negative size")
		}
		n.size = uint64(n.entry.Size)
		b := ceilDiv(n.size, blockSize)
		if b > 1<<32-1 {
			return fmt.Errorf("file of %d bytes is larger than ext4 allows with 4 KiB blocks", n.size)
		}
		n.bound += b + treeBlocks(b)
	case rootfs.TypeSymlink:
		n.target = n.entry.Target
		n.size = uint64(len(n.target))
		if n.size >= blockSize {
			return fmt.Errorf("symlink target of %d bytes is longer than %d", n.size, blockSize-1)
		}
		if n.size == 0 {
			return fmt.Errorf("symlink with an empty target")
		}
		if n.size >= 60 {
			n.bound++
		}
	case rootfs.TypeChar, rootfs.TypeBlock:
		if n.entry.Major > 0xFFF || n.entry.Minor > 0xFFFFF {
			return fmt.Errorf("device %d,%d out of range", n.entry.Major, n.entry.Minor)
		}
	case rootfs.TypeFifo, rootfs.TypeSocket:
	default:
		return fmt.Errorf("unsupported entry type %v", n.typ)
	}
	return nil
}

func fileType(t rootfs.Type) (uint8, error) {
	switch t {
	case rootfs.TypeRegular:
		return ftRegular, nil
	case rootfs.TypeDir:
		return ftDir, nil
	case rootfs.TypeSymlink:
		return ftSymlink, nil
	case rootfs.TypeChar:
		return ftChar, nil
	case rootfs.TypeBlock:
		return ftBlock, nil
	case rootfs.TypeFifo:
		return ftFifo, nil
	case rootfs.TypeSocket:
		return ftSocket, nil
	}
	return 0, fmt.Errorf("unsupported entry type %v", t)
}

// modeBits is the S_IF* part of i_mode.
func modeBits(t rootfs.Type) uint16 {
	switch t {
	case rootfs.TypeRegular:
		return 0x8000
	case rootfs.TypeDir:
		return 0x4000
	case rootfs.TypeSymlink:
		return 0xA000
	case rootfs.TypeChar:
		return 0x2000
	case rootfs.TypeBlock:
		return 0x6000
	case rootfs.TypeFifo:
		return 0x1000
	case rootfs.TypeSocket:
		return 0xC000
	}
	return 0
}

// encodeTime splits t into ext4's 32-bit seconds and the extra word: two
// epoch bits that extend the range to 2446, and the nanoseconds.
func encodeTime(t time.Time) ([2]uint32, error) {
	s := t.Unix()
	if s < -1<<31 || s >= 1<<34-1<<31 {
		return [2]uint32{}, fmt.Errorf("time %s is outside ext4's range", t.UTC().Format(time.RFC3339))
	}
	lo := uint32(s)
	epoch := uint32((s-int64(int32(lo)))>>32) & 3
	return [2]uint32{lo, epoch | uint32(t.Nanosecond())<<2}, nil
}
