package ext4

import (
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

// benchTree makes a tree like a node image's root: about 11,000 entries
// and 300 MB, half of it in 20 large files, the rest in files of
// log-normally distributed sizes (median about 5 KiB); directories, and
// some symlinks and hard links. Content is text-like with runs of zeros,
// as binaries have.
func benchTree(b *testing.B) (*rootfs.Tree, int64) {
	b.Helper()
	tr := rootfstest.New(b, testEpoch)
	rng := rand.New(rand.NewPCG(3, 4))
	const (
		dirs   = 550
		files  = 10_250
		large  = 20
		total  = 300 << 20
		links  = 150
		hard   = 50
		maxLen = 8 << 20
	)
	sizes := make([]int64, files)
	var small int64
	for i := range sizes {
		if i < large {
			sizes[i] = total / 2 / large
			continue
		}
		sizes[i] = int64(math.Exp(math.Log(5<<10) + 1.6*rng.NormFloat64()))
		sizes[i] = min(max(sizes[i], 1), maxLen)
		small += sizes[i]
	}
	// Scale the small files so they carry the other half.
	var sum int64
	for i := large; i < files; i++ {
		sizes[i] = max(1, sizes[i]*(total/2)/small)
		sum += sizes[i]
	}
	sum += total / 2
	for d := range dirs {
		rootfstest.Add(b, tr, fmt.Sprintf("/usr/d%03d", d), rootfs.Header{Type: rootfs.TypeDir, Perm: 0o755}, "")
	}
	for i, size := range sizes {
		p := fmt.Sprintf("/usr/d%03d/f%05d", i%dirs, i)
		r := &textReader{rng: rand.New(rand.NewPCG(uint64(i), 5)), left: size}
		if _, err := tr.Create(p, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, UID: uint32(i % 3)}, r); err != nil {
			b.Fatal(err)
		}
	}
	for i := range links {
		rootfstest.Add(b, tr, fmt.Sprintf("/usr/d%03d/l%05d", i%dirs, i), rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777,
			Target: fmt.Sprintf("../d%03d/f%05d", (i+7)%dirs, i+7)}, "")
	}
	for i := range hard {
		if _, err := tr.Link(fmt.Sprintf("/usr/d%03d/h%05d", i%dirs, i), fmt.Sprintf("/usr/d%03d/f%05d", (i+3)%dirs, i+3), rootfs.Origin{}); err != nil {
			b.Fatal(err)
		}
	}
	sealTree(b, tr)
	return tr, sum
}

// textReader yields text-like bytes with an occasional 8 KiB run of zeros.
type textReader struct {
	rng  *rand.Rand
	left int64
}

func (r *textReader) Read(p []byte) (int, error) {
	if r.left == 0 {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), r.left))
	for i := 0; i < n; {
		if r.rng.IntN(64) == 0 {
			z := min(n-i, 8<<10)
			clear(p[i : i+z])
			i += z
			continue
		}
		w := r.rng.Uint64()
		for k := 0; k < 8 && i < n; k++ {
			p[i] = "abcdefghijklmnopqrstuvwxyz0123456789 \n\x00\x01\x7fELF"[int(w%42)]
			w >>= 6
			i++
		}
	}
	r.left -= int64(n)
	return n, nil
}

// BenchmarkWrite writes the benchmark tree; compare with BenchmarkMke2fsD.
func BenchmarkWrite(b *testing.B) {
	o := testOptions()
	benchImages(b, func(tr *rootfs.Tree, img *os.File) error {
		_, err := Write(context.Background(), tr.View(), img, o)
		return err
	})
	reportRSS(b)
}

// BenchmarkMke2fsD is the peer: mke2fs -d on the same tree's directory
// and a filesystem of the same size.
func BenchmarkMke2fsD(b *testing.B) {
	mke2fs := harness.Tool(b, "mke2fs")
	benchImages(b, func(tr *rootfs.Tree, img *os.File) error {
		cmd := exec.Command(mke2fs, "-q", "-t", "ext4", "-F", "-b", "4096", "-U", testUUIDString,
			"-E", "hash_seed="+testSeedString+",root_owner=0:0", "-d", tr.Dir(), img.Name())
		cmd.Env = append(os.Environ(), "E2FSPROGS_FAKE_TIME=1700000000")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("mke2fs -d: %v\n%s", err, out)
		}
		return nil
	})
}

// benchImages times write on the benchmark tree, each time into a new
// image file of the size Plan gives the tree; creating and removing the
// file is not timed.
func benchImages(b *testing.B, write func(tr *rootfs.Tree, img *os.File) error) {
	tr, bytes := benchTree(b)
	size, err := Plan(tr.View(), testOptions())
	if err != nil {
		b.Fatal(err)
	}
	img := filepath.Join(b.TempDir(), "bench.img")
	b.SetBytes(bytes)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		f, err := os.Create(img)
		if err == nil {
			err = f.Truncate(size)
		}
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		err = write(tr, f)
		b.StopTimer()
		f.Close()
		os.Remove(img)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
}

// reportRSS reports the process's peak resident set, tree making included.
func reportRSS(b *testing.B) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err == nil {
		b.ReportMetric(float64(ru.Maxrss)/1024, "peak-RSS-MiB")
	}
}
