package rootfs

import (
	"context"
	"fmt"
	"io"
)

// Ref says that the content of the regular file at Path, and of its hard
// links, is its size in bytes at Offset of the archive the tree's
// ArchiveStore keeps as Archive (a sha256 in hex).
type Ref struct {
	Path    string `json:"path"`
	Archive string `json:"archive"`
	Offset  int64  `json:"offset"`
}

// Refs lists the files whose content is a reference into an archive the
// tree's ArchiveStore keeps, each hard-link group once under its first path,
// in the byte order of the paths. WriteContent leaves their content out.
func (t *Tree) Refs() []Ref {
	var refs []Ref
	seen := map[*Inode]bool{}
	for _, e := range t.Entries() {
		if e.Type != TypeRegular || seen[e.Inode] || !keptRef(e.Inode) {
			continue
		}
		seen[e.Inode] = true
		refs = append(refs, Ref{Path: e.Path, Archive: e.ref.a.sum, Offset: e.ref.off})
	}
	return refs
}

func keptRef(in *Inode) bool { return in.ref != nil && in.ref.a.kept && in.ref.a.sum != "" }

// WriteContent writes the content of every regular file, each hard-link
// group once, in the byte order of the paths, except what Refs lists: with
// the manifest and those references, what Restore needs to make the tree
// again.
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
		if keptRef(e.Inode) {
			continue
		}
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
// the tree, which holds only its root, with the content WriteContent wrote
// and the references Refs listed, whose archives the tree's ArchiveStore
// opens. Content that does not hash to its entry's digest is an error naming
// the path; a referenced file is not hashed again, since its archive is
// verified as a whole when it is opened.
func (t *Tree) Restore(ctx context.Context, entries []*Entry, content io.Reader, refs []Ref) error {
	t.deferDirs = true
	defer func() { t.deferDirs = false }()
	byPath := make(map[string]Ref, len(refs))
	for _, r := range refs {
		byPath[r.Path] = r
	}
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
		if ref, ok := byPath[e.Path]; ok && e.Type == TypeRegular {
			if err := t.restoreRef(e, h, ref); err != nil {
				return err
			}
			delete(byPath, e.Path)
			continue
		}
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
	if len(byPath) > 0 {
		for p := range byPath {
			return fmt.Errorf("%s: a reference names a path that is not a regular file of the manifest", p)
		}
	}
	return nil
}

// restoreRef adds the regular file e whose content is ref.
func (t *Tree) restoreRef(e *Entry, h Header, ref Ref) error {
	if t.opts.Archives == nil {
		return fmt.Errorf("%s: content is a reference, and the tree has no archive store", e.Path)
	}
	a, err := t.openKept(ref.Archive)
	if err != nil {
		return fmt.Errorf("%s: %w", e.Path, err)
	}
	if ref.Offset < 0 || ref.Offset+e.Size > a.size {
		return fmt.Errorf("%s: %d bytes at %d lie outside archive %s of %d bytes", e.Path, e.Size, ref.Offset, ref.Archive, a.size)
	}
	full, err := t.prepareNew(e.Path)
	if err != nil {
		return err
	}
	t.addRef(full, h, a, ref.Offset, e.Size, e.Digest)
	return nil
}

// openKept opens the kept archive sum once per tree.
func (t *Tree) openKept(sum string) (*archive, error) {
	for _, a := range t.archives {
		if a.kept && a.sum == sum {
			return a, nil
		}
	}
	f, err := t.opts.Archives.Open(sum)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	a := &archive{f: f, path: f.Name(), sum: sum, kept: true, size: fi.Size()}
	t.archives = append(t.archives, a)
	return a, nil
}
