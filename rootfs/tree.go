package rootfs

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// Limits the kernel would apply to the same paths in the image.
const (
	PathMax     = 4096
	NameMax     = 255
	maxSymlinks = 40
)

// Errors callers test for.
var (
	ErrLoop     = errors.New("too many levels of symbolic links")
	ErrNotDir   = errors.New("not a directory")
	ErrNotExist = fs.ErrNotExist
	ErrTooLong  = errors.New("path longer than PATH_MAX")
	ErrIsDir    = errors.New("is a directory")
)

// Options configure a Tree.
type Options struct {
	// DefaultMTime is given to directories the tree creates implicitly.
	DefaultMTime time.Time
	// ReverseReaddir makes every walk of a host directory into the tree
	// (a rescan, a files layer's directory) read it in reverse byte order.
	// stamp verify sets it for its second build, so that a result
	// depending on the order a directory is read in shows up as a
	// difference.
	ReverseReaddir bool
	// ContentDir, when set, is where archives extracted by reference are
	// kept (see ExtractOptions.ByReference). It must not be inside the
	// tree's directory.
	ContentDir string
	// Archives, when set, keeps those archives in place of ContentDir: a
	// content-addressed store (the build cache) where they outlive the
	// build, so that a kept phase can point into them (see Refs and
	// Restore).
	Archives ArchiveStore
}

// Tree is a root filesystem under construction. It is not safe for concurrent
// mutation: phases run one layer at a time.
type Tree struct {
	dir     string
	root    *os.Root
	opts    Options
	entries map[string]*Entry
	sorted  []string // cache of sorted paths; nil when stale
	// deferDirs, while Restore or a snapshot's extraction runs, leaves
	// directories and symlinks out of the directory; offDisk says some are
	// (see restoredirs.go).
	deferDirs, offDisk bool
	// bufs are filled alternately, so one can be read into while the
	// hasher still reads the other.
	bufs   [2][]byte
	hasher *hashio.Hasher
	// writes, while an extraction runs, writes small files on workers.
	writes *writePool
	// adopted trees index an existing root: owners come from the disk.
	adopted bool
	// lower is the tree an overlay was made from (see Overlay); lowerPath
	// says where in it the content of an inode the overlay kept lives.
	lower     *Tree
	lowerPath map[*Inode]string
	// archives hold the content of referenced files; referenced says some
	// file may still be one (see content.go).
	archives   []*archive
	referenced bool
}

// New opens dir (created if missing, and expected empty) as a new tree holding
// only the root directory.
func New(dir string, opts Options) (*Tree, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tree %s: %w", dir, err)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("tree %s: %w", dir, err)
	}
	t := &Tree{dir: dir, root: r, opts: opts, entries: map[string]*Entry{}}
	in := &Inode{Type: TypeDir, Perm: 0o755, MTime: opts.DefaultMTime, nlink: 1}
	t.entries["/"] = &Entry{Path: "/", Inode: in}
	if err := t.syncDisk("/", in); err != nil {
		r.Close()
		return nil, err
	}
	return t, nil
}

// Close releases the directory handle. The directory itself stays.
func (t *Tree) Close() error {
	if t.hasher != nil {
		t.hasher.Close()
		t.hasher = nil
	}
	aerr := t.closeArchives()
	if err := t.root.Close(); err != nil {
		return err
	}
	return aerr
}

// Dir is the directory that holds the tree's contents.
func (t *Tree) Dir() string { return t.dir }

// Len is the number of entries, the root included.
func (t *Tree) Len() int { return len(t.entries) }

// Get returns the entry at the exact clean path p, without following
// symlinks, or nil.
func (t *Tree) Get(p string) *Entry { return t.entries[p] }

// Lookup resolves p inside the tree as the image would, following symlinks in
// every component (and in the last one if follow is set), and returns the entry.
func (t *Tree) Lookup(p string, follow bool) (*Entry, error) {
	rp, err := t.Resolve(p, follow)
	if err != nil {
		return nil, err
	}
	e := t.entries[rp]
	if e == nil {
		return nil, &fs.PathError{Op: "lookup", Path: p, Err: ErrNotExist}
	}
	return e, nil
}

