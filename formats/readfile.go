package formats

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/stamp-dev/stamp/disk/erofs"
	"github.com/stamp-dev/stamp/disk/ext4"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// ErrCannotReadFile is a format whose reader cannot give a file's content
// back (see ReadTreeFile).
var ErrCannotReadFile = errors.New("reading a file's content back is not supported for this format")

// ReadTreeFile reads the content of the regular file at p in the tree of an
// image read back, up to max bytes: a member of a tar, a file of the ext4
// root of a disk (raw, qcow2, vhd, vmdk, ova) or of an EROFS image (erofs,
// decompressed as the kernel would). Other formats return
// ErrCannotReadFile. Readers unpack no content, so a caller that needs one
// file (a database describing the image's state) reads it here.
func ReadTreeFile(ctx context.Context, im *Image, p string, max int64) ([]byte, error) {
	e := im.Tree.Get(p)
	if e == nil || e.Type != rootfs.TypeRegular {
		return nil, fmt.Errorf("%s: no regular file %s", im.Path, p)
	}
	if e.Size > max {
		return nil, fmt.Errorf("%s: %s is %d bytes, more than %d", im.Path, p, e.Size, max)
	}
	switch im.Format {
	case "tar":
		return tarFile(ctx, im, p, max)
	case "erofs":
		f, err := os.Open(im.Path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		sb, err := erofs.ReadSuper(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", im.Path, err)
		}
		data, err := erofs.ReadFile(f, im.Size, sb, p)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", im.Path, err)
		}
		return data, nil
	case "raw", "qcow2", "vhd", "vmdk", "ova":
		f, err := os.Open(im.Path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		var r io.ReaderAt = f
		size := im.Size
		if im.Format != "raw" {
			if r, size, err = guestDisk(im.Format, f); err != nil {
				return nil, err
			}
		}
		for _, part := range im.Partitions {
			if part.Filesystem == "ext4" {
				return ext4.ReadFile(r, size, part.Start, part.Size, p)
			}
		}
		return nil, fmt.Errorf("%s: no ext4 root partition", im.Path)
	}
	return nil, fmt.Errorf("%s (%s): %w", im.Path, im.Format, ErrCannotReadFile)
}

// tarFile reads one member of a tar output.
func tarFile(ctx context.Context, im *Image, p string, max int64) ([]byte, error) {
	f, err := os.Open(im.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := compress.NewReader(im.Compression, f)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("%s: no member %s", im.Path, p)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", im.Path, err)
		}
		if tp, err := tarPath(hdr.Name); err == nil && tp == p && hdr.Typeflag == tar.TypeReg {
			return io.ReadAll(io.LimitReader(tr, max))
		}
	}
}
