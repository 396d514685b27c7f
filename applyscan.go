package stamp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// EntryState is what a root directory holds at one path, as read from the
// disk: the before and after of a change, and what the apply record keeps.
type EntryState struct {
	Type      string            `json:"type"`
	Mode      string            `json:"mode"`
	UID       uint32            `json:"uid"`
	GID       uint32            `json:"gid"`
	MTime     int64             `json:"mtime"`
	MTimeNsec int64             `json:"mtimeNsec,omitempty"`
	Size      int64             `json:"size,omitempty"`
	SHA256    string            `json:"sha256,omitempty"`
	Target    string            `json:"target,omitempty"`
	Major     uint32            `json:"major,omitempty"`
	Minor     uint32            `json:"minor,omitempty"`
	Xattrs    map[string][]byte `json:"xattrs,omitempty"`
	// Links are the other paths of the root that share this inode.
	Links []string `json:"links,omitempty"`
}

// node is one scanned path. typ and perm are EntryState's Type and Mode in
// the form the code compares.
type node struct {
	path string
	typ  rootfs.Type
	perm uint32
	EntryState
	ino   uint64
	dev   uint64
	nlink uint64
	// mount marks a directory another file system is mounted on.
	mount bool
}

func (n *node) mtimeNs() int64 { return n.MTime*1e9 + n.MTimeNsec }

// scanRoot lists dir's entries in byte order of the path and changes
// nothing. known, when non-nil, supplies the sha256 of a regular file whose
// content the caller already hashed (the tree's index), so it is not read
// again; it returns "" when it does not know.
//
// The scan stays on dir's own file system, as cp -x does: a mount point
// is listed, what is mounted on it is not (so --root / does not walk
// /proc). skip, a host path, is left out with everything under it: the
// work directory, when the root holds it.
func scanRoot(ctx context.Context, dir string, known func(p string, size int64) string, skip string) ([]*node, error) {
	var nodes []*node
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
		n, err := statNode(hp, p, known)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		nodes = append(nodes, n)
		if p == "/" {
			rootDev = n.dev
		} else if n.typ == rootfs.TypeDir && n.dev != rootDev {
			n.mount = true
			return fs.SkipDir
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", dir, err)
	}
	// A walk visits "/a/b" before "/a-c"; byte order puts it after.
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].path < nodes[j].path })
	setLinks(nodes)
	return nodes, nil
}

func statNode(hp, p string, known func(string, int64) string) (*node, error) {
	fi, err := os.Lstat(hp)
	if err != nil {
		return nil, err
	}
	st := fi.Sys().(*syscall.Stat_t)
	n := &node{path: p, typ: rootfs.TypeOf(fi.Mode()), perm: st.Mode & 07777, ino: st.Ino, dev: st.Dev, nlink: uint64(st.Nlink)}
	n.Type = n.typ.String()
	n.Mode = fmt.Sprintf("%04o", n.perm)
	n.UID, n.GID = st.Uid, st.Gid
	n.MTime, n.MTimeNsec = st.Mtim.Sec, st.Mtim.Nsec
	switch n.typ {
	case rootfs.TypeRegular:
		n.Size = st.Size
		if known != nil {
			n.SHA256 = known(p, st.Size)
		}
		if n.SHA256 == "" {
			if n.SHA256, _, err = hashio.File(hp, true); err != nil {
				return nil, err
			}
		}
	case rootfs.TypeSymlink:
		if n.Target, err = os.Readlink(hp); err != nil {
			return nil, err
		}
	case rootfs.TypeChar, rootfs.TypeBlock:
		n.Major, n.Minor = unix.Major(st.Rdev), unix.Minor(st.Rdev)
	}
	if n.Xattrs, err = readXattrs(hp); err != nil {
		return nil, err
	}
	return n, nil
}

