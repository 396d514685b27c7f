package formats

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/test/harness"
)

// TestGCE writes a GCE archive of a raw disk twice and takes it apart with
// the system's tools: the same bytes both times; file(1) sees a gzipped
// GNU tar; the gzip header has no name and mtime 0; disk.raw is an
// old-GNU sparse member; tar lists it as the only member, owned by 0:0 at
// the epoch; its bytes are the raw's, padded with zeros to a whole GiB,
// with the backup GPT moved to the end, so sgdisk -v finds it clean and
// the partitions the raw's; and reading it back by detection gives the
// raw's entries.
func TestGCE(t *testing.T) {
	harness.RequireTools(t, "tar", "gzip", "file", "sgdisk")
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
	// The member is an old-GNU sparse one: the raw's data, not its holes.
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if h, err := tar.NewReader(zr).Next(); err != nil || h.Typeflag != tar.TypeGNUSparse || h.Format != tar.FormatGNU {
		t.Errorf("the member: %v, type %q, format %v", err, h.Typeflag, h.Format)
	}
	// GNU tar extracts a sparse member as a sparse file, so the GiB of
	// padding costs nothing to check: no data past the raw's end.
	x := t.TempDir()
	listing := strings.TrimSpace(run(t, "tar", "--numeric-owner", "--utc", "-xzvvf", gz, "-C", x))
	xf, err := os.Open(filepath.Join(x, "disk.raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer xf.Close()
	xi, _ := xf.Stat()
	// The raw's bytes, the MBR's size of the disk and the primary GPT
	// header aside, up to its backup GPT; zeros after it up to the new
	// backup GPT at the end.
	oldTail := disk.LastUsable(int64(len(raw)))
	head := make([]byte, oldTail)
	if _, err := xf.ReadAt(head, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(head[:446], raw[:446]) || !bytes.Equal(head[1024:], raw[1024:oldTail]) || xi.Size() != GCEDiskSize(int64(len(raw))) {
		t.Errorf("disk.raw (%d bytes) is not the raw disk grown to a GiB", xi.Size())
	}
	newTail := xi.Size() - (int64(len(raw)) - oldTail)
	for _, e := range disk.DataExtents(xf, xi.Size()) {
		if e.Off+e.Len > oldTail {
			// A file system may keep data in blocks of its own size past
			// a hole; what lies there must still be zeros.
			from, to := max(e.Off, oldTail), min(e.Off+e.Len, newTail)
			if to <= from {
				continue
			}
			b := make([]byte, to-from)
			if _, err := xf.ReadAt(b, from); err != nil || !disk.IsZero(b) {
				t.Errorf("the padding after the raw disk is not zeros (%v)", err)
			}
		}
	}
	if out := run(t, "sgdisk", "-v", filepath.Join(x, "disk.raw")); !strings.Contains(out, "No problems found") || strings.Contains(out, "Warning") {
		t.Errorf("sgdisk -v disk.raw:\n%s", out)
	}
	rf, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer rf.Close()
	guidRaw, partsRaw, err := disk.ReadGPT(rf, int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	guid, parts, err := disk.ReadGPT(xf, xi.Size())
	if err != nil || guid != guidRaw || fmt.Sprint(parts) != fmt.Sprint(partsRaw) {
		t.Errorf("disk.raw's GPT: %v %s %v, the raw's %s %v", err, guid, parts, guidRaw, partsRaw)
	}
	f := strings.Fields(listing)
	if strings.Contains(listing, "\n") || len(f) < 6 || f[1] != "0/0" || f[2] != "1073741824" || f[3]+" "+f[4] != tarEpoch.UTC().Format("2006-01-02 15:04") || f[5] != "disk.raw" {
		t.Errorf("tar -tvz: %s", listing)
	}
	if _, n := readBack(t, gz, "gce", want); n != 1<<30 {
		t.Errorf("the plain stream: %d bytes, want the disk padded to 1 GiB", n)
	}
}

// TestGNUSparseHeader writes members whose maps need extension blocks
// (4 entries in the header, 21 in each block after it) and a size past
// what octal holds: archive/tar reads the map and the bytes back, holes as
// zeros, and GNU tar lists the member at its full size.
func TestGNUSparseHeader(t *testing.T) {
	harness.RequireTools(t, "tar")
	for _, c := range []struct {
		size    int64
		extents int
	}{{1 << 20, 0}, {1 << 20, 3}, {1 << 20, 4}, {1 << 20, 25}, {1 << 20, 26}, {9 << 30, 60}} {
		var ext []disk.Extent
		var data []byte
		for i := range c.extents {
			e := disk.Extent{Off: int64(i) * (c.size / 64), Len: int64(100 + i)}
			ext = append(ext, e)
			data = append(data, bytes.Repeat([]byte{byte(i + 1)}, int(e.Len))...)
		}
		hdr, err := gnuSparseHeader("disk.raw", tarEpoch, c.size, ext)
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		b.Write(hdr)
		b.Write(data)
		b.Write(make([]byte, (blockSize-len(data)%blockSize)%blockSize+2*blockSize))
		p := filepath.Join(t.TempDir(), "s.tar")
		if err := os.WriteFile(p, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if out := run(t, "tar", "-tvf", p); !strings.Contains(out, fmt.Sprintf(" %d ", c.size)) || !strings.Contains(out, "disk.raw") {
			t.Errorf("%d extents, %d bytes: tar -tv: %s", c.extents, c.size, out)
		}
		if c.size > 1<<30 {
			continue // the holes of 9 GiB are not worth reading back
		}
		tr := tar.NewReader(bytes.NewReader(b.Bytes()))
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%d extents: %v", c.extents, err)
		}
		got, err := io.ReadAll(tr)
		if err != nil || h.Size != c.size || int64(len(got)) != c.size || h.ModTime.Unix() != tarEpoch.Unix() {
			t.Fatalf("%d extents: size %d, read %d, %v", c.extents, h.Size, len(got), err)
		}
		want := make([]byte, c.size)
		k := 0
		for _, e := range ext {
			copy(want[e.Off:], data[k:k+int(e.Len)])
			k += int(e.Len)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%d extents: the member reads back other bytes", c.extents)
		}
	}
}
