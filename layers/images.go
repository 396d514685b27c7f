package layers

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/containerd"
	"github.com/stamp-dev/stamp/layers/ociremote"
	"github.com/stamp-dev/stamp/rootfs"
)

const (
	// DefaultImagesDir is where pre-seeded image archives go.
	DefaultImagesDir = "/var/lib/stamp/images"
	// ImportUnit imports the archives into containerd at first boot.
	ImportUnit     = "stamp-import-images.service"
	importUnitPath = "/usr/lib/systemd/system/" + ImportUnit
	// importedStamp marks that the import ran, so it runs once per machine
	// rather than once per boot.
	importedStamp = "/var/lib/stamp/images-imported"
	importCommand = "ExecStart=/usr/bin/ctr -n k8s.io images import "

	refNameAnnotation        = "org.opencontainers.image.ref.name"
	containerdNameAnnotation = "io.containerd.image.name"
)

// Images stores container images in the tree, one oci-archive tar per
// image, so a node without network has them at first boot. Each archive's
// index.json names its image by its full name and tag (e.g.
// registry.example/pause:3.10), the name kubelet asks the runtime for, in both
// the OCI ref.name annotation and containerd's image name annotation. A
// systemd oneshot unit, enabled here, runs `ctr -n k8s.io images import` for
// every archive at first boot.
//
// An image pinned by an index keeps that index, holding only the recipe's
// platform, so the runtime records the digest the recipe pinned.
type Images struct {
	// Images are the inputs, Kind "image", URI name:tag[@sha256:...],
	// each pinned by the recipe or, from its tag, by stamp.lock.
	Images []*Input
	// Dir is where the archives go; "" is DefaultImagesDir.
	Dir string
	// Into is where the images go: "" for archives and the import unit,
	// IntoContainerd for containerd's own state, written now (see
	// layers/containerd), so the node boots with nothing to import.
	Into string
	// DiscardLayers, with IntoContainerd, leaves the layer blobs out of the
	// content store once unpacked; nil follows the tree's containerd
	// configuration (discard_unpacked_layers).
	DiscardLayers *bool
}

// IntoContainerd is Images.Into for containerd's own state.
const IntoContainerd = "containerd"

// Kind implements Layer.
func (l *Images) Kind() string { return "images" }

// Inputs implements WithInputs.
func (l *Images) Inputs() []*Input { return l.Images }

// Apply implements Layer.
func (l *Images) Apply(ctx context.Context, env *Env) error {
	if l.Into == IntoContainerd {
		return l.applyContainerd(ctx, env)
	}
	dir := path.Clean("/" + l.Dir)
	if l.Dir == "" {
		dir = DefaultImagesDir
	}
	files := map[string]string{}
	var archives []string
	for i, in := range l.Images {
		if err := ctx.Err(); err != nil {
			return err
		}
		full, err := ImageName(in.URI)
		if err != nil {
			return fmt.Errorf("%s[%d]: %w", env.Label, i, err)
		}
		file := path.Join(dir, imageArchiveName(full))
		if other, dup := files[file]; dup {
			return fmt.Errorf("%s[%d]: %s and %s would both be stored as %s", env.Label, i, other, full, file)
		}
		files[file] = full
		if err := l.writeArchive(ctx, env, in, full, file); err != nil {
			return fmt.Errorf("%s[%d]: %s: %w", env.Label, i, in.URI, err)
		}
		archives = append(archives, file)
	}
	if err := writeImportUnit(ctx, env, archives); err != nil {
		return fmt.Errorf("%s: %s: %w", env.Label, ImportUnit, err)
	}
	return nil
}

