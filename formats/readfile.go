package formats

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/stamp-dev/stamp/disk/ext4"
	"github.com/stamp-dev/stamp/rootfs"
)

// ErrCannotReadFile is a format whose reader cannot give a file's content
// back (see ReadTreeFile).
var ErrCannotReadFile = errors.New("reading a file's content back is not supported for this format")

// TreeFileReader is a Reader that gives a file's content back from the
// image itself, without a disk (a tar member).
type TreeFileReader interface {
	// ReadTreeFile reads the regular file p of im's tree, which holds it,
	// up to max bytes.
	ReadTreeFile(ctx context.Context, im *Image, p string, max int64) ([]byte, error)
}

// ReadTreeFile reads the content of the regular file at p in the tree of an
// image read back, up to max bytes: through the format's reader, a member
// of a tar (TreeFileReader: tar, erofs) or a file of the ext4 root of a disk the reader
// opens (DiskOpener: raw, qcow2, vhd, vmdk, ova). Other formats return
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
	switch r := readerOf(im.Format).(type) {
	case TreeFileReader:
		return r.ReadTreeFile(ctx, im, p, max)
	case DiskOpener:
		f, err := os.Open(im.Path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		d, size, err := openDisk(r, f)
		if err != nil {
			return nil, err
		}
		for _, part := range im.Partitions {
			if part.Filesystem == "ext4" {
				return ext4.ReadFile(d, size, part.Start, part.Size, p)
			}
		}
		return nil, fmt.Errorf("%s: no ext4 root partition", im.Path)
	}
	return nil, fmt.Errorf("%s (%s): %w", im.Path, im.Format, ErrCannotReadFile)
}
