package layers

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// testIndex is a two-platform index of small images and is stored in the
// cache as the conductor would (every platform's blobs, as a full pull of a
// multi-arch image would leave them).
func testIndex(t *testing.T, env *Env) (v1.ImageIndex, v1.Image, v1.Image) {
	t.Helper()
	amd := harness.Image(t, "amd64", harness.TarLayer(t, harness.TarFile{Name: "pause", Body: "amd64 pause", Mode: 0o755}))
	arm := harness.Image(t, "arm64", harness.TarLayer(t, harness.TarFile{Name: "pause", Body: "arm64 pause", Mode: 0o755}))
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}}},
	)
	cacheImage(t, env.Cache, amd)
	cacheImage(t, env.Cache, arm)
	raw, err := idx.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Cache.Put(context.Background(), bytes.NewReader(raw), ""); err != nil {
		t.Fatal(err)
	}
	return idx, amd, arm
}

func digestOf(t *testing.T, d interface{ Digest() (v1.Hash, error) }) string {
	t.Helper()
	h, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

func TestImagesArchive(t *testing.T) {
	env := ociEnv(t)
	idx, amd, arm := testIndex(t, env)
	idxDigest := digestOf(t, idx)
	single := harness.Image(t, "amd64", harness.TarLayer(t, harness.TarFile{Name: "x", Body: "x"}))
	singleDigest := cacheImage(t, env.Cache, single)
	l := &Images{Images: []*Input{
		{Kind: "image", URI: "registry.example.invalid/pause:3.10@" + idxDigest, Digest: idxDigest, Pinned: true},
		{Kind: "image", URI: "mirror.example.invalid:5000/library/busybox:1.36@" + singleDigest, Digest: singleDigest, Pinned: true},
	}}
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	const pause = "/var/lib/stamp/images/registry.example.invalid_pause_3.10.tar"
	e, data := readTree(t, env, pause)
	if e.Perm != 0o644 || e.UID != 0 || !e.MTime.Equal(ociEpoch) {
		t.Errorf("archive mode %o owner %d mtime %v", e.Perm, e.UID, e.MTime)
	}
	if e.Origin.Input != idxDigest || e.Origin.Member != "registry.example.invalid/pause:3.10@"+idxDigest {
		t.Errorf("origin %+v", e.Origin)
	}

	// The archive holds the index, the amd64 image and nothing of arm64.
	want := map[string]bool{"blobs/": true, "blobs/sha256/": true, "index.json": true, "oci-layout": true}
	blob := func(d string) { want["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")] = true }
	blob(idxDigest)
	blob(digestOf(t, amd))
	cfg, _ := amd.ConfigName()
	blob(cfg.String())
	ls, _ := amd.Layers()
	blob(digestOf(t, ls[0]))
	tr := tar.NewReader(bytes.NewReader(data))
	var names []string
	var indexJSON []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || !h.ModTime.Equal(ociEpoch) {
			t.Errorf("%s: owner %d:%d %q mtime %v", h.Name, h.Uid, h.Gid, h.Uname, h.ModTime)
		}
		if !want[h.Name] {
			t.Errorf("unexpected archive member %s", h.Name)
		}
		if h.Name == "index.json" {
			indexJSON, _ = io.ReadAll(tr)
		}
	}
	if len(names) != len(want) {
		t.Errorf("archive members %v, want %d", names, len(want))
	}
	for i := 1; i < len(names); i++ {
		if names[i-1] >= names[i] {
			t.Errorf("archive not sorted: %s before %s", names[i-1], names[i])
		}
	}
	if want["blobs/sha256/"+strings.TrimPrefix(digestOf(t, arm), "sha256:")] {
		t.Fatal("test is broken: the arm64 manifest is expected")
	}
	var ix v1.IndexManifest
	if err := json.Unmarshal(indexJSON, &ix); err != nil {
		t.Fatal(err)
	}
	if len(ix.Manifests) != 1 || ix.Manifests[0].Digest.String() != idxDigest || ix.Manifests[0].MediaType != types.OCIImageIndex ||
		ix.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != "registry.example.invalid/pause:3.10" ||
		ix.Manifests[0].Annotations["io.containerd.image.name"] != "registry.example.invalid/pause:3.10" {
		t.Errorf("index.json: %s", indexJSON)
	}

	if _, b := readTree(t, env, "/var/lib/stamp/images/mirror.example.invalid_5000_library_busybox_1.36.tar"); len(b) == 0 {
		t.Error("busybox archive is empty")
	}
	_, unit := readTree(t, env, "/usr/lib/systemd/system/stamp-import-images.service")
	for _, w := range []string{
		"ExecStart=/usr/bin/ctr -n k8s.io images import /var/lib/stamp/images/mirror.example.invalid_5000_library_busybox_1.36.tar\nExecStart=/usr/bin/ctr -n k8s.io images import " + pause + "\n",
		"ConditionPathExists=!/var/lib/stamp/images-imported", "Type=oneshot", "WantedBy=multi-user.target",
	} {
		if !strings.Contains(string(unit), w) {
			t.Errorf("unit lacks %q:\n%s", w, unit)
		}
	}
	link := env.Tree.Get("/etc/systemd/system/multi-user.target.wants/stamp-import-images.service")
	if link == nil || link.Type != rootfs.TypeSymlink || link.Target != "/usr/lib/systemd/system/stamp-import-images.service" {
		t.Errorf("unit not enabled: %+v", link)
	}

	// A second layer adds its archive to the same unit, and the same inputs
	// give the same bytes.
	env2 := ociEnv(t)
	testIndex(t, env2)
	cacheImage(t, env2.Cache, single)
	if err := (&Images{Images: l.Images[:1]}).Apply(context.Background(), env2); err != nil {
		t.Fatal(err)
	}
	if err := (&Images{Images: l.Images[1:]}).Apply(context.Background(), env2); err != nil {
		t.Fatal(err)
	}
	_, unit2 := readTree(t, env2, "/usr/lib/systemd/system/stamp-import-images.service")
	_, data2 := readTree(t, env2, pause)
	if !bytes.Equal(unit, unit2) || !bytes.Equal(data, data2) {
		t.Error("two applies of the same images differ")
	}

	// skopeo, a real OCI reader, accepts the archive under its ref name.
	skopeo, err := exec.LookPath("skopeo")
	if err != nil {
		t.Fatal("skopeo is missing (run test/scripts/deps.sh)")
	}
	host := env.Tree.DiskPath(pause)
	out, err := exec.Command(skopeo, "inspect", "--raw", "oci-archive:"+host+":registry.example.invalid/pause:3.10").CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo inspect: %v\n%s", err, out)
	}
	raw, _ := idx.RawManifest()
	if !bytes.Equal(bytes.TrimSpace(out), bytes.TrimSpace(raw)) {
		t.Errorf("skopeo reads another manifest:\n%s", out)
	}
	out, err = exec.Command(skopeo, "inspect", "oci-archive:"+host).CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"Architecture": "amd64"`) {
		t.Errorf("skopeo inspect: %v\n%s", err, out)
	}
	if out, err := exec.Command(skopeo, "inspect", "--raw", "oci-archive:"+host+":registry.example.invalid/pause:3.9").CombinedOutput(); err == nil {
		t.Errorf("skopeo found a ref name the archive does not have:\n%s", out)
	}
	os.Remove(host) // the tree's directory is removed with the test anyway
}

func TestImagesMissingPlatform(t *testing.T) {
	env := ociEnv(t)
	env.Arch = "s390x"
	idx, _, _ := testIndex(t, env)
	d := digestOf(t, idx)
	l := &Images{Images: []*Input{{Kind: "image", URI: "registry.example.invalid/pause:3.10@" + d, Digest: d, Pinned: true}}}
	err := l.Apply(context.Background(), env)
	if err == nil || !strings.Contains(err.Error(), "linux/s390x") || !strings.Contains(err.Error(), "linux/amd64, linux/arm64/v8") {
		t.Fatalf("missing platform: %v", err)
	}
}

func TestImageName(t *testing.T) {
	for ref, want := range map[string]string{
		"registry.example.invalid/pause:3.10@sha256:" + strings.Repeat("a", 64):        "registry.example.invalid/pause:3.10",
		"mirror.example.invalid/calico/node:v3.27.0@sha256:" + strings.Repeat("a", 64): "mirror.example.invalid/calico/node:v3.27.0",
		"localhost/k8s/pause:1":      "localhost/k8s/pause:1",
		"127.0.0.1:5000/k8s/pause:1": "127.0.0.1:5000/k8s/pause:1",
	} {
		if got, err := ImageName(ref); err != nil || got != want {
			t.Errorf("%s: %q %v, want %q", ref, got, err, want)
		}
	}
	if _, err := ImageName("r.example/x@sha256:" + strings.Repeat("a", 64)); err == nil {
		t.Error("a reference without a tag was accepted")
	}
	for _, short := range []string{"busybox:1.36", "library/busybox:1.36"} {
		if _, err := ImageName(short); err == nil || !strings.Contains(err.Error(), "does not name its registry") {
			t.Errorf("%s: %v, want a refusal of a reference without its registry", short, err)
		}
	}
}

// In a build that writes the cache, an image archive is written once into
// the cache and the tree's file points at it: the same bytes as an archive
// written into the tree. A later build with the same inputs points at the
// same blob without writing it again, and one whose kept archive was
// damaged writes it again.
func TestImagesArchiveByReference(t *testing.T) {
	ctx := context.Background()
	const pause = "/var/lib/stamp/images/registry.example.invalid_pause_3.10.tar"
	written := ociEnv(t)
	idx, _, _ := testIndex(t, written)
	idxDigest := digestOf(t, idx)
	l := &Images{Images: []*Input{{Kind: "image", URI: "registry.example.invalid/pause:3.10@" + idxDigest, Digest: idxDigest, Pinned: true}}}
	if err := l.Apply(ctx, written); err != nil {
		t.Fatal(err)
	}
	want, wantData := readTree(t, written, pause)

	first := ociEnvByReference(t)
	first.Maker = "sha256:" + strings.Repeat("5", 64)
	testIndex(t, first)
	if err := l.Apply(ctx, first); err != nil {
		t.Fatal(err)
	}
	e, data := readTree(t, first, pause)
	if !bytes.Equal(data, wantData) || e.Digest != want.Digest || e.Size != want.Size || e.Perm != want.Perm || !e.MTime.Equal(want.MTime) {
		t.Fatalf("the archive by reference differs from the one written (%d bytes, %s)", e.Size, e.Digest)
	}
	if first.Tree.DiskPath(pause) != "" {
		t.Fatal("the archive was written into the tree's directory")
	}
	blob, err := first.Cache.Path("sha256:" + e.Digest)
	if err != nil {
		t.Fatalf("the archive is not a blob of the cache: %v", err)
	}
	inode := func(p string) uint64 {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	ino := inode(blob)
	// sameCache is a later build's env: a new tree, first's cache.
	sameCache := func() *Env {
		t.Helper()
		env := &Env{}
		*env = *first
		tree, err := rootfs.New(filepath.Join(t.TempDir(), "tree"), rootfs.Options{DefaultMTime: ociEpoch, Archives: first.Cache.Archives()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tree.Close() })
		env.Tree = tree
		return env
	}
	// The cache's record points at the blob, which is not written again.
	second := sameCache()
	if err := l.Apply(ctx, second); err != nil {
		t.Fatal(err)
	}
	if e, data := readTree(t, second, pause); !bytes.Equal(data, wantData) || e.Digest != want.Digest {
		t.Fatal("the archive from the cache's record differs")
	}
	if inode(blob) != ino {
		t.Fatal("the kept archive was written again")
	}
	if err := second.Tree.Materialize(ctx); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(second.Tree.DiskPath(pause)); err != nil || !bytes.Equal(b, wantData) {
		t.Fatalf("materialized archive: %v", err)
	}

	// A damaged kept archive is found, and written again.
	damaged := bytes.Clone(wantData)
	damaged[len(damaged)/2] ^= 0xff
	if err := os.Remove(blob); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blob, damaged, 0o644); err != nil {
		t.Fatal(err)
	}
	third := sameCache()
	if err := l.Apply(ctx, third); err != nil {
		t.Fatal(err)
	}
	if e, data := readTree(t, third, pause); !bytes.Equal(data, wantData) || e.Digest != want.Digest {
		t.Fatal("the archive written again differs")
	}
	if b, err := os.ReadFile(blob); err != nil || !bytes.Equal(b, wantData) {
		t.Fatalf("the cache does not hold a good archive again: %v", err)
	}
}
