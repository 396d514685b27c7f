package disk

import (
	"bytes"
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Extent is a byte range of a disk image.
type Extent struct{ Off, Len int64 }

// DataExtents lists where src may hold data: its data extents when it is a
// file whose file system reports holes (SEEK_DATA/SEEK_HOLE) or a view
// that knows its own (a Grown disk), else all of it. Encoders of a sparse
// raw disk read only these, so a mostly empty disk costs what its data
// costs.
func DataExtents(src io.ReaderAt, size int64) []Extent {
	all := []Extent{{0, size}}
	if x, ok := src.(interface{ Extents() []Extent }); ok {
		return x.Extents()
	}
	f, ok := src.(*os.File)
	if !ok || size == 0 {
		return all
	}
	var out []Extent
	for off := int64(0); off < size; {
		start, err := f.Seek(off, unix.SEEK_DATA)
		if err != nil {
			if errors.Is(err, unix.ENXIO) {
				break // only a hole remains
			}
			return all // no SEEK_DATA here: read everything
		}
		if start >= size {
			break
		}
		end, err := f.Seek(start, unix.SEEK_HOLE)
		if err != nil {
			return all
		}
		end = min(end, size)
		out = append(out, Extent{start, end - start})
		off = end
	}
	return out
}

var zeros [64 << 10]byte

// IsZero reports whether b holds only zero bytes.
func IsZero(b []byte) bool {
	for len(b) > 0 {
		n := min(len(b), len(zeros))
		if !bytes.Equal(b[:n], zeros[:n]) {
			return false
		}
		b = b[n:]
	}
	return true
}

// page is the unit WriteNonZero leaves out when it is zeros: a file
// system's block, the smallest hole a file can have.
const page = 4 << 10

// WriteNonZero writes b at off except its pages of zeros, which the image
// file is left to read as holes: a block that is mostly free space then
// takes only its data on the host, as it does in the raw disk. The caller
// gives the file its length.
func WriteNonZero(w io.WriterAt, b []byte, off int64) error {
	for i := 0; i < len(b); {
		for i < len(b) && IsZero(b[i:min(i+page, len(b))]) {
			i += page
		}
		j := i
		for j < len(b) && !IsZero(b[j:min(j+page, len(b))]) {
			j += page
		}
		j = min(j, len(b))
		if j > i {
			if _, err := w.WriteAt(b[i:j], off+int64(i)); err != nil {
				return err
			}
		}
		i = j
	}
	return nil
}
