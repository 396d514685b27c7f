package rootfs

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
)

// ExtractOptions tune the one extractor every archive input goes through.
type ExtractOptions struct {
	// Origin is recorded on every entry; Member is set to the entry's name.
	Origin Origin
	// KeepDirSymlinks keeps an existing symlink to a directory when the archive
	// holds a directory at that path, as dpkg does for merged /usr.
	KeepDirSymlinks bool
	// Whiteouts applies OCI whiteouts (".wh.NAME", ".wh..wh..opq") to what
	// earlier archives put in the tree.
	Whiteouts bool
	// Map, when set, rewrites an entry's clean path or drops the entry
	// (ok=false). Hard-link targets are mapped the same way.
	Map func(p string) (dest string, ok bool)
	// Progress, when set, is told the size of each regular file written.
	Progress func(n int64)
	// MaxSize, when set, bounds the bytes the archive may expand to (a
	// sparse member can declare terabytes in a few bytes).
	MaxSize int64
	// Snapshot, when set, unpacks the archive into a directory of the tree
	// as containerd's applier unpacks an image layer into a snapshot (see
	// Snapshot). It replaces Whiteouts and KeepDirSymlinks.
	Snapshot *Snapshot
	// ByReference keeps the uncompressed archive in the tree's archive
	// store or content directory and lets regular files point into it,
	// instead of writing them to the tree's directory (see
	// Tree.Materialize). Without either (Options.Archives,
	// Options.ContentDir) it does nothing.
	ByReference bool
	// Kept, with ByReference in a tree that keeps references
	// (Tree.KeepsReferences), is the sha256 (hex) under which the tree's
	// archive store already keeps the archive r reads from its start: an
	// image layer unpacked before, filed under its diff ID. Files then
	// point into that copy, and nothing is written or hashed whole again;
	// the store verified the copy when it opened it.
	Kept string

	archive *archiveWriter
}

// Snapshot is a directory of the tree that an archive is unpacked into as
// containerd's applier unpacks an image layer for a snapshotter:
//   - member paths, symlinks and hard-link targets resolve inside Dir, as if
//     it were the root;
//   - the archive's entry for its root is ignored, and its trusted.* xattrs
//     are dropped (containerd refuses to set them from a layer);
//   - with Overlay, the directory is an overlay upper directory over the
//     layers below it: a whiteout ".wh.NAME" becomes a character device 0:0
//     named NAME with the whiteout's owner, an opaque marker ".wh..wh..opq"
//     the trusted.overlay.opaque=y xattr on its directory, and a missing
//     parent directory takes the attributes Parent gives, as containerd
//     copies them up from the first lower layer that has the directory;
//   - without Overlay (the bottom layer, which containerd unpacks on a bind
//     mount) whiteouts remove what the archive made before them.
type Snapshot struct {
	// Dir is the snapshot's directory, a clean path of the tree that exists.
	Dir     string
	Overlay bool
	// Parent returns the attributes of a directory (a path inside Dir, such
	// as "/usr/lib") that a member needs and the archive has not made;
	// ok=false gives it mode 0755, owner 0:0. Only Overlay asks.
	Parent func(dir string) (h Header, ok bool)
}

// within is the path inside root (a clean path of the tree) of its
// descendant p.
func within(root, p string) string {
	if root == "/" {
		return p
	}
	if p == root {
		return "/"
	}
	return strings.TrimPrefix(p, root)
}

// mkparent makes the directory dir of the tree, and its missing parents up to
// the snapshot's directory, with the attributes the lower layers give.
func (s *Snapshot) mkparent(t *Tree, dir string, origin Origin) error {
	if e := t.entries[dir]; e != nil {
		if e.Type != TypeDir {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: ErrNotDir}
		}
		return nil
	}
	if dir == s.Dir || dir == "/" {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: ErrNotExist}
	}
	if err := s.mkparent(t, path.Dir(dir), origin); err != nil {
		return err
	}
	h := Header{Type: TypeDir, Perm: 0o755, MTime: t.opts.DefaultMTime}
	if s.Parent != nil {
		if ph, ok := s.Parent(within(s.Dir, dir)); ok {
			h = ph
			h.Type = TypeDir
		}
	}
	h.Origin = origin
	_, err := t.Create(dir, h, nil)
	return err
}

