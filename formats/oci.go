package formats

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// Media types stamp writes. The layer is gzip-compressed unless the recipe
// says otherwise, because gzip is what every registry and client reads, and
// what go-containerregistry's validation and the docker tools assume. The
// diff_id stays the sha256 of the canonical tar whatever the compression, so
// it never moves; the layer digest moves with the encoder (Go's
// compress/gzip, klauspost's zstd), which provenance pins through stamp's
// build info. An uncompressed layer (compression: none) keeps the digest
// independent of any encoder, at its full size on the wire.
const (
	OCIIndexMediaType     = "application/vnd.oci.image.index.v1+json"
	OCIManifestMediaType  = "application/vnd.oci.image.manifest.v1+json"
	OCIConfigMediaType    = "application/vnd.oci.image.config.v1+json"
	OCILayerMediaType     = "application/vnd.oci.image.layer.v1.tar"
	OCILayerGzipMediaType = "application/vnd.oci.image.layer.v1.tar+gzip"
	OCILayerZstdMediaType = "application/vnd.oci.image.layer.v1.tar+zstd"

	// OCIRefName is the org.opencontainers.image.ref.name stamp gives its
	// one image in index.json, so "oci:DIR:latest" names it as "oci:DIR"
	// does.
	OCIRefName = "latest"

	ociRefNameAnnotation = "org.opencontainers.image.ref.name"
	ociLayoutVersion     = "1.0.0"
)

// KubeVirt's containerDisk convention, as KubeVirt's own test images lay it
// out (pkg_tar with owner 107.107, mode 440, package_dir /disk): the disk
// is the only file under /disk, owned by the qemu user (uid and gid 107)
// that virt-launcher runs as, readable by it and by nobody else. /disk itself
// is 107:107 0555, as kubevirt/containerdisks writes it, so the directory
// is not writable by anyone.
const (
	containerDiskDir     = "/disk"
	containerDiskOwner   = 107
	containerDiskPerm    = 0o440
	containerDiskDirPerm = 0o555
)

// ociFormat writes an image as an OCI layout directory ("<base>.oci") or an
// oci-archive tar of that layout ("<base>.oci.tar"), plus "<main>.digest"
// holding the manifest digest, the one a registry will report.
//
// kind rootfs: one layer, the tree as WriteTar writes it. kind
// containerdisk: one layer holding the file of the output named by from
// (a qcow2 or raw disk) as /disk/<its file name>.
type ociFormat struct{}

func (ociFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	kind, layout := spec.Kind, spec.Layout
	if kind == "" {
		kind = "rootfs"
	}
	if layout == "" {
		layout = "dir"
	}
	if kind != "rootfs" && kind != "containerdisk" {
		return nil, fmt.Errorf("oci: kind %q must be rootfs or containerdisk", kind)
	}
	if layout != "dir" && layout != "archive" {
		return nil, fmt.Errorf("oci: layout %q must be dir or archive", layout)
	}
	if kind == "containerdisk" && src.From == "" {
		return nil, errors.New("oci: a containerdisk is made from a raw or qcow2 output; from is not set")
	}
	alg, err := ociCompression(spec.Compression)
	if err != nil {
		return nil, err
	}
	plat, err := ociPlatform(src.Arch)
	if err != nil {
		return nil, err
	}

	name := base + ".oci"
	layoutDir := filepath.Join(dir, name)
	if layout == "archive" {
		name = base + ".oci.tar"
		// The layout is built beside the archive and removed once the
		// archive holds it.
		layoutDir = filepath.Join(dir, "."+base+".oci-layout")
	}
	// Mkdir, not MkdirAll: a directory already there is not ours to fill,
	// nor to remove on failure.
	if err := os.Mkdir(layoutDir, 0o755); err != nil {
		return nil, fmt.Errorf("oci: %w", err)
	}
	if layout == "archive" {
		defer os.RemoveAll(layoutDir)
	}
	w := &ociWriter{ctx: ctx, src: src, spec: spec, dir: layoutDir, plat: plat, alg: alg}
	res, digest, err := w.write(kind)
	if err != nil {
		os.RemoveAll(layoutDir)
		return nil, fmt.Errorf("oci: %w", err)
	}
	if layout == "archive" {
		err := writeFile(filepath.Join(dir, name), func(f *os.File) error {
			return writeOCIArchive(ctx, layoutDir, f, src.Epoch)
		})
		if err != nil {
			return nil, fmt.Errorf("oci: %w", err)
		}
	}
	digestName := name + ".digest"
	err = writeFile(filepath.Join(dir, digestName), func(f *os.File) error {
		_, err := io.WriteString(f, digest+"\n")
		return err
	})
	if err != nil {
		if layout == "dir" {
			os.RemoveAll(layoutDir)
		} else {
			os.Remove(filepath.Join(dir, name))
		}
		return nil, fmt.Errorf("oci: %w", err)
	}
	res.Files = []string{name, digestName}
	return res, nil
}

