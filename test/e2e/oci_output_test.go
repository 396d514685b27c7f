package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/test/harness"
)

const ociRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: oci-node
arch: amd64
epoch: 1700000000
base:
  tarball: ./base.tar.zst
customize:
  layers:
    - files:
        - {path: /etc/hostname, content: "oci-node\n"}
outputs:
  - {format: tar}
  - format: oci
    entrypoint: [/sbin/init]
    env: [PATH=/usr/sbin:/usr/bin:/sbin:/bin]
    labels: {org.opencontainers.image.title: oci-node, dev.stamp.test: "yes"}
  - format: oci
    name: archive
    layout: archive
    entrypoint: [/sbin/init]
    env: [PATH=/usr/sbin:/usr/bin:/sbin:/bin]
    labels: {org.opencontainers.image.title: oci-node, dev.stamp.test: "yes"}
  - {format: oci, name: zstd, compression: zstd}
  - {format: oci, name: plain, layout: archive, compression: none}
`

// treeFiles maps every path under root to a description of its type, mode
// and content, so two output directories compare in one go.
func treeFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			// The test made the directory, with its own mode.
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		if fi.Mode().IsRegular() {
			// Streamed: a raw disk output may be large.
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			h := sha256.New()
			_, err = io.Copy(h, f)
			f.Close()
			if err != nil {
				return err
			}
			desc += " " + hex.EncodeToString(h.Sum(nil))
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func skopeoJSON(t *testing.T, args ...string) map[string]any {
	t.Helper()
	cmd := exec.Command(harness.Tool(t, "skopeo"), args...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "TMPDIR=" + t.TempDir()}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("skopeo %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	if args[0] != "inspect" {
		return nil
	}
	var v map[string]any
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func readDigest(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestOCIOutputs(t *testing.T) {
	harness.RequireSetpriv(t)
	dir := recipeDir(t, ociRecipe, nil)
	out1 := filepath.Join(dir, "out-root")
	stamp(t, dir, []string{"TZ=UTC"}, "build", "recipe.yaml", "-o", out1,
		"--cache-dir", filepath.Join(dir, "cache-root"), "--work-dir", dir).mustSucceed(t)
	work2 := filepath.Join(dir, "work-nobody")
	out2 := filepath.Join(dir, "out-nobody")
	for _, d := range []string{work2, out2} {
		os.MkdirAll(d, 0o777)
		os.Chmod(d, 0o777)
	}
	stampAs65534(t, dir, []string{"TZ=Asia/Kathmandu"}, "build", "recipe.yaml", "-o", out2,
		"--cache-dir", filepath.Join(work2, "cache"), "--work-dir", work2).mustSucceed(t)

	// Every file, layout directories included, is byte-identical, with the
	// same modes, whoever built it.
	f1, f2 := treeFiles(t, out1), treeFiles(t, out2)
	for p, d := range f1 {
		if f2[p] != d {
			t.Errorf("%s: root build %q, uid 65534 build %q", p, d, f2[p])
		}
	}
	if len(f1) != len(f2) {
		t.Errorf("root build has %d paths, uid 65534 build %d", len(f1), len(f2))
	}
	if got := strings.Join(finalFiles(t, out1), " "); !strings.Contains(got, "oci-node.oci oci-node.oci.digest") ||
		!strings.Contains(got, "oci-node-archive.oci.tar oci-node-archive.oci.tar.digest") {
		t.Errorf("output dir holds %s", got)
	}
	if m := f1["oci-node.oci"]; !strings.HasPrefix(m, "drwxr-xr-x") {
		t.Errorf("layout dir mode %s, want 0755", m)
	}

	layout := filepath.Join(out1, "oci-node.oci")
	archive := filepath.Join(out1, "oci-node-archive.oci.tar")
	digest := readDigest(t, layout+".digest")
	if a := readDigest(t, archive+".digest"); a != digest {
		t.Errorf("the archive holds image %s, the layout dir %s: the same recipe fields must give the same image", a, digest)
	}

	// SHA256SUMS covers each file of the layout directory.
	sums, err := os.ReadFile(filepath.Join(out1, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(sums), "  oci-node.oci/index.json\n") || !strings.Contains(string(sums), "  oci-node.oci/blobs/sha256/") {
		t.Errorf("SHA256SUMS does not list the layout's files:\n%s", sums)
	}
	check := exec.Command("sha256sum", "--strict", "-c", "SHA256SUMS")
	check.Dir = out1
	if b, err := check.CombinedOutput(); err != nil {
		t.Errorf("sha256sum -c: %v\n%s", err, b)
	}

	// The layer is gzip by default, and every compression's layer is the
	// tar output, byte for byte, once decompressed: the diff_id is the tar
	// output's sha256. go-containerregistry's full validation passes on the
	// gzip images (it gunzips every layer, so it cannot pass on the others).
	im, err := formats.ReadOCI(t.Context(), layout)
	if err != nil {
		t.Fatal(err)
	}
	tarBytes, err := os.ReadFile(filepath.Join(out1, "oci-node.tar"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(tarBytes)
	tarDigest := "sha256:" + hex.EncodeToString(sum[:])
	if im.Digest != digest || im.Kind != "rootfs" || im.Tree.Len() < 100 {
		t.Errorf("ReadOCI: digest %s kind %s, %d entries", im.Digest, im.Kind, im.Tree.Len())
	}
	for _, c := range []struct{ file, mediaType string }{
		{"oci-node.oci", formats.OCILayerGzipMediaType},
		{"oci-node-archive.oci.tar", formats.OCILayerGzipMediaType},
		{"oci-node-zstd.oci", formats.OCILayerZstdMediaType},
		{"oci-node-plain.oci.tar", formats.OCILayerMediaType},
	} {
		oi, err := formats.ReadOCI(t.Context(), filepath.Join(out1, c.file))
		if err != nil {
			t.Fatal(err)
		}
		if oi.Layer.MediaType != c.mediaType || oi.DiffID != tarDigest || oi.Tree.Len() != im.Tree.Len() {
			t.Errorf("%s: layer %+v diff_id %s, %d entries; want %s, the tar output's %s, %d entries",
				c.file, oi.Layer, oi.DiffID, oi.Tree.Len(), c.mediaType, tarDigest, im.Tree.Len())
		}
		if c.mediaType == formats.OCILayerMediaType && oi.Layer.Digest != tarDigest {
			t.Errorf("%s: the uncompressed layer %s is not the tar output", c.file, oi.Layer.Digest)
		}
		if c.mediaType == formats.OCILayerGzipMediaType {
			if err := harness.ValidateLayout(t, filepath.Join(out1, c.file)); err != nil {
				t.Errorf("%s: validate.Image: %v", c.file, err)
			}
		}
	}

	// skopeo accepts all three names of the image and sees what the recipe
	// asked for.
	for _, ref := range []string{"oci:" + layout, "oci:" + layout + ":latest", "oci-archive:" + archive} {
		v := skopeoJSON(t, "inspect", ref)
		if v["Digest"] != digest || v["Architecture"] != "amd64" || v["Os"] != "linux" {
			t.Errorf("skopeo inspect %s: %v %v %v", ref, v["Digest"], v["Architecture"], v["Os"])
		}
		if labels, _ := v["Labels"].(map[string]any); labels["dev.stamp.test"] != "yes" {
			t.Errorf("skopeo inspect %s: labels %v", ref, v["Labels"])
		}
	}
	skopeoJSON(t, "copy", "oci:"+layout, "dir:"+filepath.Join(t.TempDir(), "copy"))

	// A rebuild into the same directory replaces the layout directory.
	stamp(t, dir, []string{"TZ=UTC"}, "build", "recipe.yaml", "-o", out1,
		"--cache-dir", filepath.Join(dir, "cache-root"), "--work-dir", dir).mustSucceed(t)
	if f3 := treeFiles(t, out1); len(f3) != len(f1) {
		t.Errorf("a rebuild left %d paths, the first build %d", len(f3), len(f1))
	} else {
		for p, d := range f1 {
			if f3[p] != d {
				t.Errorf("%s changed on rebuild", p)
			}
		}
	}

	// stamp push, then pull back: the registry serves the same digest,
	// whatever the layer's compression.
	reg := harness.StartRegistry(t)
	for _, src := range []string{layout, archive, filepath.Join(out1, "oci-node-zstd.oci"), filepath.Join(out1, "oci-node-plain.oci.tar")} {
		want := readDigest(t, src+".digest")
		ref := reg.Addr + "/e2e/" + filepath.Base(src) + ":v1"
		r := stamp(t, dir, nil, "push", src, ref).mustSucceed(t)
		if got := strings.TrimSpace(r.stdout); !strings.HasSuffix(got, "@"+want) {
			t.Errorf("stamp push printed %q, want …@%s", got, want)
		}
		if v := skopeoJSON(t, "inspect", "--tls-verify=false", "docker://"+ref); v["Digest"] != want {
			t.Errorf("registry serves %v for %s, want %s", v["Digest"], ref, want)
		}
	}
	stamp(t, dir, nil, "push", layout).mustFail(t, 2, "OUTPUT and REF")
	stamp(t, dir, nil, "push", filepath.Join(dir, "nope.oci"), reg.Addr+"/x:v1").mustFail(t, 1, "nope.oci")
}

const containerDiskRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: cd-node
arch: amd64
epoch: 1700000000
base:
  tarball: ./base.tar.zst
outputs:
  - {format: raw, boot: {loader: none}}
  - {format: qcow2}
  - {format: oci, name: disk, kind: containerdisk}
`

