package formats

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// compressedImageReader reads a compressed raw disk: a compressed stream
// whose plain bytes begin as a GPT disk does.
type compressedImageReader struct{}

func (compressedImageReader) Format() string { return "compressed" }

func (compressedImageReader) Match(h *Head) bool {
	return !h.IsDir && h.Compression != compress.None && len(h.Plain) >= 2*disk.SectorSize &&
		string(h.Plain[disk.SectorSize:disk.SectorSize+8]) == "EFI PART"
}

func (compressedImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	im := &Image{Path: h.Path, Format: "compressed", Compression: h.Compression, Size: h.Size, Plain: PlainDecompressed}
	if err := readCompressedDisk(ctx, f, h.Compression, im); err != nil {
		return nil, err
	}
	return im, nil
}

// readCompressedDisk reads the disk in the compressed stream r into im,
// from a sparse copy: its file systems are read by offset, which a
// compressed stream cannot seek to. The copy is unlinked at once.
func readCompressedDisk(ctx context.Context, r io.Reader, alg compress.Algorithm, im *Image) error {
	rc, err := compress.NewReader(alg, r)
	if err != nil {
		return err
	}
	defer rc.Close()
	tmp, err := os.CreateTemp("", "stamp-compressed-*.raw")
	if err != nil {
		return err
	}
	os.Remove(tmp.Name())
	defer tmp.Close()
	buf := make([]byte, 1<<20)
	var size int64
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := io.ReadFull(rc, buf)
		if n > 0 {
			if werr := disk.WriteNonZero(tmp, buf[:n], size); werr != nil {
				return werr
			}
			size += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return fmt.Errorf("%s stream at %d: %w", alg, size, err)
		}
	}
	if err := tmp.Truncate(size); err != nil {
		return err
	}
	im.Facts = append(im.Facts, Fact{"compressed.disk-size", fmt.Sprint(size)})
	return readDisk(ctx, tmp, size, im)
}