// setLinks fills every hard-linked node's Links with the other paths of its
// inode. nodes must be sorted, so each list is too.
func setLinks(nodes []*node) {
	type key struct{ dev, ino uint64 }
	groups := map[key][]*node{}
	for _, n := range nodes {
		if n.typ != rootfs.TypeDir && n.nlink > 1 {
			k := key{n.dev, n.ino}
			groups[k] = append(groups[k], n)
		}
	}
	for _, n := range nodes {
		g := groups[key{n.dev, n.ino}]
		if n.typ == rootfs.TypeDir || len(g) < 2 {
			continue
		}
		for _, o := range g {
			if o != n {
				n.Links = append(n.Links, o.path)
			}
		}
	}
}

// readXattrs reads every extended attribute of hp without following a
// symlink; a file system without xattrs has none.
func readXattrs(hp string) (map[string][]byte, error) {
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
	var out map[string][]byte
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
			out = map[string][]byte{}
		}
		out[name] = v[:vs]
	}
	return out, nil
}

func sortedXattrNames(m map[string][]byte) []string {
	names := make([]string, 0, len(m))
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// lost says which of a copied entry's properties the copy could not give it
// (an unprivileged copy cannot chown or make device nodes, nor set trusted
// or security xattrs). Where the copy still holds the same inode after the
// recipe ran, those properties are taken from the original, as an in-place
// apply by the same user would leave them.
type lost struct {
	ino                   uint64
	owner, xattrs, device bool
}

// copyRoot makes dst a copy of src as nodes describe it: contents by reflink
// where the file system shares blocks, else by an in-kernel copy; hard links
// stay hard links; modes, mtimes and, where allowed, owners and xattrs as in
// src. It never writes to src.
func copyRoot(ctx context.Context, nodes []*node, src, dst string, progress func(int64)) (map[string]*lost, error) {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return nil, err
	}
	d, err := openDirTree(dst)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	asRoot := os.Geteuid() == 0
	losses := map[string]*lost{}
	done := map[string]bool{}
	for _, n := range nodes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if n.path == "/" {
			continue
		}
		err := d.at(n.path, func(fd int, name string) error {
			switch n.typ {
			case rootfs.TypeDir:
				return unix.Mkdirat(fd, name, 0o700)
			case rootfs.TypeSymlink:
				return unix.Symlinkat(n.Target, fd, name)
			case rootfs.TypeRegular:
				for _, l := range n.Links {
					if done[l] {
						return d.linkAt(l, fd, name)
					}
				}
				done[n.path] = true
				progress(n.Size)
				return copyFileAt(fd, name, filepath.Join(src, n.path[1:]))
			case rootfs.TypeChar, rootfs.TypeBlock:
				if !asRoot {
					losses[n.path] = &lost{device: true}
					return placeholderAt(fd, name)
				}
			}
			return unix.Mknodat(fd, name, nodeMode(n.typ)|0o600, int(unix.Mkdev(n.Major, n.Minor)))
		})
		if err != nil {
			return nil, fmt.Errorf("copying %s: %w", n.path, err)
		}
	}
	// Deepest first, so a read-only directory is finished after its children.
	for i := len(nodes) - 1; i >= 0; i-- {
		n := nodes[i]
		l := losses[n.path]
		if l == nil {
			l = &lost{}
		}
		if err := d.setMeta(n, l); err != nil {
			return nil, fmt.Errorf("copying %s: %w", n.path, err)
		}
		if l.owner || l.xattrs || l.device {
			fi, err := d.lstat(n.path)
			if err != nil {
				return nil, err
			}
			l.ino = fi.Sys().(*syscall.Stat_t).Ino
			losses[n.path] = l
		}
	}
	return losses, nil
}

func nodeMode(t rootfs.Type) uint32 {
	switch t {
	case rootfs.TypeChar:
		return unix.S_IFCHR
	case rootfs.TypeBlock:
		return unix.S_IFBLK
	case rootfs.TypeSocket:
		return unix.S_IFSOCK
	case rootfs.TypeFifo:
		return unix.S_IFIFO
	}
	return unix.S_IFREG
}

