// Package ext4 writes an ext4 filesystem image from a sealed tree
// (rootfs.Sealed), without root, mounts or mke2fs, and byte for byte the same
// on every run.
//
// The filesystem has the features, geometry and journal Debian bookworm's
// `mke2fs -t ext4` gives a filesystem of the same size (4 KiB blocks,
// 256-byte inodes, metadata_csum, flex_bg, resize_inode so it can be grown
// later). Everything the image holds comes from the tree's index: owners,
// modes, device numbers, xattrs (POSIX ACLs converted to ext4's on-disk
// form), hard links, and one time per entry used as its atime, ctime,
// mtime and crtime. Identifiers (UUID, directory hash seed) and every
// filesystem time come from Options.
//
// Inodes are numbered in byte order of path (root 2, lost+found 11, then
// from 12); data is placed front to back in the same order, so the layout
// depends on nothing but the tree and the options. Content is streamed one
// file at a time, and blocks of zeros become holes.
package ext4

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/rootfs"
)

// Options say how to write the filesystem.
type Options struct {
	// Size is the filesystem size in bytes (at least 8 MiB). 0 means auto:
	// the content plus FreeSpace plus the metadata, rounded up to a whole
	// MiB, grown further until at least 20% more inodes than used are free.
	Size int64
	// FreeSpace is the room an auto-sized filesystem keeps beyond the
	// content. 0 means 20% of the content, at least 64 MiB; negative
	// means none. The content counts every regular file at its full
	// size, holes included, so an auto size never depends on which blocks
	// happen to be zero.
	FreeSpace int64
	// UUID is the filesystem UUID (s_uuid), also the journal's.
	UUID [16]byte
	// HashSeed seeds the directory index hash (s_hash_seed), bytes as stored.
	HashSeed [16]byte
	// Label is the volume name, at most 16 bytes.
	Label string
	// Epoch is every time the filesystem itself records: creation, last
	// write and check, and the inodes it adds (lost+found, journal).
	Epoch time.Time
	// Log gets a summary line; nil logs nothing.
	Log logrus.FieldLogger
}

// Summary says what Write made.
type Summary struct {
	Size       int64 // bytes
	BlocksUsed int64 // 4 KiB blocks in use, metadata and journal included
	Inodes     int64 // inodes in use, the reserved ones included
	Features   []string
	// Added lists the paths the filesystem holds beyond the tree:
	// /lost+found (mode 0700, owner 0:0, the epoch as its time) when the
	// tree has none. Outputs list it in their manifest section.
	Added []string
}

const (
	mib             = 1 << 20
	minFreeSpace    = 64 * mib
	freeInodeShare  = 5 // auto keeps used/5 inodes free
	freeSpaceShare  = 5 // default FreeSpace is content/5
	autoSizeRetries = 64
)

// Plan computes the size of the filesystem the tree needs (Options.Size
// when it is fixed) and checks that the tree fits, so a caller can lay out
// partitions before writing. A tree that does not fit a fixed size is an
// error that names both sizes.
func Plan(t *rootfs.Sealed, o Options) (int64, error) {
	s, err := newSizing(t, &o)
	if err != nil {
		return 0, err
	}
	return s.size, nil
}

// Write writes the filesystem into w, at offsets 0 to the planned size. w
// must read as zeros wherever Write writes nothing (a new, sparse file or
// region): Write leaves unused blocks, empty inode table blocks and the
// journal's body unwritten. Nothing is written when the tree does not fit.
func Write(ctx context.Context, t *rootfs.Sealed, w io.WriterAt, o Options) (*Summary, error) {
	s, err := newSizing(t, &o)
	if err != nil {
		return nil, err
	}
	wr := &writer{ctx: ctx, t: t, o: &o, g: s.g, lay: s.lay, al: newAllocator(s.lay), p: s.p,
		out: &blockWriter{w: w, buf: make([]byte, 0, chunk)}, buf: make([]byte, chunk),
		fsSeed: crc32c(^uint32(0), o.UUID[:])}
	if err := wr.run(); err != nil {
		return nil, err
	}
	sum := &Summary{
		Size:       s.size,
		BlocksUsed: int64(s.g.blocks - wr.summary.free),
		Inodes:     int64(s.g.inodes - wr.summary.freeInodes),
		Features:   append([]string(nil), featureNames...),
	}
	if t.Get("/lost+found") == nil {
		sum.Added = []string{"/lost+found"}
	}
	if o.Log != nil {
		o.Log.WithFields(logrus.Fields{
			"size": s.size, "blocks_used": sum.BlocksUsed, "inodes": sum.Inodes,
			"written": wr.out.written,
		}).Info("ext4: filesystem written")
	}
	return sum, nil
}

