package formats

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/disk/qcow2"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// OCIImage is a single-image OCI layout read back: the documents, the
// layer's entries, and for a containerDisk its disk file.
type OCIImage struct {
	// Digest is the manifest digest, "sha256:<hex>".
	Digest   string
	RefName  string // org.opencontainers.image.ref.name in index.json, if any
	Created  time.Time
	Arch     string
	OS       string
	Variant  string
	Env      []string
	Entry    []string // the config's Entrypoint
	Labels   map[string]string
	Manifest []byte // raw manifest
	Config   []byte // raw config
	// Layer is the image's one layer, as stored; DiffID is the sha256 of
	// its uncompressed tar, as the config lists it.
	Layer  OCIDescriptor
	DiffID string
	// Kind is "containerdisk" when the layer holds only /disk and one file
	// in it, "disk" for an artifact of one compressed raw (kind disk, with
	// ORAS's config), "rootfs" otherwise.
	Kind string
	// Title is the file name a disk artifact's layer carries.
	Title string
	// Tree is the layer's tree, read with ReadTar, as the read-only view
	// an image read back carries (see Image.Tree).
	Tree *rootfs.Sealed
	// Disk is the disk file's entry of a containerDisk, nil otherwise.
	Disk *rootfs.Entry

	path string
}

// OCIDescriptor names a blob.
type OCIDescriptor struct {
	MediaType string
	Digest    string
	Size      int64
}

