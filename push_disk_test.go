package stamp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/test/harness"
)

// An oci disk artifact of a compressed raw, pushed with stamp push, is
// what Tinkerbell's oci2disk pulls: the manifest names ORAS's config and
// one layer of media type application/vnd.oci.image.layer.v1.tar titled
// with the file's name, and that layer, decompressed by the codec the
// reference's suffix names as oci2disk picks it (.zs for zstd), is the raw
// disk byte for byte.
func TestPushDiskArtifact(t *testing.T) {
	reg := harness.StartRegistry(t)
	raw := bytes.Repeat([]byte("a raw disk, not quite "), 100000)
	dir := t.TempDir()
	compressed := filepath.Join(dir, "node.raw.zst")
	f, err := os.Create(compressed)
	if err != nil {
		t.Fatal(err)
	}
	zw, _ := compress.NewWriter(compress.Zstd, f, compress.WriterOptions{})
	zw.Write(raw)
	zw.Close()
	f.Close()
	layout, digest := pushLayout(t, &formats.Spec{Options: &formats.OCISpec{Kind: "disk", Layout: "dir"}}, compressed)
	ref := reg.Addr + "/stamp/node:raw.zs"
	if _, err := Push(context.Background(), layout, ref, PushOptions{}); err != nil {
		t.Fatal(err)
	}
	get := func(path, accept string) []byte {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+reg.Addr+"/v2/stamp/node/"+path, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %s\n%s", path, resp.Status, b)
		}
		return b
	}
	var m struct {
		Config struct{ MediaType, Digest string }
		Layers []struct {
			MediaType   string
			Digest      string
			Annotations map[string]string
		}
	}
	if err := json.Unmarshal(get("manifests/raw.zs", formats.OCIManifestMediaType), &m); err != nil {
		t.Fatal(err)
	}
	if m.Config.MediaType != formats.ORASConfigMediaType || len(m.Layers) != 1 || m.Layers[0].MediaType != formats.OCILayerMediaType ||
		m.Layers[0].Annotations[formats.OCITitleAnnotation] != "node.raw.zst" {
		t.Fatalf("manifest %+v is not an ORAS file artifact", m)
	}
	if got := string(get("blobs/"+m.Config.Digest, "")); got != "{}" {
		t.Errorf("config %q, want {}", got)
	}
	rc, err := compress.NewReader(compress.Zstd, bytes.NewReader(get("blobs/"+m.Layers[0].Digest, "")))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	if err != nil || !bytes.Equal(got, raw) {
		t.Errorf("the pulled layer decompresses to %d bytes (%v), not the raw's %d", len(got), err, len(raw))
	}
	// The registry serves the manifest the layout holds, byte for byte.
	sum := sha256.Sum256(get("manifests/raw.zs", formats.OCIManifestMediaType))
	if d := "sha256:" + hex.EncodeToString(sum[:]); d != digest {
		t.Errorf("the registry serves %s, the layout holds %s", d, digest)
	}
}
