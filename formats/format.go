package formats

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/rootfs"
)

// Source is the sealed tree and the build facts a format may use.
type Source struct {
	Tree  *rootfs.Sealed
	Epoch time.Time
	Name  string // the recipe's name; outputs are named after it
	Arch  string
	// Seed derives every identifier (filesystem UUIDs, GUIDs, hash seeds).
	Seed string
	// From is the file of the output this one is made from, "" for the tree.
	From string
	// FromAdds are the manifest lines of what the output this one is made
	// from added beyond the tree: a qcow2 holds the same disk as its raw.
	FromAdds []string
	// WorkDir is scratch space for this output (its own view of the tree),
	// inside the build's work directory; "" means the system's.
	WorkDir string
	Log     logrus.FieldLogger
	// Progress starts a progress display; nil shows nothing.
	Progress rootfs.Progress
	// Parts, when set, holds compressed parts of this output as earlier
	// builds wrote them (PartStore); nil compresses every part.
	Parts PartStore
	// HashFrom asks a format that reads From whole (FromHasher) for its
	// sha256, Result.FromSum: the conductor then need not read From again
	// for SHA256SUMS.
	HashFrom bool
}

// Spec is one output as the recipe asks for it: what every format has, and
// the format's own options, typed, which the recipe schema has decoded and
// checked once. formats does not import recipes, so the conductor converts
// a recipe's output into a Spec.
type Spec struct {
	Format string
	Name   string
	// From names the output this one is made from; "" for the tree.
	From string
	// Options are the format's own, of the type its file declares beside
	// its writer (*TarSpec for tar, *RawSpec for raw, ...); nil takes the
	// format's defaults.
	Options any
}

// optionsOf returns spec's options as the format's own type T, T's zero
// value (the format's defaults) when there are none.
func optionsOf[T any](spec *Spec) (*T, error) {
	switch o := spec.Options.(type) {
	case nil:
		return new(T), nil
	case *T:
		return o, nil
	}
	return nil, fmt.Errorf("%s: options are a %T, not a %T", spec.Format, spec.Options, new(T))
}

// HostReader is a format's options under which its writer reads files of
// the build machine (a BIOS disk: the host's grub-mkimage and GRUB's i386-pc
// modules): the output's cache key holds their digests, so a changed host
// tool is a miss.
type HostReader interface {
	// HostFiles are absolute host paths of files or directories; a tool
	// the host lacks is left out, and the writer says why it needs it.
	HostFiles() []string
}

// Booter is a format's options whose image boots by a boot section of the
// recipe's. The conductor loads the Secure Boot key the recipe names into
// the section's SecureBoot, so that no format reads the recipe's files.
type Booter interface {
	// BootOptions is the boot section, nil when the image boots nothing.
	BootOptions() *BootSpec
}

// Result says what a format wrote.
type Result struct {
	// Files are the names written in the output directory; the first is the
	// main one.
	Files []string
	// Adds are manifest lines for entries the format adds beyond the tree.
	Adds []string
	// Warnings name what the format could not carry (sockets in a tar, ...).
	Warnings []string
	// Sums holds the hex sha256 of files the format hashed while writing
	// them, so the conductor need not read them again for SHA256SUMS.
	Sums map[string]string
	// Facts are what the output says of itself that its files alone do
	// not show plainly: a UKI's predicted PCR 11, a verified /usr's root
	// hash, the signer's certificate. The manifest and provenance.json
	// carry them.
	Facts []Fact
	// Parts are the compressed parts of the output's files, for the
	// conductor to file in a PartStore for the next build.
	Parts []FilePart
	// Uncached names the files written past the page cache that the
	// conductor is to hash, so that it reads them past it too.
	Uncached []string
	// FromSum is Source.From's hex sha256, when Source.HashFrom asked for
	// it and the format hashed it as it read it; else "".
	FromSum string
}

// FromHasher is a format that can hash the output it is made from as it
// reads it (Source.HashFrom), for an output of the given spec.
type FromHasher interface {
	HashesFrom(spec *Spec) bool
}

// ViewAddition is an entry a format may add to its own view of the tree:
// the tree, its digest and every other output never hold it.
type ViewAddition struct {
	Format string `json:"format"`
	Path   string `json:"path"`
	When   string `json:"when"`
}

// ViewAdder is a format whose writer may add entries to its own view of
// the tree (a live /init, lost+found), which the tree, its digest and every
// other output never hold.
type ViewAdder interface {
	// ViewAdditions lists them, with when each is added; ViewAdditions
	// fills in the format.
	ViewAdditions() []ViewAddition
}

