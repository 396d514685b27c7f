package rootfs

import (
	"context"
	"io/fs"
	"os"
	"path"

	"golang.org/x/sys/unix"
)

// A restored tree's directories and symlinks, thousands of them, are made in
// its directory only when something needs them there: a file made below one
// (ensureDir), or a host process that reads the directory (Materialize). A
// rebuild after a small change writes a few files into the restored tree and
// reads the rest from the index and the cache; making every directory and
// symlink was most of its restore, and their removal with the work
// directory most of its end (on ext4, the kernel seeks a free inode past
// every one the last build's work directory freed a moment before). An image
// layer unpacked by reference into a containerd snapshot waits the same way.
// An entry is on disk only if its parent is, so ensureDir walks up only as
// far as the first directory on disk.

// ensureDir makes the directory dir of the tree, and those above it, in the
// tree's directory when Restore left them off it.
func (t *Tree) ensureDir(dir string) error {
	if !t.offDisk {
		return nil
	}
	e := t.entries[dir]
	if e == nil || !e.offDisk {
		return nil
	}
	if err := t.ensureDir(path.Dir(dir)); err != nil {
		return err
	}
	if e.Type != TypeDir {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: ErrNotDir}
	}
	if err := t.root.Mkdir(rel(dir), 0o700); err != nil {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	e.offDisk = false
	return t.syncDisk(dir, e.Inode)
}

// materializeDirs makes every directory and symlink still off disk, parents
// first, each relative to its parent's open descriptor; a symlink's hard
// links as hard links.
func (t *Tree) materializeDirs(ctx context.Context) error {
	if !t.offDisk {
		return nil
	}
	if err := t.settleWrites(); err != nil {
		return err
	}
	d := &dirFDs{open: map[string]*os.File{}}
	defer d.close()
	first := map[*Inode]string{}
	for i, p := range t.Paths() {
		in := t.entries[p].Inode
		if !in.offDisk {
			continue
		}
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if fp, ok := first[in]; ok {
			if err := t.root.Link(rel(fp), rel(p)); err != nil {
				return &fs.PathError{Op: "link", Path: p, Err: err}
			}
			continue
		}
		first[in] = p
		if err := d.create(t, p, in); err != nil {
			return err
		}
	}
	for in := range first {
		in.offDisk = false
	}
	t.offDisk = false
	return nil
}

// dirFDs keeps directories of the tree open while materializeDirs makes
// thousands of directories and symlinks in byte order of path, so that each
// is made relative to its parent's descriptor. Through os.Root every one
// cost a walk of its path a component at a time, three times over (make,
// chmod, lstat): 1.6 s of making a node's tree.
//
// A parent is opened through os.Root, and each entry is made with the *at
// calls that never follow its last component, so the tree's symlinks are
// no more followed than os.Root follows them. Nothing is removed or
// renamed while they are made, so an open directory stays the tree's.
type dirFDs struct {
	open map[string]*os.File // by full path
}

// maxOpenDirs bounds the descriptors held; past it they are all closed,
// and reopened as they are needed.
const maxOpenDirs = 64

func (d *dirFDs) close() {
	for _, f := range d.open {
		f.Close()
	}
	clear(d.open)
}

func (d *dirFDs) keep(full string, f *os.File) {
	if len(d.open) >= maxOpenDirs {
		d.close()
	}
	d.open[full] = f
}

// parent returns the open directory holding full.
func (d *dirFDs) parent(t *Tree, full string) (*os.File, error) {
	dir := path.Dir(full)
	if f := d.open[dir]; f != nil {
		return f, nil
	}
	f, err := t.root.Open(rel(dir))
	if err != nil {
		return nil, err
	}
	d.keep(dir, f)
	return f, nil
}

// create makes the directory or symlink in at full as createOnDisk and
// syncDisk would, recording its state on disk; its parent is on disk.
func (d *dirFDs) create(t *Tree, full string, in *Inode) error {
	p, err := d.parent(t, full)
	if err != nil {
		return err
	}
	pfd, name := int(p.Fd()), path.Base(full)
	var st unix.Stat_t
	switch in.Type {
	case TypeDir:
		if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
			return &os.PathError{Op: "mkdirat", Path: full, Err: err}
		}
		fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "openat", Path: full, Err: err}
		}
		f := os.NewFile(uintptr(fd), full)
		if err := unix.Fchmod(fd, uint32(diskMode(in).Perm())); err != nil {
			f.Close()
			return &os.PathError{Op: "chmod", Path: full, Err: err}
		}
		if err := unix.Fstat(fd, &st); err != nil {
			f.Close()
			return &os.PathError{Op: "stat", Path: full, Err: err}
		}
		d.keep(full, f)
	case TypeSymlink:
		if err := unix.Symlinkat(in.Target, pfd, name); err != nil {
			return &os.PathError{Op: "symlinkat", Path: full, Err: err}
		}
		if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &os.PathError{Op: "stat", Path: full, Err: err}
		}
	}
	in.disk = diskState{ino: st.Ino, ctime: st.Ctim.Nano(), mode: st.Mode, uid: st.Uid, gid: st.Gid}
	return nil
}
