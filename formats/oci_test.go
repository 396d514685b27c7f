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
	"sort"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

func ociSource(t *testing.T, tree *rootfs.Tree) *Source {
	return &Source{Tree: tree, Epoch: tarEpoch, Name: "node", Arch: "amd64", Seed: "node"}
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
func ociInspect(t *testing.T, ref string) (digest, arch, osName string, env []string, labels map[string]string) {
	t.Helper()
	var v struct {
		Digest       string
		Architecture string
		Os           string
		Env          []string
		Labels       map[string]string
	}
	if err := json.Unmarshal([]byte(ociSkopeo(t, "inspect", ref)), &v); err != nil {
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
	spec := &Spec{Format: "oci", Kind: "rootfs", Layout: "dir",
		Entrypoint: []string{"/sbin/init"}, Env: []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
		Labels: map[string]string{"org.example.z": "last", "org.example.a": "first"}}
	dir, res := ociWrite(t, ociSource(t, tree), spec)
	if want := []string{"node.oci", "node.oci.digest"}; !reflect.DeepEqual(res.Files, want) {
		t.Fatalf("files %q, want %q", res.Files, want)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "/run/sock") {
		t.Errorf("warnings %q, want one naming the socket", res.Warnings)
	}
	layout := filepath.Join(dir, "node.oci")
	digest := ociReadDigestFile(t, filepath.Join(dir, "node.oci.digest"))

	// The layer is the canonical tar, byte for byte, and the diff_id is its
	// digest.
	canon := writeTarBytes(t, tree, TarOptions{})
	sum := sha256.Sum256(canon)
	layerHex := hex.EncodeToString(sum[:])
	layerBytes, err := os.ReadFile(filepath.Join(layout, "blobs", "sha256", layerHex))
	if err != nil {
		t.Fatalf("layer blob is not the canonical tar: %v", err)
	}
	if !bytes.Equal(layerBytes, canon) {
		t.Fatal("layer blob differs from WriteTar's output")
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
	if !reflect.DeepEqual(im.Entry, spec.Entrypoint) || !reflect.DeepEqual(im.Env, spec.Env) || !reflect.DeepEqual(im.Labels, spec.Labels) {
		t.Errorf("entrypoint %q env %q labels %v", im.Entry, im.Env, im.Labels)
	}
	if im.Layer != (OCIDescriptor{MediaType: OCILayerMediaType, Digest: "sha256:" + layerHex, Size: int64(len(canon))}) {
		t.Errorf("layer %+v", im.Layer)
	}
	tarCompareEntries(t, im.Entries, tarWant(tree))

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
	if ids := cfg["rootfs"].(map[string]any)["diff_ids"].([]any); len(ids) != 1 || ids[0] != "sha256:"+layerHex {
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
	for _, want := range []string{"# oci manifest " + digest, "# oci layer sha256:" + layerHex} {
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
		if d != digest || arch != "amd64" || osName != "linux" || !reflect.DeepEqual(env, spec.Env) || !reflect.DeepEqual(labels, spec.Labels) {
			t.Errorf("skopeo inspect %s: digest %s arch %s os %s env %q labels %v", ref, d, arch, osName, env, labels)
		}
	}
	copied := filepath.Join(t.TempDir(), "copy")
	ociSkopeo(t, "copy", "oci:"+layout, "dir:"+copied)
	got, err := os.ReadFile(filepath.Join(copied, layerHex))
	if err != nil || !bytes.Equal(got, canon) {
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
		spec := &Spec{Format: "oci", Kind: "rootfs", Layout: layout, Labels: map[string]string{"b": "2", "a": "1", "c": "3"}}
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
	spec := &Spec{Format: "oci", Kind: "rootfs", Layout: "archive"}
	dir, res := ociWrite(t, ociSource(t, tree), spec)
	if want := []string{"node.oci.tar", "node.oci.tar.digest"}; !reflect.DeepEqual(res.Files, want) {
		t.Fatalf("files %q, want %q", res.Files, want)
	}
	archive := filepath.Join(dir, "node.oci.tar")
	digest := ociReadDigestFile(t, archive+".digest")

	// The archive is the layout dir's files, sorted, owned 0:0, at the epoch.
	dirOut, _ := ociWrite(t, ociSource(t, tree), &Spec{Layout: "dir"})
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
	tarCompareEntries(t, im.Entries, tarWant(tree))
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
			dir, res := ociWrite(t, src, &Spec{Format: "oci", Kind: "containerdisk", Layout: layout, Labels: map[string]string{"k": "v"}})
			main := filepath.Join(dir, res.Files[0])
			digest := ociReadDigestFile(t, filepath.Join(dir, res.Files[1]))
			if len(res.Warnings) != 0 {
				t.Errorf("warnings %q", res.Warnings)
			}
			wantAdds := []string{
				"/disk type=dir mode=0555 uid=107 gid=107 mtime=1700000000",
				"/disk/node.qcow2 type=file mode=0440 uid=107 gid=107 mtime=1700000000 size=3145851 sha256=" + hex.EncodeToString(sum[:]),
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
			if len(im.Entries) != 2 {
				t.Errorf("layer holds %d entries, want /disk and the disk", len(im.Entries))
			}
			d := im.Disk
			if d == nil || d.Path != "/disk/node.qcow2" || d.UID != 107 || d.GID != 107 || d.Perm != 0o440 ||
				d.Size != int64(len(content)) || d.Digest != hex.EncodeToString(sum[:]) || !d.MTime.Equal(tarEpoch) {
				t.Fatalf("disk entry %+v", d)
			}
			if e := im.Entries[0]; e.Path != "/disk" || e.Perm != 0o555 || e.UID != 107 || e.GID != 107 {
				t.Errorf("/disk entry %+v", e.Inode)
			}
			r, err := im.OpenDisk()
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
	_, err := ociFormat{}.Write(context.Background(), ociSource(t, tree), &Spec{Kind: "containerdisk"}, t.TempDir(), "node")
	if err == nil || !strings.Contains(err.Error(), "from") {
		t.Fatalf("err %v, want one about from", err)
	}
	src := ociSource(t, tree)
	src.From = filepath.Join(t.TempDir(), "missing.qcow2")
	dir := t.TempDir()
	_, err = ociFormat{}.Write(context.Background(), src, &Spec{Kind: "containerdisk"}, dir, "node")
	if err == nil || !strings.Contains(err.Error(), "missing.qcow2") {
		t.Fatalf("err %v, want one naming the source", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a failed write left %d files", len(ents))
	}
	src.Arch = "riscv64"
	if _, err := (ociFormat{}).Write(context.Background(), ociSource(t, tree), &Spec{Kind: "wasm"}, dir, "node"); err == nil {
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
		p, im := fresh(t, &Spec{Kind: "containerdisk"})
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
		p, im := fresh(t, &Spec{Layout: "archive"})
		// The layer's data begins after the two directory headers and the
		// member header of the first blob at the earliest; flip inside the
		// layer wherever it lies.
		b, _ := os.ReadFile(p)
		canon := writeTarBytes(t, tree, TarOptions{})
		at := bytes.Index(b, canon[:4096])
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

func TestOCICancelled(t *testing.T) {
	tree := tarTestTree(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	dir := t.TempDir()
	if _, err := (ociFormat{}).Write(ctx, ociSource(t, tree), &Spec{Layout: "archive"}, dir, "node"); err == nil {
		t.Fatal("a cancelled write succeeded")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a cancelled write left %d files", len(ents))
	}
}

// FuzzReadOCI feeds ReadOCI damaged oci-archives: it must return an error
// or an image, never panic or read outside the archive.
func FuzzReadOCI(f *testing.F) {
	tree, err := rootfs.New(f.TempDir(), rootfs.Options{DefaultMTime: tarEpoch})
	if err != nil {
		f.Fatal(err)
	}
	defer tree.Close()
	if _, err := tree.Create("/etc/hostname", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: tarEpoch}, strings.NewReader("n\n")); err != nil {
		f.Fatal(err)
	}
	for _, kind := range []string{"rootfs", "containerdisk"} {
		dir := f.TempDir()
		disk := filepath.Join(dir, "d.raw")
		os.WriteFile(disk, []byte("a disk"), 0o644)
		src := &Source{Tree: tree, Epoch: tarEpoch, Arch: "amd64", From: disk}
		res, err := ociFormat{}.Write(context.Background(), src, &Spec{Kind: kind, Layout: "archive"}, dir, "n")
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
			if r, err := im.OpenDisk(); err == nil {
				io.Copy(io.Discard, r)
				r.Close()
			}
		}
	})
}