// overlayWhiteout turns a whiteout member in the directory rdir (resolved)
// into what overlayfs reads as one.
func overlayWhiteout(t *Tree, rdir, base string, hdr *tar.Header, origin Origin) (bool, error) {
	if base == whiteoutOpaque {
		return true, t.Update(rdir, func(in *Inode) {
			x := make(map[string]string, len(in.Xattrs)+1)
			for k, v := range in.Xattrs {
				x[k] = v
			}
			x[overlayOpaqueXattr] = "y"
			in.Xattrs = x
		})
	}
	name, ok := strings.CutPrefix(base, whiteoutPrefix)
	if !ok {
		return false, nil
	}
	if name == "" || name == "." || name == ".." {
		return true, fmt.Errorf("invalid whiteout name %q", base)
	}
	victim := join(rdir, name)
	if t.entries[victim] != nil {
		// containerd's mknod fails the same way.
		return true, fmt.Errorf("whiteout of %s, which this layer makes itself", victim)
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || hdr.Uid > 1<<32-1 || hdr.Gid > 1<<32-1 {
		return true, fmt.Errorf("owner %d:%d out of range", hdr.Uid, hdr.Gid)
	}
	h := Header{Type: TypeChar, UID: uint32(hdr.Uid), GID: uint32(hdr.Gid), MTime: hdr.ModTime, Origin: origin}
	_, err := t.Create(victim, h, nil)
	return true, err
}

// overlayOpaqueXattr marks an overlay upper directory that hides what the
// layers below hold at its path.
const overlayOpaqueXattr = "trusted.overlay.opaque"

// EntryError names the archive entry an extraction failed on.
type EntryError struct {
	Name string
	Err  error
}

func (e *EntryError) Error() string { return fmt.Sprintf("archive entry %q: %v", e.Name, e.Err) }
func (e *EntryError) Unwrap() error { return e.Err }

// ErrEscape is returned for a name that climbs out of the archive's root.
var ErrEscape = errors.New("path leads outside the root")

// MemberPath turns an archive member name into a clean absolute path inside
// the tree. Leading "/" and "./" are dropped, as GNU tar does; a ".." that
// would climb above the root is refused.
func MemberPath(name string) (string, error) {
	depth := 0
	var out []string
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
		case "..":
			if depth == 0 {
				return "", ErrEscape
			}
			depth--
			out = out[:len(out)-1]
		default:
			depth++
			out = append(out, c)
		}
	}
	p := "/" + strings.Join(out, "/")
	if len(p) > PathMax {
		return "", ErrTooLong
	}
	return p, nil
}

