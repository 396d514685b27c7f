package formats

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

func ociSource(t *testing.T, tree *rootfs.Tree) *Source {
	return &Source{Tree: tree.View(), Epoch: tarEpoch, Name: "node", Arch: "amd64", Seed: "node"}
}

func ociWrite(t *testing.T, src *Source, spec *Spec) (string, *Result) {
	t.Helper()
	dir := t.TempDir()
	res, err := ociFormat{}.Write(context.Background(), src, spec, dir, "node")
	if err != nil {
		t.Fatal(err)
	}
	return dir, res
}

// ociFiles maps every file under root (a file or a directory) to its bytes'
// sha256, and checks nothing but files and directories is there.
func ociFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if rel != "." {
				out[rel+"/"] = "dir"
			}
			return nil
		}
		if !d.Type().IsRegular() {
			t.Errorf("%s: not a regular file", rel)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func ociSkopeo(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(harness.Tool(t, "skopeo"), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "TMPDIR=" + t.TempDir()}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("skopeo %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// ociInspect runs skopeo inspect and returns its Digest, Architecture, Os,
// Env and Labels.
func ociInspect(t *testing.T, ref string, flags ...string) (digest, arch, osName string, env []string, labels map[string]string) {
	t.Helper()
	var v struct {
		Digest       string
		Architecture string
		Os           string
		Env          []string
		Labels       map[string]string
	}
	if err := json.Unmarshal([]byte(ociSkopeo(t, append(append([]string{"inspect"}, flags...), ref)...)), &v); err != nil {
		t.Fatal(err)
	}
	return v.Digest, v.Architecture, v.Os, v.Env, v.Labels
}

func ociReadDigestFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(b), "\n") {
		t.Fatalf("%s: %q does not end in a newline", p, b)
	}
	return strings.TrimSpace(string(b))
}

func TestOCIRootfsLayout(t *testing.T) {
	tree := tarTestTree(t)
	spec := &Spec{Format: "oci", Options: &OCISpec{Kind: "rootfs", Layout: "dir",
		Entrypoint: []string{"/sbin/init"}, Env: []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
		Labels: map[string]string{"org.example.z": "last", "org.example.a": "first"}}}
	dir, res := ociWrite(t, ociSource(t, tree), spec)
	if want := []string{"node.oci", "node.oci.digest"}; !reflect.DeepEqual(res.Files, want) {
		t.Fatalf("files %q, want %q", res.Files, want)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "/run/sock") {
		t.Errorf("warnings %q, want one naming the socket", res.Warnings)
	}
	layout := filepath.Join(dir, "node.oci")
	digest := ociReadDigestFile(t, filepath.Join(dir, "node.oci.digest"))

	// The layer is the canonical tar, gzip-compressed by default, and the
	// diff_id is the canonical tar's digest.
	canon := writeTarBytes(t, tree, TarOptions{})
	sum := sha256.Sum256(canon)
	diffID := "sha256:" + hex.EncodeToString(sum[:])
	gz := writeTarBytes(t, tree, TarOptions{Compression: compress.Gzip})
	sum = sha256.Sum256(gz)
	layerHex := hex.EncodeToString(sum[:])
	layerBytes, err := os.ReadFile(filepath.Join(layout, "blobs", "sha256", layerHex))
	if err != nil {
		t.Fatalf("layer blob is not the gzip of the canonical tar: %v", err)
	}
	if !bytes.Equal(layerBytes, gz) {
		t.Fatal("layer blob differs from WriteTar's gzip output")
	}
	// Exactly three blobs and the two layout files.
	files := ociFiles(t, layout)
	var names []string
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) != 7 || names[0] != "blobs/" || names[1] != "blobs/sha256/" || names[5] != "index.json" || names[6] != "oci-layout" {
		t.Fatalf("layout holds %q", names)
	}

	im, err := ReadOCI(context.Background(), layout)
	if err != nil {
		t.Fatal(err)
	}
	if im.Digest != digest {
		t.Errorf("ReadOCI digest %s, digest file %s", im.Digest, digest)
	}
	if im.Kind != "rootfs" || im.Disk != nil {
		t.Errorf("kind %s, disk %v", im.Kind, im.Disk)
	}
	if im.RefName != OCIRefName || im.Arch != "amd64" || im.OS != "linux" || !im.Created.Equal(tarEpoch) {
		t.Errorf("ref %q arch %q os %q created %v", im.RefName, im.Arch, im.OS, im.Created)
	}
	if !reflect.DeepEqual(im.Entry, spec.Options.(*OCISpec).Entrypoint) || !reflect.DeepEqual(im.Env, spec.Options.(*OCISpec).Env) || !reflect.DeepEqual(im.Labels, spec.Options.(*OCISpec).Labels) {
		t.Errorf("entrypoint %q env %q labels %v", im.Entry, im.Env, im.Labels)
	}
	if im.Layer != (OCIDescriptor{MediaType: OCILayerGzipMediaType, Digest: "sha256:" + layerHex, Size: int64(len(gz))}) || im.DiffID != diffID {
		t.Errorf("layer %+v diff_id %s", im.Layer, im.DiffID)
	}
	tarCompareEntries(t, im.Tree.Entries(), tarWant(tree))

	// The documents, exactly: created is the epoch everywhere.
	var cfg map[string]any
	if err := json.Unmarshal(im.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["created"] != "2023-11-14T22:13:20Z" {
		t.Errorf("config created %v", cfg["created"])
	}
	hist := cfg["history"].([]any)[0].(map[string]any)
	if hist["created"] != "2023-11-14T22:13:20Z" || hist["created_by"] != "stamp" {
		t.Errorf("history %v", hist)
	}
	if ids := cfg["rootfs"].(map[string]any)["diff_ids"].([]any); len(ids) != 1 || ids[0] != diffID {
		t.Errorf("diff_ids %v", ids)
	}
	index, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		t.Fatal(err)
	}
	msum := sha256.Sum256(im.Manifest)
	wantIndex := `{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:` +
		hex.EncodeToString(msum[:]) + `","size":` + itoa(len(im.Manifest)) +
		`,"annotations":{"org.opencontainers.image.ref.name":"latest"},"platform":{"architecture":"amd64","os":"linux"}}]}`
	if string(index) != wantIndex {
		t.Errorf("index.json\n got  %s\n want %s", index, wantIndex)
	}
	for _, want := range []string{"# oci manifest " + digest,
		"# oci layer sha256:" + layerHex + " size=" + itoa(len(gz)) + " mediaType=" + OCILayerGzipMediaType + " diffID=" + diffID} {
		found := false
		for _, a := range res.Adds {
			found = found || strings.HasPrefix(a, want)
		}
		if !found {
			t.Errorf("adds %q lack %q", res.Adds, want)
		}
	}

	// skopeo reads it, by the default name and by the ref.name tag, and
	// copies it.
	for _, ref := range []string{"oci:" + layout, "oci:" + layout + ":latest"} {
		d, arch, osName, env, labels := ociInspect(t, ref)
		if d != digest || arch != "amd64" || osName != "linux" || !reflect.DeepEqual(env, spec.Options.(*OCISpec).Env) || !reflect.DeepEqual(labels, spec.Options.(*OCISpec).Labels) {
			t.Errorf("skopeo inspect %s: digest %s arch %s os %s env %q labels %v", ref, d, arch, osName, env, labels)
		}
	}
	copied := filepath.Join(t.TempDir(), "copy")
	ociSkopeo(t, "copy", "oci:"+layout, "dir:"+copied)
	got, err := os.ReadFile(filepath.Join(copied, layerHex))
	if err != nil || !bytes.Equal(got, gz) {
		t.Errorf("skopeo copy did not keep the layer as is: %v", err)
	}
	if m, err := os.ReadFile(filepath.Join(copied, "manifest.json")); err != nil || !bytes.Equal(m, im.Manifest) {
		t.Errorf("skopeo copy changed the manifest: %v", err)
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

func TestOCIDeterministic(t *testing.T) {
	tree := tarTestTree(t)
	for _, layout := range []string{"dir", "archive"} {
		spec := &Spec{Format: "oci", Options: &OCISpec{Kind: "rootfs", Layout: layout, Labels: map[string]string{"b": "2", "a": "1", "c": "3"}}}
		d1, r1 := ociWrite(t, ociSource(t, tree), spec)
		d2, r2 := ociWrite(t, ociSource(t, tree), spec)
		if !reflect.DeepEqual(r1, r2) {
			t.Errorf("%s: results differ: %+v vs %+v", layout, r1, r2)
		}
		f1, f2 := ociFiles(t, d1), ociFiles(t, d2)
		if !reflect.DeepEqual(f1, f2) {
			t.Errorf("%s: outputs differ:\n%v\n%v", layout, f1, f2)
		}
		// Nothing but the outputs is left in the directory.
		ents, _ := os.ReadDir(d1)
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if !reflect.DeepEqual(names, r1.Files) {
			t.Errorf("%s: directory holds %q, result says %q", layout, names, r1.Files)
		}
	}
	// The epoch is the only time in the image: another epoch, another digest.
	d1, _ := ociWrite(t, ociSource(t, tree), &Spec{})
	src := ociSource(t, tree)
	src.Epoch = tarEpoch.Add(1e9)
	d2, _ := ociWrite(t, src, &Spec{})
	if ociReadDigestFile(t, filepath.Join(d1, "node.oci.digest")) == ociReadDigestFile(t, filepath.Join(d2, "node.oci.digest")) {
		t.Error("the epoch does not reach the image")
	}
}

func TestOCIArchive(t *testing.T) {
	tree := tarTestTree(t)
	spec := &Spec{Format: "oci", Options: &OCISpec{Kind: "rootfs", Layout: "archive"}}
	dir, res := ociWrite(t, ociSource(t, tree), spec)
	if want := []string{"node.oci.tar", "node.oci.tar.digest"}; !reflect.DeepEqual(res.Files, want) {
		t.Fatalf("files %q, want %q", res.Files, want)
	}
	archive := filepath.Join(dir, "node.oci.tar")
	digest := ociReadDigestFile(t, archive+".digest")

	// The archive is the layout dir's files, sorted, owned 0:0, at the epoch.
	dirOut, _ := ociWrite(t, ociSource(t, tree), &Spec{Options: &OCISpec{Layout: "dir"}})
	if d := ociReadDigestFile(t, filepath.Join(dirOut, "node.oci.digest")); d != digest {
		t.Fatalf("archive image %s, dir image %s", digest, d)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		if hdr.Uid != 0 || hdr.Gid != 0 || !hdr.ModTime.Equal(tarEpoch) || hdr.Uname != "" {
			t.Errorf("%s: owner %d:%d %q mtime %v", hdr.Name, hdr.Uid, hdr.Gid, hdr.Uname, hdr.ModTime)
		}
		if hdr.Typeflag == tar.TypeReg {
			b, _ := io.ReadAll(tr)
			want, err := os.ReadFile(filepath.Join(dirOut, "node.oci", hdr.Name))
			if err != nil || !bytes.Equal(b, want) {
				t.Errorf("%s differs from the layout dir's file: %v", hdr.Name, err)
			}
		}
	}
	if !sort.StringsAreSorted(names) || len(names) != 7 || names[0] != "blobs/" || names[6] != "oci-layout" {
		t.Errorf("archive members %q", names)
	}

	if d, _, _, _, _ := ociInspect(t, "oci-archive:"+archive); d != digest {
		t.Errorf("skopeo inspect oci-archive: digest %s, want %s", d, digest)
	}
	im, err := ReadOCI(context.Background(), archive)
	if err != nil {
		t.Fatal(err)
	}
	if im.Digest != digest {
		t.Errorf("ReadOCI digest %s, want %s", im.Digest, digest)
	}
	tarCompareEntries(t, im.Tree.Entries(), tarWant(tree))
}

// ociDiskFile writes a small stand-in disk: any bytes are a valid disk as
// far as the packaging goes.
func ociDiskFile(t *testing.T, name string, size int) (string, []byte) {
	t.Helper()
	b := tarSemiRandom(size, 11)
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p, b
}

func TestOCIContainerDisk(t *testing.T) {
	disk, content := ociDiskFile(t, "node.qcow2", 3<<20+123)
	sum := sha256.Sum256(content)
	for _, layout := range []string{"dir", "archive"} {
		t.Run(layout, func(t *testing.T) {
			tree := tarTestTree(t)
			src := ociSource(t, tree)
			src.From = disk
			src.Arch = "arm64"
			dir, res := ociWrite(t, src, &Spec{Format: "oci", Options: &OCISpec{Kind: "containerdisk", Layout: layout, Labels: map[string]string{"k": "v"}}})
			main := filepath.Join(dir, res.Files[0])
			digest := ociReadDigestFile(t, filepath.Join(dir, res.Files[1]))
			if len(res.Warnings) != 0 {
				t.Errorf("warnings %q", res.Warnings)
			}
			wantAdds := []string{
				"layer:/disk type=dir mode=0555 uid=107 gid=107 mtime=1700000000",
				"layer:/disk/node.qcow2 type=file mode=0440 uid=107 gid=107 mtime=1700000000 size=3145851 sha256=" + hex.EncodeToString(sum[:]),
			}
			for _, w := range wantAdds {
				found := false
				for _, a := range res.Adds {
					found = found || a == w
				}
				if !found {
					t.Errorf("adds %q lack %q", res.Adds, w)
				}
			}

			im, err := ReadOCI(context.Background(), main)
			if err != nil {
				t.Fatal(err)
			}
			if im.Digest != digest || im.Kind != "containerdisk" || im.Arch != "arm64" || im.Variant != "v8" {
				t.Errorf("digest %s (want %s) kind %s arch %s/%s", im.Digest, digest, im.Kind, im.Arch, im.Variant)
			}
			if im.Tree.Len() != 2 {
				t.Errorf("layer holds %d entries, want /disk and the disk", im.Tree.Len())
			}
			d := im.Disk
			if d == nil || d.Path != "/disk/node.qcow2" || d.UID != 107 || d.GID != 107 || d.Perm != 0o440 ||
				d.Size != int64(len(content)) || d.Digest != hex.EncodeToString(sum[:]) || !d.MTime.Equal(tarEpoch) {
				t.Fatalf("disk entry %+v", d)
			}
			if e := im.Tree.Get("/disk"); e == nil || e.Perm != 0o555 || e.UID != 107 || e.GID != 107 {
				t.Errorf("/disk entry %+v", e)
			}
			r, err := im.OpenDisk(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, content) {
				t.Fatalf("OpenDisk read %d bytes (err %v), want the %d of the disk", len(got), err, len(content))
			}
			lr, err := im.OpenLayer()
			if err != nil {
				t.Fatal(err)
			}
			lh := sha256.New()
			io.Copy(lh, lr)
			lr.Close()
			if "sha256:"+hex.EncodeToString(lh.Sum(nil)) != im.Layer.Digest {
				t.Error("OpenLayer does not give the layer blob")
			}
			ref := "oci:" + main
			if layout == "archive" {
				ref = "oci-archive:" + main
			}
			if sd, arch, osName, _, labels := ociInspect(t, ref); sd != digest || arch != "arm64" || osName != "linux" || labels["k"] != "v" {
				t.Errorf("skopeo inspect: digest %s arch %s os %s labels %v", sd, arch, osName, labels)
			}
			ociSkopeo(t, "copy", ref, "dir:"+filepath.Join(t.TempDir(), "copy"))
		})
	}
}

func TestOCIContainerDiskNeedsFrom(t *testing.T) {
	tree := tarTestTree(t)
	_, err := ociFormat{}.Write(context.Background(), ociSource(t, tree), &Spec{Options: &OCISpec{Kind: "containerdisk"}}, t.TempDir(), "node")
	if err == nil || !strings.Contains(err.Error(), "from") {
		t.Fatalf("err %v, want one about from", err)
	}
	src := ociSource(t, tree)
	src.From = filepath.Join(t.TempDir(), "missing.qcow2")
	dir := t.TempDir()
	_, err = ociFormat{}.Write(context.Background(), src, &Spec{Options: &OCISpec{Kind: "containerdisk"}}, dir, "node")
	if err == nil || !strings.Contains(err.Error(), "missing.qcow2") {
		t.Fatalf("err %v, want one naming the source", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a failed write left %d files", len(ents))
	}
	if _, err := (ociFormat{}).Write(context.Background(), ociSource(t, tree), &Spec{Options: &OCISpec{Compression: "xz"}}, dir, "node"); err == nil || !strings.Contains(err.Error(), "gzip, zstd or none") {
		t.Errorf("compression xz: %v", err)
	}
	src.Arch = "riscv64"
	if _, err := (ociFormat{}).Write(context.Background(), ociSource(t, tree), &Spec{Options: &OCISpec{Kind: "wasm"}}, dir, "node"); err == nil {
		t.Error("kind wasm accepted")
	}
	if _, err := (ociFormat{}).Write(context.Background(), src, &Spec{}, dir, "node"); err == nil || !strings.Contains(err.Error(), "riscv64") {
		t.Errorf("arch riscv64: %v", err)
	}
}

func TestOCIReadRejectsCorruption(t *testing.T) {
	tree := tarTestTree(t)
	disk, _ := ociDiskFile(t, "d.raw", 64<<10)
	flip := func(t *testing.T, p string, at int64) {
		t.Helper()
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := []byte{0}
		if _, err := f.ReadAt(b, at); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x01
		if _, err := f.WriteAt(b, at); err != nil {
			t.Fatal(err)
		}
	}
	fresh := func(t *testing.T, spec *Spec) (string, *OCIImage) {
		src := ociSource(t, tree)
		src.From = disk
		dir, res := ociWrite(t, src, spec)
		p := filepath.Join(dir, res.Files[0])
		im, err := ReadOCI(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		return p, im
	}
	blob := func(p, digest string) string {
		return filepath.Join(p, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:"))
	}
	t.Run("layer", func(t *testing.T) {
		p, im := fresh(t, &Spec{})
		flip(t, blob(p, im.Layer.Digest), 2000)
		if _, err := ReadOCI(context.Background(), p); err == nil || !strings.Contains(err.Error(), "does not match its digest") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("disk", func(t *testing.T) {
		p, im := fresh(t, &Spec{Options: &OCISpec{Kind: "containerdisk"}})
		flip(t, blob(p, im.Layer.Digest), im.Layer.Size-2000)
		if _, err := ReadOCI(context.Background(), p); err == nil || !strings.Contains(err.Error(), im.Layer.Digest[7:]) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("config", func(t *testing.T) {
		p, im := fresh(t, &Spec{})
		var m ociManifestJSON
		json.Unmarshal(im.Manifest, &m)
		flip(t, blob(p, m.Config.Digest), 10)
		if _, err := ReadOCI(context.Background(), p); err == nil || !strings.Contains(err.Error(), "config") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("stray blob", func(t *testing.T) {
		p, _ := fresh(t, &Spec{})
		stray := filepath.Join(p, "blobs", "sha256", strings.Repeat("ab", 32))
		os.WriteFile(stray, []byte("not what the name says"), 0o644)
		if _, err := ReadOCI(context.Background(), p); err == nil || !strings.Contains(err.Error(), strings.Repeat("ab", 32)) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("archive", func(t *testing.T) {
		p, im := fresh(t, &Spec{Options: &OCISpec{Layout: "archive"}})
		// The layer's data begins after the two directory headers and the
		// member header of the first blob at the earliest; flip inside the
		// layer wherever it lies.
		b, _ := os.ReadFile(p)
		layer := writeTarBytes(t, tree, TarOptions{Compression: compress.Gzip})
		at := bytes.Index(b, layer[:4096])
		if at < 0 {
			t.Fatal("layer not found in the archive")
		}
		flip(t, p, int64(at)+3000)
		if _, err := ReadOCI(context.Background(), p); err == nil || !strings.Contains(err.Error(), im.Layer.Digest[7:]) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("compressed archive", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "x.oci.tar.gz")
		os.WriteFile(p, []byte{0x1f, 0x8b, 8, 0, 0, 0}, 0o644)
		if _, err := ReadOCI(context.Background(), p); err == nil || !strings.Contains(err.Error(), "compressed") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("diff_id", func(t *testing.T) {
		p, _ := fresh(t, &Spec{Options: &OCISpec{Compression: "gzip"}})
		ociRewrite(t, p, func(m, cfg map[string]any) {
			cfg["rootfs"].(map[string]any)["diff_ids"] = []string{"sha256:" + strings.Repeat("0", 64)}
		})
		if _, err := ReadOCI(context.Background(), p); err == nil || !strings.Contains(err.Error(), "diff_id is sha256:000000") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("zstd as gzip", func(t *testing.T) {
		p, _ := fresh(t, &Spec{Options: &OCISpec{Compression: "zstd"}})
		ociRewrite(t, p, func(m, cfg map[string]any) {
			m["layers"].([]any)[0].(map[string]any)["mediaType"] = OCILayerGzipMediaType
		})
		_, err := ReadOCI(context.Background(), p)
		if err == nil || !strings.Contains(err.Error(), "gzip: invalid header") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("unknown layer media type", func(t *testing.T) {
		p, _ := fresh(t, &Spec{})
		ociRewrite(t, p, func(m, cfg map[string]any) {
			m["layers"].([]any)[0].(map[string]any)["mediaType"] = "application/vnd.oci.image.layer.v1.tar+bzip2"
		})
		if _, err := ReadOCI(context.Background(), p); err == nil || !strings.Contains(err.Error(), "tar+bzip2") {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("bad digest in index", func(t *testing.T) {
		p, im := fresh(t, &Spec{})
		idx, _ := os.ReadFile(filepath.Join(p, "index.json"))
		idx = bytes.Replace(idx, []byte(im.Digest), []byte("sha256:../../../etc/passwd"), 1)
		os.WriteFile(filepath.Join(p, "index.json"), idx, 0o644)
		if _, err := ReadOCI(context.Background(), p); err == nil || !strings.Contains(err.Error(), "not sha256:") {
			t.Fatalf("err %v", err)
		}
	})
}

// ociRewrite lets edit change the manifest and config of the layout
// directory p, and stores them as new blobs that index.json points at, so
// that only what edit changed is wrong.
func ociRewrite(t *testing.T, p string, edit func(manifest, config map[string]any)) {
	t.Helper()
	var idx ociIndexJSON
	ociReadJSON(t, filepath.Join(p, "index.json"), &idx)
	blob := func(d string) string { return filepath.Join(p, "blobs", "sha256", strings.TrimPrefix(d, "sha256:")) }
	var m, cfg map[string]any
	ociReadJSON(t, blob(idx.Manifests[0].Digest), &m)
	ociReadJSON(t, blob(m["config"].(map[string]any)["digest"].(string)), &cfg)
	edit(m, cfg)
	put := func(v any) (string, int) {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		if err := os.WriteFile(blob(d), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return d, len(b)
	}
	cd, cn := put(cfg)
	m["config"].(map[string]any)["digest"], m["config"].(map[string]any)["size"] = cd, cn
	md, mn := put(m)
	idx.Manifests[0].Digest, idx.Manifests[0].Size = md, int64(mn)
	b, _ := json.Marshal(idx)
	if err := os.WriteFile(filepath.Join(p, "index.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	// The replaced documents stay as blobs nothing references; they still
	// hash to their names, so only the edit is wrong.
}

func ociReadJSON(t *testing.T, p string, v any) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatal(err)
	}
}

func TestOCICancelled(t *testing.T) {
	tree := tarTestTree(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	if _, err := (ociFormat{}).Write(ctx, ociSource(t, tree), &Spec{Options: &OCISpec{Layout: "archive"}}, dir, "node"); err == nil {
		t.Fatal("a cancelled write succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a cancelled write left %d files", len(ents))
	}
}

// FuzzReadOCI feeds ReadOCI damaged oci-archives: it must return an error
// or an image, never panic or read outside the archive.
func FuzzReadOCI(f *testing.F) {
	tree := rootfstest.New(f, tarEpoch)
	if _, err := tree.Create("/etc/hostname", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: tarEpoch}, strings.NewReader("n\n")); err != nil {
		f.Fatal(err)
	}
	for _, kind := range []string{"rootfs", "containerdisk"} {
		dir := f.TempDir()
		disk := filepath.Join(dir, "d.raw")
		os.WriteFile(disk, []byte("a disk"), 0o644)
		src := &Source{Tree: tree.View(), Epoch: tarEpoch, Arch: "amd64", From: disk}
		res, err := ociFormat{}.Write(context.Background(), src, &Spec{Options: &OCISpec{Kind: kind, Layout: "archive"}}, dir, "n")
		if err != nil {
			f.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, res.Files[0]))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(t.TempDir(), "x.oci.tar")
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		im, err := ReadOCI(context.Background(), p)
		if err != nil {
			return
		}
		if im.Disk != nil {
			if r, err := im.OpenDisk(context.Background()); err == nil {
				io.Copy(io.Discard, r)
				r.Close()
			}
		}
	})
}

// TestOCICompressions: for each kind, compression and layout, the output is
// the same bytes on every build and at GOMAXPROCS=1, the layer is what its
// media type says and decompresses to the tar its diff_id names, stamp's
// reader gives back the tree (or the disk), skopeo reads it, and
// go-containerregistry's full validation passes for gzip. That validation
// gunzips every layer whatever its media type, so it refuses zstd and
// uncompressed layers: the test holds it to that, so a release that learns
// them shows up here.
func TestOCICompressions(t *testing.T) {
	tree := tarTestTree(t)
	canon := writeTarBytes(t, tree, TarOptions{})
	disk, content := ociDiskFile(t, "node.qcow2", 3<<20+123)
	diskSum := sha256.Sum256(content)
	for _, kind := range []string{"rootfs", "containerdisk"} {
		for _, c := range []string{"gzip", "zstd", "none"} {
			for _, lay := range []string{"dir", "archive"} {
				t.Run(kind+"/"+c+"/"+lay, func(t *testing.T) {
					src := ociSource(t, tree)
					if kind == "containerdisk" {
						src.From = disk
					}
					spec := &Spec{Format: "oci", Options: &OCISpec{Kind: kind, Layout: lay, Compression: compress.Algorithm(c)}}
					d1, r1 := ociWrite(t, src, spec)
					d2, r2 := ociWrite(t, src, spec)
					prev := runtime.GOMAXPROCS(1)
					d3, r3 := ociWrite(t, src, spec)
					runtime.GOMAXPROCS(prev)
					f1 := ociFiles(t, d1)
					if f2, f3 := ociFiles(t, d2), ociFiles(t, d3); !reflect.DeepEqual(f1, f2) || !reflect.DeepEqual(f1, f3) {
						t.Fatalf("outputs differ:\n%v\n%v\nGOMAXPROCS=1: %v", f1, f2, f3)
					}
					if !reflect.DeepEqual(r1, r2) || !reflect.DeepEqual(r1, r3) {
						t.Errorf("results differ: %+v / %+v / %+v", r1, r2, r3)
					}

					main := filepath.Join(d1, r1.Files[0])
					digest := ociReadDigestFile(t, filepath.Join(d1, r1.Files[1]))
					im, err := ReadOCI(context.Background(), main)
					if err != nil {
						t.Fatal(err)
					}
					alg := compress.Algorithm(c)
					if im.Digest != digest || im.Kind != kind || im.Layer.MediaType != ociLayerMediaTypes[alg] {
						t.Errorf("digest %s (want %s) kind %s layer %+v", im.Digest, digest, im.Kind, im.Layer)
					}
					lr, err := im.OpenLayer()
					if err != nil {
						t.Fatal(err)
					}
					head := make([]byte, 4)
					lr.ReadAt(head, 0)
					if got, _, _ := compress.Detect(bytes.NewReader(head)); got != alg {
						t.Errorf("layer blob starts %x: %s, want %s", head, got, alg)
					}
					zr, err := compress.NewReader(alg, lr)
					if err != nil {
						t.Fatal(err)
					}
					plain, err := io.ReadAll(zr)
					zr.Close()
					lr.Close()
					if err != nil {
						t.Fatal(err)
					}
					if sum := sha256.Sum256(plain); im.DiffID != "sha256:"+hex.EncodeToString(sum[:]) {
						t.Errorf("diff_id %s is not the sha256 of the decompressed layer", im.DiffID)
					}
					if kind == "rootfs" {
						if !bytes.Equal(plain, canon) {
							t.Error("the decompressed layer is not the canonical tar")
						}
						tarCompareEntries(t, im.Tree.Entries(), tarWant(tree))
					} else {
						if im.Disk == nil || im.Disk.Digest != hex.EncodeToString(diskSum[:]) {
							t.Fatalf("disk entry %+v", im.Disk)
						}
						r, err := im.OpenDisk(context.Background())
						if err != nil {
							t.Fatal(err)
						}
						got, err := io.ReadAll(r)
						r.Close()
						if err != nil || !bytes.Equal(got, content) {
							t.Fatalf("OpenDisk read %d bytes (err %v), want the %d of the disk", len(got), err, len(content))
						}
					}

					ref := "oci:" + main
					if lay == "archive" {
						ref = "oci-archive:" + main
					}
					if d, _, _, _, _ := ociInspect(t, ref); d != digest {
						t.Errorf("skopeo inspect %s: digest %s, want %s", ref, d, digest)
					}

					err = harness.ValidateLayout(t, main)
					t.Logf("validate.Image: %v", err)
					switch {
					case c == "gzip" && err != nil:
						t.Errorf("validate.Image: %v", err)
					case c != "gzip" && (err == nil || !strings.Contains(err.Error(), "gzip: invalid header")):
						t.Errorf("validate.Image on a %s layer: %v, want gzip: invalid header", c, err)
					}
				})
			}
		}
	}
}

// TestOCIGzipToRegistry copies the default (gzip) image of each kind into a
// real registry with skopeo, then pulls it with go-containerregistry and
// validates it in full: the registry keeps the digest, and what it serves
// is sound.
func TestOCIGzipToRegistry(t *testing.T) {
	tree := tarTestTree(t)
	disk, _ := ociDiskFile(t, "node.raw", 1<<20)
	reg := harness.StartRegistry(t)
	for _, kind := range []string{"rootfs", "containerdisk"} {
		for _, lay := range []string{"dir", "archive"} {
			src := ociSource(t, tree)
			src.From = disk
			dir, res := ociWrite(t, src, &Spec{Format: "oci", Options: &OCISpec{Kind: kind, Layout: lay}})
			main := filepath.Join(dir, res.Files[0])
			digest := ociReadDigestFile(t, filepath.Join(dir, res.Files[1]))
			from := "oci:" + main
			if lay == "archive" {
				from = "oci-archive:" + main
			}
			to := reg.Addr + "/stamp/" + kind + "-" + lay + ":v1"
			ociSkopeo(t, "copy", "--dest-tls-verify=false", from, "docker://"+to)
			if d, _, _, _, _ := ociInspect(t, "docker://"+to, "--tls-verify=false"); d != digest {
				t.Errorf("%s: registry serves %s, the layout holds %s", to, d, digest)
			}
			r, err := name.ParseReference(to)
			if err != nil {
				t.Fatal(err)
			}
			img, err := remote.Image(r)
			if err != nil {
				t.Fatal(err)
			}
			if d, err := img.Digest(); err != nil || d.String() != digest {
				t.Errorf("%s: pulled %s (%v), want %s", to, d, err, digest)
			}
			if err := validate.Image(img); err != nil {
				t.Errorf("%s: validate.Image: %v", to, err)
			}
		}
	}
}
