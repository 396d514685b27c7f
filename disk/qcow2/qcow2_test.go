package qcow2

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// rawDisk writes a sparse raw disk with what the encoder must tell apart:
// incompressible and compressible data, zeros written as data (not
// stored), a hole, a cluster with one byte set at its end, and a partial
// last cluster; and more pieces.
func rawDisk(t testing.TB, dir string, size int64, more ...harness.DiskPiece) string {
	random := harness.RandomBytes(5, 1<<20+333)
	var text bytes.Buffer
	for i := 0; text.Len() < 2<<20; i++ {
		fmt.Fprintf(&text, "line %d: the quick brown fox %x jumps over the lazy dog\n", i, random[i%len(random)]%64)
	}
	return harness.SparseRawDisk(t, dir, size, append([]harness.DiskPiece{
		{Off: 0, Data: random},
		{Off: 4<<20 + 100, Data: text.Bytes()},
		{Off: 10 << 20, Data: make([]byte, 256<<10)},
		{Off: 12<<20 + clusterSize - 1, Data: []byte{7}},
		{Off: size - 1000, Data: random[:1000]}}, more...)...)
}

func writeQcow2(t testing.TB, raw, out string, o Options) (st *Stats) {
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

func fileSum(t testing.TB, p string) [32]byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestQemuAgrees(t *testing.T) {
	dir := t.TempDir()
	size := int64(64<<20 + 3*512)
	raw := rawDisk(t, dir, size)
	for _, compress := range []bool{false, true} {
		t.Run(fmt.Sprintf("compress=%v", compress), func(t *testing.T) {
			img := filepath.Join(t.TempDir(), "disk.qcow2")
			st := writeQcow2(t, raw, img, Options{Compress: compress})
			out := harness.QemuImg(t, "check", img)
			if !strings.Contains(out, "No errors were found on the image.") {
				t.Fatalf("qemu-img check:\n%s", out)
			}
			out = harness.QemuImg(t, "compare", "-f", "raw", "-F", "qcow2", raw, img)
			if !strings.Contains(out, "Images are identical.") {
				t.Fatalf("qemu-img compare:\n%s", out)
			}
			info := harness.QemuImg(t, "info", img)
			for _, want := range []string{"file format: qcow2", fmt.Sprintf("virtual size: 64 MiB (%d bytes)", size), "cluster_size: 65536", "compat: 1.1", "refcount bits: 16"} {
				if !strings.Contains(info, want) {
					t.Errorf("qemu-img info lacks %q:\n%s", want, info)
				}
			}
			// 16 random clusters, 32 or 33 of text, 1 and 1 at the end: the rest
			// are zeros and must not be stored.
			if st.Clusters < 50 || st.Clusters > 54 {
				t.Errorf("%d clusters stored, want about 52", st.Clusters)
			}
			if compress && (st.Compressed < 30 || st.Compressed >= st.Clusters) {
				t.Errorf("%d of %d clusters compressed; the text should, the random data should not", st.Compressed, st.Clusters)
			}
			checkReader(t, raw, img)
			again := filepath.Join(t.TempDir(), "again.qcow2")
			writeQcow2(t, raw, again, Options{Compress: compress, Workers: 1})
			if fileSum(t, img) != fileSum(t, again) {
				t.Error("two writes (with different worker counts) differ")
			}
		})
	}
}

// checkReader compares the guest disk Open reads with the raw file.
func checkReader(t testing.TB, raw, img string) {
	t.Helper()
	want, err := os.ReadFile(raw)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	q, err := Open(f)
	if err != nil {
		t.Fatalf("Open %s: %v", img, err)
	}
	if q.Size() != int64(len(want)) {
		t.Fatalf("size %d, want %d", q.Size(), len(want))
	}
	got, err := io.ReadAll(io.NewSectionReader(q, 0, q.Size()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: guest byte %d is %#x, want %#x", img, i, got[i], want[i])
			}
		}
	}
}