// Extract unpacks the uncompressed tar stream r into t with tar semantics: a
// later entry replaces an earlier one, parents are created as needed, and
// every path, hard-link target and write through a symlink is resolved inside
// the tree. Owners, device numbers and xattrs go to the index only.
func Extract(ctx context.Context, t *Tree, r io.Reader, o ExtractOptions) (n int, err error) {
	t.startWrites()
	defer func() {
		// A failed queued write names its own entry; it comes first, as the
		// error after it may only be its consequence.
		if werr := t.stopWrites(); werr != nil {
			err = werr
		}
	}()
	if o.ByReference && o.Kept != "" && t.KeepsReferences() {
		// The deferred checks below set Extract's own err: nothing here
		// may shadow it.
		a, kerr := t.openKept(o.Kept)
		if kerr != nil {
			return 0, fmt.Errorf("the archive kept as %s: %w", o.Kept, kerr)
		}
		aw := &archiveWriter{a: a, r: r}
		defer func() {
			if err == nil {
				_, err = io.Copy(io.Discard, aw)
			}
			if err == nil && aw.n != a.size {
				err = fmt.Errorf("read %d bytes of the archive kept as %s, which has %d", aw.n, o.Kept, a.size)
			}
		}()
		o.archive, r = aw, aw
	} else if o.ByReference && (t.opts.ContentDir != "" || t.opts.Archives != nil) && t.lower == nil {
		aw, aerr := t.newArchive(r)
		if aerr != nil {
			return 0, aerr
		}
		defer func() {
			// Read to the end: the caller may verify what follows the
			// archive's last entry, and a reference may not be cut short.
			if err == nil {
				_, err = io.Copy(io.Discard, aw)
			}
			if ferr := aw.finish(); err == nil {
				err = ferr
			}
		}()
		o.archive, r = aw, aw
	}
	if o.Snapshot != nil && o.archive != nil && !t.adopted && !t.deferDirs {
		// An image layer's directories and symlinks, thousands of them,
		// wait in the index as a restored tree's do (see restoredirs.go):
		// its files point into the archive, and nothing at build time
		// reads a snapshot's directory.
		t.deferDirs = true
		defer func() { t.deferDirs = false }()
	}
	tr := tar.NewReader(r)
	var created map[string]bool
	if o.Whiteouts || o.Snapshot != nil && !o.Snapshot.Overlay {
		created = map[string]bool{}
	}
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("reading archive after %d entries: %w", n, err)
		}
		total += max(hdr.Size, 0)
		if o.MaxSize > 0 && total > o.MaxSize {
			return n, &EntryError{Name: hdr.Name, Err: fmt.Errorf("archive expands beyond the limit of %d bytes", o.MaxSize)}
		}
		if err := extractOne(t, tr, hdr, &o, created); err != nil {
			if ee := (*EntryError)(nil); errors.As(err, &ee) {
				return n, err
			}
			return n, &EntryError{Name: hdr.Name, Err: err}
		}
		n++
	}
}

func extractOne(t *Tree, tr *tar.Reader, hdr *tar.Header, o *ExtractOptions, created map[string]bool) error {
	switch hdr.Typeflag {
	case tar.TypeXGlobalHeader, 'V':
		return nil
	}
	p, origin, done, err := placeMember(t, hdr, o, created)
	if done || err != nil {
		return err
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || hdr.Uid > 1<<32-1 || hdr.Gid > 1<<32-1 {
		return fmt.Errorf("owner %d:%d out of range", hdr.Uid, hdr.Gid)
	}
	h := Header{
		Perm:   uint32(hdr.Mode) & 07777,
		UID:    uint32(hdr.Uid),
		GID:    uint32(hdr.Gid),
		MTime:  hdr.ModTime,
		Xattrs: paxXattrs(hdr.PAXRecords, o.Snapshot != nil),
		Origin: origin,
	}
	var content io.Reader
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeGNUSparse, tar.TypeCont:
		h.Type = TypeRegular
		content = tr
		if o.Progress != nil {
			o.Progress(hdr.Size)
		}
	case tar.TypeDir:
		h.Type = TypeDir
		if p == "/" {
			root := t.entries["/"]
			root.Perm, root.UID, root.GID, root.MTime, root.Xattrs = h.Perm, h.UID, h.GID, h.MTime, h.Xattrs
			return t.syncDisk("/", root.Inode)
		}
		if o.KeepDirSymlinks && o.Snapshot == nil {
			if keep, err := isDirSymlink(t, p); err != nil || keep {
				return err
			}
		}
	case tar.TypeSymlink:
		h.Type = TypeSymlink
		h.Target = hdr.Linkname
		if hdr.Linkname == "" {
			return errors.New("symlink with empty target")
		}
	case tar.TypeChar, tar.TypeBlock:
		h.Type = TypeChar
		if hdr.Typeflag == tar.TypeBlock {
			h.Type = TypeBlock
		}
		if hdr.Devmajor < 0 || hdr.Devminor < 0 || hdr.Devmajor > 1<<32-1 || hdr.Devminor > 1<<32-1 {
			return fmt.Errorf("device numbers %d,%d out of range", hdr.Devmajor, hdr.Devminor)
		}
		h.Major, h.Minor = uint32(hdr.Devmajor), uint32(hdr.Devminor)
	case tar.TypeFifo:
		h.Type = TypeFifo
	case tar.TypeLink:
		return extractLink(t, hdr, o, p, h, created)
	default:
		return fmt.Errorf("unsupported tar entry type %q", hdr.Typeflag)
	}
	e, err := createMember(t, hdr, o, p, h, content)
	if err != nil {
		return err
	}
	if h.Type == TypeRegular && e.Size != hdr.Size {
		return fmt.Errorf("size %d does not match header size %d", e.Size, hdr.Size)
	}
	if created != nil {
		created[e.Path] = true
	}
	return nil
}

