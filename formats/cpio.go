package formats

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/u-root/u-root/pkg/cpio"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// XattrListPath is where a cpio archive lists the xattrs of its entries. The
// kernel's initramfs unpacker ignores xattrs, so they travel as a file in
// the format of "getfattr --dump" (paths relative to the root, values in
// base64), which "setfattr -h --restore" run from the root puts back. The
// live init of the pxe format does exactly that.
const XattrListPath = "/.stamp-xattrs"

// cpioMaxSize is the first size newc cannot store: its size field is 32 bits.
const cpioMaxSize = 1 << 32

// CpioOptions configure WriteCpio. The zero value writes an uncompressed
// archive of the tree alone.
type CpioOptions struct {
	Compression compress.Algorithm
	// Extra are files the format adds beyond the tree (an /init); they are
	// merged into the archive in path order. Their directories must be in
	// the tree, and their paths must not be.
	Extra []CpioFile
	// MTime is the mtime of the entries the archive adds: Extra and the
	// xattr list. Use the build's epoch.
	MTime time.Time
	// XattrFiles, when set, gets the path of every entry whose xattrs reach
	// the image only through the list at XattrListPath.
	XattrFiles *[]string
	// Adds, when set, gets a manifest line for every entry the archive holds
	// beyond the tree.
	Adds *[]string
	// Split writes a compressed archive as a series of complete archives,
	// each compressed on its own (writeCpioSplit), so that every core
	// compresses. The kernel's initramfs unpacker reads the series as it
	// reads one archive; GNU cpio and bsdtar stop at the first trailer, so
	// only an initramfs is split.
	Split bool
	// Parts, for a split archive, supplies parts compressed before
	// (PartStore); Filed, when set, gets every part, its File left "".
	Parts PartStore
	Filed *[]FilePart
	// partSize and workers, when not 0, replace cpioPartSize and the
	// number of cores of a split archive (for tests: neither changes what
	// the kernel unpacks, and workers never changes a byte).
	partSize int64
	workers  int
}

// CpioFile is a regular file, owned by root, that an archive adds.
type CpioFile struct {
	Path    string
	Perm    uint32
	Content []byte
}

// WriteCpio writes the tree as a newc cpio archive, the format of a Linux
// initramfs: the same tree always gives the same bytes.
//
// Entries come in byte order of path, named "." for the root and without a
// leading slash otherwise. Owners, permission bits (setuid, setgid, sticky
// included) and mtimes are the index's; inode numbers count up from 1 in
// path order; link counts are real (2 plus subdirectories for a directory,
// the number of paths for a hard-linked file). The paths of a hard-link group
// share an inode number and only the last carries the data, which is how GNU
// cpio and the kernel rebuild the link. xz streams use CRC32 checks, the only
// ones the kernel's decoder accepts. When entries carry xattrs, the archive
// also holds the list at XattrListPath.
//
// Sizes are checked before anything is written: newc cannot store a file of
// 4 GiB or more, nor an mtime outside 1970..2106.
func WriteCpio(ctx context.Context, t *rootfs.Sealed, w io.Writer, o CpioOptions) error {
	items := make([]cpioItem, 0, t.Len()+len(o.Extra)+1)
	t.Walk(func(e *rootfs.Entry) error {
		items = append(items, cpioItem{path: e.Path, in: e.Inode, tree: t})
		return nil
	})
	list, xfiles := cpioXattrList(items)
	extra := o.Extra
	if len(list) > 0 {
		extra = append([]CpioFile{{Path: XattrListPath, Perm: 0o644, Content: list}}, extra...)
	}
	var adds []string
	for _, f := range extra {
		if t.Get(f.Path) != nil {
			return fmt.Errorf("cpio: %s: the tree already holds this path, which the archive adds", f.Path)
		}
		// The kernel's unpacker makes no missing directories.
		if d := t.Get(path.Dir(f.Path)); d == nil || d.Type != rootfs.TypeDir {
			return fmt.Errorf("cpio: %s: the tree has no directory %s for this added file", f.Path, path.Dir(f.Path))
		}
		it := cpioGenerated(f, o.MTime)
		items = append(items, it)
		adds = append(adds, rootfs.ManifestLine(&rootfs.Entry{Path: it.path, Inode: it.in}, nil, false))
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].path < items[j].path })
	write := writeCpioItems
	if o.Split && o.Compression != compress.None && o.Compression != "" {
		write = func(ctx context.Context, w io.Writer, alg compress.Algorithm, items []cpioItem) error {
			return writeCpioSplit(ctx, w, alg, items, o.workers, o.partSize, o.Parts, o.Filed)
		}
	}
	if err := write(ctx, w, o.Compression, items); err != nil {
		return err
	}
	if o.XattrFiles != nil {
		*o.XattrFiles = append(*o.XattrFiles, xfiles...)
	}
	if o.Adds != nil {
		sort.Strings(adds)
		*o.Adds = append(*o.Adds, adds...)
	}
	return nil
}

