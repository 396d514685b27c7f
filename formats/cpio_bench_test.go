package formats

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

// cpioBenchTree is shaped like test/cmd/gentree's tree: about total bytes in
// about entries entries, twenty large files holding half the bytes, small
// files of text, directories, symlinks and hard links.
func cpioBenchTree(b *testing.B, total int64, entries int) (*rootfs.Tree, int64) {
	b.Helper()
	tree := rootfstest.New(b, tarEpoch)
	rng := rand.New(rand.NewPCG(1, 2))
	word := make([]byte, 64<<10)
	for i := range word {
		word[i] = "abcdefghijklmnopqrstuvwxyz0123456789 \n"[rng.IntN(38)]
	}
	dirs, links := entries/20, entries/50
	files := entries - dirs - links
	large := 20
	largeSize := total / 2 / int64(large)
	smallSize := total / 2 / int64(files-large)
	var sum int64
	var buf bytes.Buffer
	for i := range files {
		size := smallSize/2 + rng.Int64N(smallSize+1)
		if i < large {
			size = largeSize
		}
		buf.Reset()
		for left := size; left > 0; {
			n := min(left, int64(len(word)))
			off := rng.IntN(len(word) - int(n) + 1)
			buf.Write(word[off : off+int(n)])
			left -= n
		}
		p := fmt.Sprintf("/d%03d/f%05d", i%dirs, i)
		if _, err := tree.Create(p, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, UID: uint32(i % 3), MTime: tarEpoch}, &buf); err != nil {
			b.Fatal(err)
		}
		sum += size
	}
	for i := range links {
		p := fmt.Sprintf("/d%03d/l%05d", i%dirs, i)
		var err error
		if i%2 == 1 {
			_, err = tree.Link(p, fmt.Sprintf("/d%03d/f%05d", i%dirs, i), rootfs.Origin{})
		} else {
			_, err = tree.Create(p, rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: fmt.Sprintf("f%05d", i), MTime: tarEpoch}, nil)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	return tree, sum
}

// BenchmarkCpioVsGNU writes an uncompressed cpio of a ~300 MB, ~11,000
// entry tree, and times GNU cpio doing the same on the same directory
// ("find . | sort | cpio -o -H newc --reproducible"). It reports both times
// and stamp's time as a multiple of GNU cpio's (the target is at most 1).
func BenchmarkCpioVsGNU(b *testing.B) {
	if _, err := exec.LookPath("cpio"); err != nil {
		b.Fatal("GNU cpio not found; run test/scripts/deps.sh")
	}
	tree, total := cpioBenchTree(b, 300<<20, 11000)
	out := filepath.Join(b.TempDir(), "out.cpio")
	stampRun := func() time.Duration {
		start := time.Now()
		f, err := os.Create(out)
		if err != nil {
			b.Fatal(err)
		}
		if err := WriteCpio(context.Background(), tree.View(), f, CpioOptions{}); err != nil {
			b.Fatal(err)
		}
		if err := f.Close(); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	gnuRun := func() time.Duration {
		start := time.Now()
		cmd := exec.Command("sh", "-c", `find . | LC_ALL=C sort | cpio -o -H newc --reproducible --quiet > "$1"`, "sh", out)
		cmd.Dir = tree.Dir()
		if msg, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("GNU cpio: %v\n%s", err, msg)
		}
		return time.Since(start)
	}
	// Both read from the page cache from here on.
	stampRun()
	gnuRun()
	var s, g time.Duration
	b.SetBytes(total)
	b.ResetTimer()
	for b.Loop() {
		s += stampRun()
		g += gnuRun()
	}
	n := float64(b.N)
	b.ReportMetric(s.Seconds()/n, "stamp-s/op")
	b.ReportMetric(g.Seconds()/n, "gnu-cpio-s/op")
	b.ReportMetric(s.Seconds()/g.Seconds(), "stamp/gnu")
	b.ReportMetric(float64(total)/(1<<20)/(s.Seconds()/n), "stamp-MB/s")
}

// BenchmarkCpioCompress is the throughput of a compressed initramfs of a
// 24 MiB tree of text mixed with random runs (xz is slow enough that 300 MB
// would take minutes; the generated tree of BenchmarkCpioVsGNU repeats
// itself too much to say anything about compression).
func BenchmarkCpioCompress(b *testing.B) {
	tree := rootfstest.New(b, tarEpoch)
	blob := tarSemiRandom(24<<20, 5)
	const files = 768
	per := len(blob) / files
	for i := range files {
		p := fmt.Sprintf("/usr/lib/d%02d/f%04d", i%32, i)
		if _, err := tree.Create(p, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: tarEpoch}, bytes.NewReader(blob[i*per:(i+1)*per])); err != nil {
			b.Fatal(err)
		}
	}
	total := int64(per * files)
	for _, a := range []compress.Algorithm{compress.Zstd, compress.XZ, compress.Gzip} {
		b.Run(string(a), func(b *testing.B) {
			b.SetBytes(total)
			var size int64
			for b.Loop() {
				w := &countWriter{}
				if err := WriteCpio(context.Background(), tree.View(), w, CpioOptions{Compression: a}); err != nil {
					b.Fatal(err)
				}
				size = w.n
			}
			b.ReportMetric(float64(size)/float64(total), "ratio")
		})
	}
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }
