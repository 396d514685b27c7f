package harness

import (
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
)

// SparseUsrDisk writes a sparse raw disk of size bytes holding about data
// bytes of the host's /usr files (binaries and text, as a real root file
// system holds) in runs, with a hole of hole bytes after every 32 MiB, and
// returns its path. Disk encoders are benchmarked on it.
func SparseUsrDisk(tb testing.TB, size, data, hole int64) string {
	tb.Helper()
	p := SparseRawDisk(tb, tb.TempDir(), size)
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	var files []string
	filepath.WalkDir("/usr", func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, p)
		}
		return nil
	})
	sort.Strings(files)
	var off, written int64
	for _, name := range files {
		if written >= data || off >= size-(16<<20) {
			break
		}
		r, err := os.Open(name)
		if err != nil {
			continue
		}
		n, _ := io.Copy(io.NewOffsetWriter(f, off), io.LimitReader(r, 8<<20))
		r.Close()
		written += n
		off += n
		if written/(32<<20) != (written-n)/(32<<20) {
			off += hole
		}
	}
	return p
}

// DiskPiece is data a test disk holds at an offset.
type DiskPiece struct {
	Off  int64
	Data []byte
}

// SparseRawDisk writes dir/disk.raw: size bytes, sparse, holding each
// piece's data at its offset and holes elsewhere, and returns its path.
// The disk encoders' tests place what each must tell apart.
func SparseRawDisk(tb testing.TB, dir string, size int64, pieces ...DiskPiece) string {
	tb.Helper()
	p := filepath.Join(dir, "disk.raw")
	f, err := os.Create(p)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		tb.Fatal(err)
	}
	for _, pc := range pieces {
		if _, err := f.WriteAt(pc.Data, pc.Off); err != nil {
			tb.Fatal(err)
		}
	}
	return p
}

// RandomBytes is n incompressible bytes, the same for the same seed.
func RandomBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// ReportFileSize reports a benchmark's output file's size and what it
// takes on the host, in MiB.
func ReportFileSize(b *testing.B, p string) {
	if fi, err := os.Stat(p); err == nil {
		b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
		b.ReportMetric(float64(fi.Sys().(*syscall.Stat_t).Blocks*512)/(1<<20), "MiB-used")
	}
}

// EncodeDisk runs a disk encoder's write from the raw disk raw into a new
// file out, failing the test on an error or when the file's size is not
// the size write reports.
func EncodeDisk(tb testing.TB, raw, out string, write func(dst, src *os.File, size int64) (fileSize int64, err error)) {
	tb.Helper()
	src, err := os.Open(raw)
	if err != nil {
		tb.Fatal(err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		tb.Fatal(err)
	}
	dst, err := os.Create(out)
	if err != nil {
		tb.Fatal(err)
	}
	defer dst.Close()
	n, err := write(dst, src, fi.Size())
	if err != nil {
		tb.Fatalf("encoding %s: %v", raw, err)
	}
	if fi, err := dst.Stat(); err != nil || fi.Size() != n {
		tb.Fatalf("%s is %d bytes, the encoder says %d (%v)", out, fi.Size(), n, err)
	}
}

// EncoderRun is one way of encoding a raw disk: stamp's encoder, and the
// same by qemu-img convert.
type EncoderRun struct {
	Name  string
	Write func(b *testing.B, raw, out string)
	// QemuArgs go after "qemu-img convert -f raw" and before the files.
	QemuArgs []string
}

// BenchEncoderVsQemuImg times each run's Write beside qemu-img convert of
// the same raw disk into out, as sub-benchmarks stamp/NAME and
// qemu-img/NAME, reporting each output's size.
func BenchEncoderVsQemuImg(b *testing.B, raw, out string, runs []EncoderRun) {
	qemuImg := Tool(b, "qemu-img")
	for _, r := range runs {
		b.Run("stamp/"+r.Name, func(b *testing.B) {
			for b.Loop() {
				os.Remove(out)
				r.Write(b, raw, out)
			}
			ReportFileSize(b, out)
		})
		b.Run("qemu-img/"+r.Name, func(b *testing.B) {
			args := append(append([]string{"convert", "-f", "raw"}, r.QemuArgs...), raw, out)
			for b.Loop() {
				os.Remove(out)
				if o, err := exec.Command(qemuImg, args...).CombinedOutput(); err != nil {
					b.Fatalf("qemu-img %v: %v\n%s", args, err, o)
				}
			}
			ReportFileSize(b, out)
		})
	}
}

// QemuImg runs qemu-img with args and returns its output, failing the test
// when it fails.
func QemuImg(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(Tool(t, "qemu-img"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("qemu-img %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}