// cpioItem is one archive entry: a tree entry, or one the format makes.
type cpioItem struct {
	path string
	in   *rootfs.Inode
	data []byte         // content of a generated file
	tree *rootfs.Sealed // otherwise the content is read from tree at src
	src  string         // "" means path
}

// cpioGenerated makes the item of a file a format adds.
func cpioGenerated(f CpioFile, mtime time.Time) cpioItem {
	sum := sha256.Sum256(f.Content)
	in := &rootfs.Inode{Type: rootfs.TypeRegular, Perm: f.Perm & 07777, MTime: mtime,
		Size: int64(len(f.Content)), Digest: hex.EncodeToString(sum[:])}
	return cpioItem{path: f.Path, in: in, data: f.Content}
}

var cpioTypeBits = map[rootfs.Type]uint64{
	rootfs.TypeRegular: cpio.S_IFREG,
	rootfs.TypeDir:     cpio.S_IFDIR,
	rootfs.TypeSymlink: cpio.S_IFLNK,
	rootfs.TypeChar:    cpio.S_IFCHR,
	rootfs.TypeBlock:   cpio.S_IFBLK,
	rootfs.TypeFifo:    cpio.S_IFIFO,
	rootfs.TypeSocket:  cpio.S_IFSOCK,
}

// writeCpioItems writes items, which must be sorted by path and unique, as
// one compressed newc archive.
func writeCpioItems(ctx context.Context, w io.Writer, alg compress.Algorithm, items []cpioItem) error {
	plan, err := planCpio(items)
	if err != nil {
		return err
	}
	// The record writer writes headers, names and padding in pieces of a
	// few bytes; the file or pipe below wants large ones.
	out := bufio.NewWriterSize(w, 1<<20)
	cw, err := compress.NewWriter(alg, out, compress.WriterOptions{XZCheckCRC32: true})
	if err != nil {
		return fmt.Errorf("cpio: %w", err)
	}
	if err := writeCpioRecords(ctx, cpio.Newc.Writer(cw), items, 0, len(items), plan, make([]byte, 1)); err != nil {
		return err
	}
	if err := cw.Close(); err != nil {
		return fmt.Errorf("cpio: %s: %w", alg, err)
	}
	if err := out.Flush(); err != nil {
		return fmt.Errorf("cpio: %w", err)
	}
	return nil
}

// writeCpioRecords writes items[start:end] and the trailer: an archive.
func writeCpioRecords(ctx context.Context, rw cpio.RecordWriter, items []cpioItem, start, end int, plan *cpioPlan, probe []byte) error {
	for i := start; i < end; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := writeCpioItem(ctx, rw, &items[i], plan, i == plan.last[items[i].in], probe); err != nil {
			return fmt.Errorf("cpio: %s: %w", items[i].path, err)
		}
	}
	// GNU cpio's trailer, link count included.
	if err := rw.WriteRecord(cpio.Record{Info: cpio.Info{Name: cpio.Trailer, NLink: 1}}); err != nil {
		return fmt.Errorf("cpio: trailer: %w", err)
	}
	return nil
}

