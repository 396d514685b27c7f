package rootfs

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// Content by reference. Writing an archive's 11,000 files into a directory,
// only for an output writer to read them back, is most of what a build of a
// tarball base costs, and all of it is in the kernel creating inodes. When the
// tree has a content directory (Options.ContentDir), an extraction that asks
// for it (ExtractOptions.ByReference) keeps the uncompressed archive there as
// one file, written in one sequential pass, and a regular file of the index
// points at its bytes inside it. Open reads the file from there.
//
// A host process (a hook, a chroot, a maintainer script) must see files in
// the directory, so whatever runs one calls Materialize first, which writes
// every referenced file where an extraction would have put it.

// ArchiveStore keeps the archives of trees extracted by reference where
// later builds find them again by their sha256. The build cache is one.
type ArchiveStore interface {
	// CreateTemp creates a file to write a new archive into, where Keep
	// can file it.
	CreateTemp() (*os.File, error)
	// Keep files the complete archive at path, a closed file CreateTemp
	// made whose sha256 is sum (hex), and returns the path it is read from
	// from now on.
	Keep(path, sum string) (string, error)
	// Open opens the archive filed as sum, verified to hash to it.
	Open(sum string) (*os.File, error)
}

// archive is an uncompressed archive files of a tree point into.
type archive struct {
	f    *os.File // read side; reads use pread, so it is shared freely
	path string
	sum  string // sha256 (hex) of a kept archive
	// kept archives belong to the tree's ArchiveStore, which outlives the
	// tree: they are closed, never removed.
	kept bool
	size int64 // of a kept archive
}

// contentRef says where a regular file's bytes are: Size bytes of a at off.
type contentRef struct {
	a   *archive
	off int64
}

// archiveWriter keeps the uncompressed stream an extraction reads, and knows
// how far it has read. Without out it only counts: the stream is an archive
// the store already keeps (ExtractOptions.Kept). Writing into a store, it hashes what it writes, on a
// goroutine of its own, so that the archive is filed under its sha256.
type archiveWriter struct {
	a     *archive
	out   *os.File
	store ArchiveStore
	// bufs are filled alternately, so one can be written and filled while
	// the hasher still reads the other.
	bufs [2][]byte
	cur  int
	fill int
	h    *hashio.Hasher
	r    io.Reader
	n    int64 // bytes read from r, and so written to the archive
	err  error
}

const archiveChunk = 1 << 20

// newArchive creates the file an extraction of r keeps its archive in.
func (t *Tree) newArchive(r io.Reader) (*archiveWriter, error) {
	var out *os.File
	var err error
	if t.opts.Archives != nil {
		out, err = t.opts.Archives.CreateTemp()
	} else if err = os.MkdirAll(t.opts.ContentDir, 0o700); err == nil {
		out, err = os.CreateTemp(t.opts.ContentDir, "archive-*.tar")
	}
	if err != nil {
		return nil, fmt.Errorf("keeping the archive: %w", err)
	}
	rf, err := os.Open(out.Name())
	if err != nil {
		out.Close()
		os.Remove(out.Name())
		return nil, fmt.Errorf("keeping the archive: %w", err)
	}
	a := &archive{f: rf, path: out.Name()}
	t.archives = append(t.archives, a)
	w := &archiveWriter{a: a, out: out, store: t.opts.Archives, r: r}
	if w.store != nil {
		// Only a stored archive is named by its sum.
		w.h = hashio.NewHasher()
	}
	w.bufs[0], w.bufs[1] = make([]byte, archiveChunk), make([]byte, archiveChunk)
	return w, nil
}

// Read passes on what it reads and writes it to the archive. A failed write
// ends the extraction as a failed read would.
func (w *archiveWriter) Read(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.r.Read(p)
	for q := p[:n]; w.out != nil && len(q) > 0 && w.err == nil; {
		c := copy(w.bufs[w.cur][w.fill:], q)
		w.fill += c
		q = q[c:]
		if w.fill == archiveChunk {
			w.flush()
		}
	}
	w.n += int64(n)
	if w.err != nil {
		return 0, w.err
	}
	return n, err
}

// flush writes the buffer being filled and hands it to the hasher.
func (w *archiveWriter) flush() {
	b := w.bufs[w.cur][:w.fill]
	if len(b) == 0 {
		return
	}
	if _, err := w.out.Write(b); err != nil {
		w.err = fmt.Errorf("keeping the archive: %w", err)
		return
	}
	w.cur, w.fill = w.cur^1, 0
	if w.h != nil {
		w.h.Write(b)
		// The buffer filled next was handed over before: its hashing
		// must be done.
		w.h.Settle(1)
	}
}

