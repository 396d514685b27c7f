package formats

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stamp-dev/stamp/disk/qcow2"
)

// Qcow2Spec is a qcow2 output's options.
type Qcow2Spec struct {
	// Compress deflates (zlib) every cluster that gets smaller.
	Compress bool
}

// qcow2Format encodes a raw disk output as qcow2. The raw disk is read back
// from its file, so the qcow2 holds exactly the bytes the raw output does.
type qcow2Format struct{}

func (qcow2Format) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	if src.From == "" {
		return nil, errors.New("from: a qcow2 is made from a raw output")
	}
	so, err := optionsOf[Qcow2Spec](spec)
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
	o := qcow2.Options{Compress: so.Compress}
	if src.Progress != nil {
		add, done := src.Progress(spec.Name, fi.Size())
		defer done()
		o.Progress = add
	}
	name := base + ".qcow2"
	err = writeFile(filepath.Join(dir, name), func(f *os.File) error {
		_, err := qcow2.Write(ctx, f, in, fi.Size(), o)
		return err
	})
	if err != nil {
		return nil, err
	}
	// The qcow2 holds the raw disk, so it adds what the disk adds.
	return &Result{Files: []string{name}, Adds: append([]string(nil), src.FromAdds...)}, nil
}
