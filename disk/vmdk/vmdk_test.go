package vmdk

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// rawDisk writes a sparse raw disk of size bytes with data in a few places:
// random data at the start, zeros written as data, one byte at the end of a
// grain table's span, and text at the very end.
func rawDisk(t testing.TB, dir string, size int64) string {
	return harness.SparseRawDisk(t, dir, size,
		harness.DiskPiece{Off: 0, Data: harness.RandomBytes(1, 1<<20+333)},
		harness.DiskPiece{Off: 4 << 20, Data: make([]byte, 3<<20)},
		harness.DiskPiece{Off: gtCover - 1, Data: []byte{7}},
		harness.DiskPiece{Off: size - 1200, Data: bytes.Repeat([]byte("stamp "), 200)})
}

func write(t testing.TB, raw, out string, o Options) (st *Stats) {
	t.Helper()
	harness.EncodeDisk(t, raw, out, func(dst, src *os.File, size int64) (int64, error) {
		var err error
		if st, err = Write(context.Background(), dst, src, size, o); err != nil {
			return 0, err
		}
		return st.FileSize, nil
	})
	return st
}

func readBack(t *testing.T, p string) (*Reader, []byte) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fi, _ := f.Stat()
	r, err := Open(f, fi.Size())
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	got, err := io.ReadAll(io.NewSectionReader(r, 0, r.Size()))
	if err != nil {
		t.Fatal(err)
	}
	return r, got
}

var types = []Type{StreamOptimized, MonolithicSparse}