// cpioPlan is what the header of each item needs from the whole archive.
type cpioPlan struct {
	ino     map[*rootfs.Inode]uint64
	links   map[*rootfs.Inode]uint32 // paths per inode in this archive
	last    map[*rootfs.Inode]int    // index of the last path of each inode
	subdirs map[string]uint32        // directories directly under each path
}

// planCpio numbers the inodes in path order and counts links. It also checks
// every limit of the format, so nothing is written for an archive that
// cannot be complete.
func planCpio(items []cpioItem) (*cpioPlan, error) {
	p := &cpioPlan{ino: map[*rootfs.Inode]uint64{}, links: map[*rootfs.Inode]uint32{},
		last: map[*rootfs.Inode]int{}, subdirs: map[string]uint32{}}
	for i, it := range items {
		if i > 0 && items[i-1].path >= it.path {
			return nil, fmt.Errorf("cpio: entries out of order or repeated at %s", it.path)
		}
		if _, ok := cpioTypeBits[it.in.Type]; !ok {
			return nil, fmt.Errorf("cpio: %s: cannot store a %s", it.path, it.in.Type)
		}
		if it.in.Type == rootfs.TypeRegular && it.in.Size >= cpioMaxSize {
			return nil, fmt.Errorf("cpio: %s: %d bytes; newc stores sizes in 32 bits, so a file of 4 GiB or more cannot be archived", it.path, it.in.Size)
		}
		if m := cpioMTime(it.in.MTime); m < 0 || m > math.MaxUint32 {
			return nil, fmt.Errorf("cpio: %s: mtime %d is outside what newc stores (0 to %d)", it.path, m, uint64(math.MaxUint32))
		}
		if _, ok := p.ino[it.in]; !ok {
			p.ino[it.in] = uint64(len(p.ino) + 1)
		}
		p.links[it.in]++
		p.last[it.in] = i
		if it.in.Type == rootfs.TypeDir && it.path != "/" {
			p.subdirs[path.Dir(it.path)]++
		}
	}
	return p, nil
}

// cpioHeader is the record of an item as the archive holds it, without
// its content: last says whether the item is the path of its inode that
// carries the data.
func cpioHeader(it *cpioItem, plan *cpioPlan, last bool) cpio.Record {
	in := it.in
	rec := cpio.Record{Info: cpio.Info{
		Ino:   plan.ino[in],
		Mode:  cpioTypeBits[in.Type] | uint64(in.Perm&07777),
		UID:   uint64(in.UID),
		GID:   uint64(in.GID),
		NLink: uint64(plan.links[in]),
		MTime: uint64(cpioMTime(in.MTime)),
		Name:  it.path,
	}}
	switch in.Type {
	case rootfs.TypeDir:
		rec.NLink = 2 + uint64(plan.subdirs[it.path])
	case rootfs.TypeSymlink:
		rec.FileSize = uint64(len(in.Target))
	case rootfs.TypeChar, rootfs.TypeBlock:
		rec.Rmajor, rec.Rminor = uint64(in.Major), uint64(in.Minor)
	case rootfs.TypeRegular:
		// GNU cpio and the kernel link the earlier paths of a group to
		// the file the last one fills.
		if last {
			rec.FileSize = uint64(in.Size)
		}
	}
	return rec
}

func writeCpioItem(ctx context.Context, rw cpio.RecordWriter, it *cpioItem, plan *cpioPlan, last bool, probe []byte) error {
	in := it.in
	rec := cpioHeader(it, plan, last)
	switch {
	case in.Type == rootfs.TypeSymlink:
		rec.ReaderAt = strings.NewReader(in.Target)
	case in.Type == rootfs.TypeRegular && last:
		if it.tree == nil {
			rec.ReaderAt = bytes.NewReader(it.data)
			break
		}
		src := it.src
		if src == "" {
			src = it.path
		}
		f, err := it.tree.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		rec.ReaderAt = io.NewSectionReader(&ctxReaderAt{ctx: ctx, r: f}, 0, in.Size)
		if err := rw.WriteRecord(rec); err != nil {
			return err
		}
		// A file changed behind the index would make the archive disagree
		// with the manifest.
		if n, _ := f.ReadAt(probe, in.Size); n > 0 {
			return fmt.Errorf("file is longer than the %d bytes the index says", in.Size)
		}
		return nil
	}
	return rw.WriteRecord(rec)
}

