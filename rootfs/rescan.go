package rootfs

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// Changes lists what a rescan folded into the index.
type Changes struct {
	Added, Modified, Removed []string
}

// Rescan folds what a process (a hook) did to the directory into the index.
// New entries get owner 0:0 and the permission bits they have on disk; a
// changed entry keeps its owner and xattrs and takes the disk's mode, content
// and mtime; entries gone from disk leave the index. A new name for an inode
// that still has its old name is a hard link.
func (t *Tree) Rescan(ctx context.Context, origin Origin) (*Changes, error) {
	var owners *diskOwners
	if t.adopted {
		owners = &diskOwners{}
	}
	return t.rescan(ctx, origin, owners)
}

// diskOwners says how owners on disk map to the image's: the build user's
// own ids stand for root when it ran the process in a user namespace.
type diskOwners struct {
	mapped           bool
	rootUID, rootGID uint32
}

func (o *diskOwners) image(uid, gid uint32) (uint32, uint32) {
	if o.mapped {
		if uid == o.rootUID {
			uid = 0
		}
		if gid == o.rootGID {
			gid = 0
		}
	}
	return uid, gid
}

// RescanAsRoot is Rescan after a process that ran as root on the directory,
// such as maintainer scripts in a chroot, whose chown(2)s are real: new
// entries take their owners from the disk, and an entry whose owner on disk
// changed takes the new one. On disk, rootUID:rootGID stand for 0:0: a user
// namespace maps the build user to root (pass 0, 0 for a real root).
func (t *Tree) RescanAsRoot(ctx context.Context, origin Origin, rootUID, rootGID uint32) (*Changes, error) {
	return t.rescan(ctx, origin, &diskOwners{mapped: true, rootUID: rootUID, rootGID: rootGID})
}

func (t *Tree) rescan(ctx context.Context, origin Origin, owners *diskOwners) (*Changes, error) {
	if t.referenced || t.offDisk {
		// The process ran on a directory without the referenced files
		// (or the directories and symlinks a restore left off it), and
		// their absence would read as removals.
		return nil, errors.New("rescan of a tree that was not materialized before a host process ran on it")
	}
	s := &rescanner{t: t, origin: origin, owners: owners, ch: &Changes{},
		seen: map[string]bool{}, byIno: map[uint64]*Entry{}, done: map[*Inode]bool{}}
	for _, p := range t.Paths() {
		e := t.entries[p]
		s.byIno[e.disk.ino] = e
	}
	err := t.WalkDir(t.dir, func(hp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		return s.visit(hp)
	})
	if err != nil {
		return nil, fmt.Errorf("rescanning tree: %w", err)
	}
	for _, p := range append([]string(nil), t.Paths()...) {
		if !s.seen[p] && t.entries[p] != nil {
			s.ch.Removed = append(s.ch.Removed, p)
			if err := t.forget(p); err != nil {
				return nil, err
			}
		}
	}
	return s.ch, nil
}

// rescanner is one rescan's walk of the directory.
type rescanner struct {
	t      *Tree
	origin Origin
	owners *diskOwners
	ch     *Changes
	seen   map[string]bool   // every path found on disk
	byIno  map[uint64]*Entry // by disk inode, to find hard links
	done   map[*Inode]bool   // inodes checked already, under another name
}

// visit brings the entry at host path hp up to date with the disk.
func (s *rescanner) visit(hp string) error {
	t := s.t
	r, err := filepath.Rel(t.dir, hp)
	if err != nil {
		return err
	}
	p := "/"
	if r != "." {
		p = "/" + filepath.ToSlash(r)
	}
	fi, err := os.Lstat(hp)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		// Keep directories enterable and readable even if a hook chmodded them.
		if fi.Mode().Perm()&0o700 != 0o700 {
			if err := os.Chmod(hp, fi.Mode().Perm()|0o700); err != nil {
				return err
			}
		}
	}
	s.seen[p] = true
	st := stateOf(fi)
	e := t.entries[p]
	typ := TypeOf(fi.Mode())
	if e != nil && !sameType(e, typ, fi) {
		if err := t.forget(p); err != nil {
			return err
		}
		s.ch.Removed = append(s.ch.Removed, p)
		e = nil
	}
	if e == nil {
		return s.addNew(p, hp, fi, st, typ)
	}
	if s.done[e.Inode] || (st.ctime == e.disk.ctime && st.ino == e.disk.ino) {
		return nil
	}
	s.done[e.Inode] = true
	return s.update(e, p, hp, fi, st, typ)
}

// addNew adds the entry found at p: a hard link to a known inode, or a new
// inode read from the disk.
func (s *rescanner) addNew(p, hp string, fi os.FileInfo, st diskState, typ Type) error {
	t := s.t
	if old := s.byIno[st.ino]; old != nil && old.Type != TypeDir && old.disk.ino == st.ino && stillThere(t, old) {
		old.nlink++
		t.add(&Entry{Path: p, Inode: old.Inode, Origin: s.origin})
		s.ch.Added = append(s.ch.Added, p)
		return nil
	}
	in, err := t.inodeFromDisk(hp, fi, typ, s.owners)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	in.nlink = 1
	ne := &Entry{Path: p, Inode: in, Origin: s.origin}
	t.add(ne)
	s.ch.Added = append(s.ch.Added, p)
	if err := t.syncDisk(p, in); err != nil {
		return err
	}
	if typ != TypeDir {
		// A later name for the same new inode is a hard link to it.
		s.byIno[in.disk.ino] = ne
	}
	return nil
}

