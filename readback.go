package stamp

import (
	"context"

	"github.com/stamp-dev/stamp/formats/readback"
)

// Reading outputs back lives in formats/readback; these are the entry
// points the CLI reaches through the root.

// Inspection is an output read back, with the record embedded in it.
type Inspection = readback.Inspection

// Change is one difference diff or verify found between two images.
type Change = readback.Change

// DiffOptions configure Diff.
type DiffOptions = readback.DiffOptions

// Inspect reads the output at path, of any format stamp reads.
func Inspect(ctx context.Context, path string) (*Inspection, error) {
	return readback.Inspect(ctx, path)
}

// Diff reads two images, of any formats stamp reads, and compares them entry
// by entry.
func Diff(ctx context.Context, a, b string, o DiffOptions) ([]Change, error) {
	return readback.Diff(ctx, a, b, o)
}
