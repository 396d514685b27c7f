package formats

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// liveImageReader reads a live bundle directory: the tree is its root
// image; the kernel, the initramfs and the script are the bundle's own.
type liveImageReader struct{}

func (liveImageReader) Format() string { return "live" }

func (liveImageReader) Match(h *Head) bool {
	if !h.IsDir {
		return false
	}
	for _, f := range []string{LiveRoot, LiveInitrd, LiveScript} {
		if _, err := os.Stat(filepath.Join(h.Path, f)); err != nil {
			return false
		}
	}
	return true
}

func (liveImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	rh, err := ReadHead(filepath.Join(h.Path, LiveRoot))
	if err != nil {
		return nil, err
	}
	if !(erofsImageReader{}).Match(rh) {
		return nil, fmt.Errorf("%s is not an EROFS image", LiveRoot)
	}
	im, err := erofsImageReader{}.Read(ctx, rh)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", LiveRoot, err)
	}
	im.Path, im.Format, im.Regions = h.Path, "live", nil
	for _, name := range []string{LiveKernel, LiveInitrd, LiveScript, LiveSums} {
		sum, size, err := hashio.File(filepath.Join(h.Path, name), false)
		if err != nil {
			return nil, err
		}
		im.Facts = append(im.Facts, Fact{"live." + name, fmt.Sprintf("sha256:%s %d bytes", sum, size)})
		im.Size += size
	}
	return im, nil
}