// update takes into e, at p, what changed on disk: its mode, its owner (when the
// process's chowns were real), a file's content, a symlink's target.
func (s *rescanner) update(e *Entry, p, hp string, fi os.FileInfo, st diskState, typ Type) error {
	changed := false
	if mode := st.mode & 07777; mode != e.disk.mode&07777 {
		e.Perm, changed = mode, true
	}
	if s.owners != nil && (st.uid != e.disk.uid || st.gid != e.disk.gid) {
		e.UID, e.GID = s.owners.image(st.uid, st.gid)
		changed = true
	}
	switch typ {
	case TypeRegular:
		if e.Type == TypeRegular {
			digest, size, err := hashio.File(hp, true)
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
			if size != e.Size || digest != e.Digest {
				e.Size, e.Digest = size, digest
				e.MTime, changed = fi.ModTime(), true
			}
		}
	case TypeSymlink:
		target, err := os.Readlink(hp)
		if err != nil {
			return err
		}
		if target != e.Target {
			e.Target, e.MTime, changed = target, fi.ModTime(), true
		}
	}
	// A directory's ctime moves whenever an entry is added under it; that
	// is not a change to the directory itself.
	if changed {
		e.Origin = s.origin
		s.ch.Modified = append(s.ch.Modified, p)
	}
	return s.t.syncDisk(p, e.Inode)
}

// stillThere reports whether an entry's own path still holds its inode on disk.
func stillThere(t *Tree, e *Entry) bool {
	fi, err := os.Lstat(t.DiskPath(e.Path))
	return err == nil && stateOf(fi).ino == e.disk.ino
}

// forget drops p and its subtree from the index only.
func (t *Tree) forget(p string) error {
	e := t.entries[p]
	if e == nil {
		return nil
	}
	if e.Type == TypeDir {
		for _, name := range t.Children(p) {
			t.forget(join(p, name))
		}
	}
	e.nlink--
	delete(t.entries, p)
	t.sorted = nil
	return nil
}

// sameType reports whether what is on disk still is what the index says;
// index-only types sit on disk as empty placeholder files.
func sameType(e *Entry, disk Type, fi os.FileInfo) bool {
	switch e.Type {
	case TypeChar, TypeBlock, TypeFifo, TypeSocket:
		return disk == e.Type || (disk == TypeRegular && fi.Size() == 0)
	}
	return disk == e.Type
}

func (t *Tree) inodeFromDisk(hp string, fi os.FileInfo, typ Type, owners *diskOwners) (*Inode, error) {
	st, _ := fi.Sys().(*syscall.Stat_t)
	perm := uint32(fi.Mode().Perm())
	if st != nil {
		perm = st.Mode & 07777
	}
	in := &Inode{Type: typ, Perm: perm, MTime: fi.ModTime()}
	if owners != nil && st != nil {
		in.UID, in.GID = owners.image(st.Uid, st.Gid)
	}
	switch typ {
	case TypeRegular:
		digest, size, err := hashio.File(hp, true)
		if err != nil {
			return nil, err
		}
		in.Size, in.Digest = size, digest
	case TypeSymlink:
		target, err := os.Readlink(hp)
		if err != nil {
			return nil, err
		}
		in.Target = target
	case TypeChar, TypeBlock:
		if st != nil {
			in.Major, in.Minor = uint32((st.Rdev>>8)&0xfff|(st.Rdev>>32)&^0xfff), uint32(st.Rdev&0xff|(st.Rdev>>12)&^0xff)
		}
	}
	return in, nil
}

// WalkDir walks a host directory as the tree's options say: in byte order,
// or in reverse under Options.ReverseReaddir. Every walk of a host
// directory whose order could reach the tree goes through it.
func (t *Tree) WalkDir(root string, fn fs.WalkDirFunc) error {
	return WalkDir(root, t.opts.ReverseReaddir, fn)
}

// WalkDir is filepath.WalkDir, or with reverse set the same walk visiting
// each directory's entries in reverse byte order.
func WalkDir(root string, reverse bool, fn fs.WalkDirFunc) error {
	if !reverse {
		return filepath.WalkDir(root, fn)
	}
	fi, err := os.Lstat(root)
	if err != nil {
		err = fn(root, nil, err)
	} else {
		err = walkReverse(root, fs.FileInfoToDirEntry(fi), fn)
	}
	if err == fs.SkipDir || err == fs.SkipAll {
		return nil
	}
	return err
}

func walkReverse(p string, d fs.DirEntry, fn fs.WalkDirFunc) error {
	if err := fn(p, d, nil); err != nil || !d.IsDir() {
		if err == fs.SkipDir && d.IsDir() {
			return nil
		}
		return err
	}
	ents, err := os.ReadDir(p)
	if err != nil {
		if err = fn(p, d, err); err != nil {
			if err == fs.SkipDir {
				return nil
			}
			return err
		}
	}
	for i := len(ents) - 1; i >= 0; i-- {
		if err := walkReverse(filepath.Join(p, ents[i].Name()), ents[i], fn); err != nil {
			if err == fs.SkipDir {
				break
			}
			return err
		}
	}
	return nil
}
