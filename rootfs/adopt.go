package rootfs

import (
	"context"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// Adopt indexes an existing root filesystem in dir so layers can change it
// in place (stamp apply). Owners, modes and mtimes come from the disk; call
// WriteBack when done to put the index's metadata onto the disk again.
func Adopt(ctx context.Context, dir string, opts Options) (*Tree, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	st := fi.Sys().(*syscall.Stat_t)
	t, err := New(dir, opts)
	if err != nil {
		return nil, err
	}
	t.adopted = true
	root := t.entries["/"]
	root.Perm, root.UID, root.GID, root.MTime = st.Mode&07777, st.Uid, st.Gid, fi.ModTime()
	if _, err := t.Rescan(ctx, Origin{Layer: "adopted"}); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

// WriteBackReport says what WriteBack could not put on disk.
type WriteBackReport struct {
	// NotApplied lists entries whose owner or type an unprivileged process
	// cannot set (owners, device nodes); they stay in the index only.
	NotApplied []string
}

// WriteBack puts every entry's mode, mtime and (as root) owner onto the disk,
// and makes device nodes and fifos the index holds (as root; fifos always).
func (t *Tree) WriteBack(ctx context.Context) (*WriteBackReport, error) {
	rep := &WriteBackReport{}
	root := os.Geteuid() == 0
	paths := t.Paths()
	// Deepest first, so tightening a directory's mode never locks us out of
	// its children.
	for i := len(paths) - 1; i >= 0; i-- {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		p := paths[i]
		e := t.entries[p]
		hp := t.DiskPath(p)
		switch e.Type {
		case TypeChar, TypeBlock, TypeFifo:
			fi, err := os.Lstat(hp)
			if err == nil && fi.Mode().IsRegular() && fi.Size() == 0 {
				if e.Type != TypeFifo && !root {
					rep.NotApplied = append(rep.NotApplied, p)
					continue
				}
				mode := uint32(syscall.S_IFIFO)
				if e.Type == TypeChar {
					mode = syscall.S_IFCHR
				} else if e.Type == TypeBlock {
					mode = syscall.S_IFBLK
				}
				os.Remove(hp)
				if err := unix.Mknod(hp, mode|e.Perm&0o777, int(unix.Mkdev(e.Major, e.Minor))); err != nil {
					return nil, fmt.Errorf("%s: %w", p, err)
				}
			}
		case TypeSocket:
			continue
		}
		if root {
			if err := os.Lchown(hp, int(e.UID), int(e.GID)); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
		} else if e.UID != uint32(os.Geteuid()) || e.GID != uint32(os.Getegid()) {
			rep.NotApplied = append(rep.NotApplied, p)
		}
		if e.Type != TypeSymlink {
			if err := unix.Chmod(hp, e.Perm&07777); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
		}
		ts := []unix.Timespec{unix.NsecToTimespec(e.MTime.UnixNano()), unix.NsecToTimespec(e.MTime.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, hp, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	return rep, nil
}
