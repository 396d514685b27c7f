package formats

import (
	"context"
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
	so, err := optionsOf[Qcow2Spec](spec)
	if err != nil {
		return nil, err
	}
	name := base + ".qcow2"
	var st *qcow2.Stats
	res, err := encodeRaw(src, spec, dir, name, func(out *os.File, in *os.File, size int64, progress func(int64)) error {
		st, err = qcow2.Write(ctx, out, in, size, qcow2.Options{Compress: so.Compress, Progress: progress})
		return err
	})
	if err != nil {
		return nil, err
	}
	if st.SHA256 != "" {
		// Hashed as written: the build need not read the image back.
		res.Sums = map[string]string{name: st.SHA256}
	}
	return res, nil
}

// encodeRaw writes the raw disk output src.From, encoded by encode, as
// name in dir. The raw disk is read back from its file, so the encoding
// holds exactly the bytes the raw output does, and adds what the disk adds.
func encodeRaw(src *Source, spec *Spec, dir, name string, encode func(out, in *os.File, size int64, progress func(int64)) error) (*Result, error) {
	if src.From == "" {
		return nil, fmt.Errorf("from: a %s is made from a raw output", spec.Format)
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
	var progress func(int64)
	if src.Progress != nil {
		add, done := src.Progress(spec.Name, fi.Size())
		defer done()
		progress = add
	}
	if err := writeFile(filepath.Join(dir, name), func(f *os.File) error { return encode(f, in, fi.Size(), progress) }); err != nil {
		return nil, err
	}
	return &Result{Files: []string{name}, Adds: append([]string(nil), src.FromAdds...)}, nil
}