// placeMember is where in t the member hdr goes, and its origin; done is
// true when the member is handled already: left out by o.Map, the root in a
// snapshot, or a whiteout.
func placeMember(t *Tree, hdr *tar.Header, o *ExtractOptions, created map[string]bool) (p string, origin Origin, done bool, err error) {
	p, err = MemberPath(hdr.Name)
	if err != nil {
		return "", origin, false, err
	}
	if o.Map != nil {
		var ok bool
		if p, ok = o.Map(p); !ok {
			return "", origin, true, nil
		}
	}
	origin = o.Origin
	origin.Member = strings.TrimPrefix(hdr.Name, "./")
	if s := o.Snapshot; s != nil {
		if p == "/" {
			return "", origin, true, nil // containerd ignores the member for the root
		}
		dir, base := path.Split(p)
		rdir, err := t.ResolveIn(s.Dir, dir, true)
		if err != nil {
			return "", origin, false, err
		}
		if s.Overlay {
			if err := s.mkparent(t, rdir, Origin{Layer: origin.Layer, Input: origin.Input}); err != nil {
				return "", origin, false, err
			}
			if done, err := overlayWhiteout(t, rdir, base, hdr, origin); done || err != nil {
				return "", origin, true, err
			}
		} else if done, err := whiteout(t, rdir, base, created, true); done || err != nil {
			return "", origin, true, err
		}
		return join(rdir, base), origin, false, nil
	}
	if dir, base := path.Split(p); created != nil && strings.HasPrefix(base, whiteoutPrefix) {
		rdir, err := t.Resolve(dir, true)
		if err != nil {
			return "", origin, false, err
		}
		if done, err := whiteout(t, rdir, base, created, false); done || err != nil {
			return "", origin, true, err
		}
	}
	return p, origin, false, nil
}

// extractLink makes p a hard link to the member's link target.
func extractLink(t *Tree, hdr *tar.Header, o *ExtractOptions, p string, h Header, created map[string]bool) error {
	target, err := MemberPath(hdr.Linkname)
	if err != nil {
		return fmt.Errorf("hard link target %q: %w", hdr.Linkname, err)
	}
	if o.Map != nil {
		var ok bool
		if target, ok = o.Map(target); !ok {
			return fmt.Errorf("hard link target %q is not extracted", hdr.Linkname)
		}
	}
	if s := o.Snapshot; s != nil {
		// As containerd: the target's directory resolves inside the
		// snapshot, its last component is not followed.
		dir, base := path.Split(target)
		rdir, err := t.ResolveIn(s.Dir, dir, true)
		if err != nil {
			return fmt.Errorf("hard link target %q: %w", hdr.Linkname, err)
		}
		target = join(rdir, base)
	}
	e, err := t.Link(p, target, h.Origin)
	if err != nil {
		return fmt.Errorf("hard link to %q: %w", hdr.Linkname, err)
	}
	if o.Snapshot != nil {
		// containerd's applier sets the link member's owner, mode,
		// mtime and xattrs on the file, and so on every link to it.
		err := t.Update(e.Path, func(in *Inode) {
			in.UID, in.GID, in.Perm, in.MTime = h.UID, h.GID, h.Perm, h.MTime
			if len(h.Xattrs) > 0 {
				x := make(map[string]string, len(in.Xattrs)+len(h.Xattrs))
				for k, v := range in.Xattrs {
					x[k] = v
				}
				for k, v := range h.Xattrs {
					x[k] = v
				}
				in.Xattrs = x
			}
		})
		if err != nil {
			return err
		}
	}
	if created != nil {
		created[e.Path] = true
	}
	return nil
}

