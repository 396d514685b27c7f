package formats

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"

	"github.com/stamp-dev/stamp/disk/erofs"
	"github.com/stamp-dev/stamp/rootfs"
)

// erofsImageReader reads an EROFS image back with disk/erofs.
type erofsImageReader struct{}

func (erofsImageReader) Format() string { return "erofs" }

// erofsMagic is the superblock's magic, at byte 1024.
const erofsMagic = 0xE0F5E1E2

func (erofsImageReader) Match(h *Head) bool {
	return !h.IsDir && len(h.Raw) >= 1028 && binary.LittleEndian.Uint32(h.Raw[1024:]) == erofsMagic
}

func (erofsImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	im, err := readErofsImage(ctx, f, h.Size)
	if err != nil {
		return nil, err
	}
	im.Path, im.Compression = h.Path, h.Compression
	return im, nil
}

// readErofsImage reads the EROFS image of size bytes in f, wherever it
// lies (a file of its own, or inside an iso's EFI system image).
func readErofsImage(ctx context.Context, f io.ReaderAt, size int64) (*Image, error) {
	sb, err := erofs.ReadSuper(f)
	if err != nil {
		return nil, err
	}
	tree, data, err := erofs.Read(ctx, f, size, sb)
	if err != nil {
		return nil, err
	}
	im := &Image{Format: "erofs", Size: size, Tree: tree, Complete: true}
	if e := tree.Get(rootfs.RecordPath); e != nil && e.Type == rootfs.TypeRegular && e.Size <= maxRecord {
		if rec, err := erofs.ReadFile(f, size, sb, rootfs.RecordPath); err == nil {
			im.Record = rec
		}
	}
	// What the image holds beyond its record's tree is no output's own:
	// EROFS adds nothing. Such entries are named as extra, not taken for
	// the tree.
	if _, ok := treePaths(im.Record); ok {
		entries, extra := splitRecorded(tree.Entries(), im.Record, "erofs")
		if len(extra) > 0 {
			im.Extra = extra
			if im.Tree, err = rootfs.SealedOf(entries); err != nil {
				return nil, err
			}
		}
	}
	fsys := Filesystem{Type: "erofs", Label: sb.Label, UUID: sb.UUID, Size: sb.Blocks * 4096, Files: tree.Len() - 1}
	for _, f := range sb.Facts {
		fsys.Facts = append(fsys.Facts, Fact(f))
	}
	im.Filesystems = []Filesystem{fsys}
	for _, r := range sb.Regions(size) {
		im.Regions = append(im.Regions, Region{Name: r.Name, Offset: r.Offset, Size: r.Size})
	}
	for _, r := range data {
		im.Regions = append(im.Regions, Region{Name: r.Name, Offset: r.Offset, Size: r.Size})
	}
	return im, nil
}

// ReadTreeFile reads p from the image itself, decompressed as the kernel
// would.
func (erofsImageReader) ReadTreeFile(ctx context.Context, im *Image, p string, max int64) ([]byte, error) {
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
		return nil, fmt.Errorf("%s: %s: %w", im.Path, p, err)
	}
	return data, nil
}
