// Command lstree lists a mounted tree as stamp's manifest lists one: one
// rootfs.ManifestLine per entry, in byte order of the path, with what the
// kernel says of each (type, mode, owner, mtime, size and sha256, symlink
// target, device numbers, hard-link groups by inode number, and every
// xattr). Boot tests run it, built static, inside a VM that mounted an
// image, and compare its output with the tree the image was written from.
//
//	lstree DIR
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/rootfs"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: lstree DIR")
		os.Exit(2)
	}
	if err := run(os.Args[1], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "lstree:", err)
		os.Exit(1)
	}
}

func run(root string, out io.Writer) error {
	type key struct{ dev, ino uint64 }
	inodes := map[key]*rootfs.Inode{}
	var entries []*rootfs.Entry
	var walk func(rel string) error
	walk = func(rel string) error {
		host := filepath.Join(root, rel)
		var st unix.Stat_t
		if err := unix.Lstat(host, &st); err != nil {
			return err
		}
		k := key{st.Dev, st.Ino}
		if in := inodes[k]; in != nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			entries = append(entries, &rootfs.Entry{Path: rel, Inode: in})
			return nil
		}
		in, err := inode(host, &st)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		inodes[k] = in
		entries = append(entries, &rootfs.Entry{Path: rel, Inode: in})
		if in.Type != rootfs.TypeDir {
			return nil
		}
		names, err := readDirNames(host)
		if err != nil {
			return err
		}
		for _, n := range names {
			if err := walk(path.Join(rel, n)); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk("/"); err != nil {
		return err
	}
	sort.Slice(entries, func(a, b int) bool { return entries[a].Path < entries[b].Path })
	rootfs.SetNlink(entries)
	return rootfs.WriteManifest(out, entries, false)
}

func readDirNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

// inode reads one entry's metadata, content digest and xattrs.
func inode(host string, st *unix.Stat_t) (*rootfs.Inode, error) {
	in := &rootfs.Inode{Perm: st.Mode & 0o7777, UID: st.Uid, GID: st.Gid,
		MTime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec).UTC()}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		in.Type = rootfs.TypeRegular
		f, err := os.Open(host)
		if err != nil {
			return nil, err
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		f.Close()
		if err != nil {
			return nil, err
		}
		in.Size, in.Digest = n, hex.EncodeToString(h.Sum(nil))
	case unix.S_IFDIR:
		in.Type = rootfs.TypeDir
	case unix.S_IFLNK:
		in.Type = rootfs.TypeSymlink
		t, err := os.Readlink(host)
		if err != nil {
			return nil, err
		}
		in.Target = t
	case unix.S_IFCHR, unix.S_IFBLK:
		in.Type = rootfs.TypeChar
		if st.Mode&unix.S_IFMT == unix.S_IFBLK {
			in.Type = rootfs.TypeBlock
		}
		in.Major, in.Minor = unix.Major(st.Rdev), unix.Minor(st.Rdev)
	case unix.S_IFIFO:
		in.Type = rootfs.TypeFifo
	case unix.S_IFSOCK:
		in.Type = rootfs.TypeSocket
	default:
		return nil, fmt.Errorf("mode %#o", st.Mode)
	}
	xs, err := xattrs(host)
	if err != nil {
		return nil, err
	}
	in.Xattrs = xs
	return in, nil
}

func xattrs(host string) (map[string]string, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(host, buf)
	if err != nil {
		if err == unix.ENOTSUP {
			return nil, nil
		}
		return nil, fmt.Errorf("listxattr: %w", err)
	}
	out := map[string]string{}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if name == "" {
			continue
		}
		v := make([]byte, 64<<10)
		m, err := unix.Lgetxattr(host, name, v)
		if err != nil {
			return nil, fmt.Errorf("getxattr %s: %w", name, err)
		}
		out[name] = string(v[:m])
	}
	if len(out) == 0 {
		return nil, nil
	}
	return out, nil
}
