package erofs

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

// FuzzRead feeds the reader damaged images: it must return an error or a
// tree, never panic, hang or exhaust memory. The seeds are small images of
// each layout: compressed, plain, with tails packed and not, with xattrs,
// devices and hard links.
func FuzzRead(f *testing.F) {
	tr := rootfstest.New(f, testEpoch)
	add := func(p string, h rootfs.Header, content string) {
		h.MTime = testEpoch
		if _, err := tr.Create(p, h, strings.NewReader(content)); err != nil {
			f.Fatal(err)
		}
	}
	add("/etc/hostname", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, Xattrs: map[string]string{"user.a": "b", "security.capability": "c"}}, "node\n")
	add("/usr/lib/text", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, UID: 70000}, content(1, 20000))
	add("/usr/lib/zeros", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, strings.Repeat("\x00", 9000))
	add("/usr/lib/noise", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, noise(2, 5000))
	add("/bin", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "usr/bin"}, "")
	add("/dev/null", rootfs.Header{Type: rootfs.TypeChar, Perm: 0o666, Major: 1, Minor: 3}, "")
	add("/run/fifo", rootfs.Header{Type: rootfs.TypeFifo, Perm: 0o600}, "")
	if _, err := tr.Link("/usr/lib/text2", "/usr/lib/text", rootfs.Origin{}); err != nil {
		f.Fatal(err)
	}
	for _, c := range []Compression{LZ4, LZ4HC, None} {
		o := testOptions()
		o.Compression = c
		img, _ := writeImage(f, tr, o)
		b, err := os.ReadFile(img)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		// Without the checksum feature the fuzzer can change the
		// superblock too.
		nosum := append([]byte(nil), b...)
		nosum[superOffset+8] &^= featureSBChecksum
		f.Add(nosum)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		sb, err := ReadSuper(readerAt(b))
		if err != nil {
			return
		}
		start := time.Now()
		Read(context.Background(), readerAt(b), int64(len(b)), sb)
		ReadFile(readerAt(b), int64(len(b)), sb, "/usr/lib/text")
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("reading an image of %d bytes took %s", len(b), d)
		}
	})
}
