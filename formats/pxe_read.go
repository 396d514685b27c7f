package formats

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// pxeImageReader reads a pxe bundle directory: the tree is in its
// initramfs, which also holds the live /init; the kernel, the script and
// the config are the bundle's own.
type pxeImageReader struct{}

func (pxeImageReader) Format() string { return "pxe" }

func (pxeImageReader) Match(h *Head) bool {
	if !h.IsDir {
		return false
	}
	_, err1 := os.Stat(filepath.Join(h.Path, PXEScript))
	_, err2 := os.Stat(filepath.Join(h.Path, PXEInitrd))
	return err1 == nil && err2 == nil
}

func (pxeImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	ih, err := ReadHead(filepath.Join(h.Path, PXEInitrd))
	if err != nil {
		return nil, err
	}
	if !(cpioImageReader{}).Match(ih) {
		return nil, fmt.Errorf("%s is not a cpio archive", PXEInitrd)
	}
	im, err := cpioImageReader{}.Read(ctx, ih)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", PXEInitrd, err)
	}
	im.Path, im.Format, im.Regions, im.Plain = h.Path, "pxe", nil, ""
	for _, e := range im.Extra {
		e.Path = "initrd:" + e.Path // the cpio reader's own (its xattr list)
	}
	// What the initramfs holds beyond the tree (the live /init) is the
	// bundle's: the record says which paths the tree had.
	if im.Record != nil {
		tree, extra := splitRecorded(im.Tree.Entries(), im.Record, "initrd")
		im.Extra = append(im.Extra, extra...)
		if im.Tree, err = rootfs.SealedOf(tree); err != nil {
			return nil, fmt.Errorf("%s: %w", PXEInitrd, err)
		}
	}
	for _, name := range []string{PXEKernel, PXEScript, PXELinuxCfg, PXESums} {
		sum, size, err := hashio.File(filepath.Join(h.Path, filepath.FromSlash(name)), false)
		if err != nil {
			return nil, err
		}
		im.Facts = append(im.Facts, Fact{"pxe." + name, fmt.Sprintf("sha256:%s %d bytes", sum, size)})
		im.Size += size
	}
	im.Size += ih.Size
	sort.Slice(im.Extra, func(a, b int) bool { return im.Extra[a].Path < im.Extra[b].Path })
	return im, nil
}
