package vmdk

import (
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkWriteVsQemuImg times Write and `qemu-img convert -O vmdk` on the
// same raw disk, for both types. The target is a stream-optimized
// write in at most half qemu-img's time.
func BenchmarkWriteVsQemuImg(b *testing.B) {
	raw := harness.SparseUsrDisk(b, 1<<30, 300<<20, 40<<20)
	var runs []harness.EncoderRun
	for _, typ := range types {
		runs = append(runs, harness.EncoderRun{
			Name:     string(typ),
			Write:    func(b *testing.B, raw, out string) { write(b, raw, out, Options{Type: typ}) },
			QemuArgs: []string{"-O", "vmdk", "-o", "subformat=" + string(typ)},
		})
	}
	harness.BenchEncoderVsQemuImg(b, raw, filepath.Join(b.TempDir(), "out.vmdk"), runs)
}
