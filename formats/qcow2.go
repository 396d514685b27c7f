package formats

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/qcow2"
	"github.com/stamp-dev/stamp/rootfs/hashio"
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
	res, err := encodeRaw(src, spec, dir, name, func(out *os.File, in io.ReaderAt, size int64, progress func(int64)) error {
		st, err = qcow2.Write(ctx, out, in, size, qcow2.Options{Compress: so.Compress, Progress: progress, HashSource: src.HashFrom})
		return err
	})
	if err != nil {
		return nil, err
	}
	if st.SHA256 != "" {
		// Hashed as written: the build need not read the image back.
		res.Sums = map[string]string{name: st.SHA256}
	}
	res.FromSum = st.SourceSHA256
	return res, nil
}

// HashesFrom: an uncompressed image's first pass reads every data extent
// of the raw disk in order, which is all a hash of it needs (its holes are
// zeros), so the build need not read the disk a third time.
func (qcow2Format) HashesFrom(spec *Spec) bool {
	so, err := optionsOf[Qcow2Spec](spec)
	return err == nil && !so.Compress
}

// encodeRaw writes the raw disk output src.From, encoded by encode, as
// name in dir. The raw disk is read back from its file, so the encoding
// holds exactly the bytes the raw output does, and adds what the disk adds.
// It is read past the page cache, which it was written past.
func encodeRaw(src *Source, spec *Spec, dir, name string, encode func(out *os.File, in io.ReaderAt, size int64, progress func(int64)) error) (*Result, error) {
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
	rs := newPastCacheReader(in, fi.Size())
	defer rs.Close()
	if err := writeFile(filepath.Join(dir, name), func(f *os.File) error { return encode(f, rs, fi.Size(), progress) }); err != nil {
		return nil, err
	}
	return &Result{Files: []string{name}, Adds: append([]string(nil), src.FromAdds...)}, nil
}

// pastCacheReader reads an output written past the page cache (a raw disk,
// a qcow2) past it too, and tells the holes of its file (disk.DataExtents)
// as the file would. A read of a window or more goes to the device as it
// is; smaller ones (an encoder that reads a grain or a tar block at a time)
// are served from one window read ahead, since each read past the page
// cache waits on the device.
type pastCacheReader struct {
	r       *hashio.DirectReader
	extents []disk.Extent

	mu     sync.Mutex
	buf    []byte
	win    []byte // what buf holds of the disk, from winOff
	winOff int64
}

// rawWindow is what a small read of a pastCacheReader reads ahead.
const rawWindow = 4 << 20

func newPastCacheReader(f *os.File, size int64) *pastCacheReader {
	return &pastCacheReader{r: hashio.NewDirectReader(f), extents: disk.DataExtents(f, size)}
}

func (s *pastCacheReader) Extents() []disk.Extent { return s.extents }

func (s *pastCacheReader) ReadAt(p []byte, off int64) (int, error) {
	if len(p) >= rawWindow {
		return s.r.ReadAt(p, off)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	done := 0
	for done < len(p) {
		at := off + int64(done)
		if at < s.winOff || at >= s.winOff+int64(len(s.win)) {
			if s.buf == nil {
				s.buf = hashio.AlignedBuffer(rawWindow)
			}
			start := at &^ (rawWindow - 1)
			n, err := s.r.ReadAt(s.buf, start)
			s.win, s.winOff = s.buf[:n], start
			if at >= start+int64(n) {
				if err == nil {
					err = io.EOF
				}
				return done, err
			}
		}
		done += copy(p[done:], s.win[at-s.winOff:])
	}
	return done, nil
}

func (s *pastCacheReader) Close() error { return s.r.Close() }
