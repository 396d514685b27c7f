package vhd

import (
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkWriteVsQemuImg times Write and `qemu-img convert -O vpc` on the
// same raw disk, for both types.
func BenchmarkWriteVsQemuImg(b *testing.B) {
	raw := harness.SparseUsrDisk(b, 1<<30, 300<<20, 40<<20)
	var runs []harness.EncoderRun
	for _, sub := range []string{"fixed", "dynamic"} {
		runs = append(runs, harness.EncoderRun{
			Name:     sub,
			Write:    func(b *testing.B, raw, out string) { write(b, raw, out, Options{Dynamic: sub == "dynamic"}) },
			QemuArgs: []string{"-O", "vpc", "-o", "subformat=" + sub},
		})
	}
	harness.BenchEncoderVsQemuImg(b, raw, filepath.Join(b.TempDir(), "out.vhd"), runs)
}
