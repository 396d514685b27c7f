package cache

import (
	"io"
	"os"
)

// sparseBlock is the unit of zeros that becomes a hole: the page size, which
// every file system that has holes can represent.
const sparseBlock = 4096

// sparseWriter writes to f, seeking over whole blocks of zeros, so that a file
// that is mostly zeros (a raw disk image) takes only the space of its data.
// finish sets the length, which a trailing hole does not.
type sparseWriter struct {
	f   *os.File
	off int64
}

var zeroBlock [sparseBlock]byte

func (w *sparseWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		// Blocks are aligned to the file, so a hole is always whole blocks.
		step := sparseBlock - int(w.off%sparseBlock)
		if step > len(p) {
			step = len(p)
		}
		chunk := p[:step]
		if step == sparseBlock && string(chunk) == string(zeroBlock[:]) {
			w.off += int64(step)
		} else {
			if _, err := w.f.WriteAt(chunk, w.off); err != nil {
				return n, err
			}
			w.off += int64(step)
		}
		n += step
		p = p[step:]
	}
	return n, nil
}

func (w *sparseWriter) finish() error { return w.f.Truncate(w.off) }

var _ io.Writer = (*sparseWriter)(nil)
