package formats

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/vhd"
)

// VHDSpec is a vhd output's options.
type VHDSpec struct {
	// Dynamic writes a dynamic VHD; the default is fixed, the only type
	// Azure takes.
	Dynamic bool
}

// vhdFormat encodes a raw disk output as a VHD. The raw disk is read back
// from its file, so the VHD holds exactly the bytes the raw output does: a
// raw disk is whole MiB, so no padding is needed (see vhd.VirtualSize);
// one that were not would be grown with its GPT (disk.Grow), as gce's is.
type vhdFormat struct{}

func (vhdFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	so, err := optionsOf[VHDSpec](spec)
	if err != nil {
		return nil, err
	}
	o := vhd.Options{Dynamic: so.Dynamic, UniqueID: disk.VHDUniqueID(src.Seed, spec.Name), Time: src.Epoch}
	return encodeRaw(src, spec, dir, base+".vhd", func(out *os.File, in io.ReaderAt, size int64, progress func(int64)) error {
		o.Progress = progress
		grown, err := disk.Grow(in, size, vhd.VirtualSize(size))
		if err != nil {
			return fmt.Errorf("from: %w", err)
		}
		_, err = vhd.Write(ctx, out, grown, grown.Size(), o)
		return err
	})
}
