package kmod

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// The .bin indexes are kmod's on-disk tries (libkmod-index.c, version 2.1):
// a header (magic, version, the root's offset), then the nodes, children
// before their parent, each one
//
//	[prefix NUL]                      when the node's prefix is not empty
//	[first last offset×(last-first+1)] when it has children, 0 for a gap
//	[count (priority value NUL)×count] when keys end there
//
// with big-endian 32-bit numbers, and a node's offset carrying flags in its
// high nibble for the parts it has. Values are ordered by priority, and a
// value of the same priority as one already there goes before it.

const (
	indexMagic   = 0xB007F457
	indexVersion = 0x00020001

	nodePrefix   = 0x80000000
	nodeValues   = 0x40000000
	nodeChildren = 0x20000000

	// indexChildMax bounds the characters of keys and values: kmod's
	// nodes have 128 child slots, and a byte above 127 indexes out of
	// them.
	indexChildMax = 128
)

// index collects the keys and values of one .bin file. The trie kmod builds
// by inserting them one by one depends only on the set of keys (a radix
// tree whose root has an empty prefix), so it is built here from the sorted
// keys in one pass.
type index struct {
	entries []indexEntry
}

type indexEntry struct {
	key, value string
	priority   uint32
	seq        int
	// from names where the entry comes from, for an error.
	from string
}

// add is kmod's index_insert; from names the module or file the entry
// comes from.
func (x *index) add(key, value string, priority uint32, from string) {
	x.entries = append(x.entries, indexEntry{key, value, priority, len(x.entries), from})
}

// checkASCII fails for a byte kmod's trie cannot hold.
func checkASCII(s string) error {
	for i := 0; i < len(s); i++ {
		if s[i] >= indexChildMax {
			return fmt.Errorf("module index: bad character 0x%x in %q: only 7-bit ASCII is supported", s[i], s)
		}
	}
	return nil
}

// write returns the index file.
func (x *index) write() ([]byte, error) {
	for _, e := range x.entries {
		if err := checkASCII(e.key); err != nil {
			return nil, fmt.Errorf("%s: %w", e.from, err)
		}
		if err := checkASCII(e.value); err != nil {
			return nil, fmt.Errorf("%s: %w", e.from, err)
		}
	}
	slices.SortFunc(x.entries, func(a, b indexEntry) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		if a.priority != b.priority {
			if a.priority < b.priority {
				return -1
			}
			return 1
		}
		return b.seq - a.seq
	})
	// keys[i] is a distinct key, its values entries[starts[i]:starts[i+1]].
	var keys []string
	var starts []int
	for i, e := range x.entries {
		if i == 0 || e.key != x.entries[i-1].key {
			keys = append(keys, e.key)
			starts = append(starts, i)
		}
	}
	starts = append(starts, len(x.entries))
	size := 12
	for _, e := range x.entries {
		size += len(e.key) + len(e.value) + 16
	}
	w := &trieWriter{buf: make([]byte, 12, size), keys: keys, starts: starts, entries: x.entries}
	binary.BigEndian.PutUint32(w.buf[0:], indexMagic)
	binary.BigEndian.PutUint32(w.buf[4:], indexVersion)
	root := uint32(12) // an empty root: no prefix, children or values
	if len(keys) > 0 {
		root = w.node(0, len(keys), 0, true)
	}
	binary.BigEndian.PutUint32(w.buf[8:], root)
	return w.buf, nil
}

type trieWriter struct {
	buf     []byte
	keys    []string
	starts  []int
	entries []indexEntry
}

// node writes the node for keys[lo:hi], which share their first depth
// bytes, after its children, and returns its offset with its flags. The
// root keeps an empty prefix, as kmod's does.
func (w *trieWriter) node(lo, hi, depth int, root bool) uint32 {
	first, last := w.keys[lo], w.keys[hi-1]
	end := depth
	if !root {
		// Sorted keys: what the first and the last share, all share.
		for end < len(first) && end < len(last) && first[end] == last[end] {
			end++
		}
	}
	prefix := first[depth:end]
	valued := len(first) == end
	next := lo
	if valued {
		next++
	}
	// Children by the byte after the prefix, in byte order.
	type child struct {
		c      byte
		offset uint32
	}
	var children []child
	for i := next; i < hi; {
		c := w.keys[i][end]
		j := i + 1
		for j < hi && w.keys[j][end] == c {
			j++
		}
		children = append(children, child{c, w.node(i, j, end+1, false)})
		i = j
	}

	offset := uint32(len(w.buf))
	if prefix != "" {
		w.buf = append(w.buf, prefix...)
		w.buf = append(w.buf, 0)
		offset |= nodePrefix
	}
	if len(children) > 0 {
		lo, hi := children[0].c, children[len(children)-1].c
		w.buf = append(w.buf, lo, hi)
		k := 0
		for c := int(lo); c <= int(hi); c++ {
			var off uint32
			if k < len(children) && children[k].c == byte(c) {
				off = children[k].offset
				k++
			}
			w.buf = binary.BigEndian.AppendUint32(w.buf, off)
		}
		offset |= nodeChildren
	}
	if valued {
		vs := w.entries[w.starts[lo]:w.starts[lo+1]]
		w.buf = binary.BigEndian.AppendUint32(w.buf, uint32(len(vs)))
		for _, v := range vs {
			w.buf = binary.BigEndian.AppendUint32(w.buf, v.priority)
			w.buf = append(w.buf, v.value...)
			w.buf = append(w.buf, 0)
		}
		offset |= nodeValues
	}
	return offset
}
