// Package rootfs holds a root filesystem under construction: a plain directory
// with the file contents, and an index that is the truth for everything an
// unprivileged process cannot put on disk (owners, device nodes, xattrs,
// special mode bits) or should not trust the host for (mtimes, modes).
package rootfs

import (
	"fmt"
	"io/fs"
	"sort"
	"time"
)

// Type is the kind of a tree entry.
type Type uint8

// Entry types. The zero value is invalid on purpose so a forgotten Type is caught.
const (
	TypeRegular Type = iota + 1
	TypeDir
	TypeSymlink
	TypeChar
	TypeBlock
	TypeFifo
	TypeSocket
)

var typeNames = [...]string{"", "file", "dir", "symlink", "char", "block", "fifo", "socket"}

func (t Type) String() string {
	if int(t) < len(typeNames) && t != 0 {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// ParseType is the inverse of Type.String.
func ParseType(s string) (Type, error) {
	for i, n := range typeNames {
		if n == s && i != 0 {
			return Type(i), nil
		}
	}
	return 0, fmt.Errorf("unknown entry type %q", s)
}

// TypeOf is the type of an entry whose file mode (as os.Lstat gives it) is
// m.
func TypeOf(m fs.FileMode) Type {
	switch {
	case m.IsDir():
		return TypeDir
	case m&fs.ModeSymlink != 0:
		return TypeSymlink
	case m&fs.ModeNamedPipe != 0:
		return TypeFifo
	case m&fs.ModeSocket != 0:
		return TypeSocket
	case m&fs.ModeCharDevice != 0:
		return TypeChar
	case m&fs.ModeDevice != 0:
		return TypeBlock
	}
	return TypeRegular
}

// IsDevice reports whether entries of this type carry device numbers.
func (t Type) IsDevice() bool { return t == TypeChar || t == TypeBlock }

// Origin says where an entry came from. It is recorded for provenance and is
// never part of the tree digest.
type Origin struct {
	Layer  string // e.g. "base", "customize[2].files"
	Input  string // digest of the input, "sha256:..."; empty for inline content
	Member string // path inside the input, artifact title, or host path
}

func (o Origin) String() string {
	if o == (Origin{}) {
		return ""
	}
	return o.Layer + ":" + o.Input + ":" + o.Member
}

// Inode is the metadata hard links share.
type Inode struct {
	Type   Type
	Perm   uint32 // permission bits including setuid, setgid and sticky (07777)
	UID    uint32
	GID    uint32
	MTime  time.Time
	Size   int64             // regular files only
	Digest string            // hex sha256 of the content, regular files only
	Target string            // symlink target as stored
	Major  uint32            // char and block devices
	Minor  uint32            // char and block devices
	Xattrs map[string]string // name -> raw value

	nlink int
	disk  diskState
	// ref, when set, is where the content is instead of the tree's
	// directory (see content.go).
	ref *contentRef
	// offDisk is a directory or symlink Restore (or the extraction of an
	// image layer into a snapshot) left out of the tree's directory until
	// something needs it there (see restoredirs.go).
	offDisk bool
}

// Nlink is the number of paths in the tree that share this inode.
func (in *Inode) Nlink() int { return in.nlink }

// XattrNames returns the xattr names in byte order, so callers never iterate
// the map for output.
func (in *Inode) XattrNames() []string {
	names := make([]string, 0, len(in.Xattrs))
	for k := range in.Xattrs {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

// diskState is what the tree last saw on disk for an inode, so a rescan after
// a hook can tell what the hook changed without reading every file.
type diskState struct {
	ino   uint64
	ctime int64 // nanoseconds; ctime cannot be set by a user, so any change shows
	mode  uint32
	// uid and gid on disk: what a root process (a chrooted maintainer
	// script) may change.
	uid, gid uint32
}

// Entry is one path in the tree. Hard links are entries sharing one *Inode.
type Entry struct {
	Path string // absolute and clean: "/", "/etc/passwd"
	*Inode
	Origin Origin
}

// Header describes an entry to create.
type Header struct {
	Type         Type
	Perm         uint32
	UID, GID     uint32
	MTime        time.Time
	Target       string // symlinks
	Major, Minor uint32
	Xattrs       map[string]string
	Origin       Origin
}

func (h *Header) inode() *Inode {
	in := &Inode{Type: h.Type, Perm: h.Perm & 07777, UID: h.UID, GID: h.GID, MTime: h.MTime,
		Target: h.Target, Major: h.Major, Minor: h.Minor}
	if len(h.Xattrs) > 0 {
		in.Xattrs = make(map[string]string, len(h.Xattrs))
		for k, v := range h.Xattrs {
			in.Xattrs[k] = v
		}
	}
	return in
}
