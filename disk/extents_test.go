package disk

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A sparse file's holes are left out; anything else is read whole.
func TestDataExtents(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sparse")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const size = 64 << 20
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte{1}, 1<<20)
	for _, off := range []int64{8 << 20, 40 << 20} {
		if _, err := f.WriteAt(data, off); err != nil {
			t.Fatal(err)
		}
	}
	var total int64
	for _, e := range DataExtents(f, size) {
		total += e.Len
		if e.Off+e.Len > size {
			t.Errorf("extent %+v past the end", e)
		}
	}
	// The file system may round to its own block size, never to the whole.
	if total < 2<<20 || total > 8<<20 {
		t.Errorf("data extents cover %d bytes; the file holds 2 MiB of data in 64 MiB", total)
	}
	if got := DataExtents(bytes.NewReader(nil), size); len(got) != 1 || got[0] != (Extent{0, size}) {
		t.Errorf("a reader that is not a file: %+v, want all of it", got)
	}
	if !IsZero(make([]byte, 200<<10)) || IsZero(append(make([]byte, 100<<10), 1)) {
		t.Error("IsZero")
	}
}
