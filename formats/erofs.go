package formats

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/erofs"
	"github.com/stamp-dev/stamp/rootfs"
)

// ErofsSpec is an erofs output's options.
type ErofsSpec struct {
	// Compression is the codec of file data: "lz4" (the default),
	// "lz4hc" or "none" (erofs.Compression).
	Compression string
}

// erofsFormat is "format: erofs": the tree as a read-only EROFS image,
// BASE.erofs, the root a live or network-booted system mounts (see
// disk/erofs). Its UUID is derived from the seed and the output's name; its
// time is the epoch. It adds nothing to the tree.
type erofsFormat struct{}

func (erofsFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	so, err := optionsOf[ErofsSpec](spec)
	if err != nil {
		return nil, err
	}
	name := base + ".erofs"
	var filed []erofs.FiledSegment
	o := erofs.Options{Compression: erofs.Compression(so.Compression), UUID: disk.ErofsUUID(src.Seed, spec.Name),
		Epoch: src.Epoch, Log: src.Log, Segments: src.Parts, Filed: &filed}
	if src.Progress != nil {
		var content int64
		src.Tree.Walk(func(e *rootfs.Entry) error {
			content += e.Size
			return nil
		})
		add, done := src.Progress(spec.Name, content)
		defer done()
		o.Progress = add
	}
	var sum string
	err = writeFile(filepath.Join(dir, name), func(f *os.File) error {
		st, err := erofs.Write(ctx, src.Tree, f, o)
		if err == nil {
			sum = st.SHA256
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("erofs: %w", err)
	}
	res := &Result{Files: []string{name}, Parts: erofsParts(name, filed)}
	if sum != "" {
		// Hashed as written: the build need not read the image back.
		res.Sums = map[string]string{name: sum}
	}
	return res, nil
}
