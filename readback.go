package stamp

import (
	"context"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/formats/readback"
	"github.com/stamp-dev/stamp/layers/containerd"
)

// Reading outputs back lives in formats/readback; these are the entry
// points the CLI reaches through the root.

// Inspection is an output read back, with the record embedded in it.
type Inspection = readback.Inspection

// Change is one difference diff or verify found between two images.
type Change = readback.Change

// DiffOptions configure Diff.
type DiffOptions = readback.DiffOptions

// Inspect reads the output at path, of any format stamp reads. When the
// image holds containerd's state (images written with into: containerd, or
// pulled before it was built), the images and snapshots its databases
// list are a section of the inspection.
func Inspect(ctx context.Context, path string) (*Inspection, error) {
	in, err := readback.Inspect(ctx, path)
	if err != nil {
		return nil, err
	}
	if in.Image.Tree.Get(containerd.MetaDBPath) == nil {
		return in, nil
	}
	lines, err := containerdState(ctx, in.Image)
	if err != nil {
		lines = []string{err.Error()}
	}
	in.Sections = append(in.Sections, readback.Section{Title: "containerd", Lines: lines})
	return in, nil
}

// maxStateDB bounds what is read of a containerd database.
const maxStateDB = 256 << 20

// containerdState lists what containerd's databases in the image hold.
func containerdState(ctx context.Context, im *formats.Image) ([]string, error) {
	meta, err := formats.ReadTreeFile(ctx, im, containerd.MetaDBPath, maxStateDB)
	if err != nil {
		return nil, err
	}
	var snaps []byte
	if im.Tree.Get(containerd.SnapshotsDBPath) != nil {
		if snaps, err = formats.ReadTreeFile(ctx, im, containerd.SnapshotsDBPath, maxStateDB); err != nil {
			return nil, err
		}
	}
	st, err := containerd.ReadState(meta, snaps)
	if err != nil {
		return nil, err
	}
	return st.Lines(), nil
}

// Diff reads two images, of any formats stamp reads, and compares them entry
// by entry.
func Diff(ctx context.Context, a, b string, o DiffOptions) ([]Change, error) {
	return readback.Diff(ctx, a, b, o)
}