// ImageName is the name a runtime knows an image by: the reference's
// registry, repository and tag. The reference must name its registry: a
// short name ("busybox:1.36") means whatever registry each tool defaults
// to, and the runtime's default need not be the one the image came from.
// It is an error for the reference to have no tag.
func ImageName(ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("reference %q: %w", ref, err)
	}
	n, tag, _ := ociSplitRef(ref)
	if tag == "" {
		return "", fmt.Errorf("reference %q has no tag; the runtime needs name:tag to find the image", ref)
	}
	host, _, ok := strings.Cut(n, "/")
	if !ok || !(strings.ContainsAny(host, ".:") || host == "localhost") {
		return "", fmt.Errorf("reference %q does not name its registry; write it in full (host/repository:tag@digest)", ref)
	}
	repo := r.Context()
	return repo.RegistryStr() + "/" + repo.RepositoryStr() + ":" + tag, nil
}

// ociSplitRef splits name:tag@digest.
func ociSplitRef(ref string) (n, tag, digest string) {
	n, digest, _ = strings.Cut(ref, "@")
	if c := strings.LastIndex(n, ":"); c > strings.LastIndex(n, "/") {
		n, tag = n[:c], n[c+1:]
	}
	return n, tag, digest
}

// imageArchiveName turns an image name into a file name: anything but letters,
// digits, '.', '_' and '-' becomes '_'.
func imageArchiveName(full string) string {
	b := []byte(full)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b) + ".tar"
}

// archiveBlob is one blob of an archive.
type archiveBlob struct {
	digest string
	size   int64
}

func (l *Images) writeArchive(ctx context.Context, env *Env, in *Input, full, file string) error {
	if in.Digest == "" {
		return fmt.Errorf("input was not resolved")
	}
	top, err := ociremote.LoadManifest(env.Cache, in.Digest)
	if err != nil {
		return err
	}
	blobs := []archiveBlob{{in.Digest, int64(len(top.Raw))}}
	img := top
	if top.Index != nil {
		d, err := ociremote.SelectPlatform(in.URI, top, ociremote.DefaultPlatform(env.Arch))
		if err != nil {
			return err
		}
		if img, err = ociremote.LoadManifest(env.Cache, d.Digest.String()); err != nil {
			return err
		}
		if img.Image == nil {
			return fmt.Errorf("index %s names %s, which is %w", top.Digest, img.Digest, ociremote.ErrNotImage)
		}
		blobs = append(blobs, archiveBlob{img.Digest, int64(len(img.Raw))})
	}
	for _, d := range img.Blobs() {
		blobs = append(blobs, archiveBlob{d.Digest.String(), d.Size})
	}
	index := v1.IndexManifest{
		SchemaVersion: 2,
		MediaType:     types.OCIImageIndex,
		Manifests: []v1.Descriptor{{
			MediaType: top.MediaType,
			Size:      int64(len(top.Raw)),
			Digest:    ociHash(top.Digest),
			Annotations: map[string]string{
				refNameAnnotation:        full,
				containerdNameAnnotation: full,
			},
		}},
	}
	indexJSON, err := json.Marshal(index)
	if err != nil {
		return err
	}
	h := rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: env.Epoch,
		Origin: env.Origin(in.Digest, full+"@"+in.Digest)}
	rp, err := env.Tree.Resolve(file, true)
	if err != nil {
		return err
	}
	if env.Maker != "" && env.Cache.Writable() && env.Tree.KeepsReferences() {
		if err := keepArchive(ctx, env, full, rp, h, indexJSON, blobs); err != nil {
			return err
		}
		env.Log.WithField("archive", file).WithField("blobs", len(blobs)).Debugf("stored image %s as a reference", full)
		return nil
	}
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeOCIArchive(ctx, pw, env.Cache, env.Epoch, indexJSON, blobs))
	}()
	defer pr.Close()
	if _, err := env.Tree.Create(rp, h, pr); err != nil {
		return err
	}
	env.Log.WithField("archive", file).WithField("blobs", len(blobs)).Debugf("stored image %s", full)
	return nil
}

// recordImageArchive files an image archive the cache keeps, under a key of
// everything its bytes depend on, so that a later build points the tree's
// file at it without reading a blob.
const recordImageArchive = "image-archive"