// TestHolesDoNotChangeTheOutput writes the same disk from its file (holes
// skipped) and through a plain ReaderAt (every byte read): the images must
// be the same, and a hash taken while writing an uncompressed one must be
// the file's. The disk has runs of data longer than one write, and data across
// the boundary of two.
func TestHolesDoNotChangeTheOutput(t *testing.T) {
	dir := t.TempDir()
	run := int64(runClusters * clusterSize)
	raw := rawDisk(t, dir, 20*run+5*clusterSize+3*512,
		harness.DiskPiece{Off: 16*run - 3000, Data: harness.RandomBytes(6, 3*runClusters*clusterSize)})
	b, _ := os.ReadFile(raw)
	for _, compress := range []bool{false, true} {
		img := filepath.Join(dir, fmt.Sprintf("file-%v.qcow2", compress))
		st := writeQcow2(t, raw, img, Options{Compress: compress})
		switch sum := fileSum(t, img); {
		case compress && st.SHA256 != "":
			t.Errorf("compress=%v: a hash (%s) from a writer that places clusters as they compress", compress, st.SHA256)
		case !compress && st.SHA256 != hex.EncodeToString(sum[:]):
			t.Errorf("compress=%v: hashed as written %q, the file's sha256 is %x", compress, st.SHA256, sum)
		}
		var out bytes.Buffer
		if _, err := Write(context.Background(), &bufferAt{&out}, bytes.NewReader(b), int64(len(b)), Options{Compress: compress}); err != nil {
			t.Fatal(err)
		}
		if sha256.Sum256(out.Bytes()) != fileSum(t, img) {
			t.Errorf("compress=%v: the output depends on whether holes were seen", compress)
		}
	}
}

// TestHashesTheSource asks the writer for the raw disk's sha256 as it reads
// it: it must be the file's, holes as zeros, whether the disk ends in data
// or in a hole or is all hole, and the image must be the one written
// without it. A compressed image reads each cluster once, and says nothing.
func TestHashesTheSource(t *testing.T) {
	dir := t.TempDir()
	run := int64(runClusters * clusterSize)
	disks := map[string]string{
		"data at the end": rawDisk(t, dir, 20*run+5*clusterSize+3*512,
			harness.DiskPiece{Off: 16*run - 3000, Data: harness.RandomBytes(6, 3*runClusters*clusterSize)}),
		"a hole at the end": harness.SparseRawDisk(t, t.TempDir(), 40*run, harness.DiskPiece{Off: 3*run + 512, Data: harness.RandomBytes(7, 2*int(run))}),
		"all hole":          harness.SparseRawDisk(t, t.TempDir(), 3*run),
		"empty":             harness.SparseRawDisk(t, t.TempDir(), 0),
	}
	for name, raw := range disks {
		want := fileSum(t, raw)
		plain := filepath.Join(dir, "plain.qcow2")
		writeQcow2(t, raw, plain, Options{})
		img := filepath.Join(dir, "hashed.qcow2")
		st := writeQcow2(t, raw, img, Options{HashSource: true})
		if st.SourceSHA256 != hex.EncodeToString(want[:]) {
			t.Errorf("%s: the raw disk hashed as read is %q, its file's sha256 %x", name, st.SourceSHA256, want)
		}
		if fileSum(t, img) != fileSum(t, plain) {
			t.Errorf("%s: hashing the raw disk changed the image", name)
		}
		if st := writeQcow2(t, raw, img, Options{HashSource: true, Compress: true}); st.SourceSHA256 != "" {
			t.Errorf("%s: a compressed image says the raw disk's sum is %s", name, st.SourceSHA256)
		}
	}
}

type bufferAt struct{ b *bytes.Buffer }

func (w *bufferAt) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(w.b.Len()) {
		w.b.Write(make([]byte, end-int64(w.b.Len())))
	}
	copy(w.b.Bytes()[off:], p)
	return len(p), nil
}