// cpioMTime is t in seconds; an unset time is the Unix epoch, as in tar.
func cpioMTime(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

// ctxReaderAt stops a long copy when the context is cancelled.
type ctxReaderAt struct {
	ctx context.Context
	r   io.ReaderAt
}

func (r *ctxReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	return r.r.ReadAt(p, off)
}

// cpioXattrList returns the xattr list of items in "getfattr --dump" form,
// and the paths it names. A hard-link group is named by its first path.
func cpioXattrList(items []cpioItem) ([]byte, []string) {
	var b bytes.Buffer
	var paths []string
	seen := map[*rootfs.Inode]bool{}
	for _, it := range items {
		if len(it.in.Xattrs) == 0 || seen[it.in] {
			continue
		}
		seen[it.in] = true
		paths = append(paths, it.path)
		rel := "."
		if it.path != "/" {
			rel = it.path[1:]
		}
		b.WriteString("# file: " + rootfs.Escape(rel) + "\n")
		for _, name := range it.in.XattrNames() {
			b.WriteString(rootfs.Escape(name) + "=0s" + base64.StdEncoding.EncodeToString([]byte(it.in.Xattrs[name])) + "\n")
		}
		b.WriteString("\n")
	}
	return b.Bytes(), paths
}

// parseXattrList reads a list in "getfattr --dump" form into path -> name ->
// value, paths made absolute.
func parseXattrList(data []byte) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	var cur map[string]string
	for n, line := range strings.Split(string(data), "\n") {
		switch {
		case line == "":
			cur = nil
		case strings.HasPrefix(line, "# file: "):
			p, err := rootfs.Unescape(line[len("# file: "):])
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
			p, err = tarPath(p)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
			if out[p] == nil {
				out[p] = map[string]string{}
			}
			cur = out[p]
		case strings.HasPrefix(line, "#"):
		case cur == nil:
			return nil, fmt.Errorf("line %d: an xattr before any \"# file:\" line", n+1)
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				return nil, fmt.Errorf("line %d: no '=' in %q", n+1, line)
			}
			name, err := rootfs.Unescape(k)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", n+1, err)
			}
			val, err := xattrValue(v)
			if err != nil {
				return nil, fmt.Errorf("line %d: %s: %w", n+1, name, err)
			}
			cur[name] = val
		}
	}
	return out, nil
}

// xattrValue decodes a value as getfattr writes one: 0s base64, 0x hex or a
// quoted string.
func xattrValue(v string) (string, error) {
	switch {
	case strings.HasPrefix(v, "0s") || strings.HasPrefix(v, "0S"):
		b, err := base64.StdEncoding.DecodeString(v[2:])
		return string(b), err
	case strings.HasPrefix(v, "0x") || strings.HasPrefix(v, "0X"):
		b, err := hex.DecodeString(v[2:])
		return string(b), err
	case len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"':
		return rootfs.Unescape(v[1 : len(v)-1])
	}
	return "", fmt.Errorf("value %q is neither 0s, 0x nor quoted", v)
}

// maxXattrList bounds the xattr list a reader keeps in memory.
const maxXattrList = 64 << 20