// TestRoundTrip writes both types of disks that end on and off a grain and
// reads the disk back: the bytes are the raw's, and only the grains with
// data are stored: the first 17 (1 MiB and 333 bytes), the one with the
// byte at the end of the first table's span, and the last.
func TestRoundTrip(t *testing.T) {
	for _, size := range []int64{40 << 20, 40<<20 + 7*Sector} {
		dir := t.TempDir()
		raw := rawDisk(t, dir, size)
		want, err := os.ReadFile(raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, typ := range types {
			out := filepath.Join(dir, string(typ)+".vmdk")
			st := write(t, raw, out, Options{Type: typ, ID: [16]byte{9}, FileName: "x.vmdk"})
			r, got := readBack(t, out)
			if !bytes.Equal(got, want) {
				t.Errorf("%s %d: the disk read back differs from the raw", typ, size)
			}
			if st.Grains != 19 || r.Grains() != 19 || st.Capacity != size || r.Size() != size {
				t.Errorf("%s %d: %d grains written, %d read, capacity %d, size %d", typ, size, st.Grains, r.Grains(), st.Capacity, r.Size())
			}
			d := r.Descriptor()
			if d.CreateType != string(typ) || d.Adapter != "lsilogic" || len(d.Extents) != 1 ||
				d.Extents[0] != fmt.Sprintf(`RW %d SPARSE "x.vmdk"`, size/Sector) || d.CID != "00000000" {
				t.Errorf("%s: descriptor %+v", typ, d)
			}
			if r.Compressed() != (typ == StreamOptimized) {
				t.Errorf("%s: compressed %v", typ, r.Compressed())
			}
		}
	}
}

// TestStreamLayout: a stream's header leaves the directory to the footer,
// which with the end-of-stream marker closes the file, and every grain
// sits behind a marker naming its sector.
func TestStreamLayout(t *testing.T) {
	dir := t.TempDir()
	raw := rawDisk(t, dir, 40<<20)
	out := filepath.Join(dir, "s.vmdk")
	write(t, raw, out, Options{})
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ParseHeader(b)
	if err != nil {
		t.Fatal(err)
	}
	if h.Version != 3 || h.GDOffset != gdAtEnd || h.Flags != 0x30001 || h.Compression != 1 || h.Overhead != GrainSectors {
		t.Errorf("header %+v", h)
	}
	le := binary.LittleEndian
	if le.Uint64(b[GrainSize:]) != 0 || le.Uint32(b[GrainSize+8:]) == 0 {
		t.Errorf("the first grain's marker: lba %d size %d", le.Uint64(b[GrainSize:]), le.Uint32(b[GrainSize+8:]))
	}
	end := b[len(b)-3*Sector:]
	if le.Uint32(end[12:]) != markerFooter || !bytes.Equal(end[2*Sector:], make([]byte, Sector)) {
		t.Errorf("the stream does not end in a footer marker and an end-of-stream marker")
	}
	f, err := ParseHeader(end[Sector:])
	if err != nil || f.GDOffset == gdAtEnd || f.GDOffset == 0 {
		t.Errorf("footer %+v, %v", f, err)
	}
}

// TestSameBytes: the same disk and options give the same image, whatever
// the number of compressing workers.
func TestSameBytes(t *testing.T) {
	dir := t.TempDir()
	raw := rawDisk(t, dir, 40<<20)
	for _, typ := range types {
		var sums [3][]byte
		for i := range sums {
			out := filepath.Join(dir, "x.vmdk")
			os.Remove(out)
			write(t, raw, out, Options{Type: typ, ID: [16]byte{1}, Workers: 1 + 3*i})
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			sums[i] = b
		}
		if !bytes.Equal(sums[0], sums[1]) || !bytes.Equal(sums[0], sums[2]) {
			t.Errorf("%s: writes differ", typ)
		}
	}
}

// TestQemuImg has qemu check both types, read the create type back, and
// compare the disk with the raw; and our reader reads qemu-img's own
// images of the raw as the raw.
func TestQemuImg(t *testing.T) {
	harness.RequireTools(t, "qemu-img")
	dir := t.TempDir()
	raw := harness.SparseUsrDisk(t, 96<<20, 12<<20, 8<<20)
	want, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range types {
		out := filepath.Join(dir, string(typ)+".vmdk")
		write(t, raw, out, Options{Type: typ, FileName: filepath.Base(out)})
		if got := harness.QemuImg(t, "check", "-f", "vmdk", out); !strings.Contains(got, "No errors were found") {
			t.Errorf("%s: qemu-img check:\n%s", typ, got)
		}
		info := harness.QemuImg(t, "info", "--output=json", "-f", "vmdk", out)
		for _, w := range []string{`"create-type": "` + string(typ) + `"`, `"virtual-size": 100663296,`} {
			if !strings.Contains(info, w) {
				t.Errorf("%s: qemu-img info lacks %s:\n%s", typ, w, info)
			}
		}
		if got := harness.QemuImg(t, "compare", "-f", "raw", "-F", "vmdk", raw, out); !strings.Contains(got, "identical") {
			t.Errorf("%s: qemu-img compare with the raw:\n%s", typ, got)
		}
		theirs := filepath.Join(dir, "qemu-"+string(typ)+".vmdk")
		harness.QemuImg(t, "convert", "-f", "raw", "-O", "vmdk", "-o", "subformat="+string(typ), raw, theirs)
		if _, got := readBack(t, theirs); !bytes.Equal(got, want) {
			t.Errorf("%s: qemu-img's image reads back other than the raw", typ)
		}
	}
}

// FuzzOpen: a damaged image is an error or reads back, never a panic or a
// load bounded by its header rather than its size.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	// A small disk with two grains of data keeps the seeds small.
	raw := filepath.Join(dir, "seed.raw")
	data := make([]byte, 2<<20)
	copy(data, bytes.Repeat([]byte("seed data for the vmdk fuzzer "), 100))
	copy(data[1<<20:], "more")
	if err := os.WriteFile(raw, data, 0o644); err != nil {
		f.Fatal(err)
	}
	for _, typ := range types {
		img := filepath.Join(dir, string(typ)+".vmdk")
		write(f, raw, img, Options{Type: typ})
		b, _ := os.ReadFile(img)
		f.Add(b, int64(0))
	}
	f.Fuzz(func(t *testing.T, img []byte, flip int64) {
		if len(img) > 0 {
			img = append([]byte(nil), img...)
			i := int(uint64(flip) % uint64(len(img)))
			img[i] ^= byte(flip >> 32)
		}
		v, err := Open(bytes.NewReader(img), int64(len(img)))
		if err != nil || v.Size() > 64<<20 {
			return
		}
		io.Copy(io.Discard, io.NewSectionReader(v, 0, v.Size()))
	})
}

// TestWriteRefuses: a disk past what a sparse extent holds, one not of
// whole sectors, an extent name a descriptor cannot quote and an unknown
// type are refused before a byte is written.
func TestWriteRefuses(t *testing.T) {
	for _, c := range []struct {
		size int64
		o    Options
		want string
	}{
		{MaxCapacity + GrainSize, Options{}, "past the"},
		{1000, Options{}, "not whole 512-byte sectors"},
		{1 << 20, Options{FileName: "a\"b.vmdk"}, "cannot be quoted"},
		{1 << 20, Options{Type: "vmfs"}, `type "vmfs"`},
	} {
		// A nil writer: any write would panic.
		_, err := Write(context.Background(), nil, bytes.NewReader(nil), c.size, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%d bytes, %+v: %v, want %q", c.size, c.o, err, c.want)
		}
	}
}
