package containerd

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkWriteState writes seven single-layer images of 40 MiB each (a
// binary and a few small files, as the control-plane images are) into a
// tree that keeps content by reference, as a build with a cache does; the
// node bench measures the real images.
func BenchmarkWriteState(b *testing.B) {
	c, err := cache.Open(filepath.Join(b.TempDir(), "cache"), cache.Options{})
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewChaCha8([32]byte{1}))
	var imgs []Image
	for i := range 7 {
		bin := make([]byte, 40<<20)
		for j := 0; j < len(bin); j += 8 {
			v := r.Uint64() & 0x0f0f0f0f0f0f0f0f // compressible, as code is
			for k := 0; k < 8 && j+k < len(bin); k++ {
				bin[j+k] = byte(v >> (8 * k))
			}
		}
		l := harness.GzipLayer(b,
			harness.TarFile{Name: "etc/passwd", Body: "root:x:0:0::/root:/sbin/nologin\n"},
			harness.TarFile{Name: "usr/local/bin/tool", Body: string(bin), Mode: 0o755})
		img := harness.Image(b, "amd64", l)
		imgs = append(imgs, Image{Name: fmt.Sprintf("registry.example/k8s/img%d:v1", i), Digest: putB(b, c, img)})
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		tree, err := rootfs.New(filepath.Join(b.TempDir(), "tree"), rootfs.Options{DefaultMTime: epoch, Archives: c.Archives()})
		if err != nil {
			b.Fatal(err)
		}
		rootfstest.File(b, tree, "/var/lib/dpkg/status", 0o644, epoch, "Package: containerd\nStatus: install ok installed\nVersion: 1.6.20~ds1-1\n\n")
		b.StartTimer()
		if _, err := Write(context.Background(), tree, c, imgs, Options{Platform: "linux/amd64", Epoch: epoch}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		tree.Close()
		b.StartTimer()
	}
}