// ReadCpio reads a newc cpio stream, compressed or not (the compression is
// detected), back into the read-only view of a tree (see rootfs.SealedOf)
// and, when the archive holds one, its xattr list. Several
// archives one after another, as the kernel accepts them, are read in turn
// when they are all in one stream: uncompressed, or compressed streams of one
// algorithm back to back (zero padding is only skipped between uncompressed
// archives).
//
// Names are made clean absolute paths ("." is "/"); a name with a ".."
// component is an error. Hard links (the same inode number within one
// archive) share the *rootfs.Inode. File contents are hashed into
// Inode.Digest and not kept. A later entry at the same path replaces an
// earlier one, as the kernel's unpacker does. When the archive holds the
// list at XattrListPath, the xattrs it names are put back on the entries it
// names, and the list is returned as an entry of its own: it is the
// format's way of carrying xattrs, not part of the tree.
func ReadCpio(ctx context.Context, r io.Reader) (tree *rootfs.Sealed, xattrList *rootfs.Entry, err error) {
	rc, _, err := compress.NewReaderAuto(r)
	if err != nil {
		return nil, nil, fmt.Errorf("cpio: %w", err)
	}
	defer rc.Close()
	cr := &cpioReader{ctx: ctx, br: bufio.NewReaderSize(rc, 1<<20), byPath: map[string]*rootfs.Entry{}, buf: make([]byte, 256<<10)}
	for archive := 0; ; archive++ {
		more, err := cr.skipPadding()
		if err != nil {
			return nil, nil, fmt.Errorf("cpio: %w", err)
		}
		if !more {
			if archive == 0 {
				return nil, nil, errors.New("cpio: empty archive")
			}
			break
		}
		if err := cr.readArchive(); err != nil {
			return nil, nil, fmt.Errorf("cpio: archive %d: %w", archive+1, err)
		}
	}
	if cr.xattrs != nil {
		list, err := parseXattrList(cr.xattrs)
		if err != nil {
			return nil, nil, fmt.Errorf("cpio: %s: %w", XattrListPath, err)
		}
		names := make([]string, 0, len(list))
		for p := range list {
			names = append(names, p)
		}
		sort.Strings(names)
		for _, p := range names {
			e := cr.byPath[p]
			if e == nil {
				return nil, nil, fmt.Errorf("cpio: %s names %s, which the archive does not hold", XattrListPath, p)
			}
			if e.Xattrs == nil {
				e.Xattrs = map[string]string{}
			}
			for k, v := range list[p] {
				e.Xattrs[k] = v
			}
		}
	}
	if xattrList = cr.byPath[XattrListPath]; xattrList != nil {
		delete(cr.byPath, XattrListPath)
		rootfs.SetNlink([]*rootfs.Entry{xattrList})
	}
	if tree, err = sealedEntries(cr.byPath); err != nil {
		return nil, nil, fmt.Errorf("cpio: %w", err)
	}
	return tree, xattrList, nil
}

type cpioReader struct {
	ctx    context.Context
	br     *bufio.Reader
	byPath map[string]*rootfs.Entry
	xattrs []byte
	buf    []byte
}

