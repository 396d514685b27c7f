package layers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/stamp-dev/stamp/layers/ociremote"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// OCI copies files out of an OCI artifact or container image that the
// conductor has already pulled into the cache.
//
// An artifact is a manifest whose layers all carry the
// org.opencontainers.image.title annotation, as `oras push` writes them: each
// layer is one file, written as is to Dest/TITLE with Mode (default 0644) and
// Owner (default 0:0). Paths, when given, select titles ("/ctr" selects the
// layer titled "ctr").
//
// Anything else is a container image: its layers are applied in order, with
// OCI whiteouts, to a scratch tree, and Paths (or the whole root) are copied
// from that merged view into the tree with the owners and modes the image
// gives them; Mode and Owner, when set, override them. A selected path lands
// at Dest/BASENAME; without Paths the image root lands at Dest.
//
// Each entry's origin records the layer digest as Input, and as Member
// "NAME@MANIFEST#MEMBER": the reference without tag or digest, the manifest
// digest, and the artifact title or the path inside the image.
type OCI struct {
	// Input is the reference (URI) and, once resolved, the digest of the
	// platform's image or artifact manifest.
	Input Input
	Dest  string // a directory; "" is "/"
	Paths []string
	Mode  *uint32
	Owner Owner
	// Platform is the os/arch[/variant] the input was resolved for; "" is
	// linux/<Env.Arch>. A container image's config must name its arch.
	Platform string
}

// Kind implements Layer.
func (l *OCI) Kind() string { return "oci" }

// Inputs implements WithInputs.
func (l *OCI) Inputs() []*Input { return []*Input{&l.Input} }

// Apply implements Layer.
func (l *OCI) Apply(ctx context.Context, env *Env) error {
	if l.Input.Digest == "" {
		return fmt.Errorf("%s: input %s was not resolved", env.Label, l.Input.URI)
	}
	m, err := ociremote.LoadManifest(env.Cache, l.Input.Digest)
	if err != nil {
		return fmt.Errorf("%s: %s: %w", env.Label, l.Input.URI, err)
	}
	if m.Image == nil {
		return fmt.Errorf("%s: %s: %s is an index; the conductor resolves a platform manifest first", env.Label, l.Input.URI, m.Digest)
	}
	var titled int
	for _, d := range m.Image.Layers {
		if d.Annotations[ociremote.TitleAnnotation] != "" {
			titled++
		}
	}
	switch {
	case titled > 0 && titled < len(m.Image.Layers):
		return fmt.Errorf("%s: %s: %d of %d layers have a %s annotation; an artifact needs one on every layer",
			env.Label, l.Input.URI, titled, len(m.Image.Layers), ociremote.TitleAnnotation)
	case titled > 0:
		err = l.applyArtifact(ctx, env, m)
	default:
		err = l.applyImage(ctx, env, m)
	}
	if err != nil {
		return fmt.Errorf("%s: %s: %w", env.Label, l.Input.URI, err)
	}
	return nil
}

// member is the Origin.Member of a file taken from this layer's manifest.
func (l *OCI) member(manifest, inside string) string {
	return ociRepoName(l.Input.URI) + "@" + manifest + "#" + inside
}

// ociRepoName strips the tag and digest from a reference.
func ociRepoName(ref string) string {
	n, _, _ := strings.Cut(ref, "@")
	if c := strings.LastIndex(n, ":"); c > strings.LastIndex(n, "/") {
		n = n[:c]
	}
	return n
}

func (l *OCI) dest() string { return path.Clean("/" + l.Dest) }

