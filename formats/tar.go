package formats

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// tarXattrPrefix is the PAX record prefix GNU tar, bsdtar and star agree on.
const tarXattrPrefix = "SCHILY.xattr."

// TarOptions configure WriteTar. The zero value writes an uncompressed tar.
type TarOptions struct {
	Compression compress.Algorithm
	// Skipped, when set, gets the path of every entry tar cannot hold
	// (sockets) appended to it. Such entries are always left out: a socket
	// is created by the process that listens on it, never restored.
	Skipped *[]string
}

// WriteTar writes the tree as a canonical tar stream: the same tree always
// gives the same bytes, whoever builds it and whenever.
//
// The canonical form is: entries in byte order of path, named "./" for the
// root, "./etc/" for directories and "./etc/passwd" otherwise; PAX format
// (plain USTAR headers where they suffice); numeric owners only, no user or
// group names; the index's permission bits including setuid, setgid and
// sticky; mtimes truncated to whole seconds, no atime or ctime; xattrs as
// SCHILY.xattr records in name order; the first path of a hard-link group in
// byte order carries the data and later ones link to it.
func WriteTar(ctx context.Context, t *rootfs.Sealed, w io.Writer, o TarOptions) error {
	// flate and the tar writer itself write in small pieces; a file or pipe
	// below wants large ones.
	out := bufio.NewWriterSize(w, 1<<20)
	cw, err := compress.NewWriter(o.Compression, out, compress.WriterOptions{})
	if err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	tw := &tarWriter{
		ctx:   ctx,
		tree:  t,
		tw:    tar.NewWriter(cw),
		links: map[*rootfs.Inode]string{},
		buf:   make([]byte, 256<<10),
		opts:  o,
	}
	if err := t.Walk(tw.entry); err != nil {
		return err
	}
	if err := tw.tw.Close(); err != nil {
		return fmt.Errorf("tar: end of archive: %w", err)
	}
	if err := cw.Close(); err != nil {
		return fmt.Errorf("tar: %s: %w", o.Compression, err)
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	return nil
}

type tarWriter struct {
	ctx  context.Context
	tree *rootfs.Sealed
	tw   *tar.Writer
	// links maps the inode of a hard-link group to the tar name of its first
	// path. It is only looked up, never iterated.
	links map[*rootfs.Inode]string
	buf   []byte
	opts  TarOptions
}

func (w *tarWriter) entry(e *rootfs.Entry) error {
	if err := w.ctx.Err(); err != nil {
		return err
	}
	if e.Type == rootfs.TypeSocket {
		if w.opts.Skipped != nil {
			*w.opts.Skipped = append(*w.opts.Skipped, e.Path)
		}
		return nil
	}
	hdr, err := w.header(e)
	if err != nil {
		return fmt.Errorf("tar: %s: %w", e.Path, err)
	}
	if err := w.tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("tar: %s: %w", e.Path, err)
	}
	if hdr.Typeflag == tar.TypeReg {
		return w.content(e)
	}
	return nil
}

func (w *tarWriter) header(e *rootfs.Entry) (*tar.Header, error) {
	name := tarName(e.Path, e.Type == rootfs.TypeDir)
	hdr := &tar.Header{
		Format:  tar.FormatPAX,
		Name:    name,
		Mode:    int64(e.Perm & 07777),
		Uid:     int(e.UID),
		Gid:     int(e.GID),
		ModTime: tarMTime(e.MTime),
	}
	if e.Type != rootfs.TypeDir && e.Nlink() > 1 {
		if first, ok := w.links[e.Inode]; ok {
			// The link shares the inode, so its metadata and xattrs come
			// with the first path; the header repeats them as GNU tar does.
			hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
			return hdr, nil
		}
		w.links[e.Inode] = name
	}
	switch e.Type {
	case rootfs.TypeRegular:
		hdr.Typeflag, hdr.Size = tar.TypeReg, e.Size
	case rootfs.TypeDir:
		hdr.Typeflag = tar.TypeDir
	case rootfs.TypeSymlink:
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, e.Target
	case rootfs.TypeChar:
		hdr.Typeflag, hdr.Devmajor, hdr.Devminor = tar.TypeChar, int64(e.Major), int64(e.Minor)
	case rootfs.TypeBlock:
		hdr.Typeflag, hdr.Devmajor, hdr.Devminor = tar.TypeBlock, int64(e.Major), int64(e.Minor)
	case rootfs.TypeFifo:
		hdr.Typeflag = tar.TypeFifo
	default:
		return nil, fmt.Errorf("cannot store a %s in tar", e.Type)
	}
	if len(e.Xattrs) > 0 {
		hdr.PAXRecords = make(map[string]string, len(e.Xattrs))
		// archive/tar sorts the records itself; the names come sorted anyway
		// so the order never rests on that.
		for _, n := range e.XattrNames() {
			hdr.PAXRecords[tarXattrPrefix+n] = e.Xattrs[n]
		}
	}
	return hdr, nil
}

