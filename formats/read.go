package formats

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/stamp-dev/stamp/disk/qcow2"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// Image is an output read back without mounting it: the tree it carries and
// whatever structure the format wraps around the tree.
type Image struct {
	Path   string
	Format string // the format's name as a recipe spells it: "tar", "raw", ...
	// Compression is that of the whole file (tar, cpio); None for formats
	// that compress inside (qcow2, OCI layers).
	Compression compress.Algorithm
	Size        int64
	// Entries is the tree the image carries, in byte order of path; hard
	// links share an *rootfs.Inode and regular files carry their sha256.
	Entries []*rootfs.Entry
	// Extra are entries the format adds beyond the tree (lost+found, ESP
	// files, an initramfs /init), named as Entries are but outside the tree's
	// comparison. Extra paths carry a prefix naming where they live, e.g.
	// "esp:/EFI/BOOT/BOOTX64.EFI".
	Extra []*rootfs.Entry
	// Record is the embedded record (rootfs.RecordPath) as stored, nil when
	// the image has none.
	Record []byte
	// Complete says Entries hold every field the tree digest covers, so the
	// digest recomputed from them must equal the record's, unless the tree
	// held entries of a type in Cannot.
	Complete bool
	// Cannot lists the entry types the format cannot carry (a tar holds no
	// sockets); such entries of the tree are missing from Entries.
	Cannot []rootfs.Type
	// Partitions is a disk's partition table; empty for archives.
	Partitions []Partition
	// Filesystems summarise what each partition holds.
	Filesystems []Filesystem
	// Facts are named values of the format's own structure (GPT GUIDs,
	// superblock fields, OCI digests), in the order the reader met them.
	Facts []Fact
	// Regions name byte ranges so that an offset can be placed. Offsets are
	// in the stream Plain names (see OpenPlain).
	Regions []Region
	// Plain names the stream Regions are measured in: "" for the file
	// itself, PlainDecompressed, PlainGuestDisk.
	Plain string
}

// Partition is one entry of a disk's partition table.
type Partition struct {
	Index      int // 1-based, as the table numbers it
	Name       string
	Type       string // type GUID or a well-known name
	GUID       string
	Start      int64 // bytes
	Size       int64 // bytes
	Filesystem string
}

// Filesystem summarises one filesystem of an image.
type Filesystem struct {
	Partition int    // 0 when the image is not a disk
	Type      string // ext4, vfat, ...
	Label     string
	UUID      string
	Size      int64
	Files     int
	Facts     []Fact
}

// Fact is one named value of an image's structure.
type Fact struct{ Key, Value string }

// Region is a named byte range of an image. A region made of equal items
// (an inode table) names the item an offset falls in.
type Region struct {
	Name         string
	Offset, Size int64
	// Item names the items, ItemSize is their size and FirstItem the number
	// of the first; ItemSize 0 means the region is not divided.
	Item      string
	ItemSize  int64
	FirstItem int64
}

// Locate names the innermost region holding offset, "" when none does.
func (im *Image) Locate(offset int64) string {
	best := -1
	for i, r := range im.Regions {
		if offset >= r.Offset && offset < r.Offset+r.Size && (best < 0 || r.Size <= im.Regions[best].Size) {
			best = i
		}
	}
	if best < 0 {
		return ""
	}
	r := im.Regions[best]
	if r.ItemSize > 0 {
		n := r.FirstItem + (offset-r.Offset)/r.ItemSize
		return fmt.Sprintf("%s %d (byte %d of it) in %s", r.Item, n, (offset-r.Offset)%r.ItemSize, r.Name)
	}
	return r.Name
}

// Head is what detection looks at: the first bytes of a file, as stored and
// decompressed.
type Head struct {
	Path        string
	IsDir       bool
	Size        int64
	Compression compress.Algorithm
	Raw         []byte // up to HeadSize bytes as stored
	Plain       []byte // the same decompressed; Raw when not compressed
}

// HeadSize is how much of a file detection reads.
const HeadSize = 64 << 10

// Reader reads one output format back; each format's Entry in Table holds
// its reader.
type Reader interface {
	// Format is the format's name as a recipe spells it.
	Format() string
	// Match reports whether the file described by h is in this format.
	Match(h *Head) bool
	// Read reads the whole image.
	Read(ctx context.Context, h *Head) (*Image, error)
}

// Readers lists every format's reader in Table's detection order.
func Readers() []Reader {
	t := Table()
	out := make([]Reader, len(t))
	for i, e := range t {
		out[i] = e.Reader
	}
	return out
}

