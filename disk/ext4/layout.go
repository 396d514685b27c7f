package ext4

import (
	"fmt"
	"sort"
)

// rng is a run of blocks.
type rng struct{ start, n uint64 }

func (r rng) end() uint64 { return r.start + r.n }

// layout places the fixed metadata: superblock copies with their GDT and
// reserved GDT blocks, and with flex_bg the bitmaps and inode tables of
// every 16 groups packed together at the start of the first of them, as
// mke2fs does.
type layout struct {
	g          *geometry
	bb, ib, it []uint64 // per group: block bitmap, inode bitmap, inode table
	used       []rng    // sorted and merged: everything above
	metaBlocks uint64
}

func newLayout(g *geometry) (*layout, error) {
	l := &layout{g: g, bb: make([]uint64, g.groups), ib: make([]uint64, g.groups), it: make([]uint64, g.groups)}
	var sbs []rng
	for i := uint32(0); i < g.groups; i++ {
		if hasSuper(i) {
			sbs = append(sbs, rng{g.groupStart(i), g.superBlocks()})
		}
	}
	var meta []rng
	cursor := uint64(0)
	take := func(n uint64) (uint64, error) {
		// The first run of n blocks at or after cursor clear of every
		// superblock area (metadata is placed in increasing order, so it
		// never meets itself).
		k := sort.Search(len(sbs), func(i int) bool { return sbs[i].end() > cursor })
		for ; ; k++ {
			if k < len(sbs) && sbs[k].start < cursor+n {
				cursor = max(cursor, sbs[k].end())
				continue
			}
			break
		}
		if cursor+n > g.blocks {
			return 0, fmt.Errorf("ext4: group metadata does not fit in %d blocks", g.blocks)
		}
		p := cursor
		cursor += n
		meta = append(meta, rng{p, n})
		return p, nil
	}
	for g0 := uint32(0); g0 < g.groups; g0 += flexGroups {
		n := min(flexGroups, g.groups-g0)
		cursor = max(cursor, g.groupStart(g0))
		var err error
		for i := g0; i < g0+n && err == nil; i++ {
			l.bb[i], err = take(1)
		}
		for i := g0; i < g0+n && err == nil; i++ {
			l.ib[i], err = take(1)
		}
		for i := g0; i < g0+n && err == nil; i++ {
			l.it[i], err = take(uint64(g.itb))
		}
		if err != nil {
			return nil, err
		}
	}
	l.used = mergeRanges(append(sbs, meta...))
	for _, r := range l.used {
		l.metaBlocks += r.n
	}
	return l, nil
}

func mergeRanges(rs []rng) []rng {
	sort.Slice(rs, func(i, j int) bool { return rs[i].start < rs[j].start })
	var out []rng
	for _, r := range rs {
		if r.n == 0 {
			continue
		}
		if k := len(out); k > 0 && out[k-1].end() >= r.start {
			out[k-1].n = max(out[k-1].end(), r.end()) - out[k-1].start
			continue
		}
		out = append(out, r)
	}
	return out
}

// allocator hands out the blocks left free by the layout, strictly in
// increasing order, so data lands in the order it is written and the
// image is written front to back.
type allocator struct {
	used   []rng
	i      int
	cur    uint64
	end    uint64
	allocs []rng // what was handed out, merged
	total  uint64
}

func newAllocator(l *layout) *allocator {
	return &allocator{used: l.used, end: l.g.blocks}
}

// next returns a run of at most n free blocks at the cursor.
func (a *allocator) next(n uint64) (rng, error) {
	for a.i < len(a.used) && a.used[a.i].start <= a.cur {
		a.cur = max(a.cur, a.used[a.i].end())
		a.i++
	}
	if a.cur >= a.end {
		return rng{}, errNoSpace
	}
	limit := a.end
	if a.i < len(a.used) {
		limit = a.used[a.i].start
	}
	r := rng{a.cur, min(n, limit-a.cur)}
	a.cur += r.n
	a.total += r.n
	if k := len(a.allocs); k > 0 && a.allocs[k-1].end() == r.start {
		a.allocs[k-1].n += r.n
	} else {
		a.allocs = append(a.allocs, r)
	}
	return r, nil
}

// blocks returns n free blocks, contiguous where the layout allows.
func (a *allocator) blocks(n uint64) ([]uint64, error) {
	out := make([]uint64, 0, n)
	for uint64(len(out)) < n {
		r, err := a.next(n - uint64(len(out)))
		if err != nil {
			return nil, err
		}
		for b := r.start; b < r.end(); b++ {
			out = append(out, b)
		}
	}
	return out, nil
}

// one returns a single free block.
func (a *allocator) one() (uint64, error) {
	r, err := a.next(1)
	return r.start, err
}

var errNoSpace = fmt.Errorf("ext4: out of space (the plan underestimated the tree)")