func (l *OCI) applyArtifact(ctx context.Context, env *Env, m *ociremote.Manifest) error {
	uid, gid, err := ResolveOwner(env.Tree, l.Owner)
	if err != nil {
		return err
	}
	perm := uint32(0o644)
	if l.Mode != nil {
		perm = *l.Mode
	}
	want := map[string]bool{}
	for _, p := range l.Paths {
		want[path.Clean("/"+p)] = true
	}
	found := map[string]bool{}
	var titles []string
	for _, d := range m.Image.Layers {
		title := d.Annotations[ociremote.TitleAnnotation]
		titles = append(titles, title)
		// A title is a file name, but one from the network: confine it.
		rel, err := rootfs.MemberPath(title)
		if err != nil || rel == "/" {
			return fmt.Errorf("layer %s: title %q is not a usable file name", d.Digest, title)
		}
		if len(want) > 0 && !want[rel] {
			continue
		}
		found[rel] = true
		if d.Annotations["io.deis.oras.content.unpack"] == "true" {
			return fmt.Errorf("layer %s (%s) is a packed directory; only plain files are supported", d.Digest, title)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		dst := path.Join(l.dest(), rel)
		h := rootfs.Header{Type: rootfs.TypeRegular, Perm: perm, UID: uid, GID: gid, MTime: env.Epoch,
			Origin: env.Origin(d.Digest.String(), l.member(m.Digest, title))}
		if err := l.writeBlob(env, d, dst, h); err != nil {
			return fmt.Errorf("layer %s (%s): %w", d.Digest, title, err)
		}
	}
	for _, p := range ociSortedKeys(want) {
		if !found[p] {
			return fmt.Errorf("path %s is not in the artifact; its files are: %s", p, strings.Join(titles, ", "))
		}
	}
	return nil
}

// writeBlob makes the cached blob the file dst. Where the tree keeps
// content by reference in the cache, the file points at the blob, which is
// verified when it is opened, and nothing is written. Otherwise the blob is
// written out; the cache hashes what it reads, a blob damaged since it was
// verified fails at its end, and the file is removed again.
func (l *OCI) writeBlob(env *Env, d v1.Descriptor, dst string, h rootfs.Header) error {
	rp, err := env.Tree.Resolve(dst, true)
	if err != nil {
		return err
	}
	if d.Digest.Algorithm == "sha256" && d.Size >= 0 {
		if _, ok, err := env.Tree.CreateKept(rp, h, d.Digest.Hex, d.Size); ok {
			return err
		}
	}
	r, err := env.Cache.Open(d.Digest.String())
	if err != nil {
		return err
	}
	defer r.Close()
	add, done := env.progress("write "+path.Base(dst), d.Size)
	defer done()
	e, err := env.Tree.Create(rp, h, rootfs.CountReader(r, add))
	if err != nil {
		return err
	}
	if d.Size >= 0 && e.Size != d.Size {
		env.Tree.Remove(rp)
		return fmt.Errorf("blob is %d bytes, the manifest says %d", e.Size, d.Size)
	}
	return nil
}

// applyImage merges the image's layers in a scratch tree, then copies the
// selection from there.
func (l *OCI) applyImage(ctx context.Context, env *Env, m *ociremote.Manifest) error {
	platform := l.Platform
	if platform == "" {
		platform = ociremote.DefaultPlatform(env.Arch)
	}
	if err := checkImageConfig(env, m, platform); err != nil {
		return err
	}
	scratchDir, err := ociScratchDir(env)
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratchDir)
	opts := rootfs.Options{DefaultMTime: env.Epoch}
	if env.Tree.KeepsReferences() && env.Cache.Writable() {
		// The layers are unpacked as references into their uncompressed
		// archives, kept in the cache, and the files copied out of them
		// point there too: no file is written twice, or at all.
		opts.Archives = env.Cache.Archives()
	}
	scratch, err := rootfs.New(filepath.Join(scratchDir, "root"), opts)
	if err != nil {
		return err
	}
	defer scratch.Close()
	for i, d := range m.Image.Layers {
		if err := ociExtractLayer(ctx, env, scratch, d); err != nil {
			return fmt.Errorf("layer %d (%s): %w", i, d.Digest, err)
		}
	}
	var uid, gid uint32
	override := l.Owner != (Owner{})
	if override {
		if uid, gid, err = ResolveOwner(env.Tree, l.Owner); err != nil {
			return err
		}
	}
	c := &imageCopy{l: l, env: env, scratch: scratch, manifest: m.Digest, links: map[*rootfs.Inode]string{},
		ownerSet: override, uid: uid, gid: gid}
	if len(l.Paths) == 0 {
		return c.copyTree("/", l.dest())
	}
	for _, p := range l.Paths {
		src, err := scratch.Resolve(path.Clean("/"+p), true)
		if err != nil {
			return fmt.Errorf("path %s: %w", p, err)
		}
		if scratch.Get(src) == nil {
			return fmt.Errorf("path %s is not in the image", p)
		}
		if err := c.copyTree(src, path.Join(l.dest(), path.Base(path.Clean("/"+p)))); err != nil {
			return err
		}
	}
	return nil
}

// checkImageConfig refuses an image whose config names another architecture
// than the recipe's: a single-arch image has no index to choose from, and a
// wrong-arch binary would only fail at boot.
func checkImageConfig(env *Env, m *ociremote.Manifest, platform string) error {
	if !m.Image.Config.MediaType.IsConfig() {
		return nil
	}
	parts := strings.Split(platform, "/")
	if len(parts) < 2 {
		return fmt.Errorf("platform %q: want os/arch[/variant]", platform)
	}
	raw, err := ociremote.ReadBlob(env.Cache, m.Image.Config.Digest.String())
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var cfg struct {
		Architecture string `json:"architecture"`
		OS           string `json:"os"`
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return fmt.Errorf("config %s: %w", m.Image.Config.Digest, err)
	}
	if cfg.Architecture != "" && cfg.Architecture != parts[1] {
		return fmt.Errorf("image %s is for %s/%s, not %s", m.Digest, cfg.OS, cfg.Architecture, platform)
	}
	return nil
}

