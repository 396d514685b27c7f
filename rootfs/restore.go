package rootfs

import (
	"context"
	"fmt"
	"io"
)

// WriteContent writes the content of every regular file, each hard-link
// group once, in the byte order of the paths: with the manifest, what
// Restore needs to make the tree again.
func (t *Tree) WriteContent(ctx context.Context, w io.Writer) error {
	if err := t.settleWrites(); err != nil {
		return err
	}
	seen := map[*Inode]bool{}
	for _, e := range t.Entries() {
		if e.Type != TypeRegular || seen[e.Inode] {
			continue
		}
		seen[e.Inode] = true
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := t.Open(e.Path)
		if err != nil {
			return err
		}
		n, err := io.Copy(w, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
		if n != e.Size {
			return fmt.Errorf("%s: %d bytes on disk, %d in the index", e.Path, n, e.Size)
		}
	}
	return nil
}

// Restore makes entries (as ParseManifest reads a manifest with origins) in
// the tree, which holds only its root, with the content WriteContent wrote.
// Content that does not hash to its entry's digest is an error naming the
// path.
func (t *Tree) Restore(ctx context.Context, entries []*Entry, content io.Reader) error {
	first := map[*Inode]string{}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		if p, ok := first[e.Inode]; ok && e.Type != TypeDir {
			if _, err := t.Link(e.Path, p, e.Origin); err != nil {
				return err
			}
			continue
		}
		first[e.Inode] = e.Path
		h := Header{Type: e.Type, Perm: e.Perm, UID: e.UID, GID: e.GID, MTime: e.MTime, Target: e.Target,
			Major: e.Major, Minor: e.Minor, Xattrs: e.Xattrs, Origin: e.Origin}
		var r io.Reader
		if e.Type == TypeRegular {
			r = io.LimitReader(content, e.Size)
		}
		got, err := t.Create(e.Path, h, r)
		if err != nil {
			return err
		}
		if e.Type == TypeRegular {
			if err := t.settleWrites(); err != nil {
				return err
			}
			if got.Size != e.Size || got.Digest != e.Digest {
				return fmt.Errorf("%s: restored content is %d bytes with sha256 %s, the manifest says %d bytes with %s", e.Path, got.Size, got.Digest, e.Size, e.Digest)
			}
		}
	}
	return nil
}