// Paths returns every path in byte order. The slice must not be modified.
func (t *Tree) Paths() []string {
	if t.sorted == nil {
		t.sorted = make([]string, 0, len(t.entries))
		for p := range t.entries {
			t.sorted = append(t.sorted, p)
		}
		sort.Strings(t.sorted)
	}
	return t.sorted
}

// Walk calls fn for every entry in byte order of the path. fn must not
// mutate the tree.
func (t *Tree) Walk(fn func(*Entry) error) error {
	for _, p := range t.Paths() {
		if err := fn(t.entries[p]); err != nil {
			return err
		}
	}
	return nil
}

// Open opens the content of the regular file at the exact path p.
func (t *Tree) Open(p string) (*File, error) {
	if err := t.settleWrites(); err != nil {
		return nil, err
	}
	e := t.entries[p]
	if e == nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: ErrNotExist}
	}
	if e.Type != TypeRegular {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fmt.Errorf("is a %s, not a file", e.Type)}
	}
	if lp, ok := t.inLower(e.Inode); ok {
		return t.lower.Open(lp)
	}
	if e.ref != nil {
		return openRef(e.Inode), nil
	}
	if t.root == nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: ErrNoContent}
	}
	f, err := t.root.OpenFile(rel(p), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	return &File{f: f, info: FileInfo(path.Base(p), e)}, nil
}

// DiskPath is where the content of the entry at the exact path p lives on the
// host. Only for tools that need a host path (hooks, external validators).
// It is "" when no directory holds the content (see SealedOf), and for a
// file whose content is a reference until the tree is materialized; a
// directory or symlink a restore made is there only once the tree is
// materialized or something was made below it.
func (t *Tree) DiskPath(p string) string {
	if e := t.entries[p]; e != nil {
		if lp, ok := t.inLower(e.Inode); ok {
			return t.lower.DiskPath(lp)
		}
		if e.ref != nil {
			return ""
		}
	}
	if t.root == nil {
		return ""
	}
	return path.Join(t.dir, rel(p))
}

// Resolve returns the clean path inside the tree that p names, following
// symlinks as the image would: absolute targets start again at the tree's
// root and ".." never climbs above it. The last component is followed only if
// follow is set. Components that do not exist yet are kept as they are.
func (t *Tree) Resolve(p string, follow bool) (string, error) {
	return t.ResolveIn("/", p, follow)
}

// ResolveIn is Resolve with the directory root (a clean path of the tree)
// taken for the root: p starts there, absolute symlink targets start there
// again and ".." never climbs above it, as a container runtime resolves a
// path inside a snapshot's directory. The result is a path of the tree.
func (t *Tree) ResolveIn(root, p string, follow bool) (string, error) {
	if len(p) > PathMax {
		return "", &fs.PathError{Op: "resolve", Path: p[:64] + "...", Err: ErrTooLong}
	}
	comps := splitPath(p)
	cur := root
	links := 0
	for i := 0; i < len(comps); i++ {
		c := comps[i]
		if c == ".." {
			if cur != root {
				cur = path.Dir(cur)
			}
			continue
		}
		if len(c) > NameMax {
			return "", &fs.PathError{Op: "resolve", Path: p, Err: fmt.Errorf("component longer than NAME_MAX (%d bytes)", NameMax)}
		}
		next := join(cur, c)
		last := i == len(comps)-1
		e := t.entries[next]
		if e != nil && e.Type == TypeSymlink && (!last || follow) {
			links++
			if links > maxSymlinks {
				return "", &fs.PathError{Op: "resolve", Path: p, Err: ErrLoop}
			}
			if strings.HasPrefix(e.Target, "/") {
				cur = root
			}
			rest := append(splitPath(e.Target), comps[i+1:]...)
			comps, i = rest, -1
			continue
		}
		if e != nil && !last && e.Type != TypeDir {
			return "", &fs.PathError{Op: "resolve", Path: p, Err: fmt.Errorf("%s: %w", next, ErrNotDir)}
		}
		cur = next
		if len(cur) > PathMax {
			return "", &fs.PathError{Op: "resolve", Path: p[:min(len(p), 64)] + "...", Err: ErrTooLong}
		}
	}
	return cur, nil
}

