package layers

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/ociremote"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

var ociEpoch = time.Unix(1700000000, 0).UTC()

func ociEnv(t *testing.T) *Env {
	t.Helper()
	work := t.TempDir()
	tree := rootfstest.NewIn(t, work, ociEpoch)
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	return &Env{Tree: tree, Cache: c, Log: log, Epoch: ociEpoch, Arch: "amd64", Label: "provision.layers[0].oci"}
}

func randomBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8)}))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// cacheImage stores an image's manifest, config and layers in the cache, as
// the conductor's pull would, and returns the manifest digest.
func cacheImage(t *testing.T, c *cache.Cache, img v1.Image) string {
	t.Helper()
	put := func(data []byte) {
		if _, err := c.Put(context.Background(), bytes.NewReader(data), ""); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	put(raw)
	cfg, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	put(cfg)
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		rc, err := l.Compressed()
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(rc)
		put(data)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

func readTree(t *testing.T, env *Env, p string) (*rootfs.Entry, []byte) {
	t.Helper()
	e := env.Tree.Get(p)
	if e == nil {
		t.Fatalf("%s is not in the tree", p)
	}
	if e.Type != rootfs.TypeRegular {
		return e, nil
	}
	f, err := env.Tree.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return e, b
}

func sha(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func TestOCIArtifactFiles(t *testing.T) {
	env := ociEnv(t)
	ctr, runc := randomBytes(1, 300<<10), randomBytes(2, 200<<10)
	img := harness.Artifact(t, harness.TitledFile{Title: "ctr", Data: ctr}, harness.TitledFile{Title: "runc", Data: runc})
	digest := cacheImage(t, env.Cache, img)
	mode := uint32(0o755)
	l := &OCI{Input: Input{Kind: "oci", URI: "127.0.0.1:5000/k8s/bins:v1", Digest: digest}, Dest: "/usr/bin/", Mode: &mode}
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	ls, _ := img.Layers()
	for i, f := range []harness.TitledFile{{Title: "ctr", Data: ctr}, {Title: "runc", Data: runc}} {
		e, got := readTree(t, env, "/usr/bin/"+f.Title)
		if !bytes.Equal(got, f.Data) || e.Digest != sha(f.Data) {
			t.Errorf("%s: content differs", f.Title)
		}
		if e.Perm != 0o755 || e.UID != 0 || e.GID != 0 || !e.MTime.Equal(ociEpoch) {
			t.Errorf("%s: mode %o owner %d:%d mtime %v", f.Title, e.Perm, e.UID, e.GID, e.MTime)
		}
		ld, _ := ls[i].Digest()
		want := rootfs.Origin{Layer: env.Label, Input: ld.String(), Member: "127.0.0.1:5000/k8s/bins@" + digest + "#" + f.Title}
		if e.Origin != want {
			t.Errorf("%s: origin %+v, want %+v", f.Title, e.Origin, want)
		}
	}

	// Default mode, named owner, one path selected.
	env2 := ociEnv(t)
	cacheImage(t, env2.Cache, img)
	l2 := &OCI{Input: l.Input, Dest: "/opt", Paths: []string{"/runc"}, Owner: Owner{User: "7", Group: "8"}}
	if err := l2.Apply(context.Background(), env2); err != nil {
		t.Fatal(err)
	}
	if env2.Tree.Get("/opt/ctr") != nil {
		t.Error("/opt/ctr was not selected but is in the tree")
	}
	if e, _ := readTree(t, env2, "/opt/runc"); e.Perm != 0o644 || e.UID != 7 || e.GID != 8 {
		t.Errorf("/opt/runc: mode %o owner %d:%d, want 0644 7:8", e.Perm, e.UID, e.GID)
	}

	l3 := &OCI{Input: l.Input, Dest: "/opt", Paths: []string{"/kubelet"}}
	err := l3.Apply(context.Background(), ociEnv(t))
	if err == nil {
		t.Fatal("a path that is not in the artifact was accepted")
	}
	// The fresh env has an empty cache: use env2's instead.
	env3 := ociEnv(t)
	cacheImage(t, env3.Cache, img)
	err = l3.Apply(context.Background(), env3)
	if err == nil || !strings.Contains(err.Error(), "/kubelet is not in the artifact") || !strings.Contains(err.Error(), "ctr, runc") {
		t.Fatalf("missing path: %v", err)
	}
}

// ociEnvByReference is ociEnv with the tree keeping content by reference
// in the cache, as a build's tree does.
func ociEnvByReference(t *testing.T) *Env {
	t.Helper()
	env := ociEnv(t)
	tree, err := rootfs.New(filepath.Join(t.TempDir(), "tree"), rootfs.Options{DefaultMTime: ociEpoch, Archives: env.Cache.Archives()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tree.Close() })
	env.Tree = tree
	return env
}

// In a build's tree an artifact's files point at their blobs in the cache:
// nothing is written until a host process needs the directory, and a blob
// damaged in the cache is found before its file is added.
func TestOCIArtifactFilesByReference(t *testing.T) {
	env := ociEnvByReference(t)
	ctr := randomBytes(4, 300<<10)
	digest := cacheImage(t, env.Cache, harness.Artifact(t, harness.TitledFile{Title: "ctr", Data: ctr}))
	l := &OCI{Input: Input{Kind: "oci", URI: "127.0.0.1:5000/k8s/bins:v1", Digest: digest}, Dest: "/usr/bin/"}
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	e, got := readTree(t, env, "/usr/bin/ctr")
	if !bytes.Equal(got, ctr) || e.Digest != sha(ctr) || e.Size != int64(len(ctr)) {
		t.Fatal("/usr/bin/ctr: content differs")
	}
	if !env.Tree.Referenced() || env.Tree.DiskPath("/usr/bin/ctr") != "" {
		t.Fatal("the artifact's file was written into the tree's directory")
	}
	if err := env.Tree.Materialize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(env.Tree.DiskPath("/usr/bin/ctr")); err != nil || !bytes.Equal(b, ctr) {
		t.Fatalf("materialized /usr/bin/ctr: %v", err)
	}
	if !env.Cache.Has("sha256:" + sha(ctr)) {
		t.Fatal("materializing removed the blob from the cache")
	}

	env = ociEnvByReference(t)
	data := randomBytes(5, 64<<10)
	d := cacheImage(t, env.Cache, harness.Artifact(t, harness.TitledFile{Title: "tool", Data: data}))
	p, err := env.Cache.Path("sha256:" + sha(data))
	if err != nil {
		t.Fatal(err)
	}
	damaged := bytes.Clone(data)
	damaged[100] ^= 0xff
	if err := os.WriteFile(p, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	l = &OCI{Input: Input{Kind: "oci", URI: "r.example/a:1", Digest: d}, Dest: "/usr/bin"}
	err = l.Apply(context.Background(), env)
	if err == nil || !strings.Contains(err.Error(), sha(data)) || !strings.Contains(err.Error(), "corrupt") {
		t.Fatalf("damaged blob: %v", err)
	}
	if env.Tree.Get("/usr/bin/tool") != nil {
		t.Error("a file from a damaged blob is in the tree")
	}
}

func TestOCIArtifactHostileTitle(t *testing.T) {
	for _, title := range []string{"../../etc/shadow", "/", ".."} {
		env := ociEnv(t)
		d := cacheImage(t, env.Cache, harness.Artifact(t, harness.TitledFile{Title: title, Data: []byte("x")}))
		l := &OCI{Input: Input{Kind: "oci", URI: "r.example/a:1", Digest: d}, Dest: "/usr/bin"}
		err := l.Apply(context.Background(), env)
		if err == nil || !strings.Contains(err.Error(), "not a usable file name") {
			t.Errorf("title %q: %v", title, err)
		}
	}
	// A title with directories is confined under dest.
	env := ociEnv(t)
	d := cacheImage(t, env.Cache, harness.Artifact(t, harness.TitledFile{Title: "sub/../tool", Data: []byte("x")}))
	l := &OCI{Input: Input{Kind: "oci", URI: "r.example/a:1", Digest: d}, Dest: "/usr/bin"}
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	readTree(t, env, "/usr/bin/tool")
}

func TestOCIArtifactCorruptCacheBlob(t *testing.T) {
	env := ociEnv(t)
	data := randomBytes(3, 64<<10)
	img := harness.Artifact(t, harness.TitledFile{Title: "tool", Data: data})
	d := cacheImage(t, env.Cache, img)
	p, err := env.Cache.Path("sha256:" + sha(data))
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o644)
	data[100] ^= 0xff
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	l := &OCI{Input: Input{Kind: "oci", URI: "r.example/a:1", Digest: d}, Dest: "/usr/bin"}
	err = l.Apply(context.Background(), env)
	if err == nil || !strings.Contains(err.Error(), sha(randomBytes(3, 64<<10))) {
		t.Fatalf("corrupt blob: %v", err)
	}
	if env.Tree.Get("/usr/bin/tool") != nil {
		t.Error("a file from a corrupt blob stayed in the tree")
	}
}

// Three layers: the second whites out a file and makes a directory opaque,
// the third replaces a file; hard links and owners survive the copy.
func whiteoutImage(t *testing.T, arch string) v1.Image {
	return harness.Image(t, arch,
		harness.TarLayer(t,
			harness.TarFile{Name: "etc/", Type: tar.TypeDir, Mode: 0o755},
			harness.TarFile{Name: "etc/a", Body: "a1"},
			harness.TarFile{Name: "etc/b", Body: "b1"},
			harness.TarFile{Name: "opt/dir/x", Body: "x"},
			harness.TarFile{Name: "opt/dir/y", Body: "y"},
			harness.TarFile{Name: "usr/local/bin/tool", Body: "tool v1", Mode: 0o750, UID: 1000, GID: 1001},
			harness.TarFile{Name: "usr/local/bin/tool-link", Type: tar.TypeLink, Link: "usr/local/bin/tool"},
			harness.TarFile{Name: "usr/local/bin/sh", Type: tar.TypeSymlink, Link: "/bin/busybox"},
		),
		harness.TarLayer(t,
			harness.TarFile{Name: "etc/.wh.a"},
			harness.TarFile{Name: "opt/dir/.wh..wh..opq"},
			harness.TarFile{Name: "opt/dir/z", Body: "z"},
		),
		gzipLayer(t, harness.TarLayer(t,
			harness.TarFile{Name: "usr/local/bin/tool", Body: "tool v2", Mode: 0o4755, UID: 1000, GID: 1001},
			harness.TarFile{Name: "usr/local/bin/tool-link", Type: tar.TypeLink, Link: "usr/local/bin/tool"},
		)),
	)
}

// gzipLayer is l compressed, as most registries' images are.
func gzipLayer(t *testing.T, l v1.Layer) v1.Layer {
	t.Helper()
	rc, err := l.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := io.Copy(zw, rc); err != nil {
		t.Fatal(err)
	}
	zw.Close()
	return static.NewLayer(buf.Bytes(), types.OCILayer)
}

func TestOCIImageWhiteouts(t *testing.T) {
	env := ociEnv(t)
	img := whiteoutImage(t, "amd64")
	d := cacheImage(t, env.Cache, img)
	// The tree's own /etc/a must survive the image's whiteout of its own /etc/a.
	if _, err := env.Tree.Create("/etc/a", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o600, MTime: ociEpoch}, strings.NewReader("base")); err != nil {
		t.Fatal(err)
	}
	l := &OCI{Input: Input{Kind: "oci", URI: "r.example/img@" + d, Digest: d}}
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if _, b := readTree(t, env, "/etc/a"); string(b) != "base" {
		t.Errorf("/etc/a = %q: the image's whiteout reached the tree's own file", b)
	}
	if _, b := readTree(t, env, "/etc/b"); string(b) != "b1" {
		t.Errorf("/etc/b = %q", b)
	}
	if got := env.Tree.Children("/opt/dir"); strings.Join(got, " ") != "z" {
		t.Errorf("/opt/dir holds %v after the opaque whiteout, want [z]", got)
	}
	e, b := readTree(t, env, "/usr/local/bin/tool")
	if string(b) != "tool v2" || e.Perm != 0o4755 || e.UID != 1000 || e.GID != 1001 {
		t.Errorf("tool: %q mode %o owner %d:%d", b, e.Perm, e.UID, e.GID)
	}
	if link := env.Tree.Get("/usr/local/bin/tool-link"); link == nil || link.Inode != e.Inode || e.Nlink() != 2 {
		t.Errorf("tool-link is not a hard link of tool")
	}
	if s := env.Tree.Get("/usr/local/bin/sh"); s == nil || s.Type != rootfs.TypeSymlink || s.Target != "/bin/busybox" {
		t.Errorf("symlink: %+v", s)
	}
	ls, _ := img.Layers()
	l3, _ := ls[2].Digest()
	if e.Origin.Input != l3.String() || e.Origin.Member != "r.example/img@"+d+"#/usr/local/bin/tool" {
		t.Errorf("origin %+v", e.Origin)
	}
	for _, p := range env.Tree.Paths() {
		if strings.Contains(p, ".wh.") {
			t.Errorf("whiteout marker %s reached the tree", p)
		}
	}
}

// In a build's tree an image's layers are unpacked into uncompressed
// archives the cache keeps, and the files copied out of the merged layers
// point into them: the same tree, origins included, as unpacking the files,
// with none written to the tree's directory until a host process needs it.
func TestOCIImageByReference(t *testing.T) {
	ctx := context.Background()
	written, byRef := ociEnv(t), ociEnvByReference(t)
	for _, env := range []*Env{written, byRef} {
		d := cacheImage(t, env.Cache, whiteoutImage(t, "amd64"))
		l := &OCI{Input: Input{Kind: "oci", URI: "r.example/img@" + d, Digest: d}}
		if err := l.Apply(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	manifest := func(env *Env) string {
		var b bytes.Buffer
		if err := rootfs.WriteManifest(&b, env.Tree.Entries(), true); err != nil {
			t.Fatal(err)
		}
		return b.String()
	}
	if got, want := manifest(byRef), manifest(written); got != want {
		t.Fatalf("by reference:\n%s\nwant\n%s", got, want)
	}
	files := 0
	for _, p := range written.Tree.Paths() {
		if written.Tree.Get(p).Type != rootfs.TypeRegular {
			continue
		}
		files++
		_, want := readTree(t, written, p)
		if _, got := readTree(t, byRef, p); !bytes.Equal(got, want) {
			t.Errorf("%s: %q, want %q", p, got, want)
		}
		if byRef.Tree.DiskPath(p) != "" {
			t.Errorf("%s was written into the tree's directory", p)
		}
	}
	if files < 3 {
		t.Fatalf("the image has %d files: the test proves little", files)
	}
	if err := byRef.Tree.Materialize(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range written.Tree.Paths() {
		if written.Tree.Get(p).Type == rootfs.TypeRegular {
			_, want := readTree(t, written, p)
			if got, err := os.ReadFile(byRef.Tree.DiskPath(p)); err != nil || !bytes.Equal(got, want) {
				t.Errorf("materialized %s: %q, %v", p, got, err)
			}
		}
	}
	a, err := os.Stat(byRef.Tree.DiskPath("/usr/local/bin/tool"))
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.Stat(byRef.Tree.DiskPath("/usr/local/bin/tool-link")); err != nil || !os.SameFile(a, b) {
		t.Errorf("the materialized hard link is not one: %v", err)
	}
}

func TestOCIImagePathsAndOverrides(t *testing.T) {
	env := ociEnv(t)
	d := cacheImage(t, env.Cache, whiteoutImage(t, "amd64"))
	mode := uint32(0o755)
	l := &OCI{Input: Input{Kind: "oci", URI: "r.example/img:1", Digest: d}, Dest: "/usr/bin",
		Paths: []string{"/usr/local/bin/tool", "/opt/dir"}, Mode: &mode, Owner: Owner{User: "0"}}
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	e, b := readTree(t, env, "/usr/bin/tool")
	if string(b) != "tool v2" || e.Perm != 0o755 || e.UID != 0 || e.GID != 0 {
		t.Errorf("tool: %q mode %o owner %d:%d", b, e.Perm, e.UID, e.GID)
	}
	if env.Tree.Get("/usr/bin/dir/z") == nil || env.Tree.Get("/usr/bin/dir/x") != nil {
		t.Errorf("directory copy: %v", env.Tree.Children("/usr/bin/dir"))
	}
	if env.Tree.Get("/usr/bin/tool-link") != nil || env.Tree.Get("/etc/b") != nil {
		t.Error("paths that were not selected were copied")
	}
	bad := &OCI{Input: l.Input, Paths: []string{"/etc/a"}}
	if err := bad.Apply(context.Background(), env); err == nil || !strings.Contains(err.Error(), "/etc/a is not in the image") {
		t.Errorf("whited-out path: %v", err)
	}
}

func TestOCIImageWrongArch(t *testing.T) {
	env := ociEnv(t)
	d := cacheImage(t, env.Cache, whiteoutImage(t, "arm64"))
	l := &OCI{Input: Input{Kind: "oci", URI: "r.example/img:1", Digest: d}, Dest: "/srv"}
	err := l.Apply(context.Background(), env)
	if err == nil || !strings.Contains(err.Error(), "linux/arm64, not linux/amd64") {
		t.Fatalf("wrong arch: %v", err)
	}
	l.Platform = "linux/arm64"
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatalf("explicit platform: %v", err)
	}
}

func TestSelectPlatform(t *testing.T) {
	idx := &ociremote.Manifest{Digest: "sha256:" + strings.Repeat("a", 64), Index: &v1.IndexManifest{Manifests: []v1.Descriptor{
		{MediaType: types.OCIManifestSchema1, Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("1", 64)}, Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}},
		{MediaType: types.OCIManifestSchema1, Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("2", 64)}, Platform: &v1.Platform{OS: "linux", Architecture: "arm", Variant: "v7"}},
		{MediaType: types.OCIManifestSchema1, Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("3", 64)}, Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}},
		{MediaType: types.OCIManifestSchema1, Digest: v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("4", 64)}, Platform: &v1.Platform{OS: "unknown", Architecture: "unknown"}},
	}}}
	for _, c := range []struct{ platform, want string }{
		{"linux/amd64", "1"}, {"linux/arm64", "3"}, {"linux/arm64/v8", "3"}, {"linux/arm/v7", "2"},
	} {
		d, err := ociremote.SelectPlatform("r/x:1", idx, c.platform)
		if err != nil || d.Digest.Hex[:1] != c.want {
			t.Errorf("%s: %v %v", c.platform, d.Digest, err)
		}
	}
	_, err := ociremote.SelectPlatform("r/x:1", idx, "linux/s390x")
	if err == nil || !strings.Contains(err.Error(), "r/x:1") || !strings.Contains(err.Error(), "linux/amd64, linux/arm/v7, linux/arm64/v8") {
		t.Errorf("missing platform: %v", err)
	}
}
