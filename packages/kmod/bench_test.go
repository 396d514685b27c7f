package kmod

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkDepmodVsKmod times Depmod on the node's kernel (Debian's amd64
// linux-image, every module) beside kmod's `depmod -b` of the same tree, in
// the same run, alternating. Depmod reads the tree as the maintainer-script
// handler does, through a rootfs.Tree's view; each side writes its indexes
// into the module directory. It reports both times, their ratio (the
// target: at most 0.5) and this process's peak RSS.
func BenchmarkDepmodVsKmod(b *testing.B) {
	kit := harness.BootParts(b)
	depmod := harness.Tool(b, "depmod")
	tr := rootfstest.New(b, rootfstest.Epoch)
	root := tr.Dir()
	dir := filepath.Join(root, "lib/modules", kit.KernelVersion)
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", kit.Modules, dir).CombinedOutput(); err != nil {
		b.Fatalf("cp: %v\n%s", err, out)
	}
	if _, err := tr.Rescan(context.Background(), rootfs.Origin{Layer: "bench"}); err != nil {
		b.Fatal(err)
	}
	fsys := tr.View().FS()
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
	// One round first, so that both find the modules in the page cache.
	kmod()
	ours()
	var ot, kt time.Duration
	for b.Loop() {
		start := time.Now()
		ours()
		ot += time.Since(start)
		start = time.Now()
		kmod()
		kt += time.Since(start)
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	n := float64(b.N)
	b.ReportMetric(ot.Seconds()/n, "stamp-s/op")
	b.ReportMetric(kt.Seconds()/n, "kmod-s/op")
	b.ReportMetric(ot.Seconds()/kt.Seconds(), "time-ratio")
	b.ReportMetric(float64(ru.Maxrss)/1024, "stamp-peak-MiB")
}
