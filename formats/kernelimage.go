package formats

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"

	"github.com/stamp-dev/stamp/rootfs"
)

// maxKernelImage bounds a decompressed arm64 kernel: Debian's is about
// 30 MiB, and a gzip stream must not be able to fill the disk.
const maxKernelImage = 256 << 20

// kernelImage checks, before anything is written, that the tree's kernel
// at kpath is not another architecture's: an x86 bzImage ("HdrS" at 0x202)
// is amd64's, an arm64 Image ("ARM\x64" at 0x38) arm64's. Firmware,
// systemd-boot and qemu start an arm64 kernel only as an Image (its EFI
// stub is a PE image; there is no decompressor in front of it), so a
// gzip-compressed one, as some distributions ship vmlinuz, is decompressed
// and returned; gzip decompression has one result, so the bytes depend on
// the tree alone. A nil result means the tree's file is used as it is.
// An empty arch checks nothing (callers outside a recipe).
func kernelImage(t *rootfs.Sealed, kpath, arch string) (decompressed []byte, err error) {
	if arch == "" {
		return nil, nil
	}
	f, err := t.Open(kpath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	head := make([]byte, 0x210)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	kind := kernelKind(head)
	if arch == "arm64" && kind == "gzip" {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return nil, err
		}
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kpath, err)
		}
		var b bytes.Buffer
		if _, err := io.Copy(&b, io.LimitReader(zr, maxKernelImage+1)); err != nil {
			return nil, fmt.Errorf("%s: decompressing: %w", kpath, err)
		}
		if b.Len() > maxKernelImage {
			return nil, fmt.Errorf("%s: decompresses to more than %d bytes", kpath, maxKernelImage)
		}
		if k := kernelKind(b.Bytes()); k != "arm64" {
			return nil, fmt.Errorf("arch: the recipe's arch is arm64, but %s decompresses to %s, not an arm64 kernel Image", kpath, k)
		}
		return b.Bytes(), nil
	}
	// A file of no format known here is left for the loader to judge, as
	// peSigned leaves signatures to the firmware; only a kernel that is
	// plainly another architecture's is refused.
	if kind != "" && kind != "gzip" && kind != arch {
		return nil, fmt.Errorf("arch: the recipe's arch is %s, but the kernel %s is %s", arch, kpath, kernelKindText(kind))
	}
	return nil, nil
}

// kernelKind tells kernel formats apart by their magic numbers: "amd64"
// for an x86 bzImage, "arm64" for an arm64 Image, "gzip", or "".
func kernelKind(head []byte) string {
	switch {
	case len(head) >= 0x206 && string(head[0x202:0x206]) == "HdrS":
		return "amd64"
	case len(head) >= 0x3c && string(head[0x38:0x3c]) == "ARM\x64":
		return "arm64"
	case len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b:
		return "gzip"
	}
	return ""
}

func kernelKindText(kind string) string {
	switch kind {
	case "amd64":
		return "an x86 bzImage"
	case "arm64":
		return "an arm64 Image"
	case "gzip":
		return "gzip-compressed"
	}
	return "no kernel format stamp knows (neither an x86 bzImage nor an arm64 Image)"
}
