package vhd

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkWriteVsQemuImg times Write and `qemu-img convert -O vpc` on the
// same raw disk, for both types.
func BenchmarkWriteVsQemuImg(b *testing.B) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		b.Fatal("no qemu-img (run test/scripts/deps.sh)")
	}
	raw := harness.SparseUsrDisk(b, 1<<30, 300<<20, 40<<20)
	out := filepath.Join(b.TempDir(), "out.vhd")
	for _, sub := range []string{"fixed", "dynamic"} {
		b.Run("stamp/"+sub, func(b *testing.B) {
			for b.Loop() {
				os.Remove(out)
				write(b, raw, out, Options{Dynamic: sub == "dynamic"})
			}
			harness.ReportFileSize(b, out)
		})
		b.Run("qemu-img/"+sub, func(b *testing.B) {
			for b.Loop() {
				os.Remove(out)
				if o, err := exec.Command("qemu-img", "convert", "-f", "raw", "-O", "vpc", "-o", "subformat="+sub, raw, out).CombinedOutput(); err != nil {
					b.Fatalf("%v\n%s", err, o)
				}
			}
			harness.ReportFileSize(b, out)
		})
	}
}