// ociCompression reads the layer compression of a spec: gzip when none is
// given, and only what a layer media type can name.
func ociCompression(name string) (compress.Algorithm, error) {
	if name == "" {
		return compress.Gzip, nil
	}
	alg, err := compress.Parse(name)
	if err != nil {
		return "", fmt.Errorf("oci: %w", err)
	}
	if _, ok := ociLayerMediaTypes[alg]; !ok {
		return "", fmt.Errorf("oci: compression %q: a layer is gzip, zstd or none", name)
	}
	return alg, nil
}

// ociLayerMediaTypes names the layer media type of each compression stamp
// writes.
var ociLayerMediaTypes = map[compress.Algorithm]string{
	compress.Gzip: OCILayerGzipMediaType,
	compress.Zstd: OCILayerZstdMediaType,
	compress.None: OCILayerMediaType,
}

// ociLayerCompression is the compression a layer media type names, for the
// OCI types and Docker's; ok is false for a media type that is not a layer
// stamp can read.
func ociLayerCompression(mediaType string) (alg compress.Algorithm, ok bool) {
	switch mediaType {
	case OCILayerMediaType, string(types.DockerUncompressedLayer):
		return compress.None, true
	case OCILayerGzipMediaType, string(types.DockerLayer):
		return compress.Gzip, true
	case OCILayerZstdMediaType:
		return compress.Zstd, true
	}
	return "", false
}

// ociPlatform maps the recipe's architecture to the OCI platform.
func ociPlatform(arch string) (ociPlatformJSON, error) {
	switch arch {
	case "amd64", "":
		return ociPlatformJSON{Architecture: "amd64", OS: "linux"}, nil
	case "arm64":
		return ociPlatformJSON{Architecture: "arm64", OS: "linux", Variant: "v8"}, nil
	}
	return ociPlatformJSON{}, fmt.Errorf("oci: architecture %q is not amd64 or arm64", arch)
}

// The JSON documents are stamp's own structs rather than a library's, so
// their bytes, and with them every digest, change only when this file does.
// Field order follows the image spec; encoding/json sorts map keys.

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *ociPlatformJSON  `json:"platform,omitempty"`
}

type ociPlatformJSON struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

type ociIndexJSON struct {
	SchemaVersion int             `json:"schemaVersion"`
	MediaType     string          `json:"mediaType,omitempty"`
	Manifests     []ociDescriptor `json:"manifests"`
}

type ociManifestJSON struct {
	SchemaVersion int             `json:"schemaVersion"`
	MediaType     string          `json:"mediaType,omitempty"`
	Config        ociDescriptor   `json:"config"`
	Layers        []ociDescriptor `json:"layers"`
}

type ociConfigJSON struct {
	Created      string          `json:"created,omitempty"`
	Architecture string          `json:"architecture"`
	Variant      string          `json:"variant,omitempty"`
	OS           string          `json:"os"`
	Config       ociRunConfig    `json:"config"`
	RootFS       ociRootFSJSON   `json:"rootfs"`
	History      []ociHistoryRow `json:"history,omitempty"`
}

