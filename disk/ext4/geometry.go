package ext4

import "fmt"

// Fixed format choices: what Debian bookworm's `mke2fs -t ext4` picks for
// every size a node image has.
const (
	blockSize    = 4096
	logBlockSize = 2 // s_log_block_size: 1024 << 2
	inodeSize    = 256
	descSize     = 64 // 64bit feature
	flexGroups   = 16 // 1 << s_log_groups_per_flex
	logFlex      = 4
	firstIno     = 11 // first non-reserved inode, lost+found
	extraIsize   = 32
	descPerBlock = blockSize / descSize
	addrPerBlock = blockSize / 4
	maxBPG       = blockSize * 8

	// minBlocks is the smallest filesystem mke2fs still gives a journal.
	minBlocks = 2048
	// linkMax is EXT4_LINK_MAX: a directory with more subdirectories has
	// a link count of 1 (dir_nlink), a file may not have more hard links.
	linkMax = 65000
	// reservedPercent is mke2fs's default -m.
	reservedPercent = 5.0
)

// geometry is the shape of a filesystem of a given size, computed the way
// mke2fs (lib/ext2fs/initialize.c, 1.47.0) computes it, so a tree written
// here and an empty mke2fs of the same size agree on block count, groups,
// inodes, reserved GDT blocks and journal size.
type geometry struct {
	blocks     uint64 // s_blocks_count
	bpg        uint32 // blocks (= clusters) per group
	groups     uint32
	ipg        uint32 // inodes per group
	itb        uint32 // inode table blocks per group
	inodes     uint32
	descBlocks uint32
	rsvGDT     uint32
	rBlocks    uint64 // blocks reserved for root
	journal    uint32 // journal blocks
	ratio      int64  // bytes per inode
}

// sizeRatio is the inode ratio mke2fs.conf gives the size type of a
// filesystem of n 4 KiB blocks ("floppy", "small", "default", "big", "huge").
func sizeRatio(n uint64) int64 {
	const meg = (1 << 20) / blockSize
	switch {
	case n < 3*meg:
		return 8192
	case n < 512*meg:
		return 4096
	case n < 4*1024*1024*meg:
		return 16384
	case n < 16*1024*1024*meg:
		return 32768
	}
	return 65536
}

func newGeometry(size int64) (*geometry, error) {
	if size < minBlocks*blockSize {
		return nil, fmt.Errorf("ext4: a %s filesystem is too small (at least %s)", human(size), human(minBlocks*blockSize))
	}
	n := uint64(size) / blockSize
	if n > 1<<48 {
		return nil, fmt.Errorf("ext4: a %s filesystem is too large", human(size))
	}
	g := &geometry{ratio: max(sizeRatio(n), blockSize)}
	inodesParam := n * blockSize / uint64(g.ratio)
	if inodesParam > 0xFFFFFFFF {
		inodesParam = 0xFFFFFFFF
	}
	rParam := uint64(reservedPercent * float64(n) / 100.0)

	blocks := n
	rBlocks := rParam
	bpg := uint32(maxBPG)
	for {
		groups := ceilDiv(blocks, uint64(bpg))
		descBlocks := ceilDiv(groups, descPerBlock)
		inodes := max(inodesParam, firstIno+1)
		ipg := ceilDiv(inodes, groups)
		if ipg > maxBPG {
			if bpg < 256 {
				return nil, fmt.Errorf("ext4: too many inodes for a %s filesystem", human(size))
			}
			bpg -= 8
			blocks = n
			continue
		}
		var itb, fipg uint64
		for {
			itb = ceilDiv(ipg*inodeSize, blockSize)
			fipg = itb * blockSize / inodeSize
			if fipg < 8 {
				fipg = 8
			}
			fipg &^= 7
			itb = ceilDiv(fipg*inodeSize, blockSize)
			if fipg*groups > 0xFFFFFFFF {
				ipg--
				continue
			}
			break
		}
		rsv := reservedGDT(blocks, bpg, descBlocks)
		if rsv+descBlocks > uint64(bpg)*3/4 {
			// mke2fs would switch to meta_bg here, a layout this writer
			// does not make.
			return nil, fmt.Errorf("ext4: a %s filesystem needs meta_bg, which is not supported", human(size))
		}
		if 3+itb+rsv+descBlocks > uint64(bpg) {
			return nil, fmt.Errorf("ext4: too many inodes for a %s filesystem", human(size))
		}
		// A last group too small for its own metadata is dropped.
		overhead := 2 + itb
		if hasSuper(uint32(groups - 1)) {
			overhead += 1 + descBlocks + rsv
		}
		rem := blocks % uint64(bpg)
		if groups == 1 && rem != 0 && rem < overhead {
			return nil, fmt.Errorf("ext4: a %s filesystem is too small", human(size))
		}
		if rem != 0 && rem < overhead+50 {
			blocks -= rem
			ratio := 100.0 * float64(rParam) / float64(n)
			rBlocks = uint64(ratio * float64(blocks) / 100.0)
			continue
		}
		g.blocks = blocks
		g.bpg = bpg
		g.groups = uint32(groups)
		g.ipg = uint32(fipg)
		g.itb = uint32(itb)
		g.inodes = uint32(fipg * groups)
		g.descBlocks = uint32(descBlocks)
		g.rsvGDT = uint32(rsv)
		g.rBlocks = rBlocks
		g.journal = journalBlocks(blocks)
		return g, nil
	}
}