// content streams the file's bytes and checks they are what the index says:
// a file changed behind the index would make the archive disagree with the
// manifest.
func (w *tarWriter) content(e *rootfs.Entry) error {
	f, err := w.tree.Open(e.Path)
	if err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	defer f.Close()
	r := &tarCtxReader{ctx: w.ctx, r: f}
	n, err := io.CopyBuffer(w.tw, io.LimitReader(r, e.Size), w.buf)
	if err != nil {
		return fmt.Errorf("tar: %s: %w", e.Path, err)
	}
	if n < e.Size {
		return fmt.Errorf("tar: %s: file has %d bytes, the index says %d", e.Path, n, e.Size)
	}
	if m, _ := f.Read(w.buf[:1]); m > 0 {
		return fmt.Errorf("tar: %s: file is longer than the %d bytes the index says", e.Path, e.Size)
	}
	return nil
}

// tarName is the member name of the tree path p: "./" for the root, a
// trailing slash for directories, as GNU tar writes for "tar -C root .".
func tarName(p string, dir bool) string {
	if p == "/" {
		return "./"
	}
	if dir {
		return "." + p + "/"
	}
	return "." + p
}

// tarMTime truncates to whole seconds. An unset time becomes the Unix epoch
// rather than year 1, which tar can only express in a PAX record and few
// tools read back.
func tarMTime(t time.Time) time.Time {
	if t.IsZero() {
		return time.Unix(0, 0).UTC()
	}
	return time.Unix(t.Unix(), 0).UTC()
}

// ReadTar reads a tar stream, compressed or not (the compression is
// detected), back into the read-only view of a tree (see rootfs.SealedOf).
//
// Names are normalised to clean absolute paths, so "./etc/passwd",
// "etc/passwd" and "/etc/passwd" all read as "/etc/passwd"; a name with a ".."
// component is an error. Hard links share the *rootfs.Inode of their target.
// File contents are hashed into Inode.Digest and not kept. A later member at
// the same path replaces an earlier one, as extraction would. Origin.Member is
// the name as the archive spells it. Only what the archive holds is returned:
// missing parent directories are not made up.
func ReadTar(ctx context.Context, r io.Reader) (*rootfs.Sealed, error) {
	rc, _, err := compress.NewReaderAuto(r)
	if err != nil {
		return nil, fmt.Errorf("tar: %w", err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	byPath := map[string]*rootfs.Entry{}
	buf := make([]byte, 256<<10)
	last := "start of archive"
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("tar: after %s: %w", last, err)
		}
		last = fmt.Sprintf("%q", hdr.Name)
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		e, err := tarEntry(ctx, hdr, tr, byPath, buf)
		if err != nil {
			return nil, fmt.Errorf("tar: member %q: %w", hdr.Name, err)
		}
		if e != nil {
			byPath[e.Path] = e
		}
	}
	return sealedEntries(byPath)
}

