package rootfs

import (
	"fmt"
	"os"
	"path"
	"strings"
)

// Overlay returns a tree that starts as a copy of t's index and keeps the
// content of t's files where it is, in t's directory, while whatever is
// created in the overlay lives in dir. It is how one output adds entries to
// its own view of a sealed tree (a disk's repart drop-in, say) without the
// tree, its digest, its record or any other output seeing them.
//
// t must not change while the overlay is in use. Hard links in t stay hard
// links in the overlay. The overlay is meant for additions: an entry of t
// can be replaced or removed, but a replaced entry's content is written anew
// into dir, never into t's directory.
func (t *Tree) Overlay(dir string) (*Tree, error) {
	return t.overlayOf(dir, func(p string) (string, bool) { return p, true })
}

// Split returns two overlays of t for a disk that holds the directory sub
// on a file system of its own: outside holds everything but what is below
// sub (sub stays, empty, where the file system is mounted), inside holds
// what is below sub moved to the root, sub itself as "/". Each keeps its
// content in t, and creates what is new in its own directory, dirOut or
// dirIn. A hard link between the two sides cannot be kept on two file
// systems, so it is an error naming both paths.
func (t *Tree) Split(sub, dirOut, dirIn string) (outside, inside *Tree, err error) {
	e := t.entries[sub]
	if sub == "/" || e == nil || e.Type != TypeDir {
		return nil, nil, fmt.Errorf("split at %s: not a directory of the tree", sub)
	}
	below := func(p string) bool { return strings.HasPrefix(p, sub+"/") }
	sides := map[*Inode]string{}
	for _, p := range t.Paths() {
		in := t.entries[p].Inode
		if q, ok := sides[in]; ok && below(q) != below(p) {
			return nil, nil, fmt.Errorf("%s and %s are hard links of one file, which cannot be on two file systems", q, p)
		}
		sides[in] = p
	}
	if outside, err = t.overlayOf(dirOut, func(p string) (string, bool) { return p, !below(p) }); err != nil {
		return nil, nil, err
	}
	inside, err = t.overlayOf(dirIn, func(p string) (string, bool) {
		switch {
		case p == sub:
			return "/", true
		case below(p):
			return p[len(sub):], true
		}
		return "", false
	})
	if err != nil {
		outside.Close()
		return nil, nil, err
	}
	return outside, inside, nil
}

// overlayOf is an overlay of the entries of t that keep maps to a path of
// the overlay. Their link counts are counted among what it keeps.
func (t *Tree) overlayOf(dir string, keep func(p string) (string, bool)) (*Tree, error) {
	if err := t.settleWrites(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("overlay %s: %w", dir, err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("overlay %s: %w", dir, err)
	}
	o := &Tree{dir: dir, root: r, opts: t.opts, entries: make(map[string]*Entry, len(t.entries)),
		lower: t, lowerPath: make(map[*Inode]string, len(t.entries))}
	copies := make(map[*Inode]*Inode, len(t.entries))
	counts := make(map[*Inode]int, len(t.entries))
	for _, p := range t.Paths() {
		np, ok := keep(p)
		if !ok {
			continue
		}
		e := t.entries[p]
		in := copies[e.Inode]
		if in == nil {
			c := *e.Inode
			if e.Xattrs != nil {
				c.Xattrs = make(map[string]string, len(e.Xattrs))
				for k, v := range e.Xattrs {
					c.Xattrs[k] = v
				}
			}
			in = &c
			copies[e.Inode] = in
			o.lowerPath[in] = p
		}
		counts[in]++
		o.entries[np] = &Entry{Path: np, Inode: in, Origin: e.Origin}
	}
	for in, n := range counts {
		in.nlink = n
	}
	if o.entries["/"] == nil {
		r.Close()
		return nil, fmt.Errorf("overlay %s: no root entry", dir)
	}
	return o, nil
}

// Added returns the entries of an overlay that its lower tree does not hold
// as they are: new paths, and paths whose entry was replaced or changed. For
// a tree that is no overlay it returns nil.
func (t *Tree) Added() []*Entry {
	if t.lower == nil {
		return nil
	}
	var out []*Entry
	for _, p := range t.Paths() {
		e := t.entries[p]
		le := t.lower.entries[p]
		if le == nil {
			out = append(out, e)
			continue
		}
		if _, kept := t.lowerPath[e.Inode]; !kept || !sameInode(le.Inode, e.Inode) {
			out = append(out, e)
		}
	}
	return out
}

// SameMetadata says whether two inodes show the same in a manifest line.
func SameMetadata(a, b *Inode) bool { return sameInode(a, b) }

// sameInode compares what a manifest line shows of two inodes.
func sameInode(a, b *Inode) bool {
	if a.Type != b.Type || a.Perm != b.Perm || a.UID != b.UID || a.GID != b.GID || !a.MTime.Equal(b.MTime) ||
		a.Size != b.Size || a.Digest != b.Digest || a.Target != b.Target || a.Major != b.Major || a.Minor != b.Minor ||
		len(a.Xattrs) != len(b.Xattrs) {
		return false
	}
	for k, v := range a.Xattrs {
		if bv, ok := b.Xattrs[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// inLower reports where the content of in lives in the lower tree, for an
// overlay's entry that kept its lower content.
func (t *Tree) inLower(in *Inode) (string, bool) {
	if t.lower == nil {
		return "", false
	}
	p, ok := t.lowerPath[in]
	return p, ok
}

// mkdirUpper makes the directories above name in an overlay's own
// directory, which holds only what the overlay created.
func (t *Tree) mkdirUpper(name string) error {
	if t.lower == nil {
		return nil
	}
	if d := path.Dir(name); d != "." {
		return t.root.MkdirAll(d, 0o700)
	}
	return nil
}
