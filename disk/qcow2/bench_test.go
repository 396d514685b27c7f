package qcow2

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkWriteVsQemuImg times Write and `qemu-img convert -O qcow2` on the
// same raw disk, with and without compression.
func BenchmarkWriteVsQemuImg(b *testing.B) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		b.Fatal("no qemu-img (run test/scripts/deps.sh)")
	}
	raw := harness.SparseUsrDisk(b, 512<<20, 200<<20, 24<<20)
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
			harness.ReportFileSize(b, out)
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
			harness.ReportFileSize(b, out)
		})
	}
}
