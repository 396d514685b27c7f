package hostroot

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
)

// Entry is one path of a host root as apply sees it: the tree's own entry
// (type, mode, owner, mtime, content digest, symlink target, device numbers,
// xattrs) and the other paths of the root that share its inode. Each Entry
// has an Inode of its own; Links, not a shared *rootfs.Inode, says which
// paths are hard links of each other, because a recorded entry's links may
// name paths the record does not hold.
type Entry struct {
	*rootfs.Entry
	// Links are the other paths of the root that share this inode, sorted.
	Links []string

	// What the scan saw of the inode on the host; a recorded entry has none.
	ino, dev, nlink uint64
	// mount marks a directory another file system is mounted on.
	mount bool
}

func (e *Entry) mtimeNs() int64 { return e.MTime.UnixNano() }

// mode is the permission bits as the report and the record write them.
func (e *Entry) mode() string { return fmt.Sprintf("%04o", e.Perm) }

// entryJSON is an Entry as the plan and the record write it (the record's
// version 1).
type entryJSON struct {
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
	Links     []string          `json:"links,omitempty"`
}

// MarshalJSON writes the entry as the plan and the record hold it.
func (e *Entry) MarshalJSON() ([]byte, error) {
	j := entryJSON{Type: e.Type.String(), Mode: e.mode(), UID: e.UID, GID: e.GID,
		MTime: e.MTime.Unix(), MTimeNsec: int64(e.MTime.Nanosecond()), Size: e.Size, SHA256: e.Digest,
		Target: e.Target, Major: e.Major, Minor: e.Minor, Links: e.Links}
	if len(e.Xattrs) > 0 {
		j.Xattrs = make(map[string][]byte, len(e.Xattrs))
		for k, v := range e.Xattrs {
			j.Xattrs[k] = []byte(v)
		}
	}
	return json.Marshal(j)
}

// entryOf turns the JSON form of the entry at p back into an Entry. What it
// reads may come from a record anybody with write access to the root could
// have edited, so every field that later names a path or a mode is checked:
// the type is one rootfs knows, the mode fits in 07777, a file's digest is
// a sha256 in hex (it names its backup), and links are clean paths in the
// root.
func entryOf(p string, j *entryJSON) (*Entry, error) {
	typ, err := rootfs.ParseType(j.Type)
	if err != nil {
		return nil, err
	}
	perm, err := strconv.ParseUint(j.Mode, 8, 32)
	if err != nil || perm > 0o7777 {
		return nil, fmt.Errorf("mode %q is not a mode", j.Mode)
	}
	if typ == rootfs.TypeRegular && !isDigest(j.SHA256) {
		return nil, fmt.Errorf("sha256 %q is not a sha256", j.SHA256)
	}
	if j.Size < 0 || j.MTimeNsec < 0 || j.MTimeNsec >= 1e9 {
		return nil, fmt.Errorf("size %d, mtimeNsec %d out of range", j.Size, j.MTimeNsec)
	}
	for _, l := range j.Links {
		if err := checkPath(l); err != nil {
			return nil, fmt.Errorf("link %w", err)
		}
		if l == p {
			return nil, fmt.Errorf("link %q is the path itself", l)
		}
	}
	in := &rootfs.Inode{Type: typ, Perm: uint32(perm), UID: j.UID, GID: j.GID, MTime: time.Unix(j.MTime, j.MTimeNsec),
		Size: j.Size, Digest: j.SHA256, Target: j.Target, Major: j.Major, Minor: j.Minor}
	if len(j.Xattrs) > 0 {
		in.Xattrs = make(map[string]string, len(j.Xattrs))
		for k, v := range j.Xattrs {
			in.Xattrs[k] = string(v)
		}
	}
	return &Entry{Entry: &rootfs.Entry{Path: p, Inode: in}, Links: j.Links}, nil
}

func isDigest(s string) bool {
	if len(s) != 64 || strings.ToLower(s) != s {
		return false
	}
	_, err := hex.DecodeString(s)
	return err == nil
}

// checkPath says why p is not a clean absolute path of the root: one that
// path.Clean leaves as it is (no empty, "." or ".." component, no doubled or
// trailing slash) and without NUL.
func checkPath(p string) error {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p || strings.ContainsRune(p, 0) {
		return fmt.Errorf("%q is not a clean absolute path", p)
	}
	return nil
}
