package rootfs

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
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

// archive is an uncompressed archive files of a tree point into.
type archive struct {
	f    *os.File // read side; reads use pread, so it is shared freely
	path string
}

// contentRef says where a regular file's bytes are: Size bytes of a at off.
type contentRef struct {
	a   *archive
	off int64
}

// archiveWriter keeps the uncompressed stream an extraction reads, and knows
// how far it has read.
type archiveWriter struct {
	a   *archive
	out *os.File
	buf *bufio.Writer
	r   io.Reader
	n   int64 // bytes read from r, and so written to the archive
	err error
}

// newArchive creates the file an extraction of r keeps its archive in.
func (t *Tree) newArchive(r io.Reader) (*archiveWriter, error) {
	if err := os.MkdirAll(t.opts.ContentDir, 0o700); err != nil {
		return nil, fmt.Errorf("content directory: %w", err)
	}
	out, err := os.CreateTemp(t.opts.ContentDir, "archive-*.tar")
	if err != nil {
		return nil, fmt.Errorf("content directory: %w", err)
	}
	rf, err := os.Open(out.Name())
	if err != nil {
		out.Close()
		os.Remove(out.Name())
		return nil, fmt.Errorf("content directory: %w", err)
	}
	a := &archive{f: rf, path: out.Name()}
	t.archives = append(t.archives, a)
	return &archiveWriter{a: a, out: out, buf: bufio.NewWriterSize(out, 1<<20), r: r}, nil
}

// Read passes on what it reads and writes it to the archive. A failed write
// ends the extraction as a failed read would.
func (w *archiveWriter) Read(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	n, err := w.r.Read(p)
	if n > 0 {
		if _, werr := w.buf.Write(p[:n]); werr != nil {
			w.err = fmt.Errorf("keeping the archive: %w", werr)
			return 0, w.err
		}
		w.n += int64(n)
	}
	return n, err
}

// finish writes out what is buffered, so that reads of the archive see every
// byte a reference may point at.
func (w *archiveWriter) finish() error {
	err := w.err
	if err == nil {
		err = w.buf.Flush()
	}
	if cerr := w.out.Close(); err == nil {
		err = cerr
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
	in := h.inode()
	n, digest, err := t.hashContent(r)
	if err != nil {
		return nil, &fs.PathError{Op: "create", Path: full, Err: fmt.Errorf("reading content: %w", err)}
	}
	if n != size {
		return nil, &fs.PathError{Op: "create", Path: full, Err: fmt.Errorf("content is %d bytes, the header says %d", n, size)}
	}
	in.Size, in.Digest, in.nlink = size, digest, 1
	in.ref = &contentRef{a: a, off: off}
	t.referenced = true
	e := &Entry{Path: full, Inode: in, Origin: h.Origin}
	t.add(e)
	return e, nil
}

// Referenced reports whether some file of the tree is not in its directory
// yet (see Materialize).
func (t *Tree) Referenced() bool { return t.referenced }

// Materialize writes every file whose content is a reference into the tree's
// directory, hard links as hard links, so that a host process sees the whole
// tree. The index does not change. Afterwards the archives are no longer
// needed, and are removed.
func (t *Tree) Materialize(ctx context.Context) error {
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
