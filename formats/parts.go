package formats

import (
	"io"

	"github.com/stamp-dev/stamp/disk/erofs"
)

// PartStore holds the compressed parts of outputs written before, under the
// key of what each part holds before compression. A writer whose output is
// a series of independently compressed parts (a split initramfs) asks it
// for each part before compressing one: after a one-line change most parts
// hold exactly what they held in the last build, and compressing them again
// is most of the output's time. Compression is deterministic, so a part
// taken from the store is the bytes compressing would give: the store
// changes how fast an output is written, never what it holds.
type PartStore interface {
	// Part writes the compressed part filed under key into w, and reports
	// whether it had one, whole and matching the part sum it was filed with,
	// and the Meta it was filed with. On false the caller discards
	// whatever w got and compresses the part itself.
	Part(key string, w io.Writer) (meta string, ok bool)
}

// FilePart is a compressed part of an output file, as a PartStore files
// it: Size bytes at Offset of File (a name in the output directory) with
// part sum Sum (hashio.PartSum), holding what Key names. Meta is what else the writer
// needs to use the part again, in its own form (an EROFS segment's
// extents).
type FilePart struct {
	File   string `json:"file"`
	Key    string `json:"key"`
	Offset int64  `json:"offset"`
	Size   int64  `json:"size"`
	Sum    string `json:"sum"`
	Meta   string `json:"meta,omitempty"`
}

// erofsParts are the segments an EROFS image written at the start of file
// filed, as parts of file.
func erofsParts(file string, segs []erofs.FiledSegment) []FilePart {
	parts := make([]FilePart, 0, len(segs))
	for _, s := range segs {
		parts = append(parts, FilePart{File: file, Key: s.Key, Offset: s.Offset, Size: s.Size, Sum: s.Sum, Meta: s.Meta})
	}
	return parts
}