type ociRunConfig struct {
	Env        []string          `json:"Env,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

type ociRootFSJSON struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type ociHistoryRow struct {
	Created   string `json:"created,omitempty"`
	CreatedBy string `json:"created_by,omitempty"`
	Comment   string `json:"comment,omitempty"`
}

type ociWriter struct {
	ctx  context.Context
	src  *Source
	spec *Spec
	dir  string
	plat ociPlatformJSON
	alg  compress.Algorithm
}

// write lays out the image in w.dir and returns the manifest digest.
func (w *ociWriter) write(kind string) (*Result, string, error) {
	blobs := filepath.Join(w.dir, "blobs", "sha256")
	if err := os.MkdirAll(blobs, 0o755); err != nil {
		return nil, "", err
	}
	if err := w.small("oci-layout", []byte(`{"imageLayoutVersion":"`+ociLayoutVersion+`"}`)); err != nil {
		return nil, "", err
	}
	res := &Result{}
	var layer ociDescriptor
	var diffID, comment string
	var err error
	switch kind {
	case "rootfs":
		layer, diffID, err = w.rootfsLayer(res)
		comment = "the sealed tree of " + w.src.Name
	case "containerdisk":
		layer, diffID, err = w.diskLayer(res)
		comment = "KubeVirt containerDisk " + path.Join(containerDiskDir, filepath.Base(w.src.From))
	}
	if err != nil {
		return nil, "", err
	}
	created := w.src.Epoch.UTC().Format(time.RFC3339)
	cfg := ociConfigJSON{
		Created:      created,
		Architecture: w.plat.Architecture,
		Variant:      w.plat.Variant,
		OS:           w.plat.OS,
		Config:       ociRunConfig{Env: w.spec.Env, Entrypoint: w.spec.Entrypoint, Labels: w.spec.Labels},
		RootFS:       ociRootFSJSON{Type: "layers", DiffIDs: []string{diffID}},
		History:      []ociHistoryRow{{Created: created, CreatedBy: "stamp", Comment: comment}},
	}
	config, err := w.blob(OCIConfigMediaType, cfg)
	if err != nil {
		return nil, "", err
	}
	manifest, err := w.blob(OCIManifestMediaType, ociManifestJSON{
		SchemaVersion: 2, MediaType: OCIManifestMediaType, Config: config, Layers: []ociDescriptor{layer},
	})
	if err != nil {
		return nil, "", err
	}
	manifest.Annotations = map[string]string{ociRefNameAnnotation: OCIRefName}
	plat := w.plat
	manifest.Platform = &plat
	index, err := json.Marshal(ociIndexJSON{SchemaVersion: 2, MediaType: OCIIndexMediaType, Manifests: []ociDescriptor{manifest}})
	if err != nil {
		return nil, "", err
	}
	if err := w.small("index.json", index); err != nil {
		return nil, "", err
	}
	// Comment lines: the manifest parser skips them, and they say which
	// blobs the image adds around the tree.
	res.Adds = append(res.Adds,
		fmt.Sprintf("# oci manifest %s size=%d", manifest.Digest, manifest.Size),
		fmt.Sprintf("# oci config %s size=%d", config.Digest, config.Size),
		fmt.Sprintf("# oci layer %s size=%d mediaType=%s diffID=%s", layer.Digest, layer.Size, layer.MediaType, diffID))
	return res, manifest.Digest, nil
}

// small writes a small file of the layout.
func (w *ociWriter) small(name string, b []byte) error {
	return writeFile(filepath.Join(w.dir, name), func(f *os.File) error {
		_, err := f.Write(b)
		return err
	})
}

// blob marshals v into a blob and returns its descriptor.
func (w *ociWriter) blob(mediaType string, v any) (ociDescriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return ociDescriptor{}, err
	}
	sum := sha256.Sum256(b)
	hx := hex.EncodeToString(sum[:])
	if err := w.small(path.Join("blobs", "sha256", hx), b); err != nil {
		return ociDescriptor{}, err
	}
	return ociDescriptor{MediaType: mediaType, Digest: "sha256:" + hx, Size: int64(len(b))}, nil
}

// layerBlob streams the tar that fill writes into a temporary file in
// blobs/sha256 in one pass: the tar is hashed for the diff_id, compressed,
// and the compressed bytes hashed for the digest on their way to the file,
// which is then renamed to its digest. The layer is never held in memory.
// It returns the layer's descriptor and its diff_id.
func (w *ociWriter) layerBlob(fill func(io.Writer) error) (ociDescriptor, string, error) {
	blobs := filepath.Join(w.dir, "blobs", "sha256")
	tmp := filepath.Join(blobs, ".layer.tmp")
	digest, diff := sha256.New(), sha256.New()
	var n int64
	err := writeFile(tmp, func(f *os.File) error {
		// The encoders write in small pieces; the file wants large ones.
		bw := bufio.NewWriterSize(f, 1<<20)
		cw := &ociCountWriter{w: io.MultiWriter(bw, digest)}
		zw, err := compress.NewWriter(w.alg, cw, compress.WriterOptions{})
		if err != nil {
			return err
		}
		tarOut := io.Writer(zw)
		if w.alg != compress.None {
			// Uncompressed, the digest is the diff_id: one hash serves.
			tarOut = io.MultiWriter(zw, diff)
		}
		err = fill(tarOut)
		if cerr := zw.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("layer %s: %w", w.alg, cerr)
		}
		if ferr := bw.Flush(); err == nil {
			err = ferr
		}
		n = cw.n
		return err
	})
	if err != nil {
		return ociDescriptor{}, "", err
	}
	hx := hex.EncodeToString(digest.Sum(nil))
	diffID := "sha256:" + hx
	if w.alg != compress.None {
		diffID = "sha256:" + hex.EncodeToString(diff.Sum(nil))
	}
	if err := os.Rename(tmp, filepath.Join(blobs, hx)); err != nil {
		os.Remove(tmp)
		return ociDescriptor{}, "", err
	}
	return ociDescriptor{MediaType: ociLayerMediaTypes[w.alg], Digest: "sha256:" + hx, Size: n}, diffID, nil
}

func (w *ociWriter) rootfsLayer(res *Result) (ociDescriptor, string, error) {
	var skipped []string
	desc, diffID, err := w.layerBlob(func(out io.Writer) error {
		return WriteTar(w.ctx, w.src.Tree, out, TarOptions{Skipped: &skipped})
	})
	if err != nil {
		return desc, "", err
	}
	for _, p := range skipped {
		res.Warnings = append(res.Warnings, fmt.Sprintf("%s: a socket cannot be stored in an image layer; left out", p))
	}
	err = w.src.Tree.Walk(func(e *rootfs.Entry) error {
		if strings.HasPrefix(path.Base(e.Path), ".wh.") {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s: container runtimes read a .wh. name as a whiteout and will not create it", e.Path))
		}
		return nil
	})
	return desc, diffID, err
}

// diskLayer writes the containerDisk layer: /disk/ and the disk file, as
// names without "./" like KubeVirt's own images.
func (w *ociWriter) diskLayer(res *Result) (ociDescriptor, string, error) {
	f, err := os.Open(w.src.From)
	if err != nil {
		return ociDescriptor{}, "", fmt.Errorf("containerdisk source: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return ociDescriptor{}, "", fmt.Errorf("containerdisk source: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return ociDescriptor{}, "", fmt.Errorf("containerdisk source %s is not a regular file", filepath.Base(w.src.From))
	}
	diskName := filepath.Base(w.src.From)
	mtime := tarMTime(w.src.Epoch)
	add, done := func(int64) {}, func() {}
	if w.src.Progress != nil {
		add, done = w.src.Progress("containerdisk "+diskName, fi.Size())
	}
	defer done()
	diskHash := sha256.New()
	desc, diffID, err := w.layerBlob(func(out io.Writer) error {
		bw := bufio.NewWriterSize(out, 1<<20)
		tw := tar.NewWriter(bw)
		hdrs := []*tar.Header{
			{Typeflag: tar.TypeDir, Name: "disk/", Mode: containerDiskDirPerm, Uid: containerDiskOwner, Gid: containerDiskOwner, ModTime: mtime, Format: tar.FormatPAX},
			{Typeflag: tar.TypeReg, Name: "disk/" + diskName, Mode: containerDiskPerm, Uid: containerDiskOwner, Gid: containerDiskOwner, ModTime: mtime, Size: fi.Size(), Format: tar.FormatPAX},
		}
		for _, h := range hdrs {
			if err := tw.WriteHeader(h); err != nil {
				return fmt.Errorf("layer %s: %w", h.Name, err)
			}
		}
		r := &tarCtxReader{ctx: w.ctx, r: f}
		dst := io.MultiWriter(tw, diskHash, ociProgressWriter(add))
		n, err := io.CopyBuffer(dst, io.LimitReader(r, fi.Size()), make([]byte, 1<<20))
		if err != nil {
			return fmt.Errorf("copying %s: %w", diskName, err)
		}
		if n != fi.Size() {
			return fmt.Errorf("%s shrank from %d to %d bytes while it was read", diskName, fi.Size(), n)
		}
		if err := tw.Close(); err != nil {
			return err
		}
		return bw.Flush()
	})
	if err != nil {
		return desc, "", err
	}
	ep := time.Unix(mtime.Unix(), 0).UTC()
	dirEntry := &rootfs.Entry{Path: containerDiskDir, Inode: &rootfs.Inode{Type: rootfs.TypeDir,
		Perm: containerDiskDirPerm, UID: containerDiskOwner, GID: containerDiskOwner, MTime: ep}}
	fileEntry := &rootfs.Entry{Path: path.Join(containerDiskDir, diskName), Inode: &rootfs.Inode{Type: rootfs.TypeRegular,
		Perm: containerDiskPerm, UID: containerDiskOwner, GID: containerDiskOwner, MTime: ep,
		Size: fi.Size(), Digest: hex.EncodeToString(diskHash.Sum(nil))}}
	res.Adds = append(res.Adds, rootfs.ManifestLine(dirEntry, nil, false), rootfs.ManifestLine(fileEntry, nil, false))
	return desc, diffID, nil
}

type ociCountWriter struct {
	w io.Writer
	n int64
}

func (c *ociCountWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

type ociProgressWriter func(int64)

func (f ociProgressWriter) Write(p []byte) (int, error) {
	f(int64(len(p)))
	return len(p), nil
}

// writeOCIArchive writes the layout in dir as an oci-archive: an
// uncompressed tar of the layout's files, in byte order of name, owned
// 0:0, directories 0755 and files 0644, every mtime the epoch.
func writeOCIArchive(ctx context.Context, dir string, w io.Writer, epoch time.Time) error {
	var names []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			rel += "/"
		}
		names = append(names, rel)
		return nil
	})
	if err != nil {
		return err
	}
	sort.Strings(names)
	bw := bufio.NewWriterSize(w, 1<<20)
	tw := tar.NewWriter(bw)
	buf := make([]byte, 1<<20)
	mtime := tarMTime(epoch)
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr := &tar.Header{Name: name, ModTime: mtime, Format: tar.FormatPAX}
		if strings.HasSuffix(name, "/") {
			hdr.Typeflag, hdr.Mode = tar.TypeDir, 0o755
			if err := tw.WriteHeader(hdr); err != nil {
				return fmt.Errorf("archive %s: %w", name, err)
			}
			continue
		}
		f, err := os.Open(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			return err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return err
		}
		hdr.Typeflag, hdr.Mode, hdr.Size = tar.TypeReg, 0o644, fi.Size()
		if err := tw.WriteHeader(hdr); err != nil {
			f.Close()
			return fmt.Errorf("archive %s: %w", name, err)
		}
		n, err := io.CopyBuffer(tw, io.LimitReader(&tarCtxReader{ctx: ctx, r: f}, fi.Size()), buf)
		f.Close()
		if err != nil {
			return fmt.Errorf("archive %s: %w", name, err)
		}
		if n != fi.Size() {
			return fmt.Errorf("archive %s: shrank while it was read", name)
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// ---- reading ----

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
	// in it, "rootfs" otherwise.
	Kind string
	// Entries are the layer's entries, as ReadTar returns them.
	Entries []*rootfs.Entry
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
	if im.Entries, err = s.readLayer(ctx, l, im.DiffID); err != nil {
		return nil, err
	}
	// Blobs nothing references are checked too: a layout is only as sound
	// as every file in it.
	checked := map[string]bool{mdesc.Digest: true, m.Config.Digest: true, l.Digest: true}
	for _, name := range s.blobNames() {
		d := "sha256:" + path.Base(name)
		if checked[d] {
			continue
		}
		if err := s.verify(ctx, name, -1); err != nil {
			return nil, err
		}
	}
	im.Kind, im.Disk = "rootfs", containerDiskEntry(im.Entries)
	if im.Disk != nil {
		im.Kind = "containerdisk"
	}
	return im, nil
}

// containerDiskEntry returns the disk of a containerDisk layer: the layer
// holds /disk and exactly one regular file in it (and at most the root).
func containerDiskEntry(entries []*rootfs.Entry) *rootfs.Entry {
	var dir, disk *rootfs.Entry
	for _, e := range entries {
		switch {
		case e.Path == "/":
		case e.Path == containerDiskDir && e.Type == rootfs.TypeDir:
			dir = e
		case path.Dir(e.Path) == containerDiskDir && e.Type == rootfs.TypeRegular && disk == nil:
			disk = e
		default:
			return nil
		}
	}
	if dir == nil {
		return nil
	}
	return disk
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

// ociStore reads the files of a layout directory or an oci-archive.
type ociStore struct {
	path string
	// archive is the open oci-archive, nil for a directory.
	archive *os.File
	members map[string]ociMember // archive member name -> data location
}

type ociMember struct{ off, size int64 }

func openOCIStore(p string) (*ociStore, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	s := &ociStore{path: p}
	if fi.IsDir() {
		return s, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	s.archive = f
	if err := s.scanArchive(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return s, nil
}

func (s *ociStore) Close() error {
	if s.archive != nil {
		return s.archive.Close()
	}
	return nil
}

// scanArchive records where each member's data lies, reading headers only.
func (s *ociStore) scanArchive() error {
	var magic [6]byte
	n, _ := io.ReadFull(s.archive, magic[:])
	switch {
	case n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b,
		n >= 4 && bytes.Equal(magic[:4], []byte{0x28, 0xb5, 0x2f, 0xfd}),
		n >= 6 && bytes.Equal(magic[:6], []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return errors.New("a compressed oci-archive; decompress it first")
	}
	if _, err := s.archive.Seek(0, io.SeekStart); err != nil {
		return err
	}
	s.members = map[string]ociMember{}
	tr := tar.NewReader(s.archive)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("oci-archive: %w", err)
		}
		p, err := tarPath(hdr.Name)
		if err != nil {
			return fmt.Errorf("oci-archive: member %q: %w", hdr.Name, err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return fmt.Errorf("oci-archive: member %q is not a file or directory", hdr.Name)
		}
		name := strings.TrimPrefix(p, "/")
		if _, dup := s.members[name]; dup {
			return fmt.Errorf("oci-archive: member %q appears twice", hdr.Name)
		}
		off, err := s.archive.Seek(0, io.SeekCurrent)
		if err != nil {
			return err
		}
		s.members[name] = ociMember{off: off, size: hdr.Size}
	}
	return nil
}

// open returns a reader over the layout file name ("index.json",
// "blobs/sha256/<hex>") and a function that releases it.
func (s *ociStore) open(name string) (*io.SectionReader, func() error, error) {
	if s.archive != nil {
		m, ok := s.members[name]
		if !ok {
			return nil, nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
		}
		return io.NewSectionReader(s.archive, m.off, m.size), func() error { return nil }, nil
	}
	full := filepath.Join(s.path, filepath.FromSlash(name))
	fi, err := os.Lstat(full)
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s is not a regular file", name)
	}
	f, err := os.Open(full)
	if err != nil {
		return nil, nil, err
	}
	return io.NewSectionReader(f, 0, fi.Size()), f.Close, nil
}

// blob opens the blob with the given digest.
func (s *ociStore) blob(digest string) (*io.SectionReader, func() error, error) {
	hx, err := ociHex(digest)
	if err != nil {
		return nil, nil, err
	}
	return s.open("blobs/sha256/" + hx)
}

// blobNames lists every blob file, sorted.
func (s *ociStore) blobNames() []string {
	var names []string
	if s.archive != nil {
		for name := range s.members {
			if strings.HasPrefix(name, "blobs/") {
				names = append(names, name)
			}
		}
	} else {
		ents, _ := os.ReadDir(filepath.Join(s.path, "blobs", "sha256"))
		for _, e := range ents {
			names = append(names, "blobs/sha256/"+e.Name())
		}
	}
	sort.Strings(names)
	return names
}

func (s *ociStore) readSmall(name string, limit int64) ([]byte, error) {
	sr, closeFn, err := s.open(name)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	if sr.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a layout document may have", name, sr.Size(), limit)
	}
	return io.ReadAll(sr)
}

func (s *ociStore) checkLayoutVersion() error {
	b, err := s.readSmall("oci-layout", 1<<16)
	if err != nil {
		return fmt.Errorf("not an OCI layout: %w", err)
	}
	var v struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("oci-layout: %w", err)
	}
	if v.Version != ociLayoutVersion {
		return fmt.Errorf("oci-layout: imageLayoutVersion %q, want %q", v.Version, ociLayoutVersion)
	}
	return nil
}

// single returns the descriptor of the one image manifest index.json lists.
func (s *ociStore) single() (ociDescriptor, string, error) {
	b, err := s.readSmall("index.json", 4<<20)
	if err != nil {
		return ociDescriptor{}, "", err
	}
	var idx ociIndexJSON
	if err := json.Unmarshal(b, &idx); err != nil {
		return ociDescriptor{}, "", fmt.Errorf("index.json: %w", err)
	}
	if idx.SchemaVersion != 2 {
		return ociDescriptor{}, "", fmt.Errorf("index.json: schemaVersion %d, want 2", idx.SchemaVersion)
	}
	if len(idx.Manifests) != 1 {
		return ociDescriptor{}, "", fmt.Errorf("index.json lists %d manifests; stamp reads layouts holding one image", len(idx.Manifests))
	}
	d := idx.Manifests[0]
	switch d.MediaType {
	case OCIManifestMediaType, string(types.DockerManifestSchema2):
	default:
		return ociDescriptor{}, "", fmt.Errorf("index.json: manifest %s has media type %q, not an image manifest", d.Digest, d.MediaType)
	}
	return d, d.Annotations[ociRefNameAnnotation], nil
}

// readBlob reads a small blob and checks its size and digest.
func (s *ociStore) readBlob(d ociDescriptor, limit int64) ([]byte, error) {
	hx, err := ociHex(d.Digest)
	if err != nil {
		return nil, err
	}
	if d.Size > limit || d.Size < 0 {
		return nil, fmt.Errorf("blob %s: size %d out of range", d.Digest, d.Size)
	}
	b, err := s.readSmall("blobs/sha256/"+hx, limit)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != d.Size {
		return nil, fmt.Errorf("blob %s has %d bytes, its descriptor says %d", d.Digest, len(b), d.Size)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hx {
		return nil, fmt.Errorf("blob %s: content does not match its digest", d.Digest)
	}
	return b, nil
}

// verify hashes the blob file name and compares it with its name (and with
// size unless it is negative).
func (s *ociStore) verify(ctx context.Context, name string, size int64) error {
	sr, closeFn, err := s.open(name)
	if err != nil {
		return err
	}
	defer closeFn()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, &tarCtxReader{ctx: ctx, r: sr}, make([]byte, 1<<20)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return ociCheck(name, h, sr.Size(), size)
}

func ociCheck(name string, h hash.Hash, got, want int64) error {
	if want >= 0 && got != want {
		return fmt.Errorf("%s has %d bytes, its descriptor says %d", name, got, want)
	}
	if hex.EncodeToString(h.Sum(nil)) != path.Base(name) {
		return fmt.Errorf("%s: content does not match its digest", name)
	}
	return nil
}

// readLayer reads the layer with ReadTar through its decompressor, and
// checks its digest and diff_id on the same pass.
func (s *ociStore) readLayer(ctx context.Context, d ociDescriptor, diffID string) ([]*rootfs.Entry, error) {
	alg, _ := ociLayerCompression(d.MediaType)
	sr, closeFn, err := s.blob(d.Digest)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	defer closeFn()
	h, dh := sha256.New(), sha256.New()
	tee := io.TeeReader(sr, h)
	entries, terr := ociReadLayerTar(ctx, alg, tee, dh)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// The decompressor may stop short of the blob's end; the rest still
	// counts for the digest. A blob that does not match its digest is
	// reported as such even when the damage also broke the tar or the
	// compression, since that is the cause.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return nil, fmt.Errorf("layer %s: %w", d.Digest, err)
	}
	hx, _ := ociHex(d.Digest)
	if err := ociCheck("blobs/sha256/"+hx, h, sr.Size(), d.Size); err != nil {
		if terr != nil {
			return nil, fmt.Errorf("%w (and the layer no longer reads as a %s tar: %v)", err, alg, terr)
		}
		return nil, err
	}
	if terr != nil {
		return nil, fmt.Errorf("layer %s: %w", d.Digest, terr)
	}
	if alg != compress.None {
		if got := "sha256:" + hex.EncodeToString(dh.Sum(nil)); got != diffID {
			return nil, fmt.Errorf("layer %s: its uncompressed tar hashes to %s, the config's diff_id is %s", d.Digest, got, diffID)
		}
	}
	return entries, nil
}

// ociReadLayerTar decompresses r with alg and reads the tar in it, hashing
// the whole decompressed stream (the end-of-archive padding included) into
// dh when the layer is compressed.
func ociReadLayerTar(ctx context.Context, alg compress.Algorithm, r io.Reader, dh hash.Hash) ([]*rootfs.Entry, error) {
	if alg == compress.None {
		return ReadTar(ctx, r)
	}
	zr, err := compress.NewReader(alg, r)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	ut := io.TeeReader(zr, dh)
	entries, err := ReadTar(ctx, ut)
	if err != nil {
		return nil, err
	}
	// Reading to the end also makes gzip and zstd check their own
	// checksums.
	if _, err := io.Copy(io.Discard, ut); err != nil {
		return nil, fmt.Errorf("%s: %w", alg, err)
	}
	return entries, nil
}

// ociHex checks a digest string and returns its hex part. Only sha256
// digests are read; the hex part becomes a file name, so it is checked
// strictly.
func ociHex(digest string) (string, error) {
	hx, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hx) != 64 {
		return "", fmt.Errorf("digest %q is not sha256:<64 hex digits>", digest)
	}
	for _, c := range hx {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", fmt.Errorf("digest %q is not sha256:<64 lowercase hex digits>", digest)
		}
	}
	return hx, nil
}

// ---- publishing ----

// OCILayout is an OCI layout opened for publishing: stamp push hands its
// image to a registry client.
type OCILayout struct {
	store    *ociStore
	manifest ociDescriptor
}

// OpenOCILayout opens the layout directory or oci-archive at p, which must
// hold one image. Close it when done.
func OpenOCILayout(p string) (*OCILayout, error) {
	s, err := openOCIStore(p)
	if err != nil {
		return nil, err
	}
	l := &OCILayout{store: s}
	if err := s.checkLayoutVersion(); err != nil {
		s.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if l.manifest, _, err = s.single(); err != nil {
		s.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return l, nil
}

// Close releases the layout.
func (l *OCILayout) Close() error { return l.store.Close() }

// Digest is the image's manifest digest.
func (l *OCILayout) Digest() string { return l.manifest.Digest }

// Image returns the layout's image for go-containerregistry. Its manifest
// and blobs are served byte for byte, so a registry stores it under the
// same digest; every blob is checked against its digest as it is read.
func (l *OCILayout) Image() (v1.Image, error) {
	raw, err := l.store.readBlob(l.manifest, 4<<20)
	if err != nil {
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", l.manifest.Digest, err)
	}
	cfg, err := l.store.readBlob(ociDescriptor{Digest: m.Config.Digest.String(), Size: m.Config.Size}, 4<<20)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return partial.CompressedToImage(&ociPushImage{l: l, raw: raw, m: m, cfg: cfg})
}

// ociPushImage is the layout's image as go-containerregistry's partial
// package wants it: the raw documents and each layer's blob as is.
type ociPushImage struct {
	l   *OCILayout
	raw []byte
	m   *v1.Manifest
	cfg []byte
}

func (i *ociPushImage) RawConfigFile() ([]byte, error) { return i.cfg, nil }
func (i *ociPushImage) RawManifest() ([]byte, error)   { return i.raw, nil }
func (i *ociPushImage) MediaType() (types.MediaType, error) {
	if i.m.MediaType != "" {
		return i.m.MediaType, nil
	}
	return types.OCIManifestSchema1, nil
}

func (i *ociPushImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, d := range i.m.Layers {
		if d.Digest == h {
			return &ociPushLayer{store: i.l.store, desc: d}, nil
		}
	}
	if i.m.Config.Digest == h {
		return &ociPushLayer{store: i.l.store, desc: i.m.Config}, nil
	}
	return nil, fmt.Errorf("blob %s is not in manifest %s", h, i.l.manifest.Digest)
}

type ociPushLayer struct {
	store *ociStore
	desc  v1.Descriptor
}

func (l *ociPushLayer) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *ociPushLayer) Size() (int64, error)                { return l.desc.Size, nil }
func (l *ociPushLayer) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }

// Compressed streams the blob and fails at its end if it does not hash to
// its digest, so a corrupt layout is never published as sound.
func (l *ociPushLayer) Compressed() (io.ReadCloser, error) {
	sr, closeFn, err := l.store.blob(l.desc.Digest.String())
	if err != nil {
		return nil, err
	}
	hx, _ := ociHex(l.desc.Digest.String())
	return &ociVerifyReader{r: sr, h: sha256.New(), name: "blobs/sha256/" + hx, want: l.desc.Size, close: closeFn}, nil
}

type ociVerifyReader struct {
	r     io.Reader
	h     hash.Hash
	n     int64
	name  string
	want  int64
	close func() error
}

func (v *ociVerifyReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if err == io.EOF {
		if cerr := ociCheck(v.name, v.h, v.n, v.want); cerr != nil {
			return n, cerr
		}
	}
	return n, err
}

func (v *ociVerifyReader) Close() error { return v.close() }
