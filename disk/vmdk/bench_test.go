package vmdk

import (
	"os"
	"os/exec"
	"path/filepath"
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
			harness.ReportFileSize(b, out)
		})
		b.Run("qemu-img/"+string(typ), func(b *testing.B) {
			for b.Loop() {
				os.Remove(out)
				if o, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "vmdk", "-o", "subformat="+string(typ), raw, out).CombinedOutput(); err != nil {
					b.Fatalf("%v\n%s", err, o)
				}
			}
			harness.ReportFileSize(b, out)
		})
	}
}
