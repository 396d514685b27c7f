package formats

import (
	"context"
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
// from its file, so the VHD holds exactly the bytes the raw output does,
// padded with zeros to a whole MiB (see vhd.VirtualSize).
type vhdFormat struct{}

func (vhdFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	so, err := optionsOf[VHDSpec](spec)
	if err != nil {
		return nil, err
	}
	o := vhd.Options{Dynamic: so.Dynamic, UniqueID: disk.VHDUniqueID(src.Seed, spec.Name), Time: src.Epoch}
	return encodeRaw(src, spec, dir, base+".vhd", func(out *os.File, in *os.File, size int64, progress func(int64)) error {
		o.Progress = progress
		_, err := vhd.Write(ctx, out, in, size, o)
		return err
	})
}
