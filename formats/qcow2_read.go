package formats

import (
	"context"
	"encoding/binary"
	"io"
	"os"
	"strconv"

	"github.com/stamp-dev/stamp/disk/qcow2"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// qcow2ImageReader reads a qcow2 image's guest disk as a raw one.
type qcow2ImageReader struct{}

func (qcow2ImageReader) Format() string { return "qcow2" }

// OpenDisk implements DiskOpener.
func (qcow2ImageReader) OpenDisk(f *os.File, _ int64) (io.ReaderAt, int64, error) {
	q, err := qcow2.Open(f)
	if err != nil {
		return nil, 0, err
	}
	return q, q.Size(), nil
}

func (qcow2ImageReader) Match(h *Head) bool {
	return !h.IsDir && len(h.Raw) >= 4 && string(h.Raw[:4]) == "QFI\xfb"
}

func (qcow2ImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	q, err := qcow2.Open(f)
	if err != nil {
		return nil, err
	}
	im := &Image{Path: h.Path, Format: "qcow2", Compression: compress.None, Size: h.Size, Plain: PlainGuestDisk}
	im.Facts = append(im.Facts, qcow2Facts(h.Raw)...)
	if err := readDisk(ctx, q, q.Size(), im); err != nil {
		return nil, err
	}
	return im, nil
}

// qcow2Facts are the header fields of a qcow2 image.
func qcow2Facts(b []byte) []Fact {
	if len(b) < 104 {
		return nil
	}
	be := binary.BigEndian
	u32 := func(o int) string { return strconv.FormatUint(uint64(be.Uint32(b[o:])), 10) }
	u64 := func(o int) string { return strconv.FormatUint(be.Uint64(b[o:]), 10) }
	return []Fact{
		{"qcow2.version", u32(4)},
		{"qcow2.cluster-bits", u32(20)},
		{"qcow2.size", u64(24)},
		{"qcow2.l1-size", u32(36)},
		{"qcow2.l1-offset", u64(40)},
		{"qcow2.refcount-table-offset", u64(48)},
		{"qcow2.refcount-table-clusters", u32(56)},
		{"qcow2.incompatible-features", u64(72)},
		{"qcow2.compatible-features", u64(80)},
		{"qcow2.refcount-order", u32(96)},
	}
}
