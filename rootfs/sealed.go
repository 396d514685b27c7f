package rootfs

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"
)

// Sealed is a read-only view of a tree: what every output is written from.
// rootfs.Seal returns the build's; an output's own view of it, with what the
// format adds, comes from an overlay (Sealed.Overlay, then Tree.View). It
// offers no way to change the tree. The entries it hands out point into the
// tree's index and must not be changed either.
type Sealed struct {
	t      *Tree
	digest string
	// root stands in for "/" in the fs.FS of a view read back from an
	// archive that does not list its root (see SealedOf); nil otherwise.
	root *Entry
}

// View returns a read-only view of t as it stands, with no sealing rules
// applied: an output's view once its overlay holds what the format adds, or
// a test's tree. t must not change while the view is in use.
func (t *Tree) View() *Sealed { return &Sealed{t: t} }

// Digest is the tree digest of the view (rootfs.Digest of its entries):
// for the view Seal returns, of the tree as sealed, the record left out.
func (s *Sealed) Digest() string {
	if s.digest == "" {
		return Digest(s.t.Entries())
	}
	return s.digest
}

// Len is the number of entries, the root included.
func (s *Sealed) Len() int { return s.t.Len() }

// Get returns the entry at the exact clean path p, without following
// symlinks, or nil.
func (s *Sealed) Get(p string) *Entry { return s.t.Get(p) }

// Lookup resolves p as the image would (see Tree.Lookup) and returns the
// entry.
func (s *Sealed) Lookup(p string, follow bool) (*Entry, error) { return s.t.Lookup(p, follow) }

// Resolve returns the clean path p names, following symlinks as the image
// would (see Tree.Resolve).
func (s *Sealed) Resolve(p string, follow bool) (string, error) { return s.t.Resolve(p, follow) }

// Paths returns every path in byte order. The slice must not be modified.
func (s *Sealed) Paths() []string { return s.t.Paths() }

// Children returns the names directly under the directory at the exact path
// p, sorted.
func (s *Sealed) Children(p string) []string { return s.t.Children(p) }

// Walk calls fn for every entry in byte order of the path.
func (s *Sealed) Walk(fn func(*Entry) error) error { return s.t.Walk(fn) }

// Entries returns every entry in byte order of the path.
func (s *Sealed) Entries() []*Entry { return s.t.Entries() }

// Added returns what an output's view holds beyond the tree it was made
// from (see Tree.Added); nil for a view that is no overlay.
func (s *Sealed) Added() []*Entry { return s.t.Added() }

// Overlay starts an output's own view of s: a tree whose additions live in
// dir and never in s (see Tree.Overlay). Its View is what the output is
// written from; the caller closes it.
func (s *Sealed) Overlay(dir string) (*Tree, error) { return s.t.Overlay(dir) }

// Split starts two views of s for a disk that holds the directory sub on a
// file system of its own (see Tree.Split); the caller closes both.
func (s *Sealed) Split(sub, dirOut, dirIn string) (outside, inside *Tree, err error) {
	return s.t.Split(sub, dirOut, dirIn)
}

// DiskPath is where the content of the entry at the exact path p lives on
// the host, for tools that need a host path; "" for a view made by
// SealedOf. What lies there must be read, never changed.
func (s *Sealed) DiskPath(p string) string { return s.t.DiskPath(p) }

// Open opens the content of the regular file at the exact path p for
// reading. On a view made by SealedOf it fails with ErrNoContent.
func (s *Sealed) Open(p string) (*File, error) {
	e := s.t.entries[p]
	if e == nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: ErrNotExist}
	}
	return s.open(p, e, path.Base(p))
}

