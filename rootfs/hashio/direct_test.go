package hashio

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestDirectWriterWritesWhatItIsGiven writes aligned pieces (which go past
// the page cache) and unaligned ones (which cannot), leaving holes
// between, and reads back exactly what a plain file would hold.
func TestDirectWriterWritesWhatItIsGiven(t *testing.T) {
	dir := t.TempDir()
	page := func(c byte, n int) []byte {
		m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(m) })
		for i := range m {
			m[i] = c + byte(i%7)
		}
		return m
	}
	aligned := page('a', 3*directAlign)
	writes := []struct {
		b   []byte
		off int64
	}{
		{[]byte("header"), 0},
		{aligned, 16 * directAlign},               // aligned: direct
		{aligned[1:], 40 * directAlign},           // memory not aligned
		{aligned[:100], 50 * directAlign},         // length not aligned
		{aligned, 60*directAlign + 512},           // offset not aligned
		{page('z', directAlign), 2 * directAlign}, // aligned, before the others
	}
	want := filepath.Join(dir, "want")
	got := filepath.Join(dir, "got")
	wf, err := os.Create(want)
	if err != nil {
		t.Fatal(err)
	}
	gf, err := os.Create(got)
	if err != nil {
		t.Fatal(err)
	}
	dw := NewDirectWriter(gf)
	if dw.direct() == nil {
		t.Logf("%s takes no O_DIRECT: every write went through the page cache", dir)
	}
	for _, w := range writes {
		if _, err := wf.WriteAt(w.b, w.off); err != nil {
			t.Fatal(err)
		}
		if n, err := dw.WriteAt(w.b, w.off); err != nil || n != len(w.b) {
			t.Fatalf("WriteAt(%d bytes, %d) = %d, %v", len(w.b), w.off, n, err)
		}
	}
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(gf.Fd()), &fs); err != nil {
		t.Fatal(err)
	}
	// tmpfs takes O_DIRECT but is the page cache itself.
	if dw.direct() != nil && fs.Type != unix.TMPFS_MAGIC {
		// The aligned writes went past the page cache: their pages are
		// not in it, where the unaligned ones' are.
		m, err := unix.Mmap(int(gf.Fd()), 0, 61*directAlign, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		in := make([]byte, 61)
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&in[0]))); errno != 0 {
			t.Fatal(errno)
		}
		unix.Munmap(m)
		for _, c := range []struct {
			page     int
			resident bool
		}{{0, true}, {2, false}, {16, false}, {18, false}, {40, true}, {50, true}} {
			if got := in[c.page]&1 == 1; got != c.resident {
				t.Errorf("page %d in the page cache: %v, want %v", c.page, got, c.resident)
			}
		}
	}
	dw.Close()
	wf.Close()
	gf.Close()
	a, _ := os.ReadFile(want)
	b, _ := os.ReadFile(got)
	if !bytes.Equal(a, b) {
		t.Fatalf("the direct writer's file (%d bytes) differs from the plain one (%d bytes)", len(b), len(a))
	}
}

// TestDirectStreamWritesWhatItIsGiven streams pieces of odd sizes, across
// chunk boundaries and ending inside one, and reads back the same bytes.
func TestDirectStreamWritesWhatItIsGiven(t *testing.T) {
	var want []byte
	for i := 0; len(want) < 3*directChunk+777; i++ {
		want = append(want, bytes.Repeat([]byte{byte(i)}, 1+i*4099%70001)...)
	}
	p := filepath.Join(t.TempDir(), "stream")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	s := NewDirectStream(f)
	for rest := want; len(rest) > 0; {
		k := min(len(rest), 1+len(rest)*7%65537)
		if n, err := s.Write(rest[:k]); err != nil || n != k {
			t.Fatalf("Write(%d bytes) = %d, %v", k, n, err)
		}
		rest = rest[k:]
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("read back %d bytes, not the %d written", len(got), len(want))
	}
}

// TestDirectReaderReadsWhatIsThere reads spans at unaligned offsets and of
// unaligned lengths, across its chunks and past the file's end, and gets
// what os.File.ReadAt gets.
func TestDirectReaderReadsWhatIsThere(t *testing.T) {
	data := make([]byte, 3*directReadChunk+12345)
	for i := range data {
		data[i] = byte(i*7 + i/4096)
	}
	p := filepath.Join(t.TempDir(), "blob")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := NewDirectReader(f)
	defer r.Close()
	if r.d == nil {
		t.Logf("%s takes no O_DIRECT: every read went through the page cache", p)
	}
	for _, c := range []struct {
		off int64
		n   int
	}{
		{0, 10}, {5, 4096}, {4095, 2}, {4096, 4096}, {1000, 2*directReadChunk + 3},
		{int64(len(data)) - 100, 100}, {int64(len(data)) - 100, 300}, {int64(len(data)) + 5, 10},
		{2 * directReadChunk, 2 * directReadChunk}, {int64(len(data)) &^ 4095, 8192},
	} {
		want := make([]byte, c.n)
		wn, werr := f.ReadAt(want, c.off)
		// Into a buffer of the caller's, and into an aligned one (read
		// straight into where aligned, past the file's end too).
		for _, got := range [][]byte{make([]byte, c.n), AlignedBuffer(c.n)} {
			gn, gerr := r.ReadAt(got, c.off)
			if gn != wn || (gerr == nil) != (werr == nil) || !bytes.Equal(got[:gn], want[:wn]) {
				t.Errorf("ReadAt(%d bytes at %d) = %d, %v; the file gives %d, %v", c.n, c.off, gn, gerr, wn, werr)
			}
		}
	}
}
