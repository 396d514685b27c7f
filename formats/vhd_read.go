package formats

import (
	"context"
	"io"
	"os"
	"strconv"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/vhd"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// vhdImageReader reads a VHD image's guest disk as a raw one.
type vhdImageReader struct{}

func (vhdImageReader) Format() string { return "vhd" }

// OpenDisk implements DiskOpener, fixed or dynamic.
func (vhdImageReader) OpenDisk(f *os.File, size int64) (io.ReaderAt, int64, error) {
	v, err := vhd.Open(f, size)
	if err != nil {
		return nil, 0, err
	}
	return v, v.Size(), nil
}

// Match looks for the footer's cookie at the end, where every VHD has it: a
// fixed VHD begins with the disk itself, so its start reads as a raw disk.
func (vhdImageReader) Match(h *Head) bool {
	return !h.IsDir && h.Compression == compress.None && len(h.Tail) >= vhd.FooterSize &&
		string(h.Tail[len(h.Tail)-vhd.FooterSize:][:8]) == "conectix"
}

func (vhdImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := vhd.Open(f, h.Size)
	if err != nil {
		return nil, err
	}
	im := &Image{Path: h.Path, Format: "vhd", Compression: compress.None, Size: h.Size}
	if v.Dynamic() {
		im.Plain = PlainGuestDisk
	}
	im.Facts = append(im.Facts, vhdFacts(v.Footer())...)
	if err := readDisk(ctx, v, v.Size(), im); err != nil {
		return nil, err
	}
	return im, nil
}

// vhdFacts are the footer fields of a VHD image.
func vhdFacts(f vhd.Footer) []Fact {
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	typ := map[uint32]string{vhd.TypeFixed: "fixed", vhd.TypeDynamic: "dynamic"}[f.Type]
	if typ == "" {
		typ = u(uint64(f.Type))
	}
	return []Fact{
		{"vhd.type", typ},
		{"vhd.size", u(f.CurrentSize)},
		{"vhd.geometry", u(uint64(f.Geometry.Cylinders)) + "/" + u(uint64(f.Geometry.Heads)) + "/" + u(uint64(f.Geometry.Sectors))},
		{"vhd.creator", strconv.Quote(string(f.CreatorApp[:]))},
		{"vhd.timestamp", u(uint64(f.Timestamp))},
		{"vhd.unique-id", disk.FormatUUID(f.UniqueID)},
	}
}
