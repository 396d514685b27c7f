package formats

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/verity"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// A raw disk may hold /usr on a partition of its own (type usr, ext4,
// read-only), with its dm-verity hash tree on another (type usr-verity),
// as the Discoverable Partitions Specification lays out a verified /usr:
// the root partition then holds the rest of the tree, writable, with an
// empty /usr to mount it on. The hash tree is what veritysetup format
// writes (disk/verity), salted and labelled with identifiers derived from
// the seed; the two partitions' GUIDs are the first and last 128 bits of
// its root hash, as systemd-repart derives them, so that the root hash on
// the UKI's command line (usrhash=) names both.

// mergedUsrLinks are the top-level directories merged-/usr makes links into
// /usr: with /usr on a partition of its own they must be links, or what
// they hold would sit unverified on the writable root.
var mergedUsrLinks = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// checkUsrLayout refuses a tree the layout cannot hold: /usr must be a
// directory, and the tree merged-/usr.
func checkUsrLayout(t *rootfs.Sealed, field string) error {
	u := t.Get("/usr")
	if u == nil || u.Type != rootfs.TypeDir {
		return fmt.Errorf("%s: the tree's /usr is not a directory, so it cannot go on a partition of its own", field)
	}
	for _, p := range mergedUsrLinks {
		e := t.Get(p)
		if e == nil || e.Type == rootfs.TypeSymlink {
			continue
		}
		what := "not a directory"
		if e.Type == rootfs.TypeDir {
			what = "a directory"
		}
		return fmt.Errorf("%s: the tree's %s is %s, not a link into /usr: with /usr on a partition of its own, the tree must be merged-/usr, or what %s holds would be outside it, unverified on the root", field, p, what, p)
	}
	return nil
}

// splitUsr gives the root partition the tree without what is below /usr,
// and the usr partition what is below /usr as its root. base is the disk's
// view of the tree (with its repart drop-in, say), or nil for the tree.
func (p *diskPlan) splitUsr(src *Source, base *rootfs.Tree, root, usr *plannedPart) error {
	dir, err := os.MkdirTemp(src.WorkDir, "usr-")
	if err != nil {
		return err
	}
	var out, in *rootfs.Tree
	if base != nil {
		out, in, err = base.Split("/usr", filepath.Join(dir, "root"), filepath.Join(dir, "usr"))
	} else {
		out, in, err = src.Tree.Split("/usr", filepath.Join(dir, "root"), filepath.Join(dir, "usr"))
	}
	if err != nil {
		os.RemoveAll(dir)
		return fmt.Errorf("%s: %w", usr.field, err)
	}
	p.cleanup = append(p.cleanup, func() { out.Close(); in.Close(); os.RemoveAll(dir) })
	root.tree, usr.tree = out.View(), in.View()
	return nil
}

// sizeVerity gives the hash partition the size /usr's tree needs, once
// /usr's partition has its size.
func (p *diskPlan) sizeVerity() (int64, error) {
	pp, usr := p.usrVerity, p.usr
	need := disk.AlignUp(verity.HashSize(usr.gpt.Size))
	size := disk.AlignUp(pp.spec.Size)
	switch {
	case size == 0:
		size = need
	case size < need:
		return 0, fmt.Errorf("%s.size: %s is too small for the hash tree of the %s /usr partition; it needs %s", pp.field, human(pp.spec.Size), human(usr.gpt.Size), human(need))
	}
	pp.gpt.Size = size
	return size, nil
}

// writeVerity writes /usr's hash tree, once its partition is written, and
// gives both partitions the GUIDs its root hash derives.
func (p *diskPlan) writeVerity(ctx context.Context, f *os.File) (*verity.Result, error) {
	usr, h := p.usr, p.usrVerity
	var ext []disk.Extent
	for _, e := range disk.DataExtents(f, p.size) {
		s, end := max(e.Off, usr.gpt.Start), min(e.Off+e.Len, usr.gpt.End())
		if s < end {
			ext = append(ext, disk.Extent{Off: s - usr.gpt.Start, Len: end - s})
		}
	}
	if ext == nil {
		ext = []disk.Extent{}
	}
	w := &partWriter{w: f, off: h.gpt.Start, size: h.gpt.Size, name: h.spec.Name}
	// /usr was written past the page cache (writeParts).
	ur := hashio.NewDirectReader(f)
	defer ur.Close()
	r, err := verity.Format(ctx, io.NewSectionReader(ur, usr.gpt.Start, usr.gpt.Size), usr.gpt.Size, w, verity.Options{
		Salt: disk.VeritySalt(p.src.Seed, h.spec.Name), UUID: disk.VerityUUID(p.src.Seed, h.spec.Name), Extents: ext})
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", h.field, h.spec.Name, err)
	}
	copy(usr.gpt.GUID[:], r.RootHash[:16])
	copy(h.gpt.GUID[:], r.RootHash[len(r.RootHash)-16:])
	return r, nil
}

// usrAdds are the manifest lines of what the usr partition holds beyond
// the tree's /usr: lost+found, and what the disk's view added below /usr.
func (p *diskPlan) usrAdds() []*rootfs.Entry {
	pp := p.usr
	var lines []*rootfs.Entry
	for _, e := range pp.tree.Entries() {
		te := p.src.Tree.Get(usrPath(e.Path))
		if te == nil || !rootfs.SameMetadata(te.Inode, e.Inode) {
			lines = append(lines, &rootfs.Entry{Path: pp.spec.Name + ":" + e.Path, Inode: e.Inode})
		}
	}
	if pp.tree.Get("/lost+found") == nil {
		lines = append(lines, &rootfs.Entry{Path: pp.spec.Name + ":/lost+found", Inode: &rootfs.Inode{Type: rootfs.TypeDir, Perm: 0o700, MTime: p.src.Epoch}})
	}
	return lines
}

// usrPath is where a path of the usr partition is in the tree.
func usrPath(p string) string {
	if p == "/" {
		return "/usr"
	}
	return "/usr" + p
}
