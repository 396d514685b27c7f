package vhd

import (
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
)

// benchDisk is a 1 GiB sparse raw disk holding about 300 MiB of the host's
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
	const size = 1 << 30
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
		if written >= 300<<20 || off >= size-(16<<20) {
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
			off += 40 << 20 // a hole now and then, as in a file system
		}
	}
	return p
}

// BenchmarkWriteVsQemuImg times Write and `qemu-img convert -O vpc` on the
// same raw disk, for both types.
func BenchmarkWriteVsQemuImg(b *testing.B) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		b.Fatal("no qemu-img (run test/scripts/deps.sh)")
	}
	raw := benchDisk(b)
	out := filepath.Join(b.TempDir(), "out.vhd")
	for _, sub := range []string{"fixed", "dynamic"} {
		b.Run("stamp/"+sub, func(b *testing.B) {
			for b.Loop() {
				os.Remove(out)
				write(b, raw, out, Options{Dynamic: sub == "dynamic"})
			}
			reportSize(b, out)
		})
		b.Run("qemu-img/"+sub, func(b *testing.B) {
			for b.Loop() {
				os.Remove(out)
				if o, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "vpc", "-o", "subformat="+sub, raw, out).CombinedOutput(); err != nil {
					b.Fatalf("%v\n%s", err, o)
				}
			}
			reportSize(b, out)
		})
	}
}

// reportSize reports the file's size and what it takes on the host.
func reportSize(b *testing.B, p string) {
	if fi, err := os.Stat(p); err == nil {
		b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
		b.ReportMetric(float64(fi.Sys().(*syscall.Stat_t).Blocks*512)/(1<<20), "MiB-used")
	}
}
