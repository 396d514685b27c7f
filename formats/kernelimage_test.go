package formats

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/disk/fat"
	"github.com/stamp-dev/stamp/rootfs"
)

// fakeKernel is a stand-in with the magic numbers of kind: an x86 bzImage's
// "HdrS" at 0x202, an arm64 Image's "ARM\x64" at 0x38, and padding.
func fakeKernel(kind string) []byte {
	b := bytes.Repeat([]byte{'k'}, 4096)
	switch kind {
	case "amd64":
		copy(b[0x202:], "HdrS")
	case "arm64":
		copy(b[0x38:], "ARM\x64")
	}
	return b
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func setKernel(t *testing.T, tree *rootfs.Tree, p string, content []byte) {
	t.Helper()
	tree.Remove(p)
	if _, err := tree.Create(p, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: tarEpoch}, bytes.NewReader(content)); err != nil {
		t.Fatal(err)
	}
}

// An arm64 bundle carries the kernel as an Image, decompressing a gzip'd
// one and saying so in its manifest lines, and its default console is the
// PL011's; another architecture's kernel is refused, naming arch, before
// a file is written.
func TestPXEKernelImage(t *testing.T) {
	image := fakeKernel("arm64")
	tree := pxeTestTree(t)
	setKernel(t, tree, "/boot/vmlinuz-6.1.0-10-amd64", gzipped(t, image))
	dir := filepath.Join(t.TempDir(), "bundle")
	b, err := WritePXE(context.Background(), tree.View(), dir, PXEOptions{MTime: tarEpoch, Name: "node", Arch: "arm64"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, PXEKernel))
	if err != nil || !bytes.Equal(got, image) {
		t.Errorf("the bundle's kernel is not the decompressed Image (%v)", err)
	}
	if !strings.Contains(strings.Join(b.Adds, "\n"), "decompressed from /boot/vmlinuz-6.1.0-10-amd64") {
		t.Errorf("no manifest line says the kernel was decompressed: %q", b.Adds)
	}
	script, _ := os.ReadFile(filepath.Join(dir, PXEScript))
	if !strings.Contains(string(script), "console=ttyAMA0,115200") {
		t.Errorf("the arm64 default command line has no ttyAMA0:\n%s", script)
	}

	// The tree's Image is taken as it is.
	setKernel(t, tree, "/boot/vmlinuz-6.1.0-10-amd64", image)
	dir = filepath.Join(t.TempDir(), "bundle")
	if b, err = WritePXE(context.Background(), tree.View(), dir, PXEOptions{MTime: tarEpoch, Arch: "arm64"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(b.Adds, "\n"), "decompressed") {
		t.Errorf("an Image was decompressed: %q", b.Adds)
	}

	for _, c := range []struct{ arch, kernel string }{{"arm64", "amd64"}, {"amd64", "arm64"}} {
		setKernel(t, tree, "/boot/vmlinuz-6.1.0-10-amd64", fakeKernel(c.kernel))
		dir := filepath.Join(t.TempDir(), "bundle")
		_, err := WritePXE(context.Background(), tree.View(), dir, PXEOptions{MTime: tarEpoch, Arch: c.arch})
		if err == nil || !strings.Contains(err.Error(), "arch: the recipe's arch is "+c.arch) {
			t.Errorf("an %s kernel in an %s bundle: got %v", c.kernel, c.arch, err)
		}
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the refused bundle left %s (%v)", dir, err)
		}
	}
}

// The raw format's ESP gets the same kernel: an arm64 disk refuses an amd64
// kernel before the disk file exists, and holds a gzip'd Image decompressed.
func TestRawKernelImage(t *testing.T) {
	tree := rawTestTree(t, "arm64")
	setKernel(t, tree, "/boot/vmlinuz-"+rawKernel, fakeKernel("amd64"))
	dir := t.TempDir()
	_, err := rawFormat{}.Write(context.Background(), rawSource(tree, "arm64"), &Spec{Format: "raw", Options: rawSpec()}, dir, "node")
	if err == nil || !strings.Contains(err.Error(), "boot.loader: arch: the recipe's arch is arm64, but the kernel /boot/vmlinuz-"+rawKernel+" is an x86 bzImage") {
		t.Fatalf("got %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the refused disk left %v", ents)
	}

	image := fakeKernel("arm64")
	setKernel(t, tree, "/boot/vmlinuz-"+rawKernel, gzipped(t, image))
	_, res := writeRaw(t, rawSource(tree, "arm64"), rawSpec())
	want := rootfs.ManifestLine(&rootfs.Entry{Path: "esp:/vmlinuz", Inode: &rootfs.Inode{Type: rootfs.TypeRegular, Perm: 0o644,
		MTime: fat.Timestamp(tarEpoch), Size: int64(len(image)), Digest: sha256Hex(string(image))}}, nil, false)
	if !strings.Contains(strings.Join(res.Adds, "\n"), want) {
		t.Errorf("the ESP's kernel is not the decompressed Image: want %q in\n%s", want, strings.Join(res.Adds, "\n"))
	}
}
