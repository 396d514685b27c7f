package containerd

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
	bolt "go.etcd.io/bbolt"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

var epoch = time.Unix(1700000000, 0).UTC()

// put stores an image's blobs in the cache as a pull would.
func put(t *testing.T, c *cache.Cache, img v1.Image) string { return putB(t, c, img) }

func putB(t testing.TB, c *cache.Cache, img v1.Image) string {
	t.Helper()
	add := func(b []byte) string {
		d, err := c.Put(context.Background(), bytes.NewReader(b), "")
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	raw, _ := img.RawManifest()
	cfg, _ := img.RawConfigFile()
	add(cfg)
	ls, _ := img.Layers()
	for _, l := range ls {
		rc, _ := l.Compressed()
		var b bytes.Buffer
		b.ReadFrom(rc)
		add(b.Bytes())
	}
	return add(raw)
}

type fixture struct {
	tree  *rootfs.Tree
	cache *cache.Cache
	imgs  []Image
	app   v1.Image
}

func newFixture(t *testing.T, version, config string) *fixture {
	t.Helper()
	return newFixtureOf(t, version, config, harness.TarLayer)
}

// newFixtureOf is newFixture with layers made by layer: uncompressed, or
// gzipped as registries serve them.
func newFixtureOf(t *testing.T, version, config string, layer func(testing.TB, ...harness.TarFile) v1.Layer) *fixture {
	t.Helper()
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tree := rootfstest.New(t, epoch)
	if version != "" {
		rootfstest.File(t, tree, "/var/lib/dpkg/status", 0o644, epoch,
			"Package: containerd\nStatus: install ok installed\nArchitecture: amd64\nVersion: "+version+"\n\n")
	}
	if config != "" {
		rootfstest.File(t, tree, ConfigPath, 0o644, epoch, config)
	}
	lower := layer(t,
		harness.TarFile{Name: "etc/", Type: tar.TypeDir, Mode: 0o755},
		harness.TarFile{Name: "etc/hidden", Body: "hidden"},
		harness.TarFile{Name: "big", Body: strings.Repeat("0123456789abcdef", 200000)},
		harness.TarFile{Name: "opq/", Type: tar.TypeDir, Mode: 0o755},
		harness.TarFile{Name: "opq/old", Body: "old"},
		harness.TarFile{Name: "srv/", Type: tar.TypeDir, Mode: 0o750, UID: 5, GID: 5, Xattrs: map[string]string{"user.a": "1", "trusted.x": "no"}},
		harness.TarFile{Name: "lnk", Type: tar.TypeSymlink, Link: "/etc"},
	)
	upper := layer(t,
		harness.TarFile{Name: "etc/.wh.hidden", UID: 3, GID: 3},
		harness.TarFile{Name: "opq/.wh..wh..opq"},
		harness.TarFile{Name: "opq/new", Body: "new"},
		harness.TarFile{Name: "srv/app/f", Body: "f"},
		harness.TarFile{Name: "lnk/escape", Body: "stays in the snapshot"},
		harness.TarFile{Name: "top", Body: "top", Mode: 0o4755, UID: 1000, GID: 1000, Xattrs: map[string]string{"user.b": "2", "trusted.overlay.redirect": "/x"}},
		harness.TarFile{Name: "top2", Type: tar.TypeLink, Link: "top"},
	)
	app := harness.Image(t, "amd64", lower, upper)
	pause := harness.Image(t, "amd64", lower)
	return &fixture{tree: tree, cache: c, app: app, imgs: []Image{
		{Name: "registry.example:5000/k8s/app:v1", Digest: put(t, c, app)},
		{Name: "registry.example:5000/k8s/pause:3.10", Digest: put(t, c, pause)},
	}}
}

func (f *fixture) write(t *testing.T, o Options) (*Result, error) {
	t.Helper()
	if o.Platform == "" {
		o.Platform = "linux/amd64"
	}
	o.Epoch = epoch
	return Write(context.Background(), f.tree, f.cache, f.imgs, o)
}

func read(t *testing.T, tree *rootfs.Tree, p string) []byte {
	t.Helper()
	b, err := readTreeFile(tree, p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWriteState(t *testing.T) {
	const config = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.example:5000/k8s/pause:3.10\"\n"
	f := newFixture(t, "1.7.24-1", config)
	r, err := f.write(t, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Schema.Line != "1.7" || len(r.Snapshots) != 2 || len(r.Names) != 6 {
		t.Fatalf("result %+v", r)
	}
	snap := "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/"
	for p, want := range map[string]string{
		snap + "1/fs/etc/hidden":   "file 0644 0:0",
		snap + "2/fs/etc/hidden":   "char 0000 3:3 0,0",
		snap + "2/fs/opq":          "dir 0755 0:0 trusted.overlay.opaque=y",
		snap + "2/fs/srv":          "dir 0750 5:5 user.a=1",
		snap + "2/fs/srv/app":      "dir 0755 0:0",
		snap + "2/fs/lnk":          "dir 0755 0:0",
		snap + "2/fs/lnk/escape":   "file 0644 0:0",
		snap + "2/fs/top":          "file 0644 0:0 user.b=2", // the link member's owner and mode land on the file, as containerd sets them
		snap + "1/fs/srv":          "dir 0750 5:5 user.a=1",
		snap + "2":                 "dir 0700 0:0",
		snap + "2/work":            "dir 0711 0:0",
		"/var/lib/containerd":      "dir 0700 0:0",
		"/etc/escape":              "",
		snap + "2/fs/opq/old":      "",
		snap + "2/fs/opq/new":      "file 0644 0:0",
		snap + "2/fs/.wh..wh..opq": "",
	} {
		e := f.tree.Get(p)
		got := ""
		if e != nil {
			got = e.Type.String() + " " + octal(e.Perm) + " " + itoa(e.UID) + ":" + itoa(e.GID)
			if e.Type == rootfs.TypeChar {
				got += " " + itoa(e.Major) + "," + itoa(e.Minor)
			}
			for _, n := range e.XattrNames() {
				got += " " + n + "=" + e.Xattrs[n]
			}
		}
		if got != want {
			t.Errorf("%s: %q, want %q", p, got, want)
		}
	}
	if top, top2 := f.tree.Get(snap+"2/fs/top"), f.tree.Get(snap+"2/fs/top2"); top == nil || top2 == nil || top.Inode != top2.Inode {
		t.Error("the hard link is not one inode")
	}
	// The databases read back as containerd reads them.
	meta := boltRead(t, read(t, f.tree, "/var/lib/containerd/io.containerd.metadata.v1.bolt/meta.db"))
	cfgDigest, _ := f.app.ConfigName()
	for _, want := range []string{
		"v1/version=" + string(varint(3)),
		"v1/k8s.io/images/registry.example:5000/k8s/app:v1/labels/io.cri-containerd.image=managed",
		"v1/k8s.io/images/registry.example:5000/k8s/pause:3.10/labels/io.cri-containerd.pinned=pinned",
		"v1/k8s.io/images/registry.example:5000/k8s/app@" + f.imgs[0].Digest + "/target/digest=" + f.imgs[0].Digest,
		"v1/k8s.io/images/" + cfgDigest.String() + "/target/mediatype=" + string(types.OCIManifestSchema1),
		"v1/k8s.io/content/blob/" + cfgDigest.String() + "/labels/containerd.io/distribution.source.registry.example=k8s/app",
		"v1/k8s.io/content/blob/" + f.imgs[0].Digest + "/labels/containerd.io/gc.ref.content.config=" + cfgDigest.String(),
		"v1/k8s.io/snapshots/overlayfs/" + chain(t, f.app, 1) + "/parent=" + chain(t, f.app, 0),
		"v1/k8s.io/snapshots/overlayfs/" + chain(t, f.app, 0) + "/children/" + chain(t, f.app, 1) + "=",
		"v1/k8s.io/snapshots/overlayfs/" + chain(t, f.app, 1) + "/name=k8s.io/2/" + chain(t, f.app, 1),
		"v1/k8s.io/content/blob/" + cfgDigest.String() + "/labels/containerd.io/gc.ref.snapshot.overlayfs=" + chain(t, f.app, 1),
	} {
		if !meta[want] {
			t.Errorf("meta.db lacks %s", want)
		}
	}
	sn := boltRead(t, read(t, f.tree, "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/metadata.db"))
	for _, want := range []string{
		"v1/snapshots/k8s.io/2/" + chain(t, f.app, 1) + "/parent=k8s.io/1/" + chain(t, f.app, 0),
		"v1/snapshots/k8s.io/2/" + chain(t, f.app, 1) + "/kind=\x03",
		"v1/parents/\x01\x00\x02=k8s.io/2/" + chain(t, f.app, 1),
	} {
		if !sn[want] {
			t.Errorf("metadata.db lacks %q", want)
		}
	}
}

func octal(p uint32) string {
	const digits = "01234567"
	return string([]byte{digits[p>>9&7], digits[p>>6&7], digits[p>>3&7], digits[p&7]})
}

func itoa(v uint32) string { return strconv.FormatUint(uint64(v), 10) }

func chain(t *testing.T, img v1.Image, i int) string {
	t.Helper()
	cf, _ := img.ConfigFile()
	c := cf.RootFS.DiffIDs[0].String()
	for _, d := range cf.RootFS.DiffIDs[1 : i+1] {
		s := sha256.Sum256([]byte(c + " " + d.String()))
		c = "sha256:" + hex.EncodeToString(s[:])
	}
	return c
}

// boltRead flattens a bbolt file to "bucket/.../key=value" lines.
func boltRead(t *testing.T, data []byte) map[string]bool {
	t.Helper()
	p := filepath.Join(t.TempDir(), "db")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(p, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	out := map[string]bool{}
	var walk func(prefix string, b *bolt.Bucket)
	walk = func(prefix string, b *bolt.Bucket) {
		b.ForEach(func(k, v []byte) error {
			if v == nil && b.Bucket(k) != nil {
				walk(prefix+string(k)+"/", b.Bucket(k))
				return nil
			}
			out[prefix+string(k)+"="+string(v)] = true
			return nil
		})
	}
	db.View(func(tx *bolt.Tx) error {
		return tx.ForEach(func(name []byte, b *bolt.Bucket) error {
			walk(string(name)+"/", b)
			return nil
		})
	})
	return out
}

// The databases are the same bytes every time, whatever order Go's maps
// iterate in.
func TestWriteDeterministic(t *testing.T) {
	var first [][]byte
	for i := range 8 {
		f := newFixture(t, "1.6.20~ds1-1+deb12u3", "")
		if _, err := f.write(t, Options{}); err != nil {
			t.Fatal(err)
		}
		var got [][]byte
		for _, p := range []string{"/var/lib/containerd/io.containerd.metadata.v1.bolt/meta.db",
			"/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/metadata.db"} {
			got = append(got, read(t, f.tree, p))
		}
		if i == 0 {
			first = got
			continue
		}
		for j := range got {
			if !bytes.Equal(got[j], first[j]) {
				t.Fatalf("run %d: database %d differs", i, j)
			}
		}
	}
}

func TestWriteRefuses(t *testing.T) {
	for _, c := range []struct {
		name, version, config, want string
	}{
		{"no containerd", "", "", "needs the containerd package"},
		{"unknown version", "3.0.1-1", "", "version 3.0.1-1"},
		{"other snapshotter", "1.6.20~ds1-1", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"native\"\n",
			`plugins."io.containerd.grpc.v1.cri".containerd.snapshotter = "native"`},
		{"config v3 for 1.6", "1.6.20~ds1-1", "version = 3\n", "version = 3, which containerd 1.6.20~ds1-1 does not read"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, c.version, c.config)
			if _, err := f.write(t, Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one naming %q", err, c.want)
			}
		})
	}
}

// With the layers kept by reference (the cache's archive store) the tree
// is the same.
func TestWriteByReference(t *testing.T) {
	plain := newFixture(t, "1.6.20~ds1-1", "")
	if _, err := plain.write(t, Options{}); err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, "1.6.20~ds1-1", "")
	tree, err := rootfs.New(filepath.Join(t.TempDir(), "tree"), rootfs.Options{DefaultMTime: epoch, Archives: f.cache.Archives()})
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	for _, p := range []string{"/var/lib/dpkg/status"} {
		rootfstest.File(t, tree, p, 0o644, epoch, string(read(t, f.tree, p)))
	}
	f.tree = tree
	if _, err := f.write(t, Options{}); err != nil {
		t.Fatal(err)
	}
	if a, b := manifest(t, plain.tree), manifest(t, f.tree); a != b {
		t.Errorf("by reference:\n%s\nwant\n%s", b, a)
	}
}

func manifest(t *testing.T, tree *rootfs.Tree) string {
	t.Helper()
	var b strings.Builder
	tree.Walk(func(e *rootfs.Entry) error {
		b.WriteString(e.Path + " " + e.Type.String() + " " + octal(e.Perm) + " " + e.Digest + "\n")
		return nil
	})
	return b.String()
}

// ReadState reads back what Write wrote.
func TestReadState(t *testing.T) {
	f := newFixture(t, "2.0.0", "")
	if _, err := f.write(t, Options{}); err != nil {
		t.Fatal(err)
	}
	st, err := ReadState(read(t, f.tree, MetaDBPath), read(t, f.tree, SnapshotsDBPath))
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(st.Lines(), "\n")
	for _, want := range []string{
		"metadata version 4, 6 images, 2 snapshots",
		"image k8s.io/registry.example:5000/k8s/app:v1 -> " + f.imgs[0].Digest,
		"snapshot k8s.io/overlayfs/" + chain(t, f.app, 1) + " parent " + chain(t, f.app, 0) + " (committed, snapshots/2)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("state lacks %q:\n%s", want, got)
		}
	}
}

// A layer unpacked by reference once is kept uncompressed under its diff
// ID; the next write unpacks from that copy, without the compressed blob,
// and a copy that fails its check is unpacked from the blob again. Either
// way the tree is the same.
func TestWriteFromKeptLayers(t *testing.T) {
	discard := true
	byRef := func(t *testing.T, f *fixture) *rootfs.Tree {
		t.Helper()
		tree, err := rootfs.New(filepath.Join(t.TempDir(), "tree"), rootfs.Options{DefaultMTime: epoch, Archives: f.cache.Archives()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tree.Close() })
		rootfstest.File(t, tree, "/var/lib/dpkg/status", 0o644, epoch, string(read(t, f.tree, "/var/lib/dpkg/status")))
		f.tree = tree
		if _, err := f.write(t, Options{DiscardLayers: &discard}); err != nil {
			t.Fatal(err)
		}
		return tree
	}
	blobPath := func(t *testing.T, f *fixture, d string) string {
		t.Helper()
		p, err := f.cache.Path(d)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	f := newFixtureOf(t, "1.6.20~ds1-1", "", harness.GzipLayer)
	want := manifest(t, byRef(t, f))
	cfg, err := f.app.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	layers, err := f.app.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var compressed []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			t.Fatal(err)
		}
		compressed = append(compressed, d.String())
	}

	t.Run("kept", func(t *testing.T) {
		for _, d := range compressed {
			if err := os.Remove(blobPath(t, f, d)); err != nil {
				t.Fatal(err)
			}
		}
		tree := byRef(t, f)
		if got := manifest(t, tree); got != want {
			t.Errorf("from the kept layers:\n%s\nwant\n%s", got, want)
		}
		if got := string(read(t, tree, "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs/snapshots/1/fs/big")); got != strings.Repeat("0123456789abcdef", 200000) {
			t.Errorf("a file of the kept layer reads %d bytes, not its content", len(got))
		}
	})

	t.Run("spoilt", func(t *testing.T) {
		g := newFixtureOf(t, "1.6.20~ds1-1", "", harness.GzipLayer)
		byRef(t, g)
		p := blobPath(t, g, cfg.RootFS.DiffIDs[0].String())
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)/2] ^= 1
		os.Chmod(p, 0o644)
		if err := os.WriteFile(p, b, 0o444); err != nil {
			t.Fatal(err)
		}
		if got := manifest(t, byRef(t, g)); got != want {
			t.Errorf("after the kept copy was spoilt:\n%s\nwant\n%s", got, want)
		}
	})
}

// A layer whose bytes are not the ones its image's config names fails the
// write (it is hashed on a goroutine of its own, ahead of its unpack), and
// the error names both digests.
func TestWriteRefusesALayerThatIsNotItsDiffID(t *testing.T) {
	f := newFixtureOf(t, "1.7.24-1", "", harness.GzipLayer)
	other := harness.GzipLayer(t, harness.TarFile{Name: "big", Body: strings.Repeat("fedcba9876543210", 300000)})
	wrong, err := other.DiffID()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := f.app.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	want := cf.RootFS.DiffIDs[0]
	cf.RootFS.DiffIDs[0] = wrong
	bad, err := mutate.ConfigFile(f.app, cf)
	if err != nil {
		t.Fatal(err)
	}
	f.imgs = []Image{{Name: "registry.example:5000/k8s/app:v1", Digest: put(t, f.cache, bad)}}
	_, err = f.write(t, Options{})
	if err == nil {
		t.Fatal("a layer unpacked though its bytes are not the config's diff ID")
	}
	if !strings.Contains(err.Error(), "unpacks to "+want.String()) || !strings.Contains(err.Error(), "config says "+wrong.String()) {
		t.Errorf("the error does not name the layer's digest and the config's: %v", err)
	}
}
