package rootfs

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// ErrNoContent is what Open returns on a view made by SealedOf: an output
// read back holds the index (digests included), not a directory of content.
var ErrNoContent = errors.New("no content: the view holds only the index of an image read back")

// SealedOf returns a read-only view of entries that no directory backs:
// what a reader of an output gives back, so that comparison, diff and
// inspection walk the same type whether a tree was built or read back.
// Everything but content works as on a built tree's view (Get, Lookup,
// Walk, Entries, Paths, Children, Digest, the fs.FS's Stat, ReadDir and
// ReadLink); Open, and the fs.FS's Open of a regular file, fail with
// ErrNoContent wrapped with the path.
//
// Each entry needs a clean absolute path of its own; hard links share an
// *Inode, whose link count SealedOf sets. The view takes the entries over:
// they must not be changed afterwards. An archive need not list its root;
// the fs.FS then shows "." as a 0755 directory of its own, while Get("/")
// stays nil and the digest covers only what the archive listed.
func SealedOf(entries []*Entry) (*Sealed, error) {
	t := &Tree{entries: make(map[string]*Entry, len(entries))}
	// Readers hand their entries over already sorted; keeping that order
	// spares the view sorting its paths again.
	sorted := make([]string, 0, len(entries))
	inOrder := true
	for _, e := range entries {
		if e == nil {
			return nil, errors.New("index: nil entry")
		}
		if !cleanAbs(e.Path) {
			return nil, fmt.Errorf("index: %q is not a clean absolute path", e.Path)
		}
		if t.entries[e.Path] != nil {
			return nil, fmt.Errorf("index: %s: listed twice", e.Path)
		}
		if n := len(sorted); n > 0 && sorted[n-1] > e.Path {
			inOrder = false
		}
		t.entries[e.Path] = e
		sorted = append(sorted, e.Path)
	}
	if inOrder {
		t.sorted = sorted
	}
	SetNlink(entries)
	s := &Sealed{t: t}
	if t.entries["/"] == nil {
		s.root = &Entry{Path: "/", Inode: &Inode{Type: TypeDir, Perm: 0o755, nlink: 1}}
	}
	return s, nil
}

// cleanAbs reports whether p is an absolute path in the form Tree keeps.
func cleanAbs(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p
}

// HasContent reports whether Open can read the view's files: false for a
// view made by SealedOf.
func (s *Sealed) HasContent() bool { return s.t.root != nil }
