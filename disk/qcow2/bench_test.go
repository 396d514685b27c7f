package qcow2

import (
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkWriteVsQemuImg times Write and `qemu-img convert -O qcow2` on the
// same raw disk, with and without compression.
func BenchmarkWriteVsQemuImg(b *testing.B) {
	raw := harness.SparseUsrDisk(b, 512<<20, 200<<20, 24<<20)
	harness.BenchEncoderVsQemuImg(b, raw, filepath.Join(b.TempDir(), "out.qcow2"), []harness.EncoderRun{
		{
			Name:     "plain",
			Write:    func(b *testing.B, raw, out string) { writeQcow2(b, raw, out, Options{}) },
			QemuArgs: []string{"-O", "qcow2"},
		},
		{
			Name:     "compressed",
			Write:    func(b *testing.B, raw, out string) { writeQcow2(b, raw, out, Options{Compress: true}) },
			QemuArgs: []string{"-O", "qcow2", "-c"},
		},
	})
}
