package formats

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// TestGCE writes a GCE archive of a raw disk twice and takes it apart with
// the system's tools: the same bytes both times; file(1) sees a gzipped
// GNU tar; the gzip header has no name and mtime 0; tar lists disk.raw as
// the only member, owned by 0:0 at the epoch; its bytes are the raw's,
// padded with zeros to a whole GiB; and reading it back by detection gives
// the raw's entries.
func TestGCE(t *testing.T) {
	harness.RequireTools(t, "tar", "gzip", "file")
	tree := rawTestTree(t, "amd64")
	img, _ := writeRaw(t, rawSource(tree, "amd64"), rawSpec())
	raw, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := manifest(t, img)
	var sums [][32]byte
	var gz string
	for range 2 {
		dir := t.TempDir()
		src := rawSource(tree, "amd64")
		src.From, src.FromAdds = img, readAdds(t, img, tree)
		res, err := gceFormat{}.Write(context.Background(), src, &Spec{Format: "gce", Name: "gce", From: "raw"}, dir, "node")
		if err != nil {
			t.Fatal(err)
		}
		if res.Files[0] != "node.tar.gz" {
			t.Errorf("file %s, want node.tar.gz", res.Files[0])
		}
		gz = filepath.Join(dir, res.Files[0])
		sums = append(sums, sumFile(t, gz))
	}
	if sums[0] != sums[1] {
		t.Error("two GCE archives of the same raw disk differ")
	}
	if out := run(t, "file", "-z", gz); !strings.Contains(out, "tar archive (GNU)") {
		t.Errorf("file -z: %s", out)
	}
	b, err := os.ReadFile(gz)
	if err != nil {
		t.Fatal(err)
	}
	// ID, deflate, no flags (no name), mtime 0.
	if !bytes.Equal(b[:8], []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0}) {
		t.Errorf("gzip header % x", b[:10])
	}
	// One pass of tar over the archive (gunzipping a GiB is most of this
	// test's time): the member's bytes on stdout, its listing on stderr.
	cmd := exec.Command("tar", "--numeric-owner", "--utc", "-xzvvOf", gz)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, len(raw))
	if _, err := io.ReadFull(out, head); err != nil {
		t.Fatal(err)
	}
	rest, err := io.Copy(zeroWriter{t}, out)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !bytes.Equal(head, raw) || int64(len(raw))+rest != GCEDiskSize(int64(len(raw))) || err != nil {
		t.Errorf("disk.raw is not the raw disk padded to a GiB (%d bytes more, %v)", rest, err)
	}
	listing := strings.TrimSpace(stderr.String())
	f := strings.Fields(listing)
	if strings.Contains(listing, "\n") || len(f) < 6 || f[1] != "0/0" || f[2] != "1073741824" || f[3]+" "+f[4] != tarEpoch.UTC().Format("2006-01-02 15:04") || f[5] != "disk.raw" {
		t.Errorf("tar -tvz: %s", listing)
	}
	{
		got, im := manifest(t, gz)
		if im.Format != "gce" || got != want {
			t.Errorf("read back as %s, entries:\n%s\nwant:\n%s", im.Format, got, want)
		}
		im.Path = gz
		rc, err := OpenPlain(im)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil || n != 1<<30 {
			t.Errorf("the plain stream: %d bytes, %v", n, err)
		}
	}
}

// zeroWriter fails the test on a byte that is not zero.
type zeroWriter struct{ t *testing.T }

func (z zeroWriter) Write(b []byte) (int, error) {
	if !bytes.Equal(b, make([]byte, len(b))) {
		z.t.Error("the padding after the raw disk is not zeros")
	}
	return len(b), nil
}
