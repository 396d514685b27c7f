package formats

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/disk"
)

// The reader the encoders of a raw disk (and a containerDisk's layer) get
// reads what the file holds, at any offset and length, the small reads
// from its window, and tells the file's holes.
func TestPastCacheReaderReadsWhatTheFileHolds(t *testing.T) {
	p := filepath.Join(t.TempDir(), "disk.raw")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	size := int64(3*rawWindow + 5*512)
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, rawWindow+12345)
	for i := range data {
		data[i] = byte(i*13 + i>>12)
	}
	for _, off := range []int64{0, 2*rawWindow - 4096} {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	r := newPastCacheReader(f, size)
	defer r.Close()
	if got, want := r.Extents(), disk.DataExtents(f, size); len(got) != len(want) || len(got) < 2 {
		t.Errorf("extents %v, the file's %v", got, want)
	}
	for _, c := range []struct {
		off int64
		n   int
	}{
		{0, 512}, {511, 3}, {rawWindow - 10, 20}, {rawWindow + 7, 64 << 10}, {0, rawWindow},
		{4096, rawWindow + 8192}, {2*rawWindow - 5000, 2 * rawWindow}, {size - 700, 700}, {size - 700, 1400}, {size + 3, 10},
		{rawWindow - 10, 20}, {0, 512},
	} {
		want := make([]byte, c.n)
		wn, werr := f.ReadAt(want, c.off)
		got := make([]byte, c.n)
		gn, gerr := r.ReadAt(got, c.off)
		if gn != wn || (gerr == nil) != (werr == nil) || !bytes.Equal(got[:gn], want[:wn]) {
			t.Errorf("ReadAt(%d bytes at %d) = %d, %v; the file gives %d, %v", c.n, c.off, gn, gerr, wn, werr)
		}
	}
}
