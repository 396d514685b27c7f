package formats

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/test/harness"
)

// A compressed raw, for each codec, decompresses with xz, gzip and zstd
// to the raw byte for byte, is the same on a second write, and reads back
// by detection as the raw's tree and partitions.
func TestCompressedRaw(t *testing.T) {
	tree := rawTestTree(t, "amd64")
	raw, rawRes := writeRaw(t, rawSource(tree, "amd64"), rawSpec())
	want, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	rawIm, err := ReadImage(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	for alg, tool := range map[compress.Algorithm]string{compress.Zstd: "zstd", compress.XZ: "xz", compress.Gzip: "gzip"} {
		t.Run(string(alg), func(t *testing.T) {
			var files []string
			for range 2 {
				dir := t.TempDir()
				src := rawSource(tree, "amd64")
				src.From, src.FromAdds = raw, rawRes.Adds
				res, err := compressedFormat{}.Write(context.Background(), src, &Spec{Format: "compressed", Name: "c", Options: &CompressedSpec{Compression: alg}}, dir, "node")
				if err != nil {
					t.Fatal(err)
				}
				files = append(files, filepath.Join(dir, res.Files[0]))
			}
			if ext := compressedExt[alg]; filepath.Base(files[0]) != "node"+ext {
				t.Errorf("file %s, want node%s", filepath.Base(files[0]), ext)
			}
			a, _ := os.ReadFile(files[0])
			b, _ := os.ReadFile(files[1])
			if !bytes.Equal(a, b) {
				t.Errorf("two writes differ")
			}
			got, err := exec.Command(harness.Tool(t, tool), "-d", "-c", files[0]).Output()
			if err != nil {
				t.Fatalf("%s -d: %v", tool, err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s -d gives %d bytes that are not the raw's %d", tool, len(got), len(want))
			}
			im, err := ReadImage(context.Background(), files[0])
			if err != nil {
				t.Fatal(err)
			}
			if im.Format != "compressed" || im.Compression != alg || len(im.Partitions) != len(rawIm.Partitions) ||
				im.Tree.Digest() != rawIm.Tree.Digest() {
				t.Errorf("reads back as %s (%s), %d partitions, tree %s; the raw has %d, %s", im.Format, im.Compression,
					len(im.Partitions), im.Tree.Digest(), len(rawIm.Partitions), rawIm.Tree.Digest())
			}
		})
	}
	_, err = compressedFormat{}.Write(context.Background(), rawSource(tree, "amd64"), &Spec{Format: "compressed", Name: "c"}, t.TempDir(), "node")
	if err == nil {
		t.Errorf("a compressed output without a raw to make it from is written")
	}
}
