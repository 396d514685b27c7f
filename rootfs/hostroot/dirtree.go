package hostroot

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/rootfs"
)

// tmpName is the name each change is staged under in its own directory
// before a rename puts it in place.
const tmpName = ".stamp-apply.tmp"

// dirTree changes entries of a directory tree by their clean absolute paths
// inside it. Every parent is opened one name at a time from the tree's own
// descriptor without following a symlink, so that no path, whether the
// scan, the recipe or an edited record gave it, leads outside the tree or
// through a symlink to somewhere else inside it.
type dirTree struct {
	dir string
	fd  int
}

func openDirTree(dir string) (*dirTree, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	return &dirTree{dir: dir, fd: fd}, nil
}

func (d *dirTree) Close() error { return unix.Close(d.fd) }

// at calls fn with a descriptor of p's parent directory (opened as a path,
// which every *at call takes) and p's last name ("." for the root itself).
func (d *dirTree) at(p string, fn func(fd int, name string) error) error {
	if err := checkPath(p); err != nil {
		return err
	}
	if p == "/" {
		return fn(d.fd, ".")
	}
	parent, name := path.Split(p)
	fd, err := d.openDir(parent)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return fn(fd, name)
}

// openDir opens the directory dir of the tree as a path, one name at a
// time, refusing a symlink or anything else that is not a directory on the
// way.
func (d *dirTree) openDir(dir string) (int, error) {
	fd, err := unix.Openat(d.fd, ".", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &fs.PathError{Op: "open", Path: "/", Err: err}
	}
	cur := ""
	for _, name := range strings.Split(strings.Trim(dir, "/"), "/") {
		if name == "" {
			continue
		}
		cur += "/" + name
		nfd, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
				err = &blockedError{Path: cur, Type: typeOf(st.Mode)}
			}
		}
		unix.Close(fd)
		if _, ok := err.(*blockedError); ok {
			return -1, err
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: cur, Err: err}
		}
		fd = nfd
	}
	return fd, nil
}

// blockedError is a path whose parent chain holds something other than a
// directory at Path: a symlink, which no path of a dirTree goes through,
// or a file.
type blockedError struct {
	Path string
	Type rootfs.Type
}

func (e *blockedError) Error() string {
	return fmt.Sprintf("%s is a %s, not a directory, and no path goes through it", e.Path, e.Type)
}

func (e *blockedError) Unwrap() error { return unix.ENOTDIR }

func (d *dirTree) lstat(p string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	err := d.at(p, func(fd int, name string) error {
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return &fs.PathError{Op: "lstat", Path: p, Err: err}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &st, nil
}

// list is the names in the directory p, sorted.
func (d *dirTree) list(p string) ([]string, error) {
	var names []string
	err := d.at(p, func(fd int, name string) error {
		nfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
				return &blockedError{Path: p, Type: typeOf(st.Mode)}
			}
		}
		if err != nil {
			return &fs.PathError{Op: "open", Path: p, Err: err}
		}
		f := os.NewFile(uintptr(nfd), p)
		defer f.Close()
		names, err = f.Readdirnames(-1)
		return err
	})
	slices.Sort(names)
	return names, err
}

// entry reads the entry at p as the scan would.
func (d *dirTree) entry(p string) (*Entry, error) {
	var e *Entry
	err := d.at(p, func(fd int, name string) error {
		var err error
		e, err = statEntry(procPath(fd, name), p, nil)
		return err
	})
	return e, err
}

// linkAt makes name in the directory fd another name of the entry at old.
func (d *dirTree) linkAt(old string, fd int, name string) error {
	return d.at(old, func(ofd int, oname string) error { return unix.Linkat(ofd, oname, fd, name, 0) })
}

// procPath names the entry name in the directory fd for the calls that
// have no *at form (the l*xattr calls, a hash by path): /proc resolves the
// descriptor, and the last component is not followed by those calls.
func procPath(fd int, name string) string { return fmt.Sprintf("/proc/self/fd/%d/%s", fd, name) }

// chmodAt sets the mode of name in the directory fd, which must not be a
// symlink: chmod follows one, and fchmodat has no flag that does not.
// The entry is opened as a path without following, checked, and changed
// through its descriptor.
func chmodAt(fd int, name string, mode uint32) error {
	pfd, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return err
	}
	if typeOf(st.Mode) == rootfs.TypeSymlink {
		return fmt.Errorf("%s is a symlink: %w", name, unix.ELOOP)
	}
	return unix.Chmod(fmt.Sprintf("/proc/self/fd/%d", pfd), mode)
}

