package rootfs

import (
	"bytes"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// A copy through the sparse writer has the content and length of what was
// written, holes where whole blocks were zero, a trailing hole included.
func TestSparseWriterKeepsLengthAndHoles(t *testing.T) {
	data := make([]byte, 4<<20)
	copy(data[10:], "head")
	copy(data[2<<20+7:], "middle")
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := NewSparseWriter(f)
	for off := 0; off < len(data); off += 300 << 10 { // chunks that do not align to blocks
		if _, err := w.Write(data[off:min(off+300<<10, len(data))]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("content differs (%d bytes, want %d)", len(got), len(data))
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if st.Blocks*512 > 64<<10 {
		t.Fatalf("%d bytes allocated for 10 bytes of data: holes were written", st.Blocks*512)
	}
}
