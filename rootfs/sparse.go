package rootfs

import (
	"io"
	"os"
)

// SparseWriter writes to a file from the offset it is at, seeking over runs
// of zero blocks, so that content of mostly zeros (a raw disk image) takes
// only the space of its data. Each run of data goes out in one write, so a
// large copy costs few system calls. Close sets the length, which a trailing
// hole does not; it does not close the file.
type SparseWriter struct {
	f    *os.File
	n    int64 // bytes written through w, holes included
	hole bool  // whether the last of them was a hole
}

// NewSparseWriter writes to f from its current offset.
func NewSparseWriter(f *os.File) *SparseWriter { return &SparseWriter{f: f} }

func (w *SparseWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	hole, err := writeChunk(w.f, p)
	if err != nil {
		return 0, err
	}
	w.hole = hole
	w.n += int64(len(p))
	return len(p), nil
}

// Close makes a trailing hole part of the file.
func (w *SparseWriter) Close() error {
	if !w.hole {
		return nil
	}
	end, err := w.f.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	return w.f.Truncate(end)
}
