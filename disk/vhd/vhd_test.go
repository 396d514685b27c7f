package vhd

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

// TestCHS holds the geometry to values worked by hand from the
// specification's algorithm, one per branch of it. qemu-img create writes
// one cylinder more for each of these sizes (302/4/17, 1004/12/17,
// 1016/16/63, 2081/16/63, 20561/16/255): it grows the disk to a geometry
// that covers it, where the specification's rounds down.
func TestCHS(t *testing.T) {
	for _, c := range []struct {
		size int64
		want Geometry
	}{
		{10 << 20, Geometry{301, 4, 17}},                  // 17 sectors, the 4-head floor
		{100 << 20, Geometry{1003, 12, 17}},               // 17 sectors, heads from the cylinders
		{500 << 20, Geometry{1015, 16, 63}},               // past 17 and 31 sectors
		{1 << 30, Geometry{2080, 16, 63}},                 // 1 GiB
		{40 << 30, Geometry{20560, 16, 255}},              // the 255-sector branch
		{3 << 40, Geometry{65535, 16, 255}},               // capped
		{65535 * 16 * 63 * 512, Geometry{16191, 16, 255}}, // the branch's edge
	} {
		if got := CHS(c.size); got != c.want {
			t.Errorf("CHS(%d) = %v, want %v", c.size, got, c.want)
		}
	}
}

// TestGeometryFor: every whole-MiB disk below 64 GiB gets a geometry that
// covers it exactly, the specification's where that one does, 16 heads
// and 63 or more sectors per track otherwise; past the largest geometry,
// or past 64 GiB with no factoring, the maximum one.
func TestGeometryFor(t *testing.T) {
	for m := int64(1); m < 65536; m++ {
		size := m << 20
		g := GeometryFor(size)
		if g.sectors()*Sector != size {
			t.Fatalf("GeometryFor(%d MiB) = %v covers %d bytes", m, g, g.sectors()*Sector)
		}
		if spec := CHS(size); spec.sectors()*Sector == size && g != spec {
			t.Errorf("GeometryFor(%d MiB) = %v, the specification's %v covers it", m, g, spec)
		}
		if g != CHS(size) && (g.Heads != 16 || g.Sectors < 63) {
			t.Errorf("GeometryFor(%d MiB) = %v", m, g)
		}
	}
	for _, c := range []struct {
		size int64
		want Geometry
	}{
		{17 << 20, Geometry{512, 4, 17}},        // the specification's own
		{63 << 20, Geometry{128, 16, 63}},       // the specification's own
		{1 << 30, Geometry{2048, 16, 64}},       // 1 GiB
		{4 << 30, Geometry{8192, 16, 64}},       // 4 GiB
		{40 << 30, Geometry{40960, 16, 128}},    // 40 GiB, where the specification has 255 sectors
		{65600 << 20, Geometry{52480, 16, 160}}, // past 64 GiB, a factoring
		{80 << 30, maxGeometry},                 // 80 GiB, 2^21·5 sectors: none within 65535 cylinders
		{(65536 + 1) << 20, maxGeometry},        // 64 GiB and a MiB: 65537 is prime
		{3 << 40, maxGeometry},                  // past the largest geometry
		{10<<20 + 7*Sector, maxGeometry},        // not a multiple of 16 sectors
	} {
		if got := GeometryFor(c.size); got != c.want {
			t.Errorf("GeometryFor(%d) = %v, want %v", c.size, got, c.want)
		}
	}
}

func TestFooterChecksumAndFields(t *testing.T) {
	f := Footer{DataOffset: noOffset, Timestamp: 0x01020304, CreatorVer: creatorVersion, CreatorOS: creatorOS,
		OriginalSize: 1 << 30, CurrentSize: 1 << 30, Geometry: CHS(1 << 30), Type: TypeFixed, UniqueID: [16]byte{1, 2, 3}}
	copy(f.CreatorApp[:], CreatorApp)
	b := f.Marshal()
	// The specification's check: the byte sum without the checksum field,
	// plus the field, is all ones.
	var sum uint32
	for i, c := range b {
		if i < 64 || i >= 68 {
			sum += uint32(c)
		}
	}
	if got := binary.BigEndian.Uint32(b[64:]); got != ^sum {
		t.Errorf("checksum %#x, want %#x", got, ^sum)
	}
	for _, w := range []struct {
		off  int
		want string
	}{{0, "conectix"}, {28, "stmp"}, {36, "Wi2k"}, {8, "\x00\x00\x00\x02"}, {12, "\x00\x01\x00\x00"}, {60, "\x00\x00\x00\x02"}} {
		if got := string(b[w.off : w.off+len(w.want)]); got != w.want {
			t.Errorf("footer at %d is %q, want %q", w.off, got, w.want)
		}
	}
	g, err := ParseFooter(b)
	if err != nil {
		t.Fatal(err)
	}
	if *g != f {
		t.Errorf("parsed %+v, want %+v", *g, f)
	}
	b[100] = 1
	if _, err := ParseFooter(b); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("a changed byte: %v", err)
	}
}

