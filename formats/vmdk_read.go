package formats

import (
	"context"
	"io"
	"os"
	"strconv"

	"github.com/stamp-dev/stamp/disk/vmdk"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// vmdkImageReader reads a VMDK image's guest disk as a raw one.
type vmdkImageReader struct{}

func (vmdkImageReader) Format() string { return "vmdk" }

// OpenDisk implements DiskOpener.
func (vmdkImageReader) OpenDisk(f *os.File, size int64) (io.ReaderAt, int64, error) {
	v, err := vmdk.Open(f, size)
	if err != nil {
		return nil, 0, err
	}
	return v, v.Size(), nil
}

func (vmdkImageReader) Match(h *Head) bool {
	return !h.IsDir && h.Compression == compress.None && len(h.Raw) >= 4 && string(h.Raw[:4]) == "KDMV"
}

func (vmdkImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := vmdk.Open(f, h.Size)
	if err != nil {
		return nil, err
	}
	im := &Image{Path: h.Path, Format: "vmdk", Compression: compress.None, Size: h.Size, Plain: PlainGuestDisk}
	im.Facts = append(im.Facts, vmdkFacts(v, "vmdk.")...)
	if err := readDisk(ctx, v, v.Size(), im); err != nil {
		return nil, err
	}
	return im, nil
}

// vmdkFacts are the header and descriptor fields of a VMDK image, named
// under prefix.
func vmdkFacts(v *vmdk.Reader, prefix string) []Fact {
	h, d := v.Header(), v.Descriptor()
	u := func(n uint64) string { return strconv.FormatUint(n, 10) }
	return []Fact{
		{prefix + "create-type", d.CreateType},
		{prefix + "version", u(uint64(h.Version))},
		{prefix + "capacity", u(h.Capacity * vmdk.Sector)},
		{prefix + "grain-size", u(h.GrainSize * vmdk.Sector)},
		{prefix + "grains", u(uint64(v.Grains()))},
		{prefix + "cid", d.CID},
		{prefix + "adapter", d.Adapter},
	}
}
