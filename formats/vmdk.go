package formats

import (
	"context"
	"io"
	"os"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/vmdk"
)

// VMDKSpec is a vmdk output's options.
type VMDKSpec struct {
	// Type is "streamOptimized" (the default, what vSphere and OVF
	// packages import) or "monolithicSparse", as a descriptor's createType
	// spells them.
	Type string
}

// vmdkFormat encodes a raw disk output as a VMDK. The raw disk is read back
// from its file, so the VMDK holds exactly the bytes the raw output does.
type vmdkFormat struct{}

func (vmdkFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	so, err := optionsOf[VMDKSpec](spec)
	if err != nil {
		return nil, err
	}
	name := base + ".vmdk"
	o := vmdk.Options{Type: vmdk.Type(so.Type), ID: disk.VMDKID(src.Seed, spec.Name), FileName: name}
	return encodeRaw(src, spec, dir, name, func(out *os.File, in io.ReaderAt, size int64, progress func(int64)) error {
		o.Progress = progress
		_, err := vmdk.Write(ctx, out, in, size, o)
		return err
	})
}