// ociScratchDir makes a temp directory beside the tree (in the build's work
// directory), or in the system temp dir when that is not writable.
func ociScratchDir(env *Env) (string, error) {
	d, err := os.MkdirTemp(filepath.Dir(env.Tree.Dir()), "oci-")
	if err == nil {
		return d, nil
	}
	return os.MkdirTemp("", "stamp-oci-")
}

func ociExtractLayer(ctx context.Context, env *Env, t *rootfs.Tree, d v1.Descriptor) error {
	if !d.MediaType.IsLayer() && d.MediaType != "" && !strings.Contains(string(d.MediaType), "tar") {
		return fmt.Errorf("media type %q is not a filesystem layer", d.MediaType)
	}
	r, err := env.Cache.Open(d.Digest.String())
	if err != nil {
		return err
	}
	defer r.Close()
	add, done := env.progress("unpack "+ociShortDigest(d.Digest.String()), d.Size)
	defer done()
	cr := rootfs.CountReader(r, add)
	dr, _, err := compress.NewReaderAuto(cr)
	if err != nil {
		return err
	}
	defer dr.Close()
	opts := rootfs.ExtractOptions{Origin: env.Origin(d.Digest.String(), ""), Whiteouts: true, ByReference: t.KeepsReferences()}
	if _, err := rootfs.Extract(ctx, t, dr, opts); err != nil {
		return err
	}
	// Read to the end so the cache checks the digest of every byte.
	_, err = io.Copy(io.Discard, cr)
	return err
}

func ociShortDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		d = d[:12]
	}
	return d
}

// imageCopy copies entries from the merged scratch tree into env.Tree.
type imageCopy struct {
	l        *OCI
	env      *Env
	scratch  *rootfs.Tree
	manifest string
	links    map[*rootfs.Inode]string // first destination of each copied inode
	ownerSet bool
	uid, gid uint32
}

// copyTree copies src (a clean path in the scratch tree) and everything
// under it to dst, in byte order of path so parents come first.
func (c *imageCopy) copyTree(src, dst string) error {
	paths := c.scratch.Paths()
	prefix := src + "/"
	if src == "/" {
		prefix = "/"
	}
	i := sort.SearchStrings(paths, src)
	for ; i < len(paths); i++ {
		p := paths[i]
		if p != src && !strings.HasPrefix(p, prefix) {
			if p > prefix {
				break
			}
			continue
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p, src), "/")
		if err := c.copyOne(c.scratch.Get(p), path.Join(dst, rel)); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

func (c *imageCopy) copyOne(e *rootfs.Entry, dst string) error {
	origin := e.Origin
	origin.Layer = c.env.Label
	origin.Member = c.l.member(c.manifest, e.Path)
	h := rootfs.Header{Type: e.Type, Perm: e.Perm, UID: e.UID, GID: e.GID, MTime: e.MTime, Target: e.Target,
		Major: e.Major, Minor: e.Minor, Xattrs: e.Xattrs, Origin: origin}
	if c.ownerSet {
		h.UID, h.GID = c.uid, c.gid
	}
	if c.l.Mode != nil && e.Type == rootfs.TypeRegular {
		h.Perm = *c.l.Mode
	}
	if dst == "/" {
		// The tree's root belongs to the base; an image rarely even lists
		// its own.
		return nil
	}
	if e.Type == rootfs.TypeDir {
		// A symlink to a directory in the tree stays, as dpkg keeps merged
		// /usr links: the image's files go through it.
		if old := c.env.Tree.Get(dst); old != nil && old.Type == rootfs.TypeSymlink {
			if t, err := c.env.Tree.Lookup(dst, true); err == nil && t.Type == rootfs.TypeDir {
				return nil
			}
		}
	}
	if e.Type == rootfs.TypeRegular && e.Nlink() > 1 {
		if first, ok := c.links[e.Inode]; ok {
			_, err := c.env.Tree.Link(dst, first, origin)
			return err
		}
	}
	var content io.Reader
	if e.Type == rootfs.TypeRegular {
		if ne, ok, err := c.env.Tree.CreateLike(dst, h, c.scratch, e.Path); ok {
			if err == nil && e.Nlink() > 1 {
				c.links[e.Inode] = ne.Path
			}
			return err
		}
		f, err := c.scratch.Open(e.Path)
		if err != nil {
			return err
		}
		defer f.Close()
		content = f
	}
	ne, err := c.env.Tree.Create(dst, h, content)
	if err != nil {
		return err
	}
	if e.Type == rootfs.TypeRegular && e.Nlink() > 1 {
		c.links[e.Inode] = ne.Path
	}
	return nil
}

func ociSortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