// skipPadding skips the NUL bytes between archives and reports whether
// another archive follows.
func (cr *cpioReader) skipPadding() (bool, error) {
	for {
		c, err := cr.br.ReadByte()
		if err == io.EOF {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if c != 0 {
			return true, cr.br.UnreadByte()
		}
	}
}

// readArchive reads one archive up to its trailer.
func (cr *cpioReader) readArchive() error {
	fr := &forwardReaderAt{r: cr.br}
	rr := cpio.Newc.Reader(fr)
	// Inode numbers only mean something within one archive, and within one
	// device of it.
	links := map[cpioLinkKey]*rootfs.Inode{}
	last := "start of archive"
	for {
		if err := cr.ctx.Err(); err != nil {
			return err
		}
		if err := fr.checkHeader(); err != nil {
			return fmt.Errorf("after %s: %w", last, err)
		}
		rec, err := rr.ReadRecord()
		if err == io.EOF && !fr.eof {
			return nil // the trailer
		}
		if err == io.EOF {
			err = errors.New("the archive ends without a trailer")
		}
		if err != nil {
			return fmt.Errorf("after %s: %w", last, err)
		}
		last = fmt.Sprintf("%q", rec.Name)
		e, err := cr.entry(rec, links)
		if err != nil {
			return fmt.Errorf("entry %q: %w", rec.Name, err)
		}
		if e != nil {
			cr.byPath[e.Path] = e
		}
	}
}

// entry makes the entry of one record, reading its content.
// cpioLinkKey identifies an inode within one archive.
type cpioLinkKey struct{ major, minor, ino uint64 }

func (cr *cpioReader) entry(rec cpio.Record, links map[cpioLinkKey]*rootfs.Inode) (*rootfs.Entry, error) {
	p, err := tarPath(rec.Name)
	if err != nil {
		return nil, err
	}
	if rec.UID > math.MaxUint32 || rec.GID > math.MaxUint32 {
		return nil, fmt.Errorf("owner %d:%d out of range", rec.UID, rec.GID)
	}
	typ, err := cpioType(rec.Mode)
	if err != nil {
		return nil, err
	}
	origin := rootfs.Origin{Member: rec.Name}
	content := io.NewSectionReader(rec.ReaderAt, 0, int64(rec.FileSize))
	key := cpioLinkKey{rec.Major, rec.Minor, rec.Ino}
	if typ != rootfs.TypeDir && rec.NLink > 1 {
		if in := links[key]; in != nil {
			if in.Type != typ {
				return nil, fmt.Errorf("shares inode %d with an entry of type %s", rec.Ino, in.Type)
			}
			// The data of a hard-link group comes with one of its paths,
			// the last as GNU cpio and stamp write it.
			if typ == rootfs.TypeRegular && rec.FileSize > 0 {
				if err := cr.hash(in, content, p); err != nil {
					return nil, err
				}
			}
			return &rootfs.Entry{Path: p, Inode: in, Origin: origin}, nil
		}
	}
	in := &rootfs.Inode{
		Type:  typ,
		Perm:  uint32(rec.Mode & 07777),
		UID:   uint32(rec.UID),
		GID:   uint32(rec.GID),
		MTime: time.Unix(int64(rec.MTime), 0).UTC(),
	}
	switch typ {
	case rootfs.TypeRegular:
		if err := cr.hash(in, content, p); err != nil {
			return nil, err
		}
	case rootfs.TypeSymlink:
		if rec.FileSize == 0 || rec.FileSize > rootfs.PathMax {
			return nil, fmt.Errorf("symlink target of %d bytes", rec.FileSize)
		}
		target := make([]byte, rec.FileSize)
		if _, err := io.ReadFull(content, target); err != nil {
			return nil, err
		}
		in.Target = string(target)
	case rootfs.TypeChar, rootfs.TypeBlock:
		if rec.Rmajor > math.MaxUint32 || rec.Rminor > math.MaxUint32 {
			return nil, fmt.Errorf("device number %d,%d out of range", rec.Rmajor, rec.Rminor)
		}
		in.Major, in.Minor = uint32(rec.Rmajor), uint32(rec.Rminor)
	}
	if typ != rootfs.TypeDir && rec.NLink > 1 {
		links[key] = in
	}
	return &rootfs.Entry{Path: p, Inode: in, Origin: origin}, nil
}

// hash reads a file's content into in's size and digest; the xattr list is
// kept as well.
func (cr *cpioReader) hash(in *rootfs.Inode, r *io.SectionReader, p string) error {
	h := sha256.New()
	var w io.Writer = h
	var list bytes.Buffer
	if p == XattrListPath {
		if r.Size() > maxXattrList {
			return fmt.Errorf("xattr list larger than %d bytes", maxXattrList)
		}
		w = io.MultiWriter(h, &list)
	}
	n, err := io.CopyBuffer(w, &tarCtxReader{ctx: cr.ctx, r: r}, cr.buf)
	if err != nil {
		return err
	}
	if n != r.Size() {
		return fmt.Errorf("content ends after %d of %d bytes", n, r.Size())
	}
	if p == XattrListPath {
		cr.xattrs = list.Bytes()
	}
	in.Size, in.Digest = n, hex.EncodeToString(h.Sum(nil))
	return nil
}

func cpioType(mode uint64) (rootfs.Type, error) {
	switch mode & cpio.S_IFMT {
	case cpio.S_IFREG:
		return rootfs.TypeRegular, nil
	case cpio.S_IFDIR:
		return rootfs.TypeDir, nil
	case cpio.S_IFLNK:
		return rootfs.TypeSymlink, nil
	case cpio.S_IFCHR:
		return rootfs.TypeChar, nil
	case cpio.S_IFBLK:
		return rootfs.TypeBlock, nil
	case cpio.S_IFIFO:
		return rootfs.TypeFifo, nil
	case cpio.S_IFSOCK:
		return rootfs.TypeSocket, nil
	}
	return 0, fmt.Errorf("unsupported file type %#o", mode&cpio.S_IFMT)
}

// forwardReaderAt lets u-root's record reader, which wants an io.ReaderAt,
// read a stream: offsets only ever move forward, and the bytes in between
// (padding, content nobody read) are skipped.
type forwardReaderAt struct {
	r   *bufio.Reader
	pos int64
	eof bool // the stream ended
}

// newc header layout: the magic, then 13 fields of 8 hex digits; the name
// size is the twelfth.
const (
	cpioHeaderLen  = 6 + 13*8
	cpioNameSizeAt = 6 + 11*8
)

// checkHeader looks at the next record's header before u-root's reader
// does: it allocates whatever name size the header claims, so a few bytes
// of a hostile archive could ask for gigabytes.
func (f *forwardReaderAt) checkHeader() error {
	skip := int(((f.pos + 3) &^ 3) - f.pos)
	head, err := f.r.Peek(skip + cpioHeaderLen)
	if err != nil {
		return nil // too short to be a header; the reader says so
	}
	field := head[skip+cpioNameSizeAt : skip+cpioNameSizeAt+8]
	n, err := strconv.ParseUint(string(field), 16, 32)
	if err != nil {
		return nil // not hex; the reader says so
	}
	if n > rootfs.PathMax+1 {
		return fmt.Errorf("a name of %d bytes, longer than PATH_MAX", n)
	}
	return nil
}

func (f *forwardReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < f.pos {
		return 0, fmt.Errorf("cpio reader went back from offset %d to %d", f.pos, off)
	}
	if off > f.pos {
		n, err := f.r.Discard(int(off - f.pos))
		f.pos += int64(n)
		if err != nil {
			f.eof = err == io.EOF
			return 0, err
		}
	}
	n, err := io.ReadFull(f.r, p)
	f.pos += int64(n)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		f.eof = true
		return n, io.EOF
	}
	return n, err
}

