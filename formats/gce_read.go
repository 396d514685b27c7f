package formats

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// gceImageReader reads a Compute Engine image archive: the raw disk in its
// gzipped tar.
type gceImageReader struct{}

func (gceImageReader) Format() string { return "gce" }

// Match takes a gzipped GNU tar whose first member is disk.raw.
func (gceImageReader) Match(h *Head) bool {
	if h.IsDir || h.Compression != compress.Gzip || len(h.Plain) < 512 {
		return false
	}
	name, _, _ := bytes.Cut(h.Plain[:100], []byte{0})
	return string(h.Plain[257:265]) == "ustar  \x00" && string(name) == GCEDiskName
}

// OpenPlain implements PlainOpener: the stream of disk.raw in the archive
// in f, which must be its first member; the gzip stream cannot be read at
// an offset.
func (gceImageReader) OpenPlain(f *os.File) (io.ReadCloser, error) {
	rc, err := compress.NewReader(compress.Gzip, f)
	if err != nil {
		return nil, err
	}
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		rc.Close()
		return nil, err
	}
	if hdr.Name != GCEDiskName || hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeGNUSparse {
		rc.Close()
		return nil, fmt.Errorf("the first member is %s, not %s", hdr.Name, GCEDiskName)
	}
	return readCloser{io.LimitReader(tr, hdr.Size), rc.Close}, nil
}

func (gceImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rc, err := compress.NewReader(compress.Gzip, f)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	hdr, err := tr.Next()
	if err != nil {
		return nil, err
	}
	if hdr.Name != GCEDiskName || hdr.Typeflag != tar.TypeReg && hdr.Typeflag != tar.TypeGNUSparse {
		return nil, fmt.Errorf("the first member is %s, not %s", hdr.Name, GCEDiskName)
	}
	// The disk is read back from a sparse copy: its file systems are read
	// by offset, which a gzip stream cannot seek to. archive/tar fills a
	// sparse member's holes with zeros, which the copy leaves unwritten.
	tmp, err := os.CreateTemp("", "stamp-gce-*.raw")
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	buf := make([]byte, 1<<20)
	var at int64
	for at < hdr.Size {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		n, err := io.ReadFull(tr, buf[:min(int64(len(buf)), hdr.Size-at)])
		if err != nil {
			return nil, fmt.Errorf("%s at %d: %w", GCEDiskName, at, err)
		}
		if err := disk.WriteNonZero(tmp, buf[:n], at); err != nil {
			return nil, err
		}
		at += int64(n)
	}
	if err := tmp.Truncate(hdr.Size); err != nil {
		return nil, err
	}
	if _, err := tr.Next(); err != io.EOF {
		return nil, fmt.Errorf("%s is not the archive's only member", GCEDiskName)
	}
	im := &Image{Path: h.Path, Format: "gce", Compression: compress.Gzip, Size: h.Size, Plain: PlainGuestDisk}
	im.Facts = append(im.Facts, Fact{"gce.member", hdr.Name}, Fact{"gce.disk-size", strconv.FormatInt(hdr.Size, 10)},
		Fact{"gce.tar-format", hdr.Format.String()}, Fact{"gce.mtime", strconv.FormatInt(hdr.ModTime.Unix(), 10)})
	if err := readDisk(ctx, tmp, hdr.Size, im); err != nil {
		return nil, err
	}
	return im, nil
}