// sizing is a plan with its chosen size and geometry.
type sizing struct {
	p    *plan
	size int64
	g    *geometry
	lay  *layout
}

func newSizing(t *rootfs.Sealed, o *Options) (*sizing, error) {
	if len(o.Label) > 16 {
		return nil, fmt.Errorf("ext4: label %q is longer than 16 bytes", o.Label)
	}
	if o.Epoch.IsZero() {
		return nil, fmt.Errorf("ext4: no epoch given")
	}
	if _, err := encodeTime(o.Epoch); err != nil {
		return nil, fmt.Errorf("ext4: epoch: %w", err)
	}
	if o.Size < 0 {
		return nil, fmt.Errorf("ext4: negative size %d", o.Size)
	}
	p, err := newPlan(t, o)
	if err != nil {
		return nil, err
	}
	if o.Size > 0 {
		return fixedSizing(t, p, o.Size)
	}
	return autoSizing(p, o)
}

// room is how many blocks a geometry leaves for the tree's inodes once the
// layout, the journal (with a possible extent tree) and the resize inode's
// block are placed.
func room(g *geometry, lay *layout) uint64 {
	journalMeta := treeBlocks(ceilDiv(uint64(g.journal), maxExtentLen) + uint64(len(lay.used)))
	fixed := lay.metaBlocks + uint64(g.journal) + journalMeta + 1
	if fixed >= g.blocks {
		return 0
	}
	return g.blocks - fixed
}

// sizingAt lays out a filesystem of size bytes for p and says how many
// blocks it has room for.
func sizingAt(p *plan, size int64) (*sizing, uint64, error) {
	g, err := newGeometry(size)
	if err != nil {
		return nil, 0, err
	}
	lay, err := newLayout(g)
	if err != nil {
		return nil, 0, err
	}
	return &sizing{p: p, size: size, g: g, lay: lay}, room(g, lay), nil
}

func fixedSizing(t *rootfs.Sealed, p *plan, size int64) (*sizing, error) {
	s, avail, err := sizingAt(p, size)
	if err != nil {
		return nil, err
	}
	if uint64(p.maxIno) > uint64(s.g.inodes) {
		return nil, fmt.Errorf("ext4: the tree needs %d inodes, a %s filesystem has %d", p.maxIno, human(size), s.g.inodes)
	}
	if p.bound > avail {
		// The bound counts holes as data; count what the content needs.
		need, err := exactBlocks(t, p, uint64(len(s.lay.used))+1)
		if err != nil {
			return nil, err
		}
		if need > avail {
			return nil, fmt.Errorf("ext4: the tree needs %s, a %s filesystem has room for %s",
				human(int64(need)*blockSize), human(size), human(int64(avail)*blockSize))
		}
	}
	return s, nil
}

func autoSizing(p *plan, o *Options) (*sizing, error) {
	content := p.bound * blockSize
	free := o.FreeSpace
	switch {
	case free == 0:
		free = max(int64(content/freeSpaceShare), minFreeSpace)
	case free < 0:
		free = 0
	}
	needBlocks := p.bound + ceilDiv(uint64(free), blockSize)
	needInodes := uint64(p.maxIno) + uint64(p.maxIno)/freeInodeShare
	size := roundMiB(int64(content) + free)
	for range autoSizeRetries {
		size = max(size, minBlocks*blockSize)
		s, avail, err := sizingAt(p, size)
		if err != nil {
			return nil, err
		}
		var grow int64
		if avail < needBlocks {
			grow = int64(needBlocks-avail) * blockSize
		}
		if uint64(s.g.inodes) < needInodes {
			grow = max(grow, int64(needInodes-uint64(s.g.inodes))*s.g.ratio)
		}
		if grow == 0 {
			return s, nil
		}
		size = roundMiB(size + grow)
	}
	return nil, fmt.Errorf("ext4: no filesystem size found for the tree")
}

func roundMiB(n int64) int64 { return (n + mib - 1) / mib * mib }