func TestReadsWhatQemuWrites(t *testing.T) {
	dir := t.TempDir()
	raw := rawDisk(t, dir, 16<<20+512)
	for _, args := range [][]string{{}, {"-c"}, {"-o", "cluster_size=4096"}, {"-c", "-o", "cluster_size=2M"}} {
		img := filepath.Join(dir, "qemu.qcow2")
		os.Remove(img)
		harness.QemuImg(t, append(append([]string{"convert", "-f", "raw", "-O", "qcow2"}, args...), raw, img)...)
		checkReader(t, raw, img)
	}
}

func TestCheckCatchesABadRefcount(t *testing.T) {
	// qemu-img check must be able to fail on what this package writes: drop
	// the refcount of the header cluster.
	dir := t.TempDir()
	raw := rawDisk(t, dir, 8<<20)
	img := filepath.Join(dir, "d.qcow2")
	writeQcow2(t, raw, img, Options{})
	f, _ := os.OpenFile(img, os.O_RDWR, 0)
	q := make([]byte, 8)
	f.ReadAt(q, 48)
	rt := int64(q[0])<<56 | int64(q[1])<<48 | int64(q[2])<<40 | int64(q[3])<<32 | int64(q[4])<<24 | int64(q[5])<<16 | int64(q[6])<<8 | int64(q[7])
	f.ReadAt(q, rt)
	rb := int64(q[0])<<56 | int64(q[1])<<48 | int64(q[2])<<40 | int64(q[3])<<32 | int64(q[4])<<24 | int64(q[5])<<16 | int64(q[6])<<8 | int64(q[7])
	f.WriteAt([]byte{0, 0}, rb)
	f.Close()
	out, err := exec.Command(harness.Tool(t, "qemu-img"), "check", img).CombinedOutput()
	if err == nil {
		t.Fatalf("qemu-img check accepted a zero refcount for the header:\n%s", out)
	}
}

func TestEmptyAndTinyDisks(t *testing.T) {
	for _, size := range []int64{0, 512, clusterSize, 3*clusterSize + 1024} {
		for _, compress := range []bool{false, true} {
			dir := t.TempDir()
			raw := filepath.Join(dir, "raw")
			os.WriteFile(raw, bytes.Repeat([]byte{0xAB}, int(size)), 0o644)
			img := filepath.Join(dir, "img.qcow2")
			st := writeQcow2(t, raw, img, Options{Compress: compress})
			if out := harness.QemuImg(t, "check", img); !strings.Contains(out, "No errors") {
				t.Errorf("%d bytes, compress=%v: %s", size, compress, out)
			}
			checkReader(t, raw, img)
			if sum := fileSum(t, img); st.SHA256 != "" && st.SHA256 != hex.EncodeToString(sum[:]) {
				t.Errorf("%d bytes: hashed as written %s, the file's sha256 is %x", size, st.SHA256, sum)
			}
		}
	}
	if _, err := Write(context.Background(), &bufferAt{&bytes.Buffer{}}, bytes.NewReader(nil), 1000, Options{}); err == nil {
		t.Error("a disk of 1000 bytes: want an error")
	}
}

// FuzzOpen feeds damaged images to the reader: errors, never a panic.
func FuzzOpen(f *testing.F) {
	dir := f.TempDir()
	raw := filepath.Join(dir, "seed.raw")
	data := bytes.Repeat([]byte("seed data for the qcow2 fuzzer, compressible "), 3000)
	os.WriteFile(raw, append(data, make([]byte, 512-len(data)%512)...), 0o644)
	for _, c := range []bool{false, true} {
		img := filepath.Join(dir, "seed.qcow2")
		writeQcow2(f, raw, img, Options{Compress: c})
		b, _ := os.ReadFile(img)
		f.Add(b, int64(0))
	}
	f.Fuzz(func(t *testing.T, img []byte, flip int64) {
		if len(img) > 0 {
			img = append([]byte(nil), img...)
			i := int(uint64(flip) % uint64(len(img)))
			img[i] ^= byte(flip >> 32)
		}
		q, err := Open(bytes.NewReader(img))
		if err != nil || q.Size() > 1<<20 {
			return
		}
		io.Copy(io.Discard, io.NewSectionReader(q, 0, q.Size()))
	})
}