// reservedGDT leaves room for the group descriptors of a filesystem grown
// to 1024 times its size (or 2^32 blocks), as calc_reserved_gdt_blocks does.
func reservedGDT(blocks uint64, bpg uint32, descBlocks uint64) uint64 {
	maxBlocks := uint64(0xFFFFFFFF)
	if blocks < maxBlocks/1024 {
		maxBlocks = blocks * 1024
	}
	rsvGroups := ceilDiv(maxBlocks, uint64(bpg))
	rsv := ceilDiv(rsvGroups, descPerBlock) - descBlocks
	return min(rsv, addrPerBlock)
}

// journalBlocks is ext2fs_default_journal_size.
func journalBlocks(blocks uint64) uint32 {
	switch {
	case blocks < 32768:
		return 1024
	case blocks < 256*1024:
		return 4096
	case blocks < 512*1024:
		return 8192
	case blocks < 4096*1024:
		return 16384
	case blocks < 8192*1024:
		return 32768
	case blocks < 16384*1024:
		return 65536
	case blocks < 32768*1024:
		return 131072
	}
	return 262144
}

// hasSuper says whether group g holds a superblock and GDT copy
// (sparse_super: groups 0, 1 and powers of 3, 5 and 7).
func hasSuper(g uint32) bool {
	if g <= 1 {
		return true
	}
	if g&1 == 0 {
		return false
	}
	return isPower(g, 3) || isPower(g, 5) || isPower(g, 7)
}

func isPower(g, base uint32) bool {
	for g%base == 0 {
		g /= base
	}
	return g == 1
}

// backupGroups lists the groups after 0 that hold superblock copies, in
// increasing order.
func (g *geometry) backupGroups() []uint32 {
	var out []uint32
	for i := uint32(1); i < g.groups; i++ {
		if hasSuper(i) {
			out = append(out, i)
		}
	}
	return out
}

func (g *geometry) groupStart(i uint32) uint64 { return uint64(i) * uint64(g.bpg) }

// groupBlocks is the number of blocks in group i (the last one may be short).
func (g *geometry) groupBlocks(i uint32) uint64 {
	if i == g.groups-1 {
		return g.blocks - g.groupStart(i)
	}
	return uint64(g.bpg)
}

// superBlocks is the size of the superblock + GDT + reserved GDT area at
// the start of a group that has one.
func (g *geometry) superBlocks() uint64 { return 1 + uint64(g.descBlocks) + uint64(g.rsvGDT) }

func ceilDiv(a, b uint64) uint64 { return (a + b - 1) / b }

// human prints a byte count the way people read partition sizes.
func human(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB (%d bytes)", float64(n)/(1<<20), n)
	}
	return fmt.Sprintf("%d bytes", n)
}