// keepArchive makes the archive a reference to a blob the cache keeps,
// writing it there first unless an earlier build did.
func keepArchive(ctx context.Context, env *Env, full, rp string, h rootfs.Header, indexJSON []byte, blobs []archiveBlob) error {
	sum := sha256.Sum256(indexJSON)
	parts := []cache.Part{
		{Name: "stamp", Digest: env.Maker},
		{Name: "epoch", Digest: strconv.FormatInt(env.Epoch.Unix(), 10)},
		{Name: "index.json", Digest: "sha256:" + hex.EncodeToString(sum[:])},
	}
	for _, b := range blobs {
		parts = append(parts, cache.Part{Name: "blob", Digest: b.digest})
	}
	key := cache.KeyOf(parts)
	r, err := env.Cache.Record(recordImageArchive, key)
	if err != nil {
		env.Log.WithError(err).Warnf("cache: ignoring the kept archive of %s; writing it again", full)
	}
	if r != nil && len(r.Blobs) == 1 {
		if hexSum, err := cache.ParseDigest(r.Blobs[0].Digest); err == nil {
			_, _, err := env.Tree.CreateKept(rp, h, hexSum, r.Blobs[0].Size)
			if err == nil {
				return nil
			}
			// A damaged blob is removed as it is found: write it again.
			env.Log.WithError(err).Warnf("cache: the kept archive of %s is unusable; writing it again", full)
		}
	}
	hexSum, size, err := env.Cache.KeepWritten(ctx, full, func(w io.Writer) error {
		return writeOCIArchive(ctx, w, env.Cache, env.Epoch, indexJSON, blobs)
	})
	if err != nil {
		return err
	}
	rec := &cache.Record{Kind: recordImageArchive, Key: key, Subject: full, Parts: parts,
		Blobs: []cache.RecordBlob{{Name: "archive", Digest: "sha256:" + hexSum, Size: size}}}
	if err := env.Cache.PutRecord(rec); err != nil {
		env.Log.WithError(err).Warnf("cache: cannot file the kept archive of %s", full)
	}
	_, _, err = env.Tree.CreateKept(rp, h, hexSum, size)
	return err
}

func ociHash(d string) v1.Hash {
	h, err := v1.NewHash(d)
	if err != nil {
		// Digests come from the cache, which only holds well-formed ones.
		panic(fmt.Sprintf("digest %q: %v", d, err))
	}
	return h
}