// tarEntry makes the entry for one member. It returns nil for a hard link to
// itself, which changes nothing.
func tarEntry(ctx context.Context, hdr *tar.Header, tr io.Reader, byPath map[string]*rootfs.Entry, buf []byte) (*rootfs.Entry, error) {
	p, err := tarPath(hdr.Name)
	if err != nil {
		return nil, err
	}
	origin := rootfs.Origin{Member: hdr.Name}
	if hdr.Typeflag == tar.TypeLink {
		tp, err := tarPath(hdr.Linkname)
		if err != nil {
			return nil, fmt.Errorf("link target: %w", err)
		}
		target := byPath[tp]
		switch {
		case target == nil:
			return nil, fmt.Errorf("hard link to %q, which is not earlier in the archive", hdr.Linkname)
		case target.Type == rootfs.TypeDir:
			return nil, fmt.Errorf("hard link to directory %q", hdr.Linkname)
		case tp == p:
			return nil, nil
		}
		return &rootfs.Entry{Path: p, Inode: target.Inode, Origin: origin}, nil
	}
	if hdr.Uid < 0 || hdr.Uid > math.MaxUint32 || hdr.Gid < 0 || hdr.Gid > math.MaxUint32 {
		return nil, fmt.Errorf("owner %d:%d out of range", hdr.Uid, hdr.Gid)
	}
	in := &rootfs.Inode{
		Perm:  uint32(hdr.Mode & 07777),
		UID:   uint32(hdr.Uid),
		GID:   uint32(hdr.Gid),
		MTime: hdr.ModTime.UTC(),
	}
	if tarIsSparse(hdr) {
		// A sparse member's holes read as zeros that cost nothing to
		// declare: a kilobyte could make us hash exabytes. Stamp never
		// writes sparse members, so refusing them loses nothing.
		return nil, errors.New("sparse members are not supported")
	}
	switch hdr.Typeflag {
	case tar.TypeReg, '\x00', tar.TypeCont:
		in.Type = rootfs.TypeRegular
		h := sha256.New()
		n, err := io.CopyBuffer(h, &tarCtxReader{ctx: ctx, r: tr}, buf)
		if err != nil {
			return nil, err
		}
		in.Size, in.Digest = n, hex.EncodeToString(h.Sum(nil))
	case tar.TypeDir:
		in.Type = rootfs.TypeDir
	case tar.TypeSymlink:
		if hdr.Linkname == "" {
			return nil, errors.New("symlink with empty target")
		}
		in.Type, in.Target = rootfs.TypeSymlink, hdr.Linkname
	case tar.TypeChar, tar.TypeBlock:
		in.Type = rootfs.TypeChar
		if hdr.Typeflag == tar.TypeBlock {
			in.Type = rootfs.TypeBlock
		}
		if hdr.Devmajor < 0 || hdr.Devmajor > math.MaxUint32 || hdr.Devminor < 0 || hdr.Devminor > math.MaxUint32 {
			return nil, fmt.Errorf("device number %d,%d out of range", hdr.Devmajor, hdr.Devminor)
		}
		in.Major, in.Minor = uint32(hdr.Devmajor), uint32(hdr.Devminor)
	case tar.TypeFifo:
		in.Type = rootfs.TypeFifo
	default:
		return nil, fmt.Errorf("unsupported member type %q", hdr.Typeflag)
	}
	for k, v := range hdr.PAXRecords {
		if name, ok := strings.CutPrefix(k, tarXattrPrefix); ok && name != "" {
			if in.Xattrs == nil {
				in.Xattrs = map[string]string{}
			}
			in.Xattrs[name] = v
		}
	}
	return &rootfs.Entry{Path: p, Inode: in, Origin: origin}, nil
}

// tarIsSparse reports whether hdr is a GNU sparse member, in the old GNU
// form or as PAX records.
func tarIsSparse(hdr *tar.Header) bool {
	if hdr.Typeflag == tar.TypeGNUSparse {
		return true
	}
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "GNU.sparse.") {
			return true
		}
	}
	return false
}

// tarPath turns a member name into a clean absolute tree path.
func tarPath(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty name")
	}
	var b strings.Builder
	for c := range strings.SplitSeq(name, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			return "", fmt.Errorf("name %q has a .. component", name)
		}
		b.WriteByte('/')
		b.WriteString(c)
	}
	if b.Len() == 0 {
		return "/", nil
	}
	if b.Len() > rootfs.PathMax {
		return "", fmt.Errorf("name longer than PATH_MAX (%d bytes)", rootfs.PathMax)
	}
	return b.String(), nil
}

// tarCtxReader stops a long copy when the context is cancelled.
type tarCtxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r *tarCtxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.Read(p)
}

// TarSpec is a tar output's options.
type TarSpec struct {
	// Compression is that of the whole file; "" is none.
	Compression compress.Algorithm
}

// tarFormat is "format: tar": the tree as one canonical tar.
type tarFormat struct{}

func (tarFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	o, err := optionsOf[TarSpec](spec)
	if err != nil {
		return nil, err
	}
	alg := o.Compression
	if alg == "" {
		alg = compress.None
	}
	name := base + ".tar" + alg.Ext()
	var skipped []string
	var sum [sha256.Size]byte
	err = writeFile(filepath.Join(dir, name), func(f *os.File) error {
		// Writing and hashing happen behind the walk, which spends its own
		// time reading the tree's files.
		hw := hashio.NewWriter(f)
		err := WriteTar(ctx, src.Tree, hw, TarOptions{Compression: alg, Skipped: &skipped})
		if cerr := hw.Close(); err == nil {
			err = cerr
		}
		sum = hw.Sum()
		return err
	})
	if err != nil {
		return nil, err
	}
	res := &Result{Files: []string{name}, Sums: map[string]string{name: hex.EncodeToString(sum[:])}}
	for _, p := range skipped {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s: a socket cannot be stored in a tar; left out", p))
	}
	return res, nil
}
