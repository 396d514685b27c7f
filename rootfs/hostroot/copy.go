package hostroot

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/rootfs"
)

// lost says which of a copied entry's properties the copy could not give it
// (an unprivileged copy cannot chown or make device nodes, nor set trusted
// or security xattrs). Where the copy still holds the same inode after the
// recipe ran, those properties are taken from the original, as an in-place
// apply by the same user would leave them.
type lost struct {
	ino                   uint64
	owner, xattrs, device bool
}

// copyRoot makes dst a copy of src as entries describe it: contents by
// reflink where the file system shares blocks, else by an in-kernel copy;
// hard links stay hard links; modes, mtimes and, where allowed, owners and
// xattrs as in src. It never writes to src, and reads it as a dirTree, so a
// directory of src swapped for a symlink meanwhile is not followed.
func copyRoot(ctx context.Context, entries []*Entry, src, dst string, progress func(int64)) (map[string]*lost, error) {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return nil, err
	}
	d, err := openDirTree(dst)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	s, err := openDirTree(src)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	losses := map[string]*lost{}
	done := map[string]bool{}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if e.Path == "/" {
			continue
		}
		err := d.at(e.Path, func(fd int, name string) error {
			if e.Type == rootfs.TypeRegular {
				for _, l := range e.Links {
					if done[l] {
						return d.linkAt(l, fd, name)
					}
				}
				done[e.Path] = true
				progress(e.Size)
				return s.at(e.Path, func(sfd int, sname string) error { return copyFileAt(fd, name, sfd, sname) })
			}
			return makeAt(fd, name, e, losses)
		})
		if err != nil {
			return nil, fmt.Errorf("copying %s: %w", e.Path, err)
		}
	}
	if err := copyMeta(d, entries, losses); err != nil {
		return nil, err
	}
	return losses, nil
}

// makeAt makes the entry e, not a regular file, as name in the directory
// fd. A device node an unprivileged process cannot make becomes an empty
// file, and losses says so.
func makeAt(fd int, name string, e *Entry, losses map[string]*lost) error {
	switch e.Type {
	case rootfs.TypeDir:
		return unix.Mkdirat(fd, name, 0o700)
	case rootfs.TypeSymlink:
		return unix.Symlinkat(e.Target, fd, name)
	case rootfs.TypeChar, rootfs.TypeBlock:
		if os.Geteuid() != 0 {
			losses[e.Path] = &lost{device: true}
			return placeholderAt(fd, name)
		}
	}
	return unix.Mknodat(fd, name, nodeMode(e.Type)|0o600, int(unix.Mkdev(e.Major, e.Minor)))
}

// copyMeta gives the copy the entries' metadata, deepest first, so a
// read-only directory is finished after its children, and notes the inode
// of each entry that lost something.
func copyMeta(d *dirTree, entries []*Entry, losses map[string]*lost) error {
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		l := losses[e.Path]
		if l == nil {
			l = &lost{}
		}
		if err := d.setMeta(e, l); err != nil {
			return fmt.Errorf("copying %s: %w", e.Path, err)
		}
		if l.owner || l.xattrs || l.device {
			st, err := d.lstat(e.Path)
			if err != nil {
				return err
			}
			l.ino = st.Ino
			losses[e.Path] = l
		}
	}
	return nil
}

func placeholderAt(fd int, name string) error {
	nfd, err := unix.Openat(fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	return unix.Close(nfd)
}

// copyFileAt creates name in the directory fd with the content of the
// regular file sname in the directory sfd.
func copyFileAt(fd int, name string, sfd int, sname string) error {
	src, _, err := openRegular(sfd, sname)
	if err != nil {
		return err
	}
	defer src.Close()
	nfd, err := unix.Openat(fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	dst := os.NewFile(uintptr(nfd), name)
	err = copyContent(dst, src)
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	return err
}

// copyContent shares src's blocks with dst where the file system can
// (btrfs, XFS), and copies in the kernel (copy_file_range) elsewhere.
func copyContent(dst, src *os.File) error {
	if err := unix.IoctlFileClone(int(dst.Fd()), int(src.Fd())); err == nil {
		return nil
	}
	_, err := io.Copy(dst, src)
	return err
}

// removeScratch removes a scratch copy whose directories may have been left
// without write permission by the recipe.
func removeScratch(dir string) error {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