// ViewAdditions lists what each format may add to its view of the tree
// (ViewAdder), whatever a recipe asks for, so that an image can say which
// of its entries are not the tree's without depending on the other
// outputs. The embedded record holds the list: it is in byte order of the
// format's name, each format's in the order its writer gives.
func ViewAdditions() []ViewAddition {
	t := Table()
	slices.SortStableFunc(t, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	var out []ViewAddition
	for _, e := range t {
		if va, ok := e.Writer.(ViewAdder); ok {
			for _, a := range va.ViewAdditions() {
				a.Format = e.Name
				out = append(out, a)
			}
		}
	}
	return out
}

// Format writes one kind of output into dir, naming its files after base.
type Format interface {
	Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error)
}

// Entry is one output format: its name, what an output of it can be made
// from, and its writer and reader, which sit beside each other in the
// format's own files.
type Entry struct {
	// Name is the format's name as a recipe spells it.
	Name string
	// MadeFrom lists, by the kind of output ("" for a format of one kind),
	// the formats an output can be made from, nearest choice first; a kind
	// it does not list is made from the tree. The recipe schema keeps the
	// same graph (recipes.MadeFrom), and a test holds the two together.
	MadeFrom map[string][]string
	Writer   Format
	// Reader reads the format back; its Match is the format's detector.
	Reader Reader
}

// Table lists every output format in detection order: containers that may
// hold another format (an OCI archive is a tar, a pxe bundle holds a cpio)
// come before what they hold. Adding a format is its file and one line here
// (and its schema in recipes); the table is explicit rather than filled
// from init functions, so its order is the code's.
func Table() []Entry {
	return []Entry{
		{Name: "qcow2", MadeFrom: map[string][]string{"": {"raw"}}, Writer: qcow2Format{}, Reader: qcow2ImageReader{}},
		// A fixed vhd begins as the raw disk it holds: it is known by its
		// footer before raw looks at its start.
		{Name: "vhd", MadeFrom: map[string][]string{"": {"raw"}}, Writer: vhdFormat{}, Reader: vhdImageReader{}},
		{Name: "vmdk", MadeFrom: map[string][]string{"": {"raw"}}, Writer: vmdkFormat{}, Reader: vmdkImageReader{}},
		// An ova and a gce archive are tars: they are known by their first
		// member before oci and tar look.
		{Name: "ova", MadeFrom: map[string][]string{"": {"raw"}}, Writer: ovaFormat{}, Reader: ovaImageReader{}},
		{Name: "gce", MadeFrom: map[string][]string{"": {"raw"}}, Writer: gceFormat{}, Reader: gceImageReader{}},
		{Name: "erofs", Writer: erofsFormat{}, Reader: erofsImageReader{}},
		// A hybrid iso holds a GPT: it is known by its volume descriptors
		// before compressed and raw look.
		{Name: "iso", MadeFrom: map[string][]string{"": {"live"}}, Writer: isoFormat{}, Reader: isoImageReader{}},
		// A compressed raw is known by the GPT in its plain stream, before
		// tar (whose reader also decompresses) looks.
		{Name: "compressed", MadeFrom: map[string][]string{"": {"raw"}}, Writer: compressedFormat{}, Reader: compressedImageReader{}},
		{Name: "raw", Writer: rawFormat{}, Reader: rawImageReader{}},
		// A live bundle holds a kernel, an initramfs and a script, as a pxe
		// bundle does: it is known by its root image first.
		{Name: "live", MadeFrom: map[string][]string{"": {"erofs"}}, Writer: liveFormat{}, Reader: liveImageReader{}},
		{Name: "pxe", MadeFrom: map[string][]string{"": {"cpio"}}, Writer: pxeFormat{}, Reader: pxeImageReader{}},
		{Name: "oci", MadeFrom: map[string][]string{"containerdisk": {"qcow2", "raw"}, "disk": {"compressed"}}, Writer: ociFormat{}, Reader: ociImageReader{}},
		{Name: "cpio", Writer: cpioFormat{}, Reader: cpioImageReader{}},
		{Name: "tar", Writer: tarFormat{}, Reader: tarReader{}},
	}
}

// Lookup returns the writer for a format name.
func Lookup(name string) (Format, error) {
	for _, e := range Table() {
		if e.Name == name {
			return e.Writer, nil
		}
	}
	return nil, fmt.Errorf("output format %q is not supported by this version of stamp", name)
}

// writeFile creates p and lets fn fill it. On failure p is removed. It does
// not fsync: atomicity comes from the conductor's rename of a complete file,
// and durability across power loss is left to the caller's filesystem. The
// file is open for reading too: a disk's hash tree reads back the partition
// just written.
func writeFile(p string, fn func(*os.File) error) (err error) {
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			os.Remove(p)
		}
	}()
	if err := fn(f); err != nil {
		return fmt.Errorf("%s: %w", filepath.Base(p), err)
	}
	return nil
}
