package vmdk

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkWriteVsQemuImg times Write and `qemu-img convert -O vmdk` on the
// same raw disk, for both types. The target is a stream-optimized
// write in at most half qemu-img's time.
func BenchmarkWriteVsQemuImg(b *testing.B) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		b.Fatal("no qemu-img (run test/scripts/deps.sh)")
	}
	raw := harness.SparseUsrDisk(b, 1<<30, 300<<20, 40<<20)
	out := filepath.Join(b.TempDir(), "out.vmdk")
	for _, typ := range types {
		b.Run("stamp/"+string(typ), func(b *testing.B) {
			for b.Loop() {
				os.Remove(out)
				write(b, raw, out, Options{Type: typ})
			}
			reportSize(b, out)
		})
		b.Run("qemu-img/"+string(typ), func(b *testing.B) {
			for b.Loop() {
				os.Remove(out)
				if o, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "vmdk", "-o", "subformat="+string(typ), raw, out).CombinedOutput(); err != nil {
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