// ReadOCI reads the OCI layout at p, a layout directory or an uncompressed
// oci-archive tar, holding one image with one layer: a tar, plain or
// compressed with gzip or zstd as its media type says. Every blob in the
// layout, referenced or not, must hash to its name, and every descriptor's
// size must match; the decompressed layer must hash to the config's
// diff_id. The layer is read with ReadTar.
func ReadOCI(ctx context.Context, p string) (*OCIImage, error) {
	s, err := openOCIStore(p)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	im, err := readOCI(ctx, s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	im.path = p
	return im, nil
}

func readOCI(ctx context.Context, s *ociStore) (*OCIImage, error) {
	if err := s.checkLayoutVersion(); err != nil {
		return nil, err
	}
	mdesc, refName, err := s.single()
	if err != nil {
		return nil, err
	}
	im := &OCIImage{Digest: mdesc.Digest, RefName: refName}
	if im.Manifest, err = s.readBlob(mdesc, 4<<20); err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	var m ociManifestJSON
	if err := json.Unmarshal(im.Manifest, &m); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", mdesc.Digest, err)
	}
	if len(m.Layers) != 1 {
		return nil, fmt.Errorf("manifest %s has %d layers; stamp reads single-layer images", mdesc.Digest, len(m.Layers))
	}
	if im.Config, err = s.readBlob(m.Config, 4<<20); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if m.Config.MediaType == ORASConfigMediaType {
		return readOCIDisk(ctx, s, im, mdesc, m)
	}
	var cfg ociConfigJSON
	if err := json.Unmarshal(im.Config, &cfg); err != nil {
		return nil, fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	if cfg.Created != "" {
		if im.Created, err = time.Parse(time.RFC3339Nano, cfg.Created); err != nil {
			return nil, fmt.Errorf("config %s: created: %w", m.Config.Digest, err)
		}
	}
	im.Arch, im.OS, im.Variant = cfg.Architecture, cfg.OS, cfg.Variant
	im.Env, im.Entry, im.Labels = cfg.Config.Env, cfg.Config.Entrypoint, cfg.Config.Labels
	l := m.Layers[0]
	im.Layer = OCIDescriptor{MediaType: l.MediaType, Digest: l.Digest, Size: l.Size}
	if len(cfg.RootFS.DiffIDs) != 1 {
		return nil, fmt.Errorf("config %s lists %d diff_ids for 1 layer", m.Config.Digest, len(cfg.RootFS.DiffIDs))
	}
	im.DiffID = cfg.RootFS.DiffIDs[0]
	if _, ok := ociLayerCompression(l.MediaType); !ok {
		return nil, fmt.Errorf("manifest %s: layer %s has media type %q, not a tar layer (plain, gzip or zstd)", mdesc.Digest, l.Digest, l.MediaType)
	}
	if ociUncompressed(l.MediaType) && im.DiffID != l.Digest {
		return nil, fmt.Errorf("config %s: diff_id %s is not the uncompressed layer's digest %s", m.Config.Digest, im.DiffID, l.Digest)
	}
	if im.Tree, err = s.readLayer(ctx, l, im.DiffID); err != nil {
		return nil, err
	}
	if err := verifyOtherBlobs(ctx, s, mdesc.Digest, m.Config.Digest, l.Digest); err != nil {
		return nil, err
	}
	im.Kind, im.Disk = "rootfs", containerDiskEntry(im.Tree)
	if im.Disk != nil {
		im.Kind = "containerdisk"
	}
	return im, nil
}

// verifyOtherBlobs checks the blobs nothing referenced has read: a layout
// is only as sound as every file in it.
func verifyOtherBlobs(ctx context.Context, s *ociStore, read ...string) error {
	checked := map[string]bool{}
	for _, d := range read {
		checked[d] = true
	}
	for _, name := range s.blobNames() {
		if checked["sha256:"+path.Base(name)] {
			continue
		}
		if err := s.verify(ctx, name, -1); err != nil {
			return err
		}
	}
	return nil
}

// readOCIDisk reads the rest of a disk artifact: one layer, the file as
// it is (checked against its digest, as every blob), titled.
func readOCIDisk(ctx context.Context, s *ociStore, im *OCIImage, mdesc ociDescriptor, m ociManifestJSON) (*OCIImage, error) {
	if len(m.Layers) != 1 || m.Layers[0].MediaType != OCILayerMediaType || m.Layers[0].Annotations[OCITitleAnnotation] == "" {
		return nil, fmt.Errorf("manifest %s: an artifact of ORAS's config with %d layers; stamp reads one titled file", mdesc.Digest, len(m.Layers))
	}
	l := m.Layers[0]
	im.Kind, im.Title = "disk", l.Annotations[OCITitleAnnotation]
	im.Layer = OCIDescriptor{MediaType: l.MediaType, Digest: l.Digest, Size: l.Size}
	if err := verifyOtherBlobs(ctx, s, mdesc.Digest, m.Config.Digest); err != nil {
		return nil, err
	}
	return im, nil
}

// containerDiskEntry returns the disk of a containerDisk layer: the layer
// holds /disk and exactly one regular file in it (and at most the root).
func containerDiskEntry(layer *rootfs.Sealed) *rootfs.Entry {
	dir := layer.Get(containerDiskDir)
	names := layer.Children(containerDiskDir)
	extra := 0
	if layer.Get("/") != nil {
		extra = 1
	}
	if dir == nil || dir.Type != rootfs.TypeDir || len(names) != 1 || layer.Len() != 2+extra {
		return nil
	}
	if disk := layer.Get(path.Join(containerDiskDir, names[0])); disk.Type == rootfs.TypeRegular {
		return disk
	}
	return nil
}

// OCIBlobReader reads part of a layout in place: a layer blob, or a
// containerDisk's disk file inside one.
type OCIBlobReader struct {
	*io.SectionReader
	close func() error
}

// Close releases the layout file.
func (r *OCIBlobReader) Close() error { return r.close() }

// OpenLayer opens the layer blob of an image read by ReadOCI, as stored
// (compressed if its media type says so), for readers that want more of
// it than ReadOCI keeps, such as file contents. The layout is not verified
// again.
func (im *OCIImage) OpenLayer() (*OCIBlobReader, error) {
	s, err := openOCIStore(im.path)
	if err != nil {
		return nil, err
	}
	sr, closeBlob, err := s.blob(im.Layer.Digest)
	if err != nil {
		s.Close()
		return nil, err
	}
	return &OCIBlobReader{SectionReader: sr, close: func() error {
		err := closeBlob()
		if cerr := s.Close(); err == nil {
			err = cerr
		}
		return err
	}}, nil
}

// OpenDisk opens the disk file of a containerDisk read by ReadOCI. From an
// uncompressed layer the disk is read in place. A compressed layer cannot
// be read at random offsets, so its disk is decompressed into a temporary
// file (in $TMPDIR, unlinked at once, with holes where the disk has zeros)
// and checked against the digest ReadOCI found. The layout is not verified
// again.
func (im *OCIImage) OpenDisk(ctx context.Context) (*OCIBlobReader, error) {
	if im.Disk == nil {
		return nil, fmt.Errorf("%s: not a containerDisk", im.path)
	}
	alg, ok := ociLayerCompression(im.Layer.MediaType)
	if !ok {
		return nil, fmt.Errorf("%s: layer media type %q", im.path, im.Layer.MediaType)
	}
	layer, err := im.OpenLayer()
	if err != nil {
		return nil, err
	}
	if alg != compress.None {
		defer layer.Close()
		return im.extractDisk(ctx, alg, layer)
	}
	sr, closeAll := layer.SectionReader, layer.Close
	// archive/tar reads exactly the header blocks and seeks over the data
	// it skips, so after Next the reader stands at the member's data.
	tr := tar.NewReader(sr)
	hdr, err := im.diskMember(tr)
	if err != nil {
		closeAll()
		return nil, err
	}
	off, err := sr.Seek(0, io.SeekCurrent)
	if err != nil {
		closeAll()
		return nil, err
	}
	return &OCIBlobReader{SectionReader: io.NewSectionReader(sr, off, hdr.Size), close: closeAll}, nil
}

// diskMember advances tr to the disk file's member.
func (im *OCIImage) diskMember(tr *tar.Reader) (*tar.Header, error) {
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("%s: %s is not in layer %s", im.path, im.Disk.Path, im.Layer.Digest)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: layer %s: %w", im.path, im.Layer.Digest, err)
		}
		p, err := tarPath(hdr.Name)
		if err == nil && p == im.Disk.Path && hdr.Typeflag == tar.TypeReg {
			return hdr, nil
		}
	}
}