func (s *Sealed) open(p string, e *Entry, name string) (*File, error) {
	if e.Type != TypeRegular {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fmt.Errorf("is a %s, not a file", e.Type)}
	}
	f, err := s.t.Open(p)
	if err != nil {
		return nil, err
	}
	// A file changed behind the index would make an output disagree with
	// the manifest. A reference into an archive is the index's own size.
	if f.f != nil {
		fi, err := f.f.Stat()
		if err != nil {
			f.Close()
			return nil, &fs.PathError{Op: "open", Path: p, Err: err}
		}
		if fi.Size() != e.Size {
			f.Close()
			return nil, &fs.PathError{Op: "open", Path: p,
				Err: fmt.Errorf("the index says %d bytes, the file has %d: changed after sealing", e.Size, fi.Size())}
		}
	}
	f.info = FileInfo(name, e)
	return f, nil
}

// FS returns the view as an fs.FS, whose names are the tree's paths without
// the leading slash ("." is the root). Open follows symlinks inside the tree
// as the image would; ReadLink and Lstat do not follow the last one. Every
// FileInfo's Sys is the *Entry.
func (s *Sealed) FS() fs.FS { return sealedFS{s} }

// File is the content of a regular file of a tree, open for reading. It
// reads; it is not a handle through which the tree could be changed. Seek
// takes the host's whence values, SEEK_DATA and SEEK_HOLE included, so a
// writer can skip holes. The content is a file of the tree's directory, or
// a section of an archive the tree points into.
type File struct {
	f       *os.File
	section *io.SectionReader
	info    fs.FileInfo
}

// Read reads the content.
func (f *File) Read(b []byte) (int, error) {
	if f.section != nil {
		return f.section.Read(b)
	}
	return f.f.Read(b)
}

// ReadAt reads the content at off.
func (f *File) ReadAt(b []byte, off int64) (int, error) {
	if f.section != nil {
		return f.section.ReadAt(b, off)
	}
	return f.f.ReadAt(b, off)
}

// Whence values of lseek(2) beyond io's.
const (
	seekData = 3
	seekHole = 4
)

// Seek sets the offset of the next Read.
func (f *File) Seek(off int64, whence int) (int64, error) {
	if f.section == nil {
		return f.f.Seek(off, whence)
	}
	// An archive is written whole: a section is data to its end, and the
	// end is the one hole, as lseek(2) reports for a file without holes.
	switch whence {
	case seekData, seekHole:
		if off < 0 || off >= f.section.Size() {
			return 0, syscall.ENXIO
		}
		if whence == seekHole {
			off = f.section.Size()
		}
		return f.section.Seek(off, io.SeekStart)
	}
	return f.section.Seek(off, whence)
}

// Stat describes the file as the index does; Sys is the *Entry.
func (f *File) Stat() (fs.FileInfo, error) { return f.info, nil }

// Close releases the file.
func (f *File) Close() error {
	if f.section != nil {
		f.section = nil
		return nil
	}
	return f.f.Close()
}

// FileInfo is the entry e, named name, seen as an fs.FileInfo whose Sys is
// e.
func FileInfo(name string, e *Entry) fs.FileInfo { return entryInfo{name: name, e: e} }

type entryInfo struct {
	name string
	e    *Entry
}

func (i entryInfo) Name() string       { return i.name }
func (i entryInfo) Size() int64        { return i.e.Size }
func (i entryInfo) ModTime() time.Time { return i.e.MTime }
func (i entryInfo) IsDir() bool        { return i.e.Type == TypeDir }
func (i entryInfo) Sys() any           { return i.e }
func (i entryInfo) Mode() fs.FileMode {
	m := fs.FileMode(i.e.Perm & 0o777)
	if i.e.Perm&0o4000 != 0 {
		m |= fs.ModeSetuid
	}
	if i.e.Perm&0o2000 != 0 {
		m |= fs.ModeSetgid
	}
	if i.e.Perm&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	switch i.e.Type {
	case TypeDir:
		m |= fs.ModeDir
	case TypeSymlink:
		m |= fs.ModeSymlink
	case TypeChar:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case TypeBlock:
		m |= fs.ModeDevice
	case TypeFifo:
		m |= fs.ModeNamedPipe
	case TypeSocket:
		m |= fs.ModeSocket
	}
	return m
}