func TestTimestamp(t *testing.T) {
	for _, c := range []struct {
		t    time.Time
		want uint32
	}{
		{time.Unix(0, 0), 0},
		{time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), 0},
		{time.Date(2000, 1, 1, 0, 1, 0, 0, time.UTC), 60},
		{time.Unix(1700000000, 0), 1700000000 - 946684800},
	} {
		if got := Timestamp(c.t); got != c.want {
			t.Errorf("Timestamp(%v) = %d, want %d", c.t, got, c.want)
		}
	}
}

// rawDisk writes a sparse raw disk of size bytes with data in a few places:
// at the start, zeros written as data (no block stored), one byte at a
// block's end, and at the very end.
func rawDisk(t testing.TB, dir string, size int64) string {
	random := harness.RandomBytes(1, 1<<20+333)
	return harness.SparseRawDisk(t, dir, size,
		harness.DiskPiece{Off: 0, Data: random},
		harness.DiskPiece{Off: 4 << 20, Data: make([]byte, 3<<20)},
		harness.DiskPiece{Off: 3*BlockSize - 1, Data: []byte{7}},
		harness.DiskPiece{Off: size - 1000, Data: random[:1000]})
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

// TestRoundTrip writes fixed and dynamic images of disks that end on and
// off a MiB and reads the disk back: the bytes are the raw's, padded with
// zeros; a dynamic image stores only the blocks with data.
func TestRoundTrip(t *testing.T) {
	for _, size := range []int64{9 << 20, 9<<20 + 7*Sector} {
		dir := t.TempDir()
		raw := rawDisk(t, dir, size)
		want, err := os.ReadFile(raw)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, make([]byte, VirtualSize(size)-size)...)
		for _, dyn := range []bool{false, true} {
			out := filepath.Join(dir, map[bool]string{false: "fixed.vhd", true: "dyn.vhd"}[dyn])
			st := write(t, raw, out, Options{Dynamic: dyn, UniqueID: [16]byte{9}, Time: time.Unix(1700000000, 0)})
			if want := (size + 1<<20 - 1) >> 20 << 20; st.VirtualSize != want {
				t.Errorf("%s: virtual size %d, want %d", out, st.VirtualSize, want)
			}
			f, err := os.Open(out)
			if err != nil {
				t.Fatal(err)
			}
			r, err := Open(f, st.FileSize)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(io.NewSectionReader(r, 0, r.Size()))
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s: the disk read back differs from the raw", out)
			}
			if r.Dynamic() != dyn || r.Footer().UniqueID != [16]byte{9} || r.Footer().Timestamp != 1700000000-946684800 {
				t.Errorf("%s: footer %+v", out, r.Footer())
			}
			// The raw holds 1 MiB and 1000 bytes of data and a byte: zeros,
			// written or not, stay holes in the image.
			if fi, err := os.Stat(out); err != nil || fi.Sys().(*syscall.Stat_t).Blocks*512 > 1<<20+64<<10 {
				t.Errorf("%s: %d bytes allocated, want the data's (%v)", out, fi.Sys().(*syscall.Stat_t).Blocks*512, err)
			}
			if dyn {
				// Blocks 0 (random data), 2 (the byte at its end) and 4 (the
				// end); block 1 holds a hole, block 2 zeros written as data
				// up to its last byte, block 3 zeros only.
				if st.Blocks != 3 {
					t.Errorf("%s: %d blocks stored, want 3", out, st.Blocks)
				}
				if want := int64(FooterSize + headerSize + Sector + 3*(bitmapSize+BlockSize) + FooterSize); st.FileSize != want {
					t.Errorf("%s: %d bytes, want %d", out, st.FileSize, want)
				}
			}
		}
	}
}

