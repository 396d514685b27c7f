package formats

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

// readTestTree is tarTestTree with an embedded record, as every build has.
func readTestTree(t *testing.T) (*rootfs.Tree, string) {
	t.Helper()
	tree := tarTestTree(t)
	record := `{"apiVersion":"stamp.dev/v1alpha1","entries":[]}` + "\n"
	rootfstest.Dir(t, tree, "/usr/lib/stamp", 0o755, tarEpoch)
	rootfstest.File(t, tree, rootfs.RecordPath, 0o644, tarEpoch, record)
	return tree, record
}

func writeOutputFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadEntriesDetectsEveryArchive(t *testing.T) {
	ctx := context.Background()
	tree, record := readTestTree(t)
	for _, alg := range []compress.Algorithm{compress.None, compress.Zstd, compress.Gzip} {
		var cpioBuf bytes.Buffer
		if err := WriteCpio(ctx, tree.View(), &cpioBuf, CpioOptions{Compression: alg, MTime: tarEpoch}); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			format string
			data   []byte
		}{
			{"tar", writeTarBytes(t, tree, TarOptions{Compression: alg})},
			{"cpio", cpioBuf.Bytes()},
		} {
			p := writeOutputFile(t, "out", tc.data)
			im, err := ReadEntries(ctx, p)
			if err != nil {
				t.Fatalf("%s %s: %v", tc.format, alg, err)
			}
			if im.Format != tc.format || im.Compression != alg {
				t.Errorf("%s %s read as %s %s", tc.format, alg, im.Format, im.Compression)
			}
			if string(im.Record) != record {
				t.Errorf("%s %s: record %q, want %q", tc.format, alg, im.Record, record)
			}
			// A tar cannot hold the tree's socket; a cpio holds everything.
			want := tree.Entries()
			if tc.format == "tar" {
				want = tarWant(tree)
			}
			if !im.Complete || im.Tree.Digest() != rootfs.Digest(want) {
				t.Errorf("%s %s: the entries read back do not give the tree's digest", tc.format, alg)
			}
			if tc.format == "cpio" && len(im.Extra) != 1 {
				t.Errorf("cpio: the xattr list is not set apart as the format's own entry: %d extra", len(im.Extra))
			}
		}
	}
	if _, err := ReadEntries(ctx, writeOutputFile(t, "x", []byte("plain text, not an image\n"))); err == nil ||
		!strings.Contains(err.Error(), "not an output format") {
		t.Errorf("a text file is read as %v", err)
	}
}

// TestReadRegionsPlaceEveryByte checks that the regions of a tar and a cpio
// name the member whose data holds a given byte, in the decompressed stream
// when the archive is compressed.
func TestReadRegionsPlaceEveryByte(t *testing.T) {
	ctx := context.Background()
	tree, _ := readTestTree(t)
	plain := writeTarBytes(t, tree, TarOptions{})
	var cpioBuf bytes.Buffer
	if err := WriteCpio(ctx, tree.View(), &cpioBuf, CpioOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, want  string
		plain, file []byte
	}{
		{"tar", "tar member ./home/capi/.profile (data)", plain, plain},
		{"tar.zst", "tar member ./home/capi/.profile (data)", plain, writeTarBytes(t, tree, TarOptions{Compression: compress.Zstd})},
		{"cpio", "cpio member home/capi/.profile (data)", cpioBuf.Bytes(), cpioBuf.Bytes()},
	} {
		im, err := ReadEntries(ctx, writeOutputFile(t, tc.name, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		off := bytes.Index(tc.plain, []byte("export PATH\n"))
		if off < 0 {
			t.Fatalf("%s: content not found", tc.name)
		}
		if got := im.Locate(int64(off) + 3); got != tc.want {
			t.Errorf("%s: offset %d is in %q, want %q", tc.name, off+3, got, tc.want)
		}
		if got := im.Locate(0); !strings.HasSuffix(got, "(header)") {
			t.Errorf("%s: offset 0 is in %q, want the first header", tc.name, got)
		}
		// Regions come in file order and never overlap.
		var end int64
		for _, r := range im.Regions {
			if r.Offset < end || r.Size <= 0 {
				t.Fatalf("%s: region %+v overlaps the one before (ending at %d)", tc.name, r, end)
			}
			end = r.Offset + r.Size
		}
		if end > int64(len(tc.plain)) {
			t.Errorf("%s: regions end at %d, beyond the %d bytes", tc.name, end, len(tc.plain))
		}
	}
}