// Create makes the entry at p, replacing whatever is there as tar does (a
// directory over a directory only updates its metadata). The parent is
// resolved inside the tree and created if missing. For regular files the
// content is read from r, hashed while written, and written sparse.
func (t *Tree) Create(p string, h Header, r io.Reader) (*Entry, error) {
	full, err := t.prepare(p)
	if err != nil {
		return nil, err
	}
	if old := t.entries[full]; old != nil {
		if h.Type == TypeDir && old.Type == TypeDir {
			old.Perm, old.UID, old.GID, old.MTime = h.Perm&07777, h.UID, h.GID, h.MTime
			old.Xattrs = h.inode().Xattrs
			old.Origin = h.Origin
			return old, t.syncDisk(full, old.Inode)
		}
		if err := t.remove(full); err != nil {
			return nil, err
		}
	}
	in := h.inode()
	if err := t.createOnDisk(full, in, r); err != nil {
		t.root.RemoveAll(rel(full))
		return nil, &fs.PathError{Op: "create", Path: full, Err: err}
	}
	in.nlink = 1
	e := &Entry{Path: full, Inode: in, Origin: h.Origin}
	t.add(e)
	return e, nil
}

// Link makes p a hard link to the existing non-directory entry target.
func (t *Tree) Link(p, target string, origin Origin) (*Entry, error) {
	if err := t.settleWrites(); err != nil {
		return nil, err
	}
	tp, err := t.Resolve(target, false)
	if err != nil {
		return nil, err
	}
	te := t.entries[tp]
	if te == nil {
		return nil, &fs.PathError{Op: "link", Path: target, Err: ErrNotExist}
	}
	if te.Type == TypeDir {
		return nil, &fs.PathError{Op: "link", Path: target, Err: ErrIsDir}
	}
	full, err := t.prepare(p)
	if err != nil {
		return nil, err
	}
	if full == tp {
		return te, nil
	}
	if old := t.entries[full]; old != nil {
		if err := t.remove(full); err != nil {
			return nil, err
		}
	}
	// An overlay's link to content it kept from the lower tree shares the
	// inode, and with it the lower path the content is read from.
	// A link to a symlink still off disk is made with it (materializeDirs).
	if _, lower := t.inLower(te.Inode); !lower && te.ref == nil && !te.offDisk {
		if err := t.mkdirUpper(rel(full)); err != nil {
			return nil, &fs.PathError{Op: "link", Path: full, Err: err}
		}
		if err := t.ensureDir(path.Dir(full)); err != nil {
			return nil, &fs.PathError{Op: "link", Path: full, Err: err}
		}
		if err := t.root.Link(rel(tp), rel(full)); err != nil {
			return nil, &fs.PathError{Op: "link", Path: full, Err: err}
		}
	}
	te.nlink++
	e := &Entry{Path: full, Inode: te.Inode, Origin: origin}
	t.add(e)
	return e, nil
}

// MkdirAll makes the directory p and any missing parents with h, following
// symlinks in every component. Existing directories are left as they are.
func (t *Tree) MkdirAll(p string, h Header) (*Entry, error) {
	full, err := t.Resolve(p, true)
	if err != nil {
		return nil, err
	}
	if e := t.entries[full]; e != nil {
		if e.Type != TypeDir {
			return nil, &fs.PathError{Op: "mkdir", Path: full, Err: ErrNotDir}
		}
		return e, nil
	}
	if err := t.mkdirParents(path.Dir(full), h); err != nil {
		return nil, err
	}
	h.Type = TypeDir
	return t.Create(full, h, nil)
}