// TestSameBytes: the same disk and options give the same image.
func TestSameBytes(t *testing.T) {
	dir := t.TempDir()
	raw := rawDisk(t, dir, 5<<20)
	for _, dyn := range []bool{false, true} {
		var sums [2][]byte
		for i := range sums {
			out := filepath.Join(dir, "x.vhd")
			os.Remove(out)
			write(t, raw, out, Options{Dynamic: dyn, UniqueID: [16]byte{1}, Time: time.Unix(1e9, 0)})
			b, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			sums[i] = b
		}
		if !bytes.Equal(sums[0], sums[1]) {
			t.Errorf("dynamic %v: two writes differ", dyn)
		}
	}
}

// TestQemuImg has qemu read both types with no options (so by the
// geometry, the creator being one it does not know): the format and
// virtual size it reports, which is the footer's, the disk compared with
// the raw, and with qemu-img's own VHD of the same raw (content, not bytes:
// qemu's geometry-sized disk is larger).
// There is no `qemu-img check`: qemu's vpc driver has none ("This image
// format does not support checks"), so reading each other's images in both
// directions stands in for it.
func TestQemuImg(t *testing.T) {
	harness.RequireTools(t, "qemu-img")
	dir := t.TempDir()
	size := int64(9<<20 + 7*Sector)
	raw := rawDisk(t, dir, size)
	for _, sub := range []string{"fixed", "dynamic"} {
		out := filepath.Join(dir, sub+".vhd")
		write(t, raw, out, Options{Dynamic: sub == "dynamic"})
		// -f names the format, no more: a fixed image begins with the
		// disk, so qemu's probe takes it for a raw one.
		info := harness.QemuImg(t, "info", "--output=json", "-f", "vpc", out)
		for _, want := range []string{`"format": "vpc"`, `"virtual-size": 10485760,`} {
			if !strings.Contains(info, want) {
				t.Errorf("%s: qemu-img info lacks %q:\n%s", sub, want, info)
			}
		}
		// The geometry qemu sizes it by is the footer's size, which a
		// specification geometry (9 MiB + 7 sectors rounded to 10 MiB:
		// 301/4/17) would not be.
		if g := CHS(10 << 20); g.sectors()*Sector == 10<<20 {
			t.Errorf("the specification's geometry %v covers 10 MiB: the test proves nothing", g)
		}
		// The raw disk is shorter than the image's: compare treats the
		// padding as equal only because it is zeros.
		if got := harness.QemuImg(t, "compare", "-f", "raw", "-F", "vpc", raw, out); !strings.Contains(got, "identical") {
			t.Errorf("%s: qemu-img compare with the raw:\n%s", sub, got)
		}
		theirs := filepath.Join(dir, "qemu-"+sub+".vhd")
		harness.QemuImg(t, "convert", "-f", "raw", "-O", "vpc", "-o", "subformat="+sub, raw, theirs)
		if got := harness.QemuImg(t, "compare", "-f", "vpc", "-F", "vpc", theirs, out); !strings.Contains(got, "identical") {
			t.Errorf("%s: qemu-img compare with qemu-img's own:\n%s", sub, got)
		}
		// And the other way: our reader reads qemu-img's image as the raw.
		f, err := os.Open(theirs)
		if err != nil {
			t.Fatal(err)
		}
		fi, _ := f.Stat()
		r, err := Open(f, fi.Size())
		if err != nil {
			t.Fatalf("reading qemu-img's %s image: %v", sub, err)
		}
		got := make([]byte, size)
		if _, err := r.ReadAt(got, 0); err != nil {
			t.Fatal(err)
		}
		f.Close()
		want, _ := os.ReadFile(raw)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: qemu-img's image reads back different from the raw", sub)
		}
	}
	// A changed byte must show: the comparison above is not vacuous.
	out := filepath.Join(dir, "dynamic.vhd")
	f, err := os.OpenFile(raw, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xAA}, 6<<20)
	f.Close()
	if o, err := exec.Command(harness.Tool(t, "qemu-img"), "compare", "-f", "raw", "-F", "vpc", raw, out).CombinedOutput(); err == nil {
		t.Errorf("qemu-img compare misses a changed byte:\n%s", o)
	}
}
