package hostroot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// Scan lists dir's entries in byte order of the path and changes nothing.
// known, when non-nil, supplies the sha256 of a regular file whose content
// the caller already hashed (a tree's index), so it is not read again; it
// returns "" when it does not know.
//
// The scan stays on dir's own file system, as cp -x does: a mount point
// is listed, what is mounted on it is not (so a scan of / does not walk
// /proc). skip, a host path, is left out with everything under it: the
// work directory, when the root holds it.
func Scan(ctx context.Context, dir string, known func(p string, size int64) string, skip string) ([]*Entry, error) {
	var entries []*Entry
	var rootDev uint64
	err := rootfs.WalkDir(dir, false, func(hp string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if skip != "" && hp == skip {
			return fs.SkipDir
		}
		r, err := filepath.Rel(dir, hp)
		if err != nil {
			return err
		}
		p := "/"
		if r != "." {
			p = "/" + filepath.ToSlash(r)
		}
		e, err := statEntry(hp, p, known)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		entries = append(entries, e)
		if p == "/" {
			rootDev = e.dev
		} else if e.Type == rootfs.TypeDir && e.dev != rootDev {
			e.mount = true
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", dir, err)
	}
	// A walk visits "/a/b" before "/a-c"; byte order puts it after.
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	setLinks(entries)
	return entries, nil
}

// statEntry reads the entry at the host path hp, the root's path p, without
// following a symlink at hp.
func statEntry(hp, p string, known func(string, int64) string) (*Entry, error) {
	var st unix.Stat_t
	if err := unix.Lstat(hp, &st); err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: hp, Err: err}
	}
	in := &rootfs.Inode{Type: typeOf(st.Mode), Perm: st.Mode & 07777, UID: st.Uid, GID: st.Gid,
		MTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec)}
	e := &Entry{Entry: &rootfs.Entry{Path: p, Inode: in}, ino: st.Ino, dev: st.Dev, nlink: uint64(st.Nlink)}
	var err error
	switch in.Type {
	case rootfs.TypeRegular:
		in.Size = st.Size
		if known != nil {
			in.Digest = known(p, st.Size)
		}
		if in.Digest == "" {
			if in.Digest, _, err = hashFile(unix.AT_FDCWD, hp); err != nil {
				return nil, err
			}
		}
	case rootfs.TypeSymlink:
		if in.Target, err = os.Readlink(hp); err != nil {
			return nil, err
		}
	case rootfs.TypeChar, rootfs.TypeBlock:
		in.Major, in.Minor = unix.Major(st.Rdev), unix.Minor(st.Rdev)
	}
	if in.Xattrs, err = readXattrs(hp); err != nil {
		return nil, err
	}
	return e, nil
}

// statTypes pairs every entry type but a regular file's with its file
// type bits in a stat(2) mode.
var statTypes = []struct {
	t    rootfs.Type
	bits uint32
}{
	{rootfs.TypeDir, unix.S_IFDIR}, {rootfs.TypeSymlink, unix.S_IFLNK}, {rootfs.TypeFifo, unix.S_IFIFO},
	{rootfs.TypeSocket, unix.S_IFSOCK}, {rootfs.TypeChar, unix.S_IFCHR}, {rootfs.TypeBlock, unix.S_IFBLK},
}

// typeOf is the entry type of a stat(2) mode.
func typeOf(mode uint32) rootfs.Type {
	for _, st := range statTypes {
		if mode&unix.S_IFMT == st.bits {
			return st.t
		}
	}
	return rootfs.TypeRegular
}

// nodeMode is the file type bits mknod(2) takes for t.
func nodeMode(t rootfs.Type) uint32 {
	for _, st := range statTypes {
		if st.t == t {
			return st.bits
		}
	}
	return unix.S_IFREG
}

// setLinks fills the Links of every entry whose inode has other names with
// those names. entries must be sorted, so each list is too.
func setLinks(entries []*Entry) {
	type key struct{ dev, ino uint64 }
	groups := map[key][]*Entry{}
	for _, e := range entries {
		if e.Type != rootfs.TypeDir && e.nlink > 1 {
			k := key{e.dev, e.ino}
			groups[k] = append(groups[k], e)
		}
	}
	for _, e := range entries {
		g := groups[key{e.dev, e.ino}]
		if e.Type == rootfs.TypeDir || len(g) < 2 {
			continue
		}
		for _, o := range g {
			if o != e {
				e.Links = append(e.Links, o.Path)
			}
		}
	}
}

// readXattrs reads every extended attribute of hp without following a
// symlink; a file system without xattrs has none.
func readXattrs(hp string) (map[string]string, error) {
	size, err := unix.Llistxattr(hp, nil)
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil || size == 0 {
		return nil, err
	}
	buf := make([]byte, size)
	if size, err = unix.Llistxattr(hp, buf); err != nil {
		return nil, err
	}
	var out map[string]string
	for _, name := range strings.Split(string(buf[:size]), "\x00") {
		if name == "" {
			continue
		}
		vs, err := unix.Lgetxattr(hp, name, nil)
		if err != nil {
			return nil, fmt.Errorf("xattr %s: %w", name, err)
		}
		v := make([]byte, vs)
		if vs, err = unix.Lgetxattr(hp, name, v); err != nil {
			return nil, fmt.Errorf("xattr %s: %w", name, err)
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = string(v[:vs])
	}
	return out, nil
}

// regular calls fn with a path that opens the regular file name in the
// directory fd, and its stat, without following a symlink at name. The
// entry is first opened as a path (O_PATH, which opens no device and
// blocks on no fifo), its type is checked on that descriptor, and fn gets
// the descriptor's /proc path: whatever opens it opens the inode that was
// checked, whatever takes its name meanwhile.
func regular(fd int, name string, fn func(proc string, st *unix.Stat_t) error) error {
	pfd, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return &fs.PathError{Op: "fstat", Path: name, Err: err}
	}
	if t := typeOf(st.Mode); t != rootfs.TypeRegular {
		return fmt.Errorf("%s is a %s, not a regular file", name, t)
	}
	return fn(fmt.Sprintf("/proc/self/fd/%d", pfd), &st)
}

// openRegular opens the regular file name in the directory fd for reading,
// as regular checks it.
func openRegular(fd int, name string) (*os.File, unix.Stat_t, error) {
	var f *os.File
	var st unix.Stat_t
	err := regular(fd, name, func(proc string, s *unix.Stat_t) error {
		var err error
		st = *s
		f, err = os.Open(proc)
		return err
	})
	return f, st, err
}

// hashFile is the sha256 (hex) and size of the regular file name in the
// directory fd (or a host path with unix.AT_FDCWD).
func hashFile(fd int, name string) (sum string, size int64, err error) {
	err = regular(fd, name, func(proc string, _ *unix.Stat_t) error {
		sum, size, err = hashio.File(proc, false)
		return err
	})
	return sum, size, err
}