// finish writes out what is buffered, so that reads of the archive see every
// byte a reference may point at, and files the archive in the store.
func (w *archiveWriter) finish() error {
	if w.err == nil {
		w.flush()
	}
	var sum string
	if w.h != nil {
		s := w.h.Sum()
		w.h.Close()
		sum = hex.EncodeToString(s[:])
	}
	err := w.err
	if cerr := w.out.Close(); err == nil {
		err = cerr
	}
	if err == nil && w.store != nil {
		var p string
		if p, err = w.store.Keep(w.a.path, sum); err == nil {
			w.a.path, w.a.kept, w.a.sum, w.a.size = p, true, sum, w.n
		}
	}
	if err != nil {
		return fmt.Errorf("keeping the archive %s: %w", w.a.path, err)
	}
	return nil
}

// createRef is Create for a new regular file whose size bytes are in the
// archive at off; r reads them, and is read to the end to hash them.
func (t *Tree) createRef(p string, h Header, r io.Reader, a *archive, off, size int64) (*Entry, error) {
	full, err := t.prepareNew(p)
	if err != nil {
		return nil, err
	}
	n, digest, err := t.hashContent(r)
	if err != nil {
		return nil, &fs.PathError{Op: "create", Path: full, Err: fmt.Errorf("reading content: %w", err)}
	}
	if n != size {
		return nil, &fs.PathError{Op: "create", Path: full, Err: fmt.Errorf("content is %d bytes, the header says %d", n, size)}
	}
	return t.addRef(full, h, a, off, size, digest), nil
}

// CreateKept is Create for a regular file whose content is the whole of the
// object the tree's ArchiveStore keeps as sum (a sha256 in hex), size bytes
// long: an artifact's file, already verified in the cache, is not written
// into the directory again. ok is false, and nothing done, when the tree has
// no store; the caller then writes the file.
func (t *Tree) CreateKept(p string, h Header, sum string, size int64) (e *Entry, ok bool, err error) {
	if !t.KeepsReferences() {
		return nil, false, nil
	}
	if err := t.settleWrites(); err != nil {
		return nil, true, err
	}
	a, err := t.openKept(sum)
	if err != nil {
		return nil, true, &fs.PathError{Op: "create", Path: p, Err: err}
	}
	if a.size != size {
		return nil, true, &fs.PathError{Op: "create", Path: p, Err: fmt.Errorf("object %s is %d bytes, %d were expected", sum, a.size, size)}
	}
	full, err := t.prepareNew(p)
	if err != nil {
		return nil, true, err
	}
	return t.addRef(full, h, a, 0, size, sum), true, nil
}

// CreateLike is Create for a regular file with the content of the file at
// the exact path srcPath of src, when that content is a reference into an
// archive the store of both trees keeps: the new file points at the same
// bytes, and nothing is read or written. ok is false, and nothing done,
// when either tree cannot; the caller then copies the content.
func (t *Tree) CreateLike(p string, h Header, src *Tree, srcPath string) (e *Entry, ok bool, err error) {
	se := src.entries[srcPath]
	if !t.KeepsReferences() || se == nil || se.Type != TypeRegular || se.ref == nil || !se.ref.a.kept {
		return nil, false, nil
	}
	if err := t.settleWrites(); err != nil {
		return nil, true, err
	}
	a, err := t.openKept(se.ref.a.sum)
	if err != nil {
		return nil, true, &fs.PathError{Op: "create", Path: p, Err: err}
	}
	full, err := t.prepareNew(p)
	if err != nil {
		return nil, true, err
	}
	return t.addRef(full, h, a, se.ref.off, se.Size, se.Digest), true, nil
}

// KeepsReferences tells whether CreateKept makes references: whether the
// tree has an ArchiveStore.
func (t *Tree) KeepsReferences() bool { return t.opts.Archives != nil && t.lower == nil }

// addRef adds the regular file at full, a path prepareNew made ready, whose
// content, with the given sha256, is size bytes of a at off.
func (t *Tree) addRef(full string, h Header, a *archive, off, size int64, digest string) *Entry {
	in := h.inode()
	in.Size, in.Digest, in.nlink = size, digest, 1
	in.ref = &contentRef{a: a, off: off}
	t.referenced = true
	e := &Entry{Path: full, Inode: in, Origin: h.Origin}
	t.add(e)
	return e
}

