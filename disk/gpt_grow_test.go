package disk

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// writeGrown writes the grown disk's extents into a sparse file, as an
// encoder would, and returns its path.
func writeGrown(t *testing.T, g *Grown) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "grown.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(g.Size()); err != nil {
		t.Fatal(err)
	}
	for _, e := range DataExtents(g, g.Size()) {
		if _, err := io.Copy(io.NewOffsetWriter(f, e.Off), io.NewSectionReader(g, e.Off, e.Len)); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// TestGrow: a disk grown by a whole GiB, by an odd number of sectors, and
// past what the protective MBR can count (2 TiB, sparse) is sgdisk -v
// clean, has the partitions it had, reads as the original up to the old
// backup GPT, and as zeros after it but for the new backup at the end; its
// extents hold every byte that is not zero. The same size is the disk
// itself.
func TestGrow(t *testing.T) {
	sgdisk := harness.Tool(t, "sgdisk")
	size, parts := testLayout(t, "amd64")
	img := writeDisk(t, size, parts)
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// Data in both partitions, the last of the root's right before the
	// backup GPT's space.
	data := harness.RandomBytes(3, 4096)
	f.WriteAt(data, parts[0].Start)
	f.WriteAt(data, parts[1].End()-4096)
	orig, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	oldTail := LastUsable(size)
	for _, newSize := range []int64{size, 1 << 30, size + 7*SectorSize, 3 << 40} {
		g, err := Grow(f, size, newSize)
		if err != nil {
			t.Fatalf("%d: %v", newSize, err)
		}
		p := writeGrown(t, g)
		if out, ok := sgdiskClean(sgdisk, p); !ok {
			t.Errorf("%d: sgdisk -v:\n%s", newSize, out)
		}
		gf, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		guid, got, err := ReadGPT(gf, newSize)
		if err != nil {
			t.Fatalf("%d: %v", newSize, err)
		}
		if guid != FormatUUID(DiskGUID("test")) || len(got) != len(parts) || got[0] != parts[0] || got[1] != parts[1] {
			t.Errorf("%d: ReadGPT: %s %+v", newSize, guid, got)
		}
		head := make([]byte, oldTail)
		gf.ReadAt(head, 0)
		if newSize == size {
			if b, _ := io.ReadAll(io.NewSectionReader(gf, 0, newSize)); !bytes.Equal(b, orig) {
				t.Errorf("grown to its own size, the disk changed")
			}
		} else if !bytes.Equal(head[2*SectorSize:], orig[2*SectorSize:oldTail]) || !bytes.Equal(head[:446], orig[:446]) {
			t.Errorf("%d: the disk before the old backup GPT changed", newSize)
		}
		gf.Close()
		// Every byte outside the extents is zero.
		if newSize < 256<<20 {
			all := make([]byte, newSize)
			if _, err := g.ReadAt(all, 0); err != nil {
				t.Fatal(err)
			}
			for _, e := range g.Extents() {
				clear(all[e.Off : e.Off+e.Len])
			}
			if !IsZero(all) {
				t.Errorf("%d: data outside the extents %v", newSize, g.Extents())
			}
		}
	}
	// Not a GPT disk, or one whose backup is not at its end: refused.
	if _, err := Grow(bytes.NewReader(make([]byte, 1<<20)), 1<<20, 2<<20); err == nil {
		t.Error("Grow took a disk without a GPT")
	}
	if _, err := Grow(f, size-SectorSize, 1<<30); err == nil {
		t.Error("Grow took a disk whose backup GPT is past its end")
	}
}