func (d *dirTree) setMTime(p string, ns int64) error {
	return d.at(p, func(fd int, name string) error {
		ts := []unix.Timespec{unix.NsecToTimespec(ns), unix.NsecToTimespec(ns)}
		return unix.UtimesNanoAt(fd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
	})
}

// mkdirs makes p and its missing parents (mode 0755, 0700 for p itself,
// mtime ep) and returns the ones it made, parents first.
func (d *dirTree) mkdirs(p string, ep time.Time) ([]string, error) {
	var made []string
	for cur := p; cur != "/"; cur = path.Dir(cur) {
		st, err := d.lstat(cur)
		if err == nil {
			if t := typeOf(st.Mode); t != rootfs.TypeDir {
				return nil, fmt.Errorf("%s is a %s, not a directory", cur, t)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		made = append([]string{cur}, made...)
	}
	for _, m := range made {
		perm := uint32(0o755)
		if m == p {
			perm = 0o700
		}
		err := d.at(m, func(fd int, name string) error {
			if err := unix.Mkdirat(fd, name, perm); err != nil {
				return err
			}
			return chmodAt(fd, name, perm)
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
	}
	for i := len(made) - 1; i >= 0; i-- {
		if err := d.setMTime(made[i], ep.UnixNano()); err != nil {
			return nil, err
		}
	}
	return made, nil
}

func (d *dirTree) writeFile(p string, data []byte, perm uint32, ep time.Time) error {
	return d.writeStream(p, perm, ep, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeStream writes p through a temporary name and renames it in place.
func (d *dirTree) writeStream(p string, perm uint32, ep time.Time, fill func(io.Writer) error) error {
	return d.at(p, func(fd int, name string) error {
		unix.Unlinkat(fd, tmpName, 0)
		nfd, err := unix.Openat(fd, tmpName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(nfd), tmpName)
		err = fill(f)
		if err == nil {
			err = f.Chmod(os.FileMode(perm))
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			ts := []unix.Timespec{unix.NsecToTimespec(ep.UnixNano()), unix.NsecToTimespec(ep.UnixNano())}
			err = unix.UtimesNanoAt(fd, tmpName, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err == nil {
			err = unix.Renameat(fd, tmpName, fd, name)
		}
		if err != nil {
			unix.Unlinkat(fd, tmpName, 0)
		}
		return err
	})
}

// readFile reads the regular file at p, of at most limit bytes.
func (d *dirTree) readFile(p string, limit int64) ([]byte, error) {
	var data []byte
	err := d.at(p, func(fd int, name string) error {
		f, st, err := openRegular(fd, name)
		if err != nil {
			return err
		}
		defer f.Close()
		if st.Size > limit {
			return fmt.Errorf("%d bytes, more than the %d it may hold", st.Size, limit)
		}
		data, err = io.ReadAll(io.LimitReader(f, limit))
		return err
	})
	return data, err
}

// remove deletes the entry at p; a directory must be empty by then.
func (d *dirTree) remove(p string) error {
	return d.at(p, func(fd int, name string) error {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		flags := 0
		if typeOf(st.Mode) == rootfs.TypeDir {
			flags = unix.AT_REMOVEDIR
		}
		return unix.Unlinkat(fd, name, flags)
	})
}

// removeAll deletes the entry at p and, if it is a directory, everything in
// it, following no symlink.
func (d *dirTree) removeAll(p string) error {
	return d.at(p, func(fd int, name string) error {
		r, err := os.OpenRoot(fmt.Sprintf("/proc/self/fd/%d", fd))
		if err != nil {
			return err
		}
		defer r.Close()
		return r.RemoveAll(name)
	})
}

// put creates e at its path: a directory (kept if there is one), or any
// other type staged under tmpName and renamed over what is there. A regular
// file's content is fill's to make under the name it is given.
func (d *dirTree) put(e *Entry, fill func(fd int, name string) error) error {
	if e.Type == rootfs.TypeDir {
		return d.at(e.Path, func(fd int, name string) error {
			err := unix.Mkdirat(fd, name, 0o700)
			if errors.Is(err, unix.EEXIST) {
				var st unix.Stat_t
				if serr := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); serr == nil && typeOf(st.Mode) == rootfs.TypeDir {
					return nil
				}
			}
			return err
		})
	}
	return d.at(e.Path, func(fd int, name string) error {
		if err := unix.Unlinkat(fd, tmpName, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		var err error
		switch e.Type {
		case rootfs.TypeRegular:
			err = fill(fd, tmpName)
		case rootfs.TypeSymlink:
			err = unix.Symlinkat(e.Target, fd, tmpName)
		default:
			err = unix.Mknodat(fd, tmpName, nodeMode(e.Type)|0o600, int(unix.Mkdev(e.Major, e.Minor)))
		}
		if err == nil {
			err = unix.Renameat(fd, tmpName, fd, name)
		}
		if err != nil {
			unix.Unlinkat(fd, tmpName, 0)
		}
		return err
	})
}

// setMeta gives the entry at e.Path e's owner, mode, xattrs and mtime, in
// that order: a chown clears setuid bits and file capabilities. What an
// unprivileged process may not set is marked in l instead of failing.
func (d *dirTree) setMeta(e *Entry, l *lost) error {
	return d.at(e.Path, func(fd int, name string) error {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Uid != e.UID || st.Gid != e.GID || os.Geteuid() == 0 {
			if err := unix.Fchownat(fd, name, int(e.UID), int(e.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if !errors.Is(err, unix.EPERM) || os.Geteuid() == 0 {
					return fmt.Errorf("chown: %w", err)
				}
				l.owner = true
			}
		}
		if e.Type != rootfs.TypeSymlink {
			if err := chmodAt(fd, name, e.Perm); err != nil {
				return fmt.Errorf("chmod: %w", err)
			}
		}
		if err := setXattrs(procPath(fd, name), e.Xattrs); err != nil {
			if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOTSUP) {
				return err
			}
			l.xattrs = true
		}
		ts := []unix.Timespec{unix.NsecToTimespec(e.mtimeNs()), unix.NsecToTimespec(e.mtimeNs())}
		if err := unix.UtimesNanoAt(fd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("mtime: %w", err)
		}
		return nil
	})
}

// setXattrs makes the entry's xattrs exactly want: others are removed.
func setXattrs(pp string, want map[string]string) error {
	have, err := readXattrs(pp)
	if err != nil {
		return err
	}
	for _, name := range slices.Sorted(maps.Keys(have)) {
		if _, ok := want[name]; !ok {
			if err := unix.Lremovexattr(pp, name); err != nil {
				return fmt.Errorf("xattr %s: %w", name, err)
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(want)) {
		if v, ok := have[name]; ok && v == want[name] {
			continue
		}
		if err := unix.Lsetxattr(pp, name, []byte(want[name]), 0); err != nil {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
}

// existingAncestor is the deepest of p and its parents that exists.
func (d *dirTree) existingAncestor(p string) string {
	for ; p != "/"; p = path.Dir(p) {
		if _, err := d.lstat(p); err == nil {
			return p
		}
	}
	return "/"
}

// unlock lets an unprivileged owner change the directories dirs although
// their modes forbid it (root needs no such help), as rootfs keeps a tree's
// directories u+rwx. The function it returns puts each mode back: final's
// mode where final knows the directory, else the one it had.
func (d *dirTree) unlock(dirs []string) (func(final func(string) *Entry) error, error) {
	had := map[string]uint32{}
	var order []string
	if os.Geteuid() != 0 {
		for _, p := range dirs {
			st, err := d.lstat(p)
			if err != nil || typeOf(st.Mode) != rootfs.TypeDir || had[p] != 0 {
				continue
			}
			if st.Uid != uint32(os.Geteuid()) || st.Mode&0o700 == 0o700 {
				continue
			}
			err = d.at(p, func(fd int, name string) error { return chmodAt(fd, name, st.Mode&0o777|0o700) })
			if err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			had[p] = st.Mode & 07777
			order = append(order, p)
		}
	}
	return func(final func(string) *Entry) error {
		for _, p := range order {
			mode := had[p]
			if e := final(p); e != nil {
				mode = e.Perm
			}
			err := d.at(p, func(fd int, name string) error { return chmodAt(fd, name, mode) })
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		return nil
	}, nil
}