// Referenced reports whether some entry of the tree is not in its
// directory yet (see Materialize).
func (t *Tree) Referenced() bool { return t.referenced || t.offDisk }

// Materialize writes every file whose content is a reference into the tree's
// directory, hard links as hard links, and makes the directories and
// symlinks a restore left off it, so that a host process sees the whole
// tree. The index does not change. Afterwards the archives are no longer
// needed: those in the content directory are removed, those in the
// ArchiveStore stay there.
func (t *Tree) Materialize(ctx context.Context) error {
	if err := t.materializeDirs(ctx); err != nil {
		return err
	}
	if !t.referenced {
		return nil
	}
	if err := t.settleWrites(); err != nil {
		return err
	}
	t.startWrites()
	first := map[*Inode]string{}
	err := t.materialize(ctx, first)
	if werr := t.stopWrites(); err == nil {
		err = werr
	}
	if err != nil {
		return err
	}
	for in := range first {
		in.ref = nil
	}
	t.referenced = false
	return t.closeArchives()
}

func (t *Tree) materialize(ctx context.Context, first map[*Inode]string) error {
	for _, p := range t.Paths() {
		e := t.entries[p]
		if e.ref == nil {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if fp, ok := first[e.Inode]; ok {
			// The link's target may be a queued write.
			if err := t.settleWrites(); err != nil {
				return err
			}
			if err := t.root.Link(rel(fp), rel(p)); err != nil {
				return &fs.PathError{Op: "link", Path: p, Err: err}
			}
			continue
		}
		first[e.Inode] = p
		if e.ref.a.kept {
			// A kept archive was checked against its sha256 when it was
			// filed or opened, so its bytes need no hashing on the way out,
			// and none of them need pass through this process.
			j := &writeJob{full: p, name: p, in: e.Inode, src: e.ref.a.f, off: e.ref.off}
			if err := t.writes.submit(j, p[:max(len(p)-len(baseName(p)), 1)]); err != nil {
				return err
			}
			continue
		}
		r := io.NewSectionReader(e.ref.a.f, e.ref.off, e.Size)
		if e.Size <= asyncMax {
			data := make([]byte, e.Size)
			if _, err := io.ReadFull(r, data); err != nil {
				return &fs.PathError{Op: "materialize", Path: p, Err: err}
			}
			j := &writeJob{full: p, name: p, in: e.Inode, data: data}
			if err := t.writes.submit(j, p[:max(len(p)-len(baseName(p)), 1)]); err != nil {
				return err
			}
			continue
		}
		if err := t.materializeLarge(p, e.Inode, r); err != nil {
			return err
		}
	}
	return nil
}

// materializeLarge streams one large file out of its archive.
func (t *Tree) materializeLarge(p string, in *Inode, r io.Reader) error {
	f, err := t.root.OpenFile(rel(p), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return &fs.PathError{Op: "materialize", Path: p, Err: err}
	}
	size, digest, werr := t.writeContent(f, r)
	if werr == nil && (size != in.Size || digest != in.Digest) {
		werr = fmt.Errorf("the archive holds %d bytes (sha256 %s), the index says %d (%s)", size, digest, in.Size, in.Digest)
	}
	fi, err := finishFile(f, in, werr)
	if err != nil {
		return &fs.PathError{Op: "materialize", Path: p, Err: err}
	}
	in.disk = stateOf(fi)
	return nil
}

// closeArchives closes and removes the archives once nothing points into
// them.
func (t *Tree) closeArchives() error {
	var first error
	for _, a := range t.archives {
		if err := a.f.Close(); err != nil && first == nil {
			first = err
		}
		if a.kept {
			continue
		}
		if err := os.Remove(a.path); err != nil && first == nil {
			first = err
		}
	}
	t.archives = nil
	return first
}

// hashContent reads r to the end and returns its size and sha256, hashing on
// the tree's hasher while the next chunk is read.
func (t *Tree) hashContent(r io.Reader) (int64, string, error) {
	return t.writeContent(nil, r)
}

// openRef opens a referenced file's bytes.
func openRef(in *Inode) *File {
	return &File{section: io.NewSectionReader(in.ref.a.f, in.ref.off, in.Size)}
}