// ReadEntries detects the format of the file or directory at path and reads
// it back.
func ReadEntries(ctx context.Context, path string) (*Image, error) {
	h, err := ReadHead(path)
	if err != nil {
		return nil, err
	}
	for _, r := range Readers() {
		if r.Match(h) {
			im, err := r.Read(ctx, h)
			if err != nil {
				return nil, fmt.Errorf("%s: %s: %w", path, r.Format(), err)
			}
			return im, nil
		}
	}
	return nil, fmt.Errorf("%s: not an output format stamp can read", path)
}

// ReadHead reads the first bytes of path for detection.
func ReadHead(path string) (*Head, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	h := &Head{Path: path, IsDir: fi.IsDir(), Size: fi.Size(), Compression: compress.None}
	if h.IsDir {
		return h, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h.Raw = make([]byte, HeadSize)
	n, err := io.ReadFull(f, h.Raw)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	h.Raw = h.Raw[:n]
	h.Plain = h.Raw
	alg, _, err := compress.Detect(bytes.NewReader(h.Raw))
	if err != nil || alg == compress.None {
		// Undetectable compression (bzip2) is left for the readers to refuse.
		return h, nil
	}
	h.Compression = alg
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	rc, err := compress.NewReader(alg, f)
	if err != nil {
		return h, nil
	}
	defer rc.Close()
	plain := make([]byte, HeadSize)
	n, _ = io.ReadFull(rc, plain)
	h.Plain = plain[:n]
	return h, nil
}

// tarReader reads the canonical tar (and any other tar) back.
type tarReader struct{}

func (tarReader) Format() string { return "tar" }

func (tarReader) Match(h *Head) bool {
	// "ustar" at 257 is in POSIX, PAX and GNU headers alike.
	return !h.IsDir && len(h.Plain) >= 262 && string(h.Plain[257:262]) == "ustar"
}

func (tarReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	im := &Image{Path: h.Path, Format: "tar", Compression: h.Compression, Size: h.Size, Complete: true,
		Cannot: []rootfs.Type{rootfs.TypeSocket}}
	rc, err := compress.NewReader(h.Compression, f)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	entries, err := readTarRegions(ctx, rc, im)
	if err != nil {
		return nil, err
	}
	im.Entries = entries
	im.Filesystems = []Filesystem{{Type: "tar", Files: len(entries), Size: im.regionEnd()}}
	if h.Compression != compress.None {
		im.Plain = PlainDecompressed
	}
	return im, nil
}

func (im *Image) regionEnd() int64 {
	if len(im.Regions) == 0 {
		return 0
	}
	last := im.Regions[len(im.Regions)-1]
	return last.Offset + last.Size
}

// readTarRegions is ReadTar over an already decompressed stream that also
// notes where each member's header and data lie and keeps the embedded
// record's bytes. It shares tarEntry with ReadTar, so both read members the
// same way.
func readTarRegions(ctx context.Context, r io.Reader, im *Image) ([]*rootfs.Entry, error) {
	cr := &countingReader{r: r}
	tr := tar.NewReader(cr)
	byPath := map[string]*rootfs.Entry{}
	buf := make([]byte, 256<<10)
	last := "start of archive"
	var dataEnd int64
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hdrStart := (dataEnd + 511) &^ 511
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("tar: after %s: %w", last, err)
		}
		last = fmt.Sprintf("%q", hdr.Name)
		dataStart := cr.n
		im.Regions = append(im.Regions, Region{Name: fmt.Sprintf("tar member %s (header)", hdr.Name), Offset: hdrStart, Size: dataStart - hdrStart})
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			dataEnd = dataStart
			continue
		}
		var rec bytes.Buffer
		var body io.Reader = tr
		if p, err := tarPath(hdr.Name); err == nil && p == rootfs.RecordPath && hdr.Typeflag != tar.TypeLink && hdr.Size <= maxRecord {
			body = io.TeeReader(tr, &rec)
		}
		e, err := tarEntry(ctx, hdr, body, byPath, buf)
		if err != nil {
			return nil, fmt.Errorf("tar: member %q: %w", hdr.Name, err)
		}
		dataEnd = cr.n
		if dataEnd > dataStart {
			im.Regions = append(im.Regions, Region{Name: fmt.Sprintf("tar member %s (data)", hdr.Name), Offset: dataStart, Size: dataEnd - dataStart})
		}
		if e != nil {
			byPath[e.Path] = e
			if e.Path == rootfs.RecordPath {
				im.Record = nil
				if e.Type == rootfs.TypeRegular {
					im.Record = bytes.Clone(rec.Bytes())
				}
			}
		}
	}
	// The end-of-archive blocks and tar's padding to a record size.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return nil, fmt.Errorf("tar: after end of archive: %w", err)
	}
	if end := (dataEnd + 511) &^ 511; cr.n > end {
		im.Regions = append(im.Regions, Region{Name: "tar end of archive", Offset: end, Size: cr.n - end})
	}
	return sortedEntries(byPath), nil
}