// Remove deletes the entry at p (the last component is not followed) and
// everything under it. A missing entry is not an error.
func (t *Tree) Remove(p string) error {
	full, err := t.Resolve(p, false)
	if err != nil {
		return err
	}
	if full == "/" {
		return &fs.PathError{Op: "remove", Path: p, Err: errors.New("cannot remove the root")}
	}
	if t.entries[full] == nil {
		return nil
	}
	return t.remove(full)
}

// Update changes the metadata of the entry at the exact path p. fn may change
// anything but Type, Size and Digest.
func (t *Tree) Update(p string, fn func(in *Inode)) error {
	if err := t.settleWrites(); err != nil {
		return err
	}
	e := t.entries[p]
	if e == nil {
		return &fs.PathError{Op: "update", Path: p, Err: ErrNotExist}
	}
	typ, size, dig := e.Type, e.Size, e.Digest
	fn(e.Inode)
	e.Inode.Type, e.Size, e.Digest = typ, size, dig
	e.Perm &= 07777
	return t.syncDisk(p, e.Inode)
}

// Children returns the names directly under the directory at the exact path p, sorted.
func (t *Tree) Children(p string) []string {
	prefix := p + "/"
	if p == "/" {
		prefix = "/"
	}
	paths := t.Paths()
	i := sort.SearchStrings(paths, prefix)
	var names []string
	for ; i < len(paths) && strings.HasPrefix(paths[i], prefix); i++ {
		name := paths[i][len(prefix):]
		if name != "" && !strings.Contains(name, "/") {
			names = append(names, name)
		}
	}
	return names
}

// prepare resolves the parent of p, creates missing parents and returns the
// clean path of p itself.
func (t *Tree) prepare(p string) (string, error) {
	if len(p) > PathMax {
		return "", &fs.PathError{Op: "create", Path: p[:64] + "...", Err: ErrTooLong}
	}
	comps := splitPath(p)
	if len(comps) == 0 {
		return "/", nil
	}
	name := comps[len(comps)-1]
	if name == ".." {
		return "", &fs.PathError{Op: "create", Path: p, Err: errors.New(`last component is ".."`)}
	}
	if len(name) > NameMax {
		return "", &fs.PathError{Op: "create", Path: p, Err: fmt.Errorf("name longer than NAME_MAX (%d bytes)", NameMax)}
	}
	parent, err := t.Resolve(strings.Join(comps[:len(comps)-1], "/"), true)
	if err != nil {
		return "", err
	}
	if err := t.mkdirParents(parent, Header{Perm: 0o755, MTime: t.opts.DefaultMTime}); err != nil {
		return "", err
	}
	full := join(parent, name)
	if len(full) > PathMax {
		return "", &fs.PathError{Op: "create", Path: full[:64] + "...", Err: ErrTooLong}
	}
	return full, nil
}

// prepareNew is prepare for a new non-directory entry: whatever is at p is
// removed first, as tar replaces it.
func (t *Tree) prepareNew(p string) (string, error) {
	full, err := t.prepare(p)
	if err != nil {
		return "", err
	}
	if old := t.entries[full]; old != nil {
		if err := t.remove(full); err != nil {
			return "", err
		}
	}
	return full, nil
}

