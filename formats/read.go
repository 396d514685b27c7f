package formats

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

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
	// Tree is the tree the image carries, as the same read-only view a
	// build's writers take (rootfs.SealedOf): hard links share an
	// *rootfs.Inode and regular files carry their sha256, but no content is
	// unpacked, so its Open fails with rootfs.ErrNoContent.
	Tree *rootfs.Sealed
	// Extra are entries the format adds beyond the tree (lost+found, ESP
	// files, an initramfs /init), outside the tree's comparison, in byte
	// order of path. Their paths carry a prefix naming where they live,
	// e.g. "esp:/EFI/BOOT/BOOTX64.EFI": they come from several file systems
	// and a format's wrapping, so they are a list, not one tree in which a
	// path could be looked up or a symlink followed.
	Extra []*rootfs.Entry
	// Record is the embedded record (rootfs.RecordPath) as stored, nil when
	// the image has none.
	Record []byte
	// Complete says Tree holds every field the tree digest covers, so its
	// Digest must equal the record's, unless the built tree held entries of
	// a type in Cannot.
	Complete bool
	// Cannot lists the entry types the format cannot carry (a tar holds no
	// sockets); such entries of the built tree are missing from Tree.
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
	// Tail is the last TailSize bytes as stored (fewer in a shorter file),
	// for formats known by a trailer, such as a fixed VHD's footer.
	Tail []byte
}

// TailSize is how much of a file's end detection reads.
const TailSize = 512

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

// ReadImage detects the format of the file or directory at path and reads
// it back: its tree as a read-only view, and the format's structure.
func ReadImage(ctx context.Context, path string) (*Image, error) {
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
	if h.Size <= int64(n) {
		h.Tail = h.Raw[max(0, n-TailSize):]
	} else {
		h.Tail = make([]byte, TailSize)
		if _, err := f.ReadAt(h.Tail, h.Size-TailSize); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
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

func (im *Image) regionEnd() int64 {
	if len(im.Regions) == 0 {
		return 0
	}
	last := im.Regions[len(im.Regions)-1]
	return last.Offset + last.Size
}

// sealedEntries returns the read-only view of the entries of byPath, a
// reader's index of what it met.
func sealedEntries(byPath map[string]*rootfs.Entry) (*rootfs.Sealed, error) {
	paths := make([]string, 0, len(byPath))
	for p := range byPath {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	entries := make([]*rootfs.Entry, len(paths))
	for i, p := range paths {
		entries[i] = byPath[p]
	}
	return rootfs.SealedOf(entries)
}

// maxRecord bounds the embedded record a reader keeps in memory.
const maxRecord = 256 << 20

// holdsRecordPath reports whether p is the record or a directory above it,
// which the record cannot list.
func holdsRecordPath(p string) bool {
	return p == rootfs.RecordPath || strings.HasPrefix(rootfs.RecordPath, strings.TrimSuffix(p, "/")+"/")
}

// splitRecorded parts the entries an image holds in one file system into
// the tree, what the embedded record names (with the record itself and the
// directories above it, which it cannot list), and the output's own,
// renamed under prefix.
func splitRecorded(entries []*rootfs.Entry, record []byte, prefix string) (tree, extra []*rootfs.Entry) {
	return splitRecordedBy(entries, record, func(p string) string { return prefix + ":" + p })
}

// splitRecordedBy is splitRecorded where name says what an extra entry is
// called: a disk names it by the file system that holds it.
func splitRecordedBy(entries []*rootfs.Entry, record []byte, name func(string) string) (tree, extra []*rootfs.Entry) {
	recorded := recordPaths(record)
	for _, e := range entries {
		if recorded[e.Path] || holdsRecordPath(e.Path) {
			tree = append(tree, e)
			continue
		}
		extra = append(extra, &rootfs.Entry{Path: name(e.Path), Inode: e.Inode, Origin: e.Origin})
	}
	return tree, extra
}

func removeEntry(entries []*rootfs.Entry, e *rootfs.Entry) []*rootfs.Entry {
	out := entries[:0:0]
	for _, x := range entries {
		if x != e {
			out = append(out, x)
		}
	}
	return out
}

// recordPaths is the set of paths the record names; empty when there is
// no record or it does not parse.
func recordPaths(record []byte) map[string]bool {
	out, _ := treePaths(record)
	return out
}

// treePaths is the set of paths a stamp record names, and whether record
// is one: only then does it list the whole tree, so that what an image
// holds beyond it is the output's own.
func treePaths(record []byte) (map[string]bool, bool) {
	var r struct {
		APIVersion string
		Entries    []struct{ Path string }
	}
	out := map[string]bool{}
	if json.Unmarshal(record, &r) != nil {
		return out, false
	}
	for _, e := range r.Entries {
		out[e.Path] = true
	}
	return out, strings.HasPrefix(r.APIVersion, "stamp.dev/")
}
