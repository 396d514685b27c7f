package containerd

import (
	"bufio"
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
	"slices"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/ociremote"
	"github.com/stamp-dev/stamp/packages/dpkg"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// Namespace is the containerd namespace the CRI plugin keeps its images in.
const Namespace = "k8s.io"

// Labels the CRI plugin and containerd's pull put on what they write.
const (
	labelCRIImage       = "io.cri-containerd.image"
	labelCRIPinned      = "io.cri-containerd.pinned"
	labelSnapshotRef    = "containerd.io/snapshot.ref"
	labelUncompressed   = "containerd.io/uncompressed"
	labelGCRefContent   = "containerd.io/gc.ref.content"
	labelGCRefSnapshot  = "containerd.io/gc.ref.snapshot." + Snapshotter
	labelDistSource     = "containerd.io/distribution.source."
	inheritedSnapLabels = "containerd.io/snapshot/"
)

// Paths inside containerd's state directory (Config.Root) and the
// snapshotter's (Config.SnapshotterRoot).
const (
	contentDir  = "io.containerd.content.v1.content"
	metadataDir = "io.containerd.metadata.v1.bolt"
	metaDB      = "meta.db"
	snapshotsDB = "metadata.db"
)

// Image is one image to write.
type Image struct {
	// Name is how the CRI plugin lists it: registry/repository:tag.
	Name string
	// Digest is what the name was pinned to, an index or an image
	// manifest, held in the cache with the platform's blobs.
	Digest string
}

// Options tune Write.
type Options struct {
	// Platform is the os/arch[/variant] whose manifest an index gives.
	Platform string
	// Epoch is every timestamp written: files, directories and the
	// databases' createdat and updatedat.
	Epoch time.Time
	// DiscardLayers leaves the layer blobs out of the content store once
	// they are unpacked, as the CRI plugin's discard_unpacked_layers does;
	// nil follows the tree's configuration.
	DiscardLayers *bool
	// Origin makes the origin of an entry written for an input.
	Origin func(input, member string) rootfs.Origin
	Log    logrus.FieldLogger
}

// Result says what Write wrote.
type Result struct {
	// Package and Version are the tree's containerd package, as dpkg
	// records it, and Schema what was written for it.
	Package, Version string
	Schema           Schema
	Config           Config
	// Names are the image records, in byte order.
	Names []string
	// Snapshots are the committed snapshots, by ID.
	Snapshots []Snapshot
	// ContentBytes are the blobs in the content store; LayerBytes the
	// layer blobs among them, or, when Discarded, left out.
	ContentBytes, LayerBytes int64
	Discarded                bool
	// SnapshotBytes is what containerd's usage counts of the snapshots:
	// their blocks on a file system of 4 KiB blocks (see Snapshot.Size).
	SnapshotBytes int64
}

// Snapshot is one committed snapshot: one layer chain.
type Snapshot struct {
	ID      uint64
	ChainID string
	Parent  string // the parent's chain ID
	// Inodes and Size are what containerd's usage would count: every
	// inode, and its blocks on a 4 KiB-block file system.
	Inodes, Size int64
}

// ErrStateExists is a tree that already holds containerd metadata.
var ErrStateExists = errors.New("the tree already holds containerd's metadata; write every image in one images layer")

// Write writes imgs into the tree as the containerd the tree holds keeps
// them after the CRI plugin pulled them: the content store, one committed
// overlayfs snapshot per layer chain, and both databases, in the k8s.io
// namespace with the names, labels and garbage-collection references CRI
// and containerd's unpacker give them.
func Write(ctx context.Context, t *rootfs.Tree, c *cache.Cache, imgs []Image, o Options) (*Result, error) {
	pkg, version, err := InstalledVersion(t)
	if err != nil {
		return nil, err
	}
	schema, err := SchemaFor(pkg, version)
	if err != nil {
		return nil, err
	}
	data, err := readTreeFile(t, ConfigPath)
	if err != nil && !errors.Is(err, rootfs.ErrNotExist) {
		return nil, err
	}
	cfg, err := ParseConfig(data)
	if err != nil {
		return nil, err
	}
	if cfg.Version != 0 && !slices.Contains(schema.ConfigVersions, cfg.Version) {
		return nil, fmt.Errorf("%s: version = %d, which containerd %s does not read", ConfigPath, cfg.Version, version)
	}
	if e, err := t.Lookup(path.Join(cfg.Root, metadataDir, metaDB), true); err == nil && e != nil {
		return nil, fmt.Errorf("%s: %w", path.Join(cfg.Root, metadataDir, metaDB), ErrStateExists)
	}
	w := &writer{t: t, c: c, o: o, schema: schema, cfg: cfg, version: version,
		blobs: map[string]*blob{}, snaps: map[string]*snapshot{}, images: map[string]*imageRecord{}}
	if w.o.Origin == nil {
		w.o.Origin = func(input, member string) rootfs.Origin { return rootfs.Origin{Input: input, Member: member} }
	}
	if w.o.Log == nil {
		l := logrus.New()
		l.Out = io.Discard
		w.o.Log = l
	}
	w.discard = cfg.DiscardUnpackedLayers
	if o.DiscardLayers != nil {
		w.discard = *o.DiscardLayers
	}
	w.sandbox = normalizeRef(cfg.SandboxImage)
	if cfg.SandboxImage == "" {
		w.sandbox = schema.SandboxImage
	}
	for _, im := range imgs {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := w.add(ctx, im); err != nil {
			return nil, fmt.Errorf("%s: %w", im.Name, err)
		}
	}
	if err := w.write(ctx); err != nil {
		return nil, err
	}
	return w.result(pkg), nil
}

// InstalledVersion is the name and version of the containerd package the
// tree's dpkg database has installed: Debian's containerd, or an upstream
// build packaged as containerd.io.
func InstalledVersion(t *rootfs.Tree) (pkg, version string, err error) {
	data, err := readTreeFile(t, dpkg.StatusPath)
	if err != nil {
		return "", "", fmt.Errorf("the tree's dpkg database: %w; images: into: containerd needs the containerd package installed first", err)
	}
	st, err := dpkg.ReadStatus(strings.NewReader(string(data)))
	if err != nil {
		return "", "", err
	}
	for _, name := range []string{"containerd", "containerd.io"} {
		p := st.Get(name)
		if p == nil || !strings.HasSuffix(p.Get("Status"), " installed") {
			continue
		}
		return name, p.Get("Version"), nil
	}
	return "", "", fmt.Errorf("the tree has no containerd package installed (dpkg database %s); images: into: containerd writes containerd's state for the containerd the tree holds, so install it in an earlier layer", dpkg.StatusPath)
}

func readTreeFile(t *rootfs.Tree, p string) ([]byte, error) {
	e, err := t.Lookup(p, true)
	if err != nil {
		return nil, err
	}
	if e.Type != rootfs.TypeRegular {
		return nil, fmt.Errorf("%s is a %s, not a file", p, e.Type)
	}
	f, err := t.Open(e.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// normalizeRef names an image as the CRI plugin's reference parser does:
// docker.io and library/ added to a short name, :latest to one without a
// tag, and a tag dropped beside a digest.
func normalizeRef(ref string) string {
	if ref == "" {
		return ""
	}
	name, digest, _ := strings.Cut(ref, "@")
	tag := ""
	if c := strings.LastIndex(name, ":"); c > strings.LastIndex(name, "/") {
		name, tag = name[:c], name[c+1:]
	}
	host, rest, ok := strings.Cut(name, "/")
	if !ok || !(strings.ContainsAny(host, ".:") || host == "localhost") {
		if !ok {
			rest = "library/" + name
		} else {
			rest = name
		}
		host = "docker.io"
	}
	name = host + "/" + rest
	switch {
	case digest != "":
		return name + "@" + digest
	case tag == "":
		return name + ":latest"
	}
	return name + ":" + tag
}

// blob is one blob of the content store.
type blob struct {
	digest string
	size   int64
	layer  bool
	labels map[string]string
	// member names the image it was first written for, for its origin.
	member string
}

// snapshot is one layer chain to unpack.
type snapshot struct {
	Snapshot
	parent *snapshot
	layer  v1.Descriptor
	diffID string
	labels map[string]string
}

type imageRecord struct {
	target v1.Descriptor
	labels map[string]string
}

type writer struct {
	t       *rootfs.Tree
	c       *cache.Cache
	o       Options
	schema  Schema
	cfg     Config
	version string
	discard bool
	sandbox string

	blobs  map[string]*blob
	snaps  map[string]*snapshot // by chain ID
	order  []*snapshot          // by ID
	images map[string]*imageRecord
}

// add plans one image: its blobs, labels, layer chains and names.
func (w *writer) add(ctx context.Context, im Image) error {
	top, err := ociremote.LoadManifest(w.c, im.Digest)
	if err != nil {
		return err
	}
	name, _, _ := strings.Cut(im.Name, "@")
	repoName := name
	if c := strings.LastIndex(repoName, ":"); c > strings.LastIndex(repoName, "/") {
		repoName = repoName[:c]
	}
	host, repo, _ := strings.Cut(repoName, "/")
	if h, _, ok := strings.Cut(host, ":"); ok && !strings.HasPrefix(host, "[") {
		host = h // containerd keys the source by host name alone
	}
	source := func(b *blob) {
		k := labelDistSource + host
		b.labels[k] = mergeSources(b.labels[k], repo)
	}
	member := name + "@" + im.Digest
	img, err := w.platformManifest(im, top, member, source)
	if err != nil {
		return err
	}
	m := img.Image
	for _, l := range m.Layers {
		if err := checkLayer(l); err != nil {
			return err
		}
	}
	diffIDs, err := w.imageConfig(img)
	if err != nil {
		return err
	}
	mb := w.blobs[img.Digest]
	kinds := []string{labelGCRefContent + ".config"}
	if !w.discard {
		for range m.Layers {
			kinds = append(kinds, labelGCRefContent+".l.")
		}
	}
	setChildLabels(mb, kinds, func(i int) string {
		if i == 0 {
			return m.Config.Digest.String()
		}
		return m.Layers[i-1].Digest.String()
	})
	cb := w.blob(m.Config.Digest.String(), m.Config.Size, false, member)
	source(cb)
	topSnap, err := w.addSnapshots(m, diffIDs, member, source)
	if err != nil {
		return err
	}
	if topSnap != nil {
		cb.labels[labelGCRefSnapshot] = topSnap.ChainID
	}
	labels := map[string]string{labelCRIImage: "managed"}
	if w.schema.Pinned(upstreamVersion(w.version)) && w.sandbox == normalizeRef(name) {
		labels[labelCRIPinned] = "pinned"
	}
	target := v1.Descriptor{MediaType: top.MediaType, Digest: ociDigest(im.Digest), Size: int64(len(top.Raw))}
	for _, n := range []string{m.Config.Digest.String(), name, repoName + "@" + im.Digest} {
		w.images[n] = &imageRecord{target: target, labels: labels}
	}
	return nil
}

// platformManifest adds the blob of im's top manifest, and, when that is
// an index, labels its children and returns the platform's image manifest,
// whose blob it adds too.
func (w *writer) platformManifest(im Image, top *ociremote.Manifest, member string, source func(*blob)) (*ociremote.Manifest, error) {
	topBlob := w.blob(im.Digest, int64(len(top.Raw)), false, member)
	source(topBlob)
	if top.Index == nil {
		return top, nil
	}
	d, err := ociremote.SelectPlatform(im.Name, top, w.o.Platform)
	if err != nil {
		return nil, err
	}
	// containerd labels every child of an index, of every platform, and
	// fetches the platform's alone.
	children := make([]string, len(top.Index.Manifests))
	for i, ch := range top.Index.Manifests {
		children[i] = childGCLabel(ch.MediaType)
	}
	setChildLabels(topBlob, children, func(i int) string { return top.Index.Manifests[i].Digest.String() })
	img, err := ociremote.LoadManifest(w.c, d.Digest.String())
	if err != nil {
		return nil, err
	}
	if img.Image == nil {
		return nil, fmt.Errorf("index %s names %s, which is %w", top.Digest, img.Digest, ociremote.ErrNotImage)
	}
	source(w.blob(img.Digest, int64(len(img.Raw)), false, member))
	return img, nil
}

// imageConfig reads img's config, checks it against the manifest and the
// platform, and returns its layers' diff IDs.
func (w *writer) imageConfig(img *ociremote.Manifest) ([]string, error) {
	m := img.Image
	raw, err := ociremote.ReadBlob(w.c, m.Config.Digest.String())
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var cfg struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
		RootFS       struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return nil, fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	if len(cfg.RootFS.DiffIDs) != len(m.Layers) {
		return nil, fmt.Errorf("config %s lists %d diff IDs for %d layers", m.Config.Digest, len(cfg.RootFS.DiffIDs), len(m.Layers))
	}
	if parts := strings.Split(w.o.Platform, "/"); len(parts) >= 2 && cfg.Architecture != "" && cfg.Architecture != parts[1] {
		return nil, fmt.Errorf("image %s is for %s/%s, not %s", img.Digest, cfg.OS, cfg.Architecture, w.o.Platform)
	}
	return cfg.RootFS.DiffIDs, nil
}

// addSnapshots adds the snapshot of each of m's layer chains that is not
// there yet, and each layer's blob, and returns the top snapshot (nil for
// an image of no layers).
func (w *writer) addSnapshots(m *v1.Manifest, diffIDs []string, member string, source func(*blob)) (*snapshot, error) {
	var parent *snapshot
	chain := ""
	for i, l := range m.Layers {
		diffID := diffIDs[i]
		if _, err := cache.ParseDigest(diffID); err != nil {
			return nil, fmt.Errorf("config %s: diff ID %d: %w", m.Config.Digest, i, err)
		}
		if chain == "" {
			chain = diffID
		} else {
			sum := sha256.Sum256([]byte(chain + " " + diffID))
			chain = "sha256:" + hex.EncodeToString(sum[:])
		}
		s := w.snaps[chain]
		if s == nil {
			labels := map[string]string{labelSnapshotRef: chain}
			for k, v := range l.Annotations {
				if strings.HasPrefix(k, inheritedSnapLabels) {
					labels[k] = v
				}
			}
			s = &snapshot{Snapshot: Snapshot{ID: uint64(len(w.order) + 1), ChainID: chain}, parent: parent,
				layer: l, diffID: diffID, labels: labels}
			if parent != nil {
				s.Parent = parent.ChainID
			}
			w.snaps[chain] = s
			w.order = append(w.order, s)
		}
		lb := w.blob(l.Digest.String(), l.Size, true, member)
		lb.labels[labelUncompressed] = diffID
		source(lb)
		parent = s
	}
	return parent, nil
}

// checkLayer refuses a layer containerd would not unpack or stamp cannot.
func checkLayer(l v1.Descriptor) error {
	mt := string(l.MediaType)
	switch {
	case len(l.URLs) > 0 && !l.MediaType.IsDistributable():
		return fmt.Errorf("layer %s is a foreign layer; not supported", l.Digest)
	case strings.Contains(mt, "encrypted"):
		return fmt.Errorf("layer %s is encrypted (%s); not supported", l.Digest, mt)
	case !l.MediaType.IsLayer() && !strings.Contains(mt, "tar"):
		return fmt.Errorf("layer %s has media type %q, not a file system layer", l.Digest, mt)
	}
	return nil
}

func ociDigest(d string) v1.Hash {
	h, err := v1.NewHash(d)
	if err != nil {
		panic(fmt.Sprintf("digest %q: %v", d, err)) // checked by the cache
	}
	return h
}

// childGCLabel is the label containerd's pull puts on a parent for a child
// of this media type (images.ChildGCLabels).
func childGCLabel(mt types.MediaType) string {
	switch {
	case mt == types.DockerConfigJSON || mt == types.OCIConfigJSON:
		return labelGCRefContent + ".config"
	case mt == types.DockerManifestSchema2 || mt == types.OCIManifestSchema1:
		return labelGCRefContent + ".m."
	case mt.IsLayer():
		return labelGCRefContent + ".l."
	}
	return labelGCRefContent + "."
}

// setChildLabels labels b with its children as SetChildrenMappedLabels
// does: a key ending in "." takes the child's index among the children of
// its key, another key takes it from the second child on.
func setChildLabels(b *blob, keys []string, digest func(i int) string) {
	count := map[string]int{}
	for i, key := range keys {
		n := count[key]
		count[key] = n + 1
		if n > 0 || strings.HasSuffix(key, ".") {
			key = fmt.Sprintf("%s%d", key, n)
		}
		b.labels[key] = digest(i)
	}
}

// mergeSources adds repo to a distribution source label's comma-separated
// repositories, sorted and without repeats, as containerd does.
func mergeSources(old, repo string) string {
	repos := []string{repo}
	if old != "" {
		repos = append(strings.Split(old, ","), repo)
	}
	sort.Strings(repos)
	return strings.Join(slices.Compact(repos), ",")
}

// blob returns the record of a blob, made on first use.
func (w *writer) blob(digest string, size int64, layer bool, member string) *blob {
	b := w.blobs[digest]
	if b == nil {
		b = &blob{digest: digest, size: size, layer: layer, labels: map[string]string{}, member: member}
		w.blobs[digest] = b
	}
	return b
}

func (w *writer) stateDir(p ...string) string {
	return path.Join(append([]string{w.cfg.Root}, p...)...)
}

func (w *writer) snapshotDir(p ...string) string {
	return path.Join(append([]string{w.cfg.SnapshotterRoot}, p...)...)
}

// write writes the planned state into the tree.
func (w *writer) write(ctx context.Context) error {
	dirs := []struct {
		p    string
		perm uint32
	}{
		// As containerd 1.6 to 2.x leave a state directory they start on.
		{w.cfg.Root, 0o700},
		{w.stateDir(contentDir), 0o755},
		{w.stateDir(contentDir, "blobs"), 0o755},
		{w.stateDir(contentDir, "blobs", "sha256"), 0o755},
		{w.stateDir(contentDir, "ingest"), 0o755},
		{w.stateDir(metadataDir), 0o711},
		{w.cfg.SnapshotterRoot, 0o700},
		{w.snapshotDir("snapshots"), 0o700},
	}
	for _, d := range dirs {
		if err := w.mkdir(d.p, d.perm); err != nil {
			return err
		}
	}
	digests := make([]string, 0, len(w.blobs))
	for d := range w.blobs {
		digests = append(digests, d)
	}
	sort.Strings(digests)
	for _, d := range digests {
		b := w.blobs[d]
		if b.layer && w.discard {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := w.writeBlob(b); err != nil {
			return fmt.Errorf("content %s: %w", d, err)
		}
	}
	for _, s := range w.order {
		if err := w.unpack(ctx, s); err != nil {
			return fmt.Errorf("layer %s (chain %s): %w", s.layer.Digest, s.ChainID, err)
		}
	}
	scratch, err := os.MkdirTemp(filepath.Dir(w.t.Dir()), "containerd-")
	if err != nil {
		if scratch, err = os.MkdirTemp("", "stamp-containerd-"); err != nil {
			return err
		}
	}
	defer os.RemoveAll(scratch)
	if err := w.writeDB(scratch, w.stateDir(metadataDir, metaDB), 0o644, w.metaPuts()); err != nil {
		return err
	}
	return w.writeDB(scratch, w.snapshotDir(snapshotsDB), 0o600, w.snapshotPuts())
}

// mkdir makes the directory p with perm, and missing parents 0755, unless
// it exists.
func (w *writer) mkdir(p string, perm uint32) error {
	if e, err := w.t.Lookup(p, true); err == nil {
		if e.Type != rootfs.TypeDir {
			return fmt.Errorf("%s is a %s, not a directory", p, e.Type)
		}
		return nil
	}
	h := rootfs.Header{Type: rootfs.TypeDir, Perm: 0o755, MTime: w.o.Epoch, Origin: w.o.Origin("", "generated")}
	if _, err := w.t.MkdirAll(path.Dir(p), h); err != nil {
		return err
	}
	rp, err := w.t.Resolve(p, true)
	if err != nil {
		return err
	}
	h.Perm = perm
	_, err = w.t.Create(rp, h, nil)
	return err
}

// writeBlob makes the cached blob a file of the content store: a
// reference to the cache's copy where the tree keeps references.
func (w *writer) writeBlob(b *blob) error {
	hexSum, err := cache.ParseDigest(b.digest)
	if err != nil {
		return err
	}
	rp, err := w.t.Resolve(w.stateDir(contentDir, "blobs", "sha256", hexSum), true)
	if err != nil {
		return err
	}
	// containerd takes the write bits off a committed blob.
	h := rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o444, MTime: w.o.Epoch, Origin: w.o.Origin(b.digest, b.member)}
	if _, ok, err := w.t.CreateKept(rp, h, hexSum, b.size); ok {
		return err
	}
	r, err := w.c.Open(b.digest)
	if err != nil {
		return err
	}
	defer r.Close()
	e, err := w.t.Create(rp, h, r)
	if err != nil {
		return err
	}
	if e.Size != b.size {
		w.t.Remove(rp)
		return fmt.Errorf("blob is %d bytes, the manifest says %d", e.Size, b.size)
	}
	return nil
}

// unpack makes the snapshot's directory and unpacks its layer into fs as
// containerd's applier does, checking the layer's uncompressed digest
// against the image's diff ID as containerd does.
func (w *writer) unpack(ctx context.Context, s *snapshot) error {
	dir := w.snapshotDir("snapshots", fmt.Sprint(s.ID))
	h := rootfs.Header{Type: rootfs.TypeDir, MTime: w.o.Epoch, Origin: w.o.Origin("", "generated")}
	for _, d := range []struct {
		p    string
		perm uint32
	}{{dir, 0o700}, {dir + "/fs", 0o755}, {dir + "/work", 0o711}} {
		h.Perm = d.perm
		if _, err := w.t.Create(d.p, h, nil); err != nil {
			return err
		}
	}
	var lowers []string
	for p := s.parent; p != nil; p = p.parent {
		lowers = append(lowers, w.snapshotDir("snapshots", fmt.Sprint(p.ID), "fs"))
	}
	opts := rootfs.ExtractOptions{
		Origin:      w.o.Origin(s.layer.Digest.String(), ""),
		ByReference: w.t.KeepsReferences(),
		Snapshot:    &rootfs.Snapshot{Dir: dir + "/fs", Overlay: s.parent != nil, Parent: w.lowerDir(lowers)},
	}
	if opts.ByReference && w.c.Has(s.diffID) {
		// An earlier unpack kept the layer uncompressed, filed under its
		// sha256, which is the diff ID the image's config names: unpack
		// from that copy, with nothing to decompress or keep again. A
		// copy that fails its check is gone from the cache by then, and
		// the layer is unpacked as the first time.
		if f, err := w.c.OpenFile(s.diffID); err == nil {
			defer f.Close()
			opts.Kept = strings.TrimPrefix(s.diffID, "sha256:")
			if _, err := rootfs.Extract(ctx, w.t, bufio.NewReaderSize(f, 1<<20), opts); err != nil {
				return err
			}
			s.Inodes, s.Size = usage(w.t, dir+"/fs")
			return nil
		}
	}
	r, err := w.c.Open(s.layer.Digest.String())
	if err != nil {
		return err
	}
	defer r.Close()
	dr, _, err := compress.NewReaderAuto(r)
	if err != nil {
		return err
	}
	defer dr.Close()
	// The extractor writes large files itself: the layer is inflated and
	// hashed on a goroutine of its own, a few chunks ahead, so the two
	// share two cores instead of taking turns on one.
	hr := hashio.NewReader(dr)
	defer hr.Close()
	n := &countWriter{}
	tee := io.TeeReader(hr, n)
	if _, err := rootfs.Extract(ctx, w.t, tee, opts); err != nil {
		return err
	}
	// The digests cover every byte: the archive's padding, and the
	// compressed stream to its end.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return err
	}
	// r is read by hr's goroutine until that stops.
	hr.Close()
	if _, err := io.Copy(io.Discard, r); err != nil {
		return err
	}
	sum := hr.Sum()
	if got := "sha256:" + hex.EncodeToString(sum[:]); got != s.diffID {
		return fmt.Errorf("the layer unpacks to %s (%d bytes), but the image's config says %s", got, n.n, s.diffID)
	}
	s.Inodes, s.Size = usage(w.t, dir+"/fs")
	return nil
}

// lowerDir gives the attributes of a directory an upper layer needs from
// the first lower layer that has something at its path, as containerd's
// applier copies them up: a directory's owner, mode, mtime and xattrs but
// its trusted.* ones; anything else there stops the search.
func (w *writer) lowerDir(lowers []string) func(dir string) (rootfs.Header, bool) {
	return func(dir string) (rootfs.Header, bool) {
		for _, l := range lowers {
			p, err := w.t.ResolveIn(l, dir, true)
			if err != nil {
				return rootfs.Header{}, false
			}
			e := w.t.Get(p)
			if e == nil {
				continue
			}
			if e.Type != rootfs.TypeDir {
				return rootfs.Header{}, false
			}
			h := rootfs.Header{Type: rootfs.TypeDir, Perm: e.Perm, UID: e.UID, GID: e.GID, MTime: e.MTime}
			for _, n := range e.XattrNames() {
				if !strings.HasPrefix(n, "trusted.") {
					if h.Xattrs == nil {
						h.Xattrs = map[string]string{}
					}
					h.Xattrs[n] = e.Xattrs[n]
				}
			}
			return h, true
		}
		return rootfs.Header{}, false
	}
}

// usage counts a snapshot's inodes and its size in 4 KiB blocks, as
// containerd's committed usage does on an ext4 root: a file's blocks, a
// directory's one block, nothing for a short symlink or a device.
func usage(t *rootfs.Tree, dir string) (inodes, size int64) {
	seen := map[*rootfs.Inode]bool{}
	paths := t.Paths()
	for i := sort.SearchStrings(paths, dir); i < len(paths); i++ {
		p := paths[i]
		if p != dir && !strings.HasPrefix(p, dir+"/") {
			break
		}
		e := t.Get(p)
		if seen[e.Inode] {
			continue
		}
		seen[e.Inode] = true
		inodes++
		switch {
		case e.Type == rootfs.TypeRegular:
			size += (e.Size + 4095) &^ 4095
		case e.Type == rootfs.TypeDir, e.Type == rootfs.TypeSymlink && len(e.Target) >= 60:
			size += 4096
		}
	}
	return inodes, size
}

// writeDB writes a database built in scratch into the tree at p.
func (w *writer) writeDB(scratch, p string, perm uint32, puts []boltPut) error {
	file, err := writeFileBolt(scratch, path.Base(p), puts)
	if err != nil {
		return err
	}
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	rp, err := w.t.Resolve(p, true)
	if err != nil {
		return err
	}
	h := rootfs.Header{Type: rootfs.TypeRegular, Perm: perm, MTime: w.o.Epoch, Origin: w.o.Origin("", "generated")}
	if _, err := w.t.Create(rp, h, f); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// backendName is the snapshotter's name of a committed snapshot, as
// containerd's metadata store makes it: namespace, sequence number, key.
func backendName(s *snapshot) string {
	return fmt.Sprintf("%s/%d/%s", Namespace, s.ID, s.ChainID)
}

// metaPuts are containerd's metadata database (metadata/buckets.go): the
// schema's version, then images, content and snapshots of the k8s.io
// namespace, each bucket in byte order.
func (w *writer) metaPuts() []boltPut {
	ns := []string{"v1", Namespace}
	puts := []boltPut{{path: []string{"v1"}, pairs: []boltPair{{"version", varint(w.schema.DBVersion)}}}}
	for _, n := range sortedKeys(w.images) {
		im := w.images[n]
		p := append(append([]string(nil), ns...), "images", n)
		puts = append(puts, boltPut{path: p, pairs: timestamps(w.o.Epoch)})
		puts = append(puts, labelsPut(p, im.labels)...)
		puts = append(puts, boltPut{path: append(p, "target"), pairs: []boltPair{
			{"digest", []byte(im.target.Digest.String())},
			{"mediatype", []byte(im.target.MediaType)},
			{"size", varint(im.target.Size)},
		}})
	}
	for _, d := range sortedKeys(w.blobs) {
		b := w.blobs[d]
		if b.layer && w.discard {
			continue
		}
		p := append(append([]string(nil), ns...), "content", "blob", d)
		puts = append(puts, boltPut{path: p, pairs: append(timestamps(w.o.Epoch), boltPair{"size", varint(b.size)})})
		puts = append(puts, labelsPut(p, b.labels)...)
	}
	children := map[string][]string{}
	for _, s := range w.order {
		if s.parent != nil {
			children[s.Parent] = append(children[s.Parent], s.ChainID)
		}
	}
	for _, c := range sortedKeys(w.snaps) {
		s := w.snaps[c]
		p := append(append([]string(nil), ns...), "snapshots", Snapshotter, c)
		pairs := append(timestamps(w.o.Epoch), boltPair{"name", []byte(backendName(s))})
		if s.parent != nil {
			pairs = append(pairs, boltPair{"parent", []byte(s.Parent)})
		}
		puts = append(puts, boltPut{path: p, pairs: pairs})
		puts = append(puts, labelsPut(p, s.labels)...)
		if ch := children[c]; len(ch) > 0 {
			sort.Strings(ch)
			cp := boltPut{path: append(p, "children")}
			for _, k := range ch {
				cp.pairs = append(cp.pairs, boltPair{k, nil})
			}
			puts = append(puts, cp)
		}
	}
	// The sequence the metadata store numbers backend keys with.
	puts = append(puts, boltPut{path: append(append([]string(nil), ns...), "snapshots", Snapshotter), seq: uint64(len(w.order))})
	return puts
}

// snapshotPuts are the overlayfs snapshotter's database
// (snapshots/storage/bolt.go): each committed snapshot under its backend
// name, with its ID, kind, parent, labels and usage, and the parent links.
func (w *writer) snapshotPuts() []boltPut {
	const kindCommitted = 3
	byName := map[string]*snapshot{}
	for _, s := range w.order {
		byName[backendName(s)] = s
	}
	var puts []boltPut
	for _, n := range sortedKeys(byName) {
		s := byName[n]
		p := []string{"v1", "snapshots", n}
		pairs := []boltPair{{"id", uvarint(s.ID)}, {"kind", []byte{kindCommitted}}}
		if s.parent != nil {
			pairs = append(pairs, boltPair{"parent", []byte(backendName(s.parent))})
		}
		pairs = append(pairs, timestamps(w.o.Epoch)...)
		pairs = append(pairs, boltPair{"inodes", varint(s.Inodes)}, boltPair{"size", varint(s.Size)})
		puts = append(puts, boltPut{path: p, pairs: pairs})
		puts = append(puts, labelsPut(p, s.labels)...)
	}
	links := boltPut{path: []string{"v1", "parents"}}
	type link struct {
		key  []byte
		name string
	}
	var ls []link
	for _, s := range w.order {
		if s.parent != nil {
			ls = append(ls, link{parentKey(s.parent.ID, s.ID), backendName(s)})
		}
	}
	sort.Slice(ls, func(i, j int) bool { return string(ls[i].key) < string(ls[j].key) })
	for _, l := range ls {
		links.pairs = append(links.pairs, boltPair{string(l.key), []byte(l.name)})
	}
	puts = append(puts, links, boltPut{path: []string{"v1", "snapshots"}, seq: uint64(len(w.order))})
	return puts
}

// parentKey is the snapshotter's key of a parent link: both IDs as
// uvarints, a zero byte between them.
func parentKey(parent, child uint64) []byte {
	return append(append(uvarint(parent), 0), uvarint(child)...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (w *writer) result(pkg string) *Result {
	r := &Result{Package: pkg, Version: w.version, Schema: w.schema, Config: w.cfg, Names: sortedKeys(w.images), Discarded: w.discard}
	for _, s := range w.order {
		r.Snapshots = append(r.Snapshots, s.Snapshot)
		r.SnapshotBytes += s.Size
	}
	for _, b := range w.blobs {
		if b.layer {
			r.LayerBytes += b.size
			if w.discard {
				continue
			}
		}
		r.ContentBytes += b.size
	}
	return r
}

type countWriter struct{ n int64 }

func (c *countWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }
