package disk

import (
	"errors"
	"io"
	"io/fs"
	"os"

	"github.com/diskfs/go-diskfs/backend"
)

// Storage adapts an io.ReaderAt, an io.WriterAt or both to the file
// go-diskfs reads and writes partition tables and file systems through. It
// has no Sync, so go-diskfs does not fsync after each of its writes: the
// caller syncs the whole image once. Nor has it an *os.File under it.
type Storage struct {
	r    io.ReaderAt
	w    io.WriterAt
	size int64
	off  int64
}

// ReadOnly is a Storage that reads the size bytes of r.
func ReadOnly(r io.ReaderAt, size int64) *Storage { return &Storage{r: r, size: size} }

// WriteOnly is a Storage that writes the size bytes of w.
func WriteOnly(w io.WriterAt, size int64) *Storage { return &Storage{w: w, size: size} }

func (s *Storage) Stat() (fs.FileInfo, error) { return nil, errors.New("disk image: no file info") }
func (s *Storage) Close() error               { return nil }
func (s *Storage) Path() string               { return "" }

func (s *Storage) Sys() (*os.File, error) { return nil, errors.New("disk image: not an os.File") }

func (s *Storage) Writable() (backend.WritableFile, error) {
	if s.w == nil {
		return nil, errors.New("disk image: read only")
	}
	return s, nil
}

func (s *Storage) Read(b []byte) (int, error) {
	n, err := s.ReadAt(b, s.off)
	s.off += int64(n)
	return n, err
}

func (s *Storage) ReadAt(b []byte, off int64) (int, error) {
	if s.r == nil {
		return 0, errors.New("disk image: not readable")
	}
	return s.r.ReadAt(b, off)
}

func (s *Storage) WriteAt(b []byte, off int64) (int, error) {
	if s.w == nil {
		return 0, errors.New("disk image: read only")
	}
	return s.w.WriteAt(b, off)
}

func (s *Storage) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
		s.off = off
	case io.SeekCurrent:
		s.off += off
	case io.SeekEnd:
		s.off = s.size + off
	}
	return s.off, nil
}
