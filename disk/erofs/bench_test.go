package erofs

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkVsMkfsErofs writes an EROFS image of the node's Debian tree
// (minbase and every Debian package of the node: its kernel and modules,
// containerd, runc, systemd, cloud-init's Python, as mmdebstrap installs
// them from the test repository; the node's tree without its Kubernetes
// binaries and images, which need make k8s-inputs) beside mkfs.erofs of the
// same tree unpacked as root, in 4 KiB clusters, for each codec (lz4, the
// default, beside mkfs.erofs -zlz4; lz4hc beside -zlz4hc), three times
// each, alternately, and reports the medians, the ratio of the times and
// of the sizes. The targets: at most 0.5x the time, the size
// within 5%. Needs root, for mmdebstrap and the peer's tree.
func BenchmarkVsMkfsErofs(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("needs root: the peer's tree is unpacked keeping its owners")
	}
	mkfs := harness.Tool(b, "mkfs.erofs")
	base := harness.MmdebstrapFor(b, harness.MinbaseNodeRepoFor(b),
		harness.MmdebstrapOptions{Variant: "minbase", Include: harness.NodeDebPackages, Epoch: testEpoch})
	tr := rootfstest.New(b, testEpoch)
	rootfstest.ExtractFile(b, tr, base, rootfs.ExtractOptions{})
	sealTree(b, tr)
	host := filepath.Join(b.TempDir(), "root")
	if err := os.Mkdir(host, 0o755); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command(harness.Tool(b, "tar"), "-xpf", base, "-C", host).CombinedOutput(); err != nil {
		b.Fatalf("tar -x: %v\n%s", err, out)
	}
	var content int64
	tr.Walk(func(e *rootfs.Entry) error {
		content += e.Size
		return nil
	})
	for _, codec := range []Compression{LZ4, LZ4HC} {
		b.Run(string(codec), func(b *testing.B) { benchVsMkfs(b, tr, host, mkfs, codec, content) })
	}
}

// benchVsMkfs times one codec of BenchmarkVsMkfsErofs.
func benchVsMkfs(b *testing.B, tr *rootfs.Tree, host, mkfs string, codec Compression, content int64) {
	dir := b.TempDir()
	ours, theirs := filepath.Join(dir, "stamp.erofs"), filepath.Join(dir, "mkfs.erofs")
	var oursT, theirsT, oursCPU, theirsCPU []time.Duration
	var oursSize, theirsSize int64
	b.SetBytes(content)
	b.ResetTimer()
	for range b.N {
		for range 3 {
			os.Remove(ours)
			os.Remove(theirs)
			exec.Command("sync").Run()
			var before, after syscall.Rusage
			syscall.Getrusage(syscall.RUSAGE_SELF, &before)
			start := time.Now()
			f, err := os.Create(ours)
			if err != nil {
				b.Fatal(err)
			}
			sum, err := Write(context.Background(), tr.View(), f, Options{UUID: testUUID, Epoch: testEpoch, Compression: codec})
			if err == nil {
				err = f.Close()
			}
			if err != nil {
				b.Fatal(err)
			}
			oursT, oursSize = append(oursT, time.Since(start)), sum.Size
			syscall.Getrusage(syscall.RUSAGE_SELF, &after)
			oursCPU = append(oursCPU, time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()))

			exec.Command("sync").Run()
			start = time.Now()
			cmd := exec.Command(mkfs, "--quiet", "-z"+string(codec), "-T"+strconv.FormatInt(testEpoch.Unix(), 10), "-U"+testUUIDString, theirs, host)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("mkfs.erofs: %v\n%s", err, out)
			}
			theirsT = append(theirsT, time.Since(start))
			theirsCPU = append(theirsCPU, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
			fi, err := os.Stat(theirs)
			if err != nil {
				b.Fatal(err)
			}
			theirsSize = fi.Size()
		}
	}
	b.StopTimer()
	median := func(d []time.Duration) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	mo, mt := median(oursT), median(theirsT)
	b.ReportMetric(mo.Seconds(), "stamp-s")
	b.ReportMetric(mt.Seconds(), "mkfs.erofs-s")
	b.ReportMetric(mo.Seconds()/mt.Seconds(), "time-ratio")
	// CPU time, on every core, for a machine other work keeps busy.
	b.ReportMetric(median(oursCPU).Seconds(), "stamp-cpu-s")
	b.ReportMetric(median(theirsCPU).Seconds(), "mkfs.erofs-cpu-s")
	b.ReportMetric(float64(oursSize)/(1<<20), "stamp-MiB")
	b.ReportMetric(float64(theirsSize)/(1<<20), "mkfs.erofs-MiB")
	b.ReportMetric(float64(oursSize)/float64(theirsSize), "size-ratio")
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		b.ReportMetric(float64(ru.Maxrss)/1024, "peak-RSS-MiB")
	}
	fmt.Fprintf(os.Stderr, "erofs of %d MB of content, %s: stamp %s (%v; CPU %v), mkfs.erofs -z%s %s (%v; CPU %v)\n",
		content>>20, codec, mo.Round(10*time.Millisecond), oursT, oursCPU, codec, mt.Round(10*time.Millisecond), theirsT, theirsCPU)
}

// BenchmarkWriteMinbase writes the node's minbase (about 100 MB), for
// profiles; cpu-s is the CPU time of one write, on every core.
func BenchmarkWriteMinbase(b *testing.B) {
	base := harness.NodeBaseTarball(b)
	tr := rootfstest.New(b, testEpoch)
	rootfstest.ExtractFile(b, tr, base, rootfs.ExtractOptions{})
	sealTree(b, tr)
	dir := b.TempDir()
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	b.ResetTimer()
	for range b.N {
		f, err := os.Create(filepath.Join(dir, "x.erofs"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Write(context.Background(), tr.View(), f, Options{UUID: testUUID, Epoch: testEpoch, Compression: LZ4HC}); err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	b.StopTimer()
	syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) / time.Duration(b.N)
	b.ReportMetric(cpu.Seconds(), "cpu-s/op")
	if fi, err := os.Stat(filepath.Join(dir, "x.erofs")); err == nil {
		b.ReportMetric(float64(fi.Size())/(1<<20), "MiB")
	}
}