func placeholderAt(fd int, name string) error {
	nfd, err := unix.Openat(fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	return unix.Close(nfd)
}

// copyFileAt creates name in the directory fd with the content of the host
// file srcPath.
func copyFileAt(fd int, name, srcPath string) error {
	src, err := os.OpenFile(srcPath, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
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

// dirTree changes entries of a directory tree by their clean absolute paths
// inside it, every parent opened through an os.Root so no symlink in the
// tree can lead a change outside it.
type dirTree struct {
	dir  string
	root *os.Root
}

func openDirTree(dir string) (*dirTree, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &dirTree{dir: dir, root: r}, nil
}

func (d *dirTree) Close() error { return d.root.Close() }

func rootRel(p string) string {
	if p == "/" {
		return "."
	}
	return p[1:]
}

// at calls fn with a descriptor of p's parent directory and p's last name
// ("." for the root itself).
func (d *dirTree) at(p string, fn func(fd int, name string) error) error {
	parent, name := path.Split(p)
	if p == "/" {
		parent, name = "/", "."
	}
	f, err := d.root.OpenFile(rootRel(path.Clean(parent)), os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return fn(int(f.Fd()), name)
}

// linkAt makes name in the directory fd another name of the entry at old.
func (d *dirTree) linkAt(old string, fd int, name string) error {
	return d.at(old, func(ofd int, oname string) error { return unix.Linkat(ofd, oname, fd, name, 0) })
}

func (d *dirTree) lstat(p string) (os.FileInfo, error) { return d.root.Lstat(rootRel(p)) }

// procPath names the entry name in the directory fd for the l*xattr calls,
// which have no *at form: /proc resolves the descriptor, and the last
// component is not followed.
func procPath(fd int, name string) string { return fmt.Sprintf("/proc/self/fd/%d/%s", fd, name) }

// setMeta gives the entry at n.path n's owner, mode, xattrs and mtime, in
// that order: a chown clears setuid bits and file capabilities. What an
// unprivileged process may not set is marked in l instead of failing.
func (d *dirTree) setMeta(n *node, l *lost) error {
	return d.at(n.path, func(fd int, name string) error {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if st.Uid != n.UID || st.Gid != n.GID || os.Geteuid() == 0 {
			if err := unix.Fchownat(fd, name, int(n.UID), int(n.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
				if !errors.Is(err, unix.EPERM) || os.Geteuid() == 0 {
					return fmt.Errorf("chown: %w", err)
				}
				l.owner = true
			}
		}
		if n.typ != rootfs.TypeSymlink {
			if err := unix.Fchmodat(fd, name, n.perm, 0); err != nil {
				return fmt.Errorf("chmod: %w", err)
			}
		}
		if err := setXattrs(procPath(fd, name), n.Xattrs); err != nil {
			if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.ENOTSUP) {
				return err
			}
			l.xattrs = true
		}
		ts := []unix.Timespec{unix.NsecToTimespec(n.mtimeNs()), unix.NsecToTimespec(n.mtimeNs())}
		if err := unix.UtimesNanoAt(fd, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("mtime: %w", err)
		}
		return nil
	})
}

// setXattrs makes the entry's xattrs exactly want: others are removed.
func setXattrs(pp string, want map[string][]byte) error {
	have, err := readXattrs(pp)
	if err != nil {
		return err
	}
	for _, name := range sortedXattrNames(have) {
		if _, ok := want[name]; !ok {
			if err := unix.Lremovexattr(pp, name); err != nil {
				return fmt.Errorf("xattr %s: %w", name, err)
			}
		}
	}
	for _, name := range sortedXattrNames(want) {
		if v, ok := have[name]; ok && string(v) == string(want[name]) {
			continue
		}
		if err := unix.Lsetxattr(pp, name, want[name], 0); err != nil {
			return fmt.Errorf("xattr %s: %w", name, err)
		}
	}
	return nil
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
