package kmod

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkDepmodVsKmod times Depmod on the node's kernel (Debian's amd64
// linux-image, all its modules) beside kmod's `depmod -b` of the same tree,
// alternating, each writing its indexes into the module directory, and
// reports both and their ratio (the target: at most 0.5).
func BenchmarkDepmodVsKmod(b *testing.B) {
	kit := harness.BootParts(b)
	depmod := harness.Tool(b, "depmod")
	root := b.TempDir()
	dir := filepath.Join(root, "lib/modules", kit.KernelVersion)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		b.Fatal(err)
	}
	// A copy of hard links where the cache's file system allows, so that
	// neither side reads through a symlink the other does not.
	if out, err := exec.Command("cp", "-al", kit.Modules, dir).CombinedOutput(); err != nil {
		if out, err := exec.Command("cp", "-a", kit.Modules, dir).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v\n%s", err, out)
		}
		_ = out
	}
	fsys := os.DirFS(root)
	ours := func() {
		idx, err := Depmod(context.Background(), fsys, kit.KernelVersion, Options{})
		if err != nil {
			b.Fatal(err)
		}
		for _, ix := range idx {
			if err := os.WriteFile(filepath.Join(dir, ix.Name), ix.Data, 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	kmod := func() {
		if out, err := exec.Command(depmod, "-b", root, kit.KernelVersion).CombinedOutput(); err != nil {
			b.Fatalf("depmod: %v\n%s", err, out)
		}
	}
	// Both read the modules once first, so both find them in the page cache.
	kmod()
	ours()
	var ot, kt time.Duration
	var orss int64
	for b.Loop() {
		start := time.Now()
		ours()
		ot += time.Since(start)
		start = time.Now()
		kmod()
		kt += time.Since(start)
	}
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	orss = ru.Maxrss / 1024
	n := float64(b.N)
	b.ReportMetric(ot.Seconds()/n, "stamp-s/op")
	b.ReportMetric(kt.Seconds()/n, "kmod-s/op")
	b.ReportMetric(ot.Seconds()/kt.Seconds(), "time-ratio")
	b.ReportMetric(float64(orss), "stamp-peak-MiB")
}