// sortedEntries returns the entries of byPath in byte order of path with
// their link counts set.
func sortedEntries(byPath map[string]*rootfs.Entry) []*rootfs.Entry {
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	entries := make([]*rootfs.Entry, len(paths))
	for i, p := range paths {
		entries[i] = byPath[p]
	}
	rootfs.SetNlink(entries)
	return entries
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// maxRecord bounds the embedded record a reader keeps in memory.
const maxRecord = 256 << 20

// cpioImageReader reads a newc cpio archive (an initramfs) back with
// ReadCpio, and walks it once more to place each member and keep the record.
type cpioImageReader struct{}

func (cpioImageReader) Format() string { return "cpio" }

func (cpioImageReader) Match(h *Head) bool {
	return !h.IsDir && len(h.Plain) >= 6 && (string(h.Plain[:6]) == "070701" || string(h.Plain[:6]) == "070702")
}

func (cpioImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := ReadCpio(ctx, f)
	if err != nil {
		return nil, err
	}
	im := &Image{Path: h.Path, Format: "cpio", Compression: h.Compression, Size: h.Size, Complete: true}
	// The xattr list is the format's way of carrying xattrs, not part of
	// the tree: ReadCpio has already put them back on the entries.
	for _, e := range entries {
		if e.Path == XattrListPath {
			im.Extra = append(im.Extra, e)
		} else {
			im.Entries = append(im.Entries, e)
		}
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	rc, err := compress.NewReader(h.Compression, f)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if err := scanNewc(ctx, rc, im); err != nil {
		return nil, fmt.Errorf("cpio: %w", err)
	}
	im.Filesystems = []Filesystem{{Type: "cpio newc", Files: len(entries), Size: im.regionEnd()}}
	if h.Compression != compress.None {
		im.Plain = PlainDecompressed
	}
	return im, nil
}

// scanNewc walks a decompressed newc stream, archive after archive, noting
// where each member's header and data lie and keeping the record's bytes.
// ReadCpio has already checked the stream; this only measures it.
func scanNewc(ctx context.Context, r io.Reader, im *Image) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var off int64
	hdr := make([]byte, 110)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Archives may follow one another with zero padding in between.
		for {
			b, err := br.Peek(1)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if b[0] != 0 {
				break
			}
			br.Discard(1)
			off++
		}
		start := off
		if _, err := io.ReadFull(br, hdr); err != nil {
			return fmt.Errorf("header at %d: %w", start, err)
		}
		off += int64(len(hdr))
		field := func(i int) (int64, error) {
			return strconv.ParseInt(string(hdr[6+8*i:6+8*i+8]), 16, 64)
		}
		size, err1 := field(6)
		nameSize, err2 := field(11)
		if err1 != nil || err2 != nil || nameSize < 1 || nameSize > 4096 {
			return fmt.Errorf("bad header at %d", start)
		}
		name := make([]byte, nameSize)
		if _, err := io.ReadFull(br, name); err != nil {
			return fmt.Errorf("name at %d: %w", off, err)
		}
		off += nameSize
		pad := (4 - off%4) % 4
		if _, err := br.Discard(int(pad)); err != nil {
			return err
		}
		off += pad
		n := strings.TrimRight(string(name), "\x00")
		im.Regions = append(im.Regions, Region{Name: fmt.Sprintf("cpio member %s (header)", n), Offset: start, Size: off - start})
		if n == "TRAILER!!!" {
			continue
		}
		dataStart := off
		var body io.Writer = io.Discard
		var rec bytes.Buffer
		if p, err := tarPath(n); err == nil && p == rootfs.RecordPath && size <= maxRecord {
			body = &rec
		}
		if _, err := io.CopyN(body, br, size); err != nil {
			return fmt.Errorf("%s: data: %w", n, err)
		}
		off += size
		if size > 0 {
			im.Regions = append(im.Regions, Region{Name: fmt.Sprintf("cpio member %s (data)", n), Offset: dataStart, Size: size})
			if body == &rec {
				im.Record = rec.Bytes()
			}
		}
		pad = (4 - off%4) % 4
		if _, err := br.Discard(int(pad)); err != nil {
			return err
		}
		off += pad
	}
}