// createMember creates p with content: a regular file's data is referred
// to in the archive where it lies whole, queued for a writer when it is
// small, and copied otherwise.
func createMember(t *Tree, hdr *tar.Header, o *ExtractOptions, p string, h Header, content io.Reader) (*Entry, error) {
	if h.Type == TypeRegular && o.archive != nil && contiguous(hdr) {
		// archive/tar reads nothing ahead: the entry's data starts where
		// the archive has been read to.
		aw := o.archive
		off := aw.n
		e, err := t.createRef(p, h, content, aw.a, off, hdr.Size)
		if err != nil {
			return nil, err
		}
		if aw.n != off+hdr.Size {
			return nil, fmt.Errorf("content at %d..%d of the archive, but %d bytes were read", off, off+hdr.Size, aw.n-off)
		}
		return e, nil
	}
	if h.Type == TypeRegular && t.writes != nil && hdr.Size >= 0 && hdr.Size <= asyncMax {
		return t.createQueued(p, h, content, hdr.Size, hdr.Name)
	}
	return t.Create(p, h, content)
}

// contiguous reports whether a regular member's content is its data as it
// lies in the archive: not a sparse member, whose data is a map of runs.
func contiguous(hdr *tar.Header) bool {
	if hdr.Typeflag != tar.TypeReg || hdr.Size < 0 {
		return false
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return false
		}
	}
	return true
}

// isDirSymlink reports whether p is a symlink that resolves to a directory.
func isDirSymlink(t *Tree, p string) (bool, error) {
	rp, err := t.Resolve(p, false)
	if err != nil {
		return false, err
	}
	e := t.entries[rp]
	if e == nil || e.Type != TypeSymlink {
		return false, nil
	}
	target, err := t.Lookup(rp, true)
	if err != nil {
		return false, nil
	}
	return target.Type == TypeDir, nil
}

const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// whiteout applies an OCI whiteout entry named base in the directory rdir
// (resolved). It removes only what earlier layers made, never what this
// archive created before the marker; but with always, a file's whiteout
// removes it whoever made it, as containerd's applier does.
func whiteout(t *Tree, rdir, base string, created map[string]bool, always bool) (bool, error) {
	if !strings.HasPrefix(base, whiteoutPrefix) {
		return false, nil
	}
	if base == whiteoutOpaque {
		if e := t.entries[rdir]; e == nil || e.Type != TypeDir {
			return true, nil
		}
		for _, name := range t.Children(rdir) {
			child := join(rdir, name)
			if !created[child] {
				if err := t.remove(child); err != nil {
					return true, err
				}
			}
		}
		return true, nil
	}
	name := strings.TrimPrefix(base, whiteoutPrefix)
	if always && (name == "" || name == "." || name == "..") {
		return true, fmt.Errorf("invalid whiteout name %q", base)
	}
	victim := join(rdir, name)
	if always || !created[victim] {
		return true, t.remove(victim)
	}
	return true, nil
}

// paxXattrs are the xattrs a member's PAX records carry; noTrusted drops
// the trusted.* ones.
func paxXattrs(recs map[string]string, noTrusted bool) map[string]string {
	var x map[string]string
	for k, v := range recs {
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			if noTrusted && strings.HasPrefix(name, "trusted.") {
				continue
			}
			if x == nil {
				x = map[string]string{}
			}
			x[name] = v
		}
	}
	return x
}