// extractDisk decompresses the disk file out of a compressed layer into an
// unlinked temporary file, so nothing is left behind whatever happens to
// the process.
func (im *OCIImage) extractDisk(ctx context.Context, alg compress.Algorithm, layer io.Reader) (*OCIBlobReader, error) {
	zr, err := compress.NewReader(alg, layer)
	if err != nil {
		return nil, fmt.Errorf("%s: layer %s: %w", im.path, im.Layer.Digest, err)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	hdr, err := im.diskMember(tr)
	if err != nil {
		return nil, err
	}
	f, err := os.CreateTemp("", "stamp-containerdisk-*")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", im.path, err)
	}
	if err := os.Remove(f.Name()); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", im.path, err)
	}
	h := sha256.New()
	err = ociCopySparse(f, &tarCtxReader{ctx: ctx, r: io.TeeReader(tr, h)}, hdr.Size)
	if err == nil && hex.EncodeToString(h.Sum(nil)) != im.Disk.Digest {
		err = errors.New("the disk no longer matches the layer ReadOCI read")
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %s: %w", im.path, im.Disk.Path, err)
	}
	return &OCIBlobReader{SectionReader: io.NewSectionReader(f, 0, hdr.Size), close: f.Close}, nil
}

// ociCopySparse copies size bytes of r into f from offset 0, leaving holes
// where whole blocks are zero: a raw disk is mostly zeros, and its copy
// then takes what its data takes.
func ociCopySparse(f *os.File, r io.Reader, size int64) error {
	const block = 64 << 10
	buf, zero := make([]byte, 1<<20), make([]byte, block)
	var off int64
	for off < size {
		n, err := io.ReadFull(r, buf[:min(int64(len(buf)), size-off)])
		if err != nil {
			if err == io.ErrUnexpectedEOF || err == io.EOF {
				err = fmt.Errorf("ends after %d of its %d bytes", off+int64(n), size)
			}
			return err
		}
		for i := 0; i < n; i += block {
			b := buf[i:min(i+block, n)]
			if !bytes.Equal(b, zero[:len(b)]) {
				if _, err := f.WriteAt(b, off+int64(i)); err != nil {
					return err
				}
			}
		}
		off += int64(n)
	}
	// Trailing zero blocks were never written; the length still counts.
	return f.Truncate(size)
}

func ociUncompressed(mediaType string) bool {
	alg, ok := ociLayerCompression(mediaType)
	return ok && alg == compress.None
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
	if oi.Kind == "disk" {
		// The tree is on the disk the layer compresses.
		layer, err := oi.OpenLayer()
		if err != nil {
			return nil, err
		}
		defer layer.Close()
		alg, r, err := compress.Detect(layer)
		if err != nil || alg == compress.None {
			return nil, fmt.Errorf("%s: the layer (%s) is not a compressed disk", h.Path, oi.Title)
		}
		// An artifact has no platform and no creation time.
		var facts []Fact
		for _, f := range im.Facts {
			if f.Key != "oci.platform" && f.Key != "oci.created" {
				facts = append(facts, f)
			}
		}
		im.Facts = append(facts, Fact{"oci.title", oi.Title})
		if err := readCompressedDisk(ctx, r, alg, im); err != nil {
			return nil, fmt.Errorf("%s: %s: %w", h.Path, oi.Title, err)
		}
		return im, nil
	}
	if oi.Kind == "containerdisk" {
		// The tree is on the disk inside the layer: read that disk, and
		// keep the layer's own entries as the format's.
		if err := readContainerDisk(ctx, oi, im); err != nil {
			return nil, err
		}
		im.Filesystems = append([]Filesystem{{Type: "oci layer", Files: oi.Tree.Len(), Size: oi.Layer.Size}}, im.Filesystems...)
		return im, nil
	}
	im.Tree = oi.Tree
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
	im.Filesystems = []Filesystem{{Type: "oci layer", Files: oi.Tree.Len(), Size: oi.Layer.Size}}
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
	// The layer's own entries are the format's; the layer's view keeps
	// its paths, so Extra gets renamed copies.
	for _, e := range oi.Tree.Entries() {
		im.Extra = append(im.Extra, &rootfs.Entry{Path: "layer:" + e.Path, Inode: e.Inode, Origin: e.Origin})
	}
	im.Extra = append(im.Extra, diskImage.Extra...)
	im.Tree, im.Record, im.Complete = diskImage.Tree, diskImage.Record, diskImage.Complete
	im.Partitions, im.Filesystems = diskImage.Partitions, diskImage.Filesystems
	im.Facts = append(im.Facts, diskImage.Facts...)
	sort.Slice(im.Extra, func(a, b int) bool { return im.Extra[a].Path < im.Extra[b].Path })
	return nil
}