// ociImageReader reads an OCI layout, as a directory or an oci-archive,
// with ReadOCI. A rootfs image's entries are its layer's; a containerDisk's
// are the disk file's.
type ociImageReader struct{}

func (ociImageReader) Format() string { return "oci" }

func (ociImageReader) Match(h *Head) bool {
	if h.IsDir {
		_, err := os.Stat(filepath.Join(h.Path, "oci-layout"))
		return err == nil
	}
	if len(h.Plain) < 512 || string(h.Plain[257:262]) != "ustar" {
		return false
	}
	// An oci-archive is a tar whose first member is part of a layout; a
	// stamp tar of a tree starts with "./".
	first := strings.TrimPrefix(string(bytes.TrimRight(h.Plain[:100], "\x00")), "./")
	return first == "blobs/" || first == "oci-layout" || first == "index.json" || strings.HasPrefix(first, "blobs/sha256/")
}

func (ociImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	oi, err := ReadOCI(ctx, h.Path)
	if err != nil {
		return nil, err
	}
	im := &Image{Path: h.Path, Format: "oci", Compression: compress.None, Size: h.Size, Cannot: []rootfs.Type{rootfs.TypeSocket}}
	if h.IsDir {
		im.Size = 0
		filepath.WalkDir(h.Path, func(_ string, d os.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					im.Size += fi.Size()
				}
			}
			return nil
		})
	}
	cfg := sha256.Sum256(oi.Config)
	platform := oi.OS + "/" + oi.Arch
	if oi.Variant != "" {
		platform += "/" + oi.Variant
	}
	im.Facts = []Fact{
		{"oci.kind", oi.Kind},
		{"oci.manifest", oi.Digest},
		{"oci.config", "sha256:" + hex.EncodeToString(cfg[:])},
		{"oci.layer", oi.Layer.Digest + " " + oi.Layer.MediaType + " " + strconv.FormatInt(oi.Layer.Size, 10) + " bytes"},
		{"oci.platform", platform},
		{"oci.created", oi.Created.UTC().Format("2006-01-02T15:04:05Z")},
	}
	if oi.RefName != "" {
		im.Facts = append(im.Facts, Fact{"oci.ref.name", oi.RefName})
	}
	im.Entries = oi.Entries
	if oi.Kind == "containerdisk" {
		// The tree is on the disk inside the layer: read that disk, and
		// keep the layer's own entries as the format's.
		if err := readContainerDisk(ctx, oi, im); err != nil {
			return nil, err
		}
		im.Filesystems = append([]Filesystem{{Type: "oci layer", Files: len(oi.Entries), Size: oi.Layer.Size}}, im.Filesystems...)
		return im, nil
	}
	var layerRegions []Region
	if oi.Kind == "rootfs" {
		im.Complete = true
		if im.Record, layerRegions, err = ociRecord(ctx, h.Path, oi.Layer.Digest); err != nil {
			return nil, err
		}
	}
	if !h.IsDir {
		// Place offsets of an oci-archive: its members, and inside the
		// layer blob (uncompressed, as stamp writes it) the layer's members.
		if im.Regions, err = tarMemberRegions(h.Path); err != nil {
			return nil, err
		}
		blob := "oci-archive member blobs/sha256/" + strings.TrimPrefix(oi.Layer.Digest, "sha256:") + " (data)"
		for _, r := range im.Regions {
			if r.Name == blob && ociUncompressed(oi.Layer.MediaType) {
				for _, lr := range layerRegions {
					im.Regions = append(im.Regions, Region{Name: "layer " + lr.Name, Offset: r.Offset + lr.Offset, Size: lr.Size})
				}
				break
			}
		}
	}
	im.Filesystems = []Filesystem{{Type: "oci layer", Files: len(oi.Entries), Size: oi.Layer.Size}}
	return im, nil
}

// ociRecord reads the embedded record out of an image's layer, and where
// the layer's members lie in the decompressed layer.
func ociRecord(ctx context.Context, p, layer string) ([]byte, []Region, error) {
	s, err := openOCIStore(p)
	if err != nil {
		return nil, nil, err
	}
	defer s.Close()
	sr, closeBlob, err := s.blob(layer)
	if err != nil {
		return nil, nil, err
	}
	defer closeBlob()
	rc, _, err := compress.NewReaderAuto(sr)
	if err != nil {
		return nil, nil, err
	}
	defer rc.Close()
	var scratch Image
	if _, err := readTarRegions(ctx, rc, &scratch); err != nil {
		return nil, nil, fmt.Errorf("layer %s: %w", layer, err)
	}
	return scratch.Record, scratch.Regions, nil
}