func TestOCIContainerDiskOutput(t *testing.T) {
	harness.RequireSetpriv(t)
	dir := recipeDir(t, containerDiskRecipe, nil)
	out1 := filepath.Join(dir, "out-root")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out1,
		"--cache-dir", filepath.Join(dir, "cache-root"), "--work-dir", dir).mustSucceed(t)
	work2 := filepath.Join(dir, "work-nobody")
	out2 := filepath.Join(dir, "out-nobody")
	for _, d := range []string{work2, out2} {
		os.MkdirAll(d, 0o777)
		os.Chmod(d, 0o777)
	}
	stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out2,
		"--cache-dir", filepath.Join(work2, "cache"), "--work-dir", work2).mustSucceed(t)
	f1, f2 := treeFiles(t, out1), treeFiles(t, out2)
	for p, d := range f1 {
		if f2[p] != d {
			t.Errorf("%s: root build %q, uid 65534 build %q", p, d, f2[p])
		}
	}

	layout := filepath.Join(out1, "cd-node-disk.oci")
	im, err := formats.ReadOCI(t.Context(), layout)
	if err != nil {
		t.Fatal(err)
	}
	qcow2 := treeFiles(t, out1)["cd-node.qcow2"]
	if im.Kind != "containerdisk" || im.Disk == nil || im.Disk.Path != "/disk/cd-node.qcow2" ||
		im.Disk.UID != 107 || im.Disk.GID != 107 || im.Disk.Perm != 0o440 || !strings.HasSuffix(qcow2, " "+im.Disk.Digest) {
		t.Fatalf("containerdisk: kind %s disk %+v", im.Kind, im.Disk)
	}
	if im.Layer.MediaType != formats.OCILayerGzipMediaType {
		t.Errorf("containerdisk layer %s, want gzip by default", im.Layer.MediaType)
	}
	if err := harness.ValidateLayout(t, layout); err != nil {
		t.Errorf("validate.Image: %v", err)
	}
	v := skopeoJSON(t, "inspect", "oci:"+layout)
	if v["Digest"] != readDigest(t, layout+".digest") {
		t.Errorf("skopeo inspect digest %v", v["Digest"])
	}
	skopeoJSON(t, "copy", "oci:"+layout, "dir:"+filepath.Join(t.TempDir(), "copy"))

	reg := harness.StartRegistry(t)
	ref := reg.Addr + "/e2e/cd-node:v1"
	stamp(t, dir, nil, "push", layout, ref).mustSucceed(t)
	if v := skopeoJSON(t, "inspect", "--tls-verify=false", "docker://"+ref); v["Digest"] != im.Digest {
		t.Errorf("registry serves %v, want %s", v["Digest"], im.Digest)
	}
}
