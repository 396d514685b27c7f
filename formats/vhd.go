package formats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

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
	if src.From == "" {
		return nil, errors.New("from: a vhd is made from a raw output")
	}
	so, err := optionsOf[VHDSpec](spec)
	if err != nil {
		return nil, err
	}
	in, err := os.Open(src.From)
	if err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return nil, fmt.Errorf("from: %w", err)
	}
	o := vhd.Options{Dynamic: so.Dynamic, UniqueID: disk.VHDUniqueID(src.Seed, spec.Name), Time: src.Epoch}
	if src.Progress != nil {
		add, done := src.Progress(spec.Name, fi.Size())
		defer done()
		o.Progress = add
	}
	name := base + ".vhd"
	err = writeFile(filepath.Join(dir, name), func(f *os.File) error {
		_, err := vhd.Write(ctx, f, in, fi.Size(), o)
		return err
	})
	if err != nil {
		return nil, err
	}
	// The VHD holds the raw disk, so it adds what the disk adds.
	return &Result{Files: []string{name}, Adds: append([]string(nil), src.FromAdds...)}, nil
}