// tarMemberRegions lists where the members of an uncompressed tar file
// lie, seeking over their data.
func tarMemberRegions(p string) ([]Region, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// archive/tar reads exactly the header blocks and seeks over data it
	// skips, so the file offset after Next is the member's data.
	tr := tar.NewReader(f)
	var out []Region
	var dataEnd int64
	for {
		hdrStart := (dataEnd + 511) &^ 511
		hdr, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		pos, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, err
		}
		out = append(out, Region{Name: "oci-archive member " + hdr.Name + " (header)", Offset: hdrStart, Size: pos - hdrStart})
		if hdr.Size > 0 {
			out = append(out, Region{Name: "oci-archive member " + hdr.Name + " (data)", Offset: pos, Size: hdr.Size})
		}
		dataEnd = pos + hdr.Size
	}
}

// readContainerDisk reads the raw or qcow2 disk a containerDisk carries,
// in place in its layer.
func readContainerDisk(ctx context.Context, oi *OCIImage, im *Image) error {
	dr, err := oi.OpenDisk(ctx)
	if err != nil {
		return err
	}
	defer dr.Close()
	var magic [4]byte
	if _, err := dr.ReadAt(magic[:], 0); err != nil {
		return fmt.Errorf("%s: %w", oi.Disk.Path, err)
	}
	var diskImage Image
	var r io.ReaderAt = dr
	size := dr.Size()
	if string(magic[:]) == "QFI\xfb" {
		q, err := qcow2.Open(dr)
		if err != nil {
			return fmt.Errorf("%s: %w", oi.Disk.Path, err)
		}
		r, size = q, q.Size()
	}
	if err := readDisk(ctx, r, size, &diskImage); err != nil {
		return fmt.Errorf("%s: %w", oi.Disk.Path, err)
	}
	for _, e := range oi.Entries {
		e.Path = "layer:" + e.Path
	}
	im.Extra = append(append(im.Extra, oi.Entries...), diskImage.Extra...)
	im.Entries, im.Record, im.Complete = diskImage.Entries, diskImage.Record, diskImage.Complete
	im.Partitions, im.Filesystems = diskImage.Partitions, diskImage.Filesystems
	im.Facts = append(im.Facts, diskImage.Facts...)
	sort.Slice(im.Extra, func(a, b int) bool { return im.Extra[a].Path < im.Extra[b].Path })
	return nil
}

// pxeImageReader reads a pxe bundle directory: the tree is in its
// initramfs, which also holds the live /init; the kernel, the script and
// the config are the bundle's own.
type pxeImageReader struct{}

func (pxeImageReader) Format() string { return "pxe" }

func (pxeImageReader) Match(h *Head) bool {
	if !h.IsDir {
		return false
	}
	_, err1 := os.Stat(filepath.Join(h.Path, PXEScript))
	_, err2 := os.Stat(filepath.Join(h.Path, PXEInitrd))
	return err1 == nil && err2 == nil
}

func (pxeImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	ih, err := ReadHead(filepath.Join(h.Path, PXEInitrd))
	if err != nil {
		return nil, err
	}
	if !(cpioImageReader{}).Match(ih) {
		return nil, fmt.Errorf("%s is not a cpio archive", PXEInitrd)
	}
	im, err := cpioImageReader{}.Read(ctx, ih)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", PXEInitrd, err)
	}
	im.Path, im.Format, im.Regions, im.Plain = h.Path, "pxe", nil, ""
	for _, e := range im.Extra {
		e.Path = "initrd:" + e.Path // the cpio reader's own (its xattr list)
	}
	// What the initramfs holds beyond the tree (the live /init) is the
	// bundle's: the record says which paths the tree had.
	if im.Record != nil {
		splitRecorded(im, "initrd")
	}
	for _, name := range []string{PXEKernel, PXEScript, PXELinuxCfg, PXESums} {
		sum, size, err := fileDigest(filepath.Join(h.Path, filepath.FromSlash(name)))
		if err != nil {
			return nil, err
		}
		im.Facts = append(im.Facts, Fact{"pxe." + name, fmt.Sprintf("sha256:%s %d bytes", sum, size)})
		im.Size += size
	}
	im.Size += ih.Size
	sort.Slice(im.Extra, func(a, b int) bool { return im.Extra[a].Path < im.Extra[b].Path })
	return im, nil
}

// holdsRecordPath reports whether p is the record or a directory above it,
// which the record cannot list.
func holdsRecordPath(p string) bool {
	return p == rootfs.RecordPath || strings.HasPrefix(rootfs.RecordPath, strings.TrimSuffix(p, "/")+"/")
}

func fileDigest(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("%s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