// CpioSpec is a cpio output's options.
type CpioSpec struct {
	// Compression is that of the whole file; "" is zstd.
	Compression compress.Algorithm
}

// cpioFormat is "format: cpio": the whole tree as an initramfs.
type cpioFormat struct{}

// ViewAdditions implements ViewAdder.
func (cpioFormat) ViewAdditions() []ViewAddition {
	return []ViewAddition{{Path: XattrListPath, When: "entries carry xattrs the kernel's unpacker drops"}}
}

func (cpioFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	o, err := optionsOf[CpioSpec](spec)
	if err != nil {
		return nil, err
	}
	alg := cpioCompression(o.Compression)
	name := base + ".cpio" + alg.Ext()
	res := &Result{Files: []string{name}}
	var xfiles []string
	err = writeFile(filepath.Join(dir, name), func(f *os.File) error {
		return WriteCpio(ctx, src.Tree, f, CpioOptions{Compression: alg, MTime: src.Epoch,
			XattrFiles: &xfiles, Adds: &res.Adds})
	})
	if err != nil {
		return nil, err
	}
	for _, p := range xfiles {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s: the kernel's initramfs unpacker drops xattrs; they are listed in %s for \"setfattr -h --restore\" (the pxe live init does this)", p, XattrListPath))
	}
	return res, nil
}

// cpioCompression is the compression of an initramfs: zstd unless the
// recipe says otherwise, since every kernel stamp boots decodes it quickly.
func cpioCompression(alg compress.Algorithm) compress.Algorithm {
	if alg == "" {
		return compress.Zstd
	}
	return alg
}
