package qcow2

import (
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
)

// benchDisk is a 512 MiB sparse raw disk holding about 200 MiB of the host's
// /usr files (binaries and text, as a real root file system holds) in runs
// with holes between them, built once per benchmark run.
func benchDisk(b *testing.B) string {
	b.Helper()
	p := filepath.Join(b.TempDir(), "bench.raw")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const size = 512 << 20
	f.Truncate(size)
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
		if written >= 200<<20 || off >= size-(16<<20) {
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
			off += 24 << 20 // a hole now and then, as in a file system
		}
	}
	return p
}

// BenchmarkWriteVsQemuImg times Write and `qemu-img convert -O qcow2` on the
// same raw disk, with and without compression.
func BenchmarkWriteVsQemuImg(b *testing.B) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		b.Fatal("no qemu-img (run test/scripts/deps.sh)")
	}
	raw := benchDisk(b)
	out := filepath.Join(b.TempDir(), "out.qcow2")
	for _, c := range []struct {
		name     string
		compress bool
	}{{"plain", false}, {"compressed", true}} {
		b.Run("stamp/"+c.name, func(b *testing.B) {
			for b.Loop() {
				os.Remove(out)
				writeQcow2(b, raw, out, Options{Compress: c.compress})
			}
			reportSize(b, out)
		})
		b.Run("qemu-img/"+c.name, func(b *testing.B) {
			args := []string{"convert", "-f", "raw", "-O", "qcow2"}
			if c.compress {
				args = append(args, "-c")
			}
			for b.Loop() {
				os.Remove(out)
				if o, err := exec.Command("qemu-img", append(args, raw, out)...).CombinedOutput(); err != nil {
					b.Fatalf("%v\n%s", err, o)
				}
			}
			reportSize(b, out)
		})
	}
}

func reportSize(b *testing.B, p string) {
	if fi, err := os.Stat(p); err == nil {
		b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
	}
}