// sealedFS is a Sealed as an fs.FS.
type sealedFS struct{ s *Sealed }

var (
	_ fs.ReadLinkFS = sealedFS{}
	_ fs.StatFS     = sealedFS{}
	_ fs.ReadDirFS  = sealedFS{}
)

// lookup finds the entry name names, following the last symlink if follow
// is set.
func (f sealedFS) lookup(op, name string, follow bool) (*Entry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." && f.s.root != nil {
		return f.s.root, nil
	}
	e, err := f.s.t.Lookup("/"+name, follow)
	if err != nil {
		return nil, &fs.PathError{Op: op, Path: name, Err: unwrapPath(err)}
	}
	return e, nil
}

// unwrapPath drops a *fs.PathError's path, which names the tree's path
// rather than the fs.FS name.
func unwrapPath(err error) error {
	if pe, ok := err.(*fs.PathError); ok {
		return pe.Err
	}
	return err
}

func (f sealedFS) Open(name string) (fs.File, error) {
	e, err := f.lookup("open", name, true)
	if err != nil {
		return nil, err
	}
	switch e.Type {
	case TypeRegular:
		file, err := f.s.open(e.Path, e, path.Base(name))
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: unwrapPath(err)}
		}
		return file, nil
	case TypeDir:
		return &dirFile{s: f.s, e: e, info: FileInfo(path.Base(name), e)}, nil
	}
	return &specialFile{info: FileInfo(path.Base(name), e)}, nil
}

func (f sealedFS) Stat(name string) (fs.FileInfo, error) {
	e, err := f.lookup("stat", name, true)
	if err != nil {
		return nil, err
	}
	return FileInfo(path.Base(name), e), nil
}

func (f sealedFS) Lstat(name string) (fs.FileInfo, error) {
	e, err := f.lookup("lstat", name, false)
	if err != nil {
		return nil, err
	}
	return FileInfo(path.Base(name), e), nil
}

func (f sealedFS) ReadLink(name string) (string, error) {
	e, err := f.lookup("readlink", name, false)
	if err != nil {
		return "", err
	}
	if e.Type != TypeSymlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	return e.Target, nil
}

func (f sealedFS) ReadDir(name string) ([]fs.DirEntry, error) {
	e, err := f.lookup("readdir", name, true)
	if err != nil {
		return nil, err
	}
	if e.Type != TypeDir {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: ErrNotDir}
	}
	return dirEntries(f.s, e), nil
}

// dirEntries lists the directory dir in byte order of the names.
func dirEntries(s *Sealed, dir *Entry) []fs.DirEntry {
	names := s.t.Children(dir.Path)
	out := make([]fs.DirEntry, 0, len(names))
	for _, n := range names {
		out = append(out, fs.FileInfoToDirEntry(FileInfo(n, s.t.entries[join(dir.Path, n)])))
	}
	return out
}

// dirFile is a directory of the view, open for ReadDir.
type dirFile struct {
	s    *Sealed
	e    *Entry
	info fs.FileInfo
	left []fs.DirEntry
	read bool
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dirFile) Close() error               { return nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.e.Path, Err: syscall.EISDIR}
}

func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	if !d.read {
		d.left, d.read = dirEntries(d.s, d.e), true
	}
	if n <= 0 {
		out := d.left
		d.left = nil
		return out, nil
	}
	if len(d.left) == 0 {
		return nil, io.EOF
	}
	k := min(n, len(d.left))
	out := d.left[:k:k]
	d.left = d.left[k:]
	return out, nil
}

// specialFile is a device, fifo or socket of the view: it has metadata and,
// as in an archive, no content.
type specialFile struct{ info fs.FileInfo }

func (f *specialFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *specialFile) Close() error               { return nil }
func (f *specialFile) Read([]byte) (int, error)   { return 0, io.EOF }
