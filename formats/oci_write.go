package formats

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// ociFormat writes an image as an OCI layout directory ("<base>.oci") or an
// oci-archive tar of that layout ("<base>.oci.tar"), plus "<main>.digest"
// holding the manifest digest, the one a registry will report.
//
// kind rootfs: one layer, the tree as WriteTar writes it. kind
// containerdisk: one layer holding the file of the output named by from
// (a qcow2 or raw disk) as /disk/<its file name>. kind disk: an artifact
// laid out as ORAS pushes a file, which Tinkerbell's oci2disk pulls and
// streams onto a disk: one layer that is the compressed raw output named
// by from as it is, media type application/vnd.oci.image.layer.v1.tar,
// titled with its file name, and ORAS's empty config.
type ociFormat struct{}

// OCISpec is an oci output's options.
type OCISpec struct {
	// Kind is rootfs (the tree as the image's layer, the default),
	// containerdisk (the disk of the output it is made from, for KubeVirt)
	// or disk (the compressed raw it is made from, for oci2disk).
	Kind string
	// Layout is dir (an OCI layout directory, the default) or archive (an
	// oci-archive tar of one).
	Layout string
	// Compression is the layer's: gzip (the default), zstd or none.
	Compression compress.Algorithm
	Entrypoint  []string
	Env         []string          // KEY=VALUE
	Labels      map[string]string // sorted where used
}

func (ociFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	so, err := optionsOf[OCISpec](spec)
	if err != nil {
		return nil, err
	}
	kind, layout := so.Kind, so.Layout
	if kind == "" {
		kind = "rootfs"
	}
	if layout == "" {
		layout = "dir"
	}
	if kind != "rootfs" && kind != "containerdisk" && kind != "disk" {
		return nil, fmt.Errorf("oci: kind %q must be rootfs, containerdisk or disk", kind)
	}
	if layout != "dir" && layout != "archive" {
		return nil, fmt.Errorf("oci: layout %q must be dir or archive", layout)
	}
	if kind == "containerdisk" && src.From == "" {
		return nil, errors.New("oci: a containerdisk is made from a raw or qcow2 output; from is not set")
	}
	if kind == "disk" && src.From == "" {
		return nil, errors.New("oci: a disk artifact is made from a compressed output; from is not set")
	}
	alg, err := ociCompression(so.Compression)
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
	w := &ociWriter{ctx: ctx, src: src, spec: so, dir: layoutDir, plat: plat, alg: alg}
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
func ociCompression(alg compress.Algorithm) (compress.Algorithm, error) {
	if alg == "" {
		return compress.Gzip, nil
	}
	if _, ok := ociLayerMediaTypes[alg]; !ok {
		return "", fmt.Errorf("oci: compression %q: a layer is gzip, zstd or none", alg)
	}
	return alg, nil
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

type ociWriter struct {
	ctx  context.Context
	src  *Source
	spec *OCISpec
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
	if kind == "disk" {
		return w.writeDiskArtifact(res)
	}
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
	plat := w.plat
	if err := w.index(manifest, &plat); err != nil {
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

// index writes index.json naming the one manifest.
func (w *ociWriter) index(manifest ociDescriptor, plat *ociPlatformJSON) error {
	manifest.Annotations = map[string]string{ociRefNameAnnotation: OCIRefName}
	manifest.Platform = plat
	index, err := json.Marshal(ociIndexJSON{SchemaVersion: 2, MediaType: OCIIndexMediaType, Manifests: []ociDescriptor{manifest}})
	if err != nil {
		return err
	}
	return w.small("index.json", index)
}

// writeDiskArtifact lays out kind disk: the compressed raw as the one
// layer, as it is, and ORAS's config, "{}" of an unknown media type.
func (w *ociWriter) writeDiskArtifact(res *Result) (*Result, string, error) {
	in, err := os.Open(w.src.From)
	if err != nil {
		return nil, "", fmt.Errorf("disk source: %w", err)
	}
	defer in.Close()
	blobs := filepath.Join(w.dir, "blobs", "sha256")
	tmp := filepath.Join(blobs, ".layer.tmp")
	h := sha256.New()
	var n int64
	err = writeFile(tmp, func(f *os.File) error {
		var err error
		n, err = io.Copy(io.MultiWriter(f, h), &tarCtxReader{ctx: w.ctx, r: in})
		return err
	})
	if err != nil {
		return nil, "", err
	}
	hx := hex.EncodeToString(h.Sum(nil))
	if err := os.Rename(tmp, filepath.Join(blobs, hx)); err != nil {
		os.Remove(tmp)
		return nil, "", err
	}
	layer := ociDescriptor{MediaType: OCILayerMediaType, Digest: "sha256:" + hx, Size: n,
		Annotations: map[string]string{OCITitleAnnotation: filepath.Base(w.src.From)}}
	config, err := w.blob(ORASConfigMediaType, struct{}{})
	if err != nil {
		return nil, "", err
	}
	manifest, err := w.blob(OCIManifestMediaType, ociManifestJSON{
		SchemaVersion: 2, MediaType: OCIManifestMediaType, Config: config, Layers: []ociDescriptor{layer},
	})
	if err != nil {
		return nil, "", err
	}
	if err := w.index(manifest, nil); err != nil {
		return nil, "", err
	}
	res.Adds = append(res.Adds,
		fmt.Sprintf("# oci manifest %s size=%d", manifest.Digest, manifest.Size),
		fmt.Sprintf("# oci config %s size=%d mediaType=%s", config.Digest, config.Size, config.MediaType),
		fmt.Sprintf("# oci layer %s size=%d mediaType=%s title=%s", layer.Digest, layer.Size, layer.MediaType, filepath.Base(w.src.From)))
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
		// The disk (a raw disk or a qcow2) was written past the page
		// cache: read it past it too.
		pr := newPastCacheReader(f, fi.Size())
		defer pr.Close()
		r := &tarCtxReader{ctx: w.ctx, r: io.NewSectionReader(pr, 0, fi.Size())}
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
	// The image holds the disk, so it adds what the disk adds, and the
	// layer's own directory and file, named as a reader names them.
	res.Adds = append(res.Adds, w.src.FromAdds...)
	dirEntry.Path, fileEntry.Path = "layer:"+dirEntry.Path, "layer:"+fileEntry.Path
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