// mkdirParents makes sure the clean, resolved path dir exists as a directory.
func (t *Tree) mkdirParents(dir string, h Header) error {
	if e := t.entries[dir]; e != nil {
		if e.Type != TypeDir {
			return &fs.PathError{Op: "mkdir", Path: dir, Err: ErrNotDir}
		}
		return nil
	}
	if err := t.mkdirParents(path.Dir(dir), h); err != nil {
		return err
	}
	h.Type = TypeDir
	in := h.inode()
	if err := t.createOnDisk(dir, in, nil); err != nil {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	in.nlink = 1
	t.add(&Entry{Path: dir, Inode: in, Origin: h.Origin})
	return nil
}

func (t *Tree) add(e *Entry) {
	if t.sorted != nil {
		i := sort.SearchStrings(t.sorted, e.Path)
		if i == len(t.sorted) || t.sorted[i] != e.Path {
			t.sorted = append(t.sorted, "")
			copy(t.sorted[i+1:], t.sorted[i:])
			t.sorted[i] = e.Path
		}
	}
	t.entries[e.Path] = e
}

// remove drops the entry at the clean path full and its subtree.
func (t *Tree) remove(full string) error {
	e := t.entries[full]
	if e == nil {
		return nil
	}
	if err := t.settleWrites(); err != nil {
		return err
	}
	if e.Type == TypeDir {
		for _, name := range t.Children(full) {
			if err := t.remove(join(full, name)); err != nil {
				return err
			}
		}
	}
	if !e.offDisk {
		if err := t.root.RemoveAll(rel(full)); err != nil {
			return &fs.PathError{Op: "remove", Path: full, Err: err}
		}
	}
	e.nlink--
	delete(t.entries, full)
	if t.sorted != nil {
		i := sort.SearchStrings(t.sorted, full)
		if i < len(t.sorted) && t.sorted[i] == full {
			t.sorted = append(t.sorted[:i], t.sorted[i+1:]...)
		}
	}
	return nil
}

// diskMode is the mode an entry gets on disk: the owner can always read and
// write (and enter directories), so an unprivileged build never meets EACCES;
// the real mode lives in the index.
func diskMode(in *Inode) os.FileMode {
	switch in.Type {
	case TypeDir:
		return os.FileMode(in.Perm&0o777 | 0o700)
	case TypeRegular:
		return os.FileMode(in.Perm&0o777 | 0o600)
	default:
		return 0o600
	}
}

func (t *Tree) createOnDisk(full string, in *Inode, r io.Reader) error {
	if t.deferDirs && t.lower == nil && full != "/" && (in.Type == TypeDir || in.Type == TypeSymlink && in.Target != "") {
		in.offDisk, t.offDisk = true, true
		return nil
	}
	name := rel(full)
	if err := t.mkdirUpper(name); err != nil {
		return err
	}
	if err := t.ensureDir(path.Dir(full)); err != nil {
		return err
	}
	switch in.Type {
	case TypeDir:
		if full != "/" {
			if err := t.root.Mkdir(name, 0o700); err != nil {
				return err
			}
		}
	case TypeSymlink:
		if in.Target == "" {
			return errors.New("symlink with empty target")
		}
		if err := t.root.Symlink(in.Target, name); err != nil {
			return err
		}
		return t.recordDisk(full, in)
	case TypeRegular:
		f, err := t.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		size, digest, werr := t.writeContent(f, r)
		fi, err := finishFile(f, in, werr)
		if err != nil {
			return err
		}
		in.Size, in.Digest = size, digest
		in.disk = stateOf(fi)
		return nil
	case TypeChar, TypeBlock, TypeFifo, TypeSocket:
		// An unprivileged build cannot make these; an empty placeholder keeps
		// the path visible to hooks while the index holds the truth.
		f, err := t.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unsupported entry type %v", in.Type)
	}
	return t.syncDisk(full, in)
}

// finishFile sets a freshly written file's disk mode and reads back its
// state, both through its descriptor (another walk of the path by name per
// file costs more than the write of a small file), and closes it. err is
// the write's own outcome; the first failure is returned.
func finishFile(f *os.File, in *Inode, err error) (os.FileInfo, error) {
	if err == nil {
		err = f.Chmod(diskMode(in))
	}
	var fi os.FileInfo
	if err == nil {
		fi, err = f.Stat()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return fi, err
}

// syncDisk sets the on-disk mode of a non-symlink and records its state.
func (t *Tree) syncDisk(full string, in *Inode) error {
	if _, lower := t.inLower(in); lower || in.ref != nil || in.offDisk {
		return nil // the index alone holds what changed
	}
	if in.Type != TypeSymlink {
		if err := t.root.Chmod(rel(full), diskMode(in)); err != nil {
			return &fs.PathError{Op: "chmod", Path: full, Err: err}
		}
	}
	return t.recordDisk(full, in)
}

func (t *Tree) recordDisk(full string, in *Inode) error {
	fi, err := t.root.Lstat(rel(full))
	if err != nil {
		return &fs.PathError{Op: "stat", Path: full, Err: err}
	}
	in.disk = stateOf(fi)
	return nil
}

func stateOf(fi os.FileInfo) diskState {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return diskState{}
	}
	return diskState{ino: st.Ino, ctime: st.Ctim.Nano(), mode: st.Mode, uid: st.Uid, gid: st.Gid}
}

// writeContent copies r into f, hashing it and leaving runs of zero blocks as
// holes so sparse inputs stay sparse.
func (t *Tree) writeContent(f *os.File, r io.Reader) (int64, string, error) {
	if r == nil {
		sum := sha256.Sum256(nil)
		return 0, hex.EncodeToString(sum[:]), nil
	}
	if t.hasher == nil {
		t.hasher = hashio.NewHasher()
		t.bufs = [2][]byte{make([]byte, 256<<10), make([]byte, 256<<10)}
	}
	h := t.hasher
	size, err := t.writeRuns(f, r, h)
	sum := h.Sum()
	if err != nil {
		return 0, "", err
	}
	return size, hex.EncodeToString(sum[:]), nil
}

// writeRuns hashes each chunk on the hasher's goroutine while writing it here.
// With f nil it only hashes.
func (t *Tree) writeRuns(f *os.File, r io.Reader, h *hashio.Hasher) (int64, error) {
	var w io.Writer = io.Discard
	var sw *SparseWriter
	if f != nil {
		sw = NewSparseWriter(f)
		w = sw
	}
	var size int64
	for i := 0; ; i ^= 1 {
		// The hasher may still read the other buffer, never this one.
		h.Settle(1)
		n, err := io.ReadFull(r, t.bufs[i])
		if n > 0 {
			chunk := t.bufs[i][:n]
			h.Write(chunk)
			if _, werr := w.Write(chunk); werr != nil {
				return 0, werr
			}
			size += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return 0, err
		}
	}
	if sw != nil {
		if err := sw.Close(); err != nil {
			return 0, err
		}
	}
	return size, nil
}

// writeChunk writes each run of data blocks in one call and seeks over runs of
// zero blocks, so holes stay holes without 4 KiB syscalls. It reports whether
// the chunk ended in a hole, which only a truncate to the full size makes part
// of the file.
func writeChunk(f *os.File, chunk []byte) (bool, error) {
	const block = 4096
	n := len(chunk)
	hole := false
	for off := 0; off < n; {
		end := off
		for end < n && !isZero(chunk[end:min(end+block, n)]) {
			end = min(end+block, n)
		}
		if end > off {
			if _, err := f.Write(chunk[off:end]); err != nil {
				return false, err
			}
			hole = false
			off = end
			continue
		}
		for end < n && isZero(chunk[end:min(end+block, n)]) {
			end = min(end+block, n)
		}
		if _, err := f.Seek(int64(end-off), io.SeekCurrent); err != nil {
			return false, err
		}
		hole = true
		off = end
	}
	return hole, nil
}

var zeroBlock [4096]byte

func isZero(b []byte) bool { return bytes.Equal(b, zeroBlock[:len(b)]) }

// splitPath splits p into its components, dropping empty ones and ".".
func splitPath(p string) []string {
	return appendSegs(make([]string, 0, strings.Count(p, "/")+1), p)
}

func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

func rel(p string) string {
	if p == "/" || p == "" {
		return "."
	}
	return p[1:]
}

// CopyToNewFile writes r into a file at the host path dst that must not
// exist yet, with perm: how a tree's file is staged outside it for a host
// program (grub-mkimage, depmod) to read.
func CopyToNewFile(dst string, perm os.FileMode, r io.Reader) error {
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, r); err != nil {
		out.Close()
		return fmt.Errorf("%s: %w", dst, err)
	}
	return out.Close()
}