// writeOCIArchive writes an OCI image layout as a tar the same way every
// time: entries in byte order, owner 0:0 without names, mtime the epoch.
func writeOCIArchive(ctx context.Context, w io.Writer, c *cache.Cache, epoch time.Time, indexJSON []byte, blobs []archiveBlob) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	tw := tar.NewWriter(bw)
	dir := func(n string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: n, Mode: 0o755, ModTime: epoch, Format: tar.FormatUSTAR})
	}
	file := func(n string, size int64, r io.Reader) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: size, ModTime: epoch, Format: tar.FormatUSTAR}); err != nil {
			return err
		}
		_, err := io.Copy(tw, r)
		return err
	}
	sorted := append([]archiveBlob(nil), blobs...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].digest < sorted[j].digest })
	if err := dir("blobs/"); err != nil {
		return err
	}
	if err := dir("blobs/sha256/"); err != nil {
		return err
	}
	for i, b := range sorted {
		if i > 0 && b.digest == sorted[i-1].digest {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		hexSum, err := cache.ParseDigest(b.digest)
		if err != nil {
			return err
		}
		rc, err := c.Open(b.digest)
		if err != nil {
			return err
		}
		// The cache's reader fails at the end if the blob hashes wrong; the
		// tar writer fails if the size is not the manifest's.
		err = file("blobs/sha256/"+hexSum, b.size, rc)
		rc.Close()
		if err != nil {
			return fmt.Errorf("blob %s: %w", b.digest, err)
		}
	}
	if err := file("index.json", int64(len(indexJSON)), bytes.NewReader(indexJSON)); err != nil {
		return err
	}
	layout := []byte(`{"imageLayoutVersion":"1.0.0"}`)
	if err := file("oci-layout", int64(len(layout)), bytes.NewReader(layout)); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

// writeImportUnit writes the oneshot unit importing every archive (those of
// earlier images layers too) and enables it.
func writeImportUnit(ctx context.Context, env *Env, archives []string) error {
	all := map[string]bool{}
	for _, a := range archives {
		all[a] = true
	}
	if old, err := env.Tree.Lookup(importUnitPath, true); err == nil && old.Type == rootfs.TypeRegular {
		f, err := env.Tree.Open(old.Path)
		if err != nil {
			return err
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if a, ok := strings.CutPrefix(sc.Text(), importCommand); ok {
				all[a] = true
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return err
		}
	}
	// Before cloud-final too: Cluster API's bootstrap runs kubeadm from
	// cloud-init's runcmd, whose preflight must find every image present.
	var b strings.Builder
	b.WriteString(`# Written by stamp: imports the container images the recipe pre-seeded
# into containerd's k8s.io namespace, once.
[Unit]
Description=Import pre-seeded container images into containerd
Requires=containerd.service
After=containerd.service
Before=kubelet.service cloud-final.service
ConditionPathExists=!` + importedStamp + `

[Service]
Type=oneshot
RemainAfterExit=yes
`)
	for _, a := range ociSortedKeys(all) {
		b.WriteString(importCommand + a + "\n")
	}
	b.WriteString("ExecStartPost=/usr/bin/touch " + importedStamp + "\n\n[Install]\nWantedBy=multi-user.target\n")
	h := rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: env.Epoch, Origin: env.Origin("", "generated")}
	rp, err := env.Tree.Resolve(importUnitPath, true)
	if err != nil {
		return err
	}
	if _, err := env.Tree.Create(rp, h, strings.NewReader(b.String())); err != nil {
		return err
	}
	return (&Systemd{Enable: []string{ImportUnit}}).Apply(ctx, env)
}

// applyContainerd writes the images into containerd's state in the tree.
func (l *Images) applyContainerd(ctx context.Context, env *Env) error {
	var imgs []containerd.Image
	names := map[string]int{}
	for i, in := range l.Images {
		full, err := ImageName(in.URI)
		if err != nil {
			return fmt.Errorf("%s[%d]: %w", env.Label, i, err)
		}
		if in.Digest == "" {
			return fmt.Errorf("%s[%d]: %s: input was not resolved", env.Label, i, in.URI)
		}
		if j, dup := names[full]; dup {
			return fmt.Errorf("%s[%d]: %s is listed twice (first at [%d])", env.Label, i, full, j)
		}
		names[full] = i
		imgs = append(imgs, containerd.Image{Name: full, Digest: in.Digest})
	}
	start := time.Now()
	r, err := containerd.Write(ctx, env.Tree, env.Cache, imgs, containerd.Options{
		Platform:      ociremote.DefaultPlatform(env.Arch),
		Epoch:         env.Epoch,
		DiscardLayers: l.DiscardLayers,
		Origin:        env.Origin,
		Log:           env.Log,
	})
	if err != nil {
		return fmt.Errorf("%s: into containerd: %w", env.Label, err)
	}
	// The sizes and the time are what make bench reports for the node.
	env.Log.WithField("containerd", r.Package+" "+r.Version).WithField("images", len(imgs)).
		WithField("snapshots", len(r.Snapshots)).WithField("contentBytes", r.ContentBytes).
		WithField("layerBytes", r.LayerBytes).WithField("snapshotBytes", r.SnapshotBytes).
		WithField("discarded", r.Discarded).WithField("seconds", time.Since(start).Seconds()).
		Infof("wrote %d images into containerd's state (%d names)", len(imgs), len(r.Names))
	return nil
}
