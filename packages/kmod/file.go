package kmod

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// Module files are told apart by their first bytes, as libkmod-file.c does:
// zstd and xz are decompressed whole (Debian's kmod 30 is built with both
// and without zlib, so a gzip module is read as it is, and is no ELF file),
// anything else is read in place.

var (
	magicZstd = []byte{0x28, 0xb5, 0x2f, 0xfd}
	magicXZ   = []byte{0xfd, '7', 'z', 'X', 'Z', 0}
)

// The decompressors' limits: a module is a few MiB at most, and a frame that
// asks for more is refused before it is decompressed. kmod itself has no
// bound; a module that decompresses to more than Options.MaxModuleSize is
// taken for what it is, a bomb, and read as a module that cannot be opened.
const (
	zstdMaxWindow = 128 << 20
	zstdMaxMemory = 1 << 30
	xzDictCap     = 64 << 20
	// DefaultMaxModuleSize is Options.MaxModuleSize's default: more than
	// ten times the largest module of Debian's kernels (amdgpu, 19 MB).
	DefaultMaxModuleSize = 256 << 20
)

// readLimited reads r whole into the reader's buffer, refusing more than
// the reader's limit.
func (r *reader) readLimited(in io.Reader) (source, error) {
	r.buf.Reset()
	n, err := r.buf.ReadFrom(io.LimitReader(in, r.limit+1))
	if err != nil {
		return nil, err
	}
	if n > r.limit {
		return nil, fmt.Errorf("decompresses to more than %d bytes", r.limit)
	}
	return wholeSource(r.buf.Bytes()), nil
}

// moduleData is what depmod reads of one module file.
type moduleData struct {
	// info holds the .modinfo entries.
	info    []modinfo
	infoErr error
	// exports are the symbols the module exports; exportsErr is
	// errNoSymbols when it exports none kmod can find.
	exports    []string
	exportsErr error
	// needs are the symbols the module takes from others.
	needs    []depSymbol
	needsErr error
}

// modinfo is one .modinfo entry: key=value, or a key alone.
type modinfo struct{ key, value string }

// reader reads modules; one per worker, as its zstd decoder and buffer are
// reused from module to module.
type reader struct {
	fsys  fs.FS
	limit int64 // of a decompressed module
	zstd  *zstd.Decoder
	buf   bytes.Buffer
}

func newReader(fsys fs.FS, limit int64) *reader { return &reader{fsys: fsys, limit: limit} }

func (r *reader) close() {
	if r.zstd != nil {
		r.zstd.Close()
	}
}

// wholeSize is the size up to which a module file is read whole, with one
// read: most modules are smaller, and one read is cheaper than the seven
// or so a module's sections take.
const wholeSize = 1 << 20

// wholeSource is a module's content in memory.
type wholeSource []byte

func (w wholeSource) Size() int64   { return int64(len(w)) }
func (w wholeSource) Bytes() []byte { return w }
func (w wholeSource) ReadAt(b []byte, off int64) (int, error) {
	if off >= int64(len(w)) {
		return 0, io.EOF
	}
	n := copy(b, w[off:])
	if n < len(b) {
		return n, io.EOF
	}
	return n, nil
}

// sizedReaderAt is an open file that can be read in place.
type sizedReaderAt struct {
	io.ReaderAt
	size int64
}

func (s sizedReaderAt) Size() int64 { return s.size }

// read reads the module at the fs path name. A file that cannot be opened
// or is no module fails every part alike, as in kmod, where such a module
// is still listed, without dependencies.
func (r *reader) read(name string) moduleData {
	var d moduleData
	f, err := r.fsys.Open(name)
	if err != nil {
		return failed(err)
	}
	defer f.Close()
	src, err := r.source(f)
	if err != nil {
		return failed(err)
	}
	e, err := openELF(src, r.limit)
	if err != nil {
		return failed(err)
	}
	if b, err := e.section(sectionModinfo); err == nil {
		for _, kv := range cStrings(b) {
			k, v, _ := strings.Cut(kv, "=")
			d.info = append(d.info, modinfo{k, v})
		}
	} else if err != errNoSection {
		d.infoErr = err
	}
	d.exports, d.exportsErr = e.exportedSymbols()
	d.needs, d.needsErr = e.dependencySymbols()
	return d
}

func failed(err error) moduleData {
	return moduleData{infoErr: err, exportsErr: err, needsErr: err}
}

// source returns the module's content: in place, or decompressed into the
// reader's buffer.
func (r *reader) source(f fs.File) (source, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	ra, seekable := f.(io.ReaderAt)
	var head [6]byte
	var n int
	if seekable {
		n, err = ra.ReadAt(head[:], 0)
	} else {
		n, err = io.ReadFull(f, head[:])
	}
	if n != len(head) {
		if err == nil || err == io.EOF || err == io.ErrUnexpectedEOF {
			err = fmt.Errorf("%w: shorter than %d bytes", errInvalid, len(head))
		}
		return nil, err
	}
	var rest io.Reader = f
	if seekable {
		rest = io.NewSectionReader(ra, int64(n), 1<<62)
	}
	compressed := func() io.Reader {
		return bufio.NewReaderSize(io.MultiReader(bytes.NewReader(head[:]), rest), 64<<10)
	}
	switch {
	case bytes.HasPrefix(head[:], magicZstd):
		return r.unzstd(compressed())
	case bytes.Equal(head[:], magicXZ):
		return r.unxz(compressed())
	}
	size := fi.Size()
	if seekable && size > wholeSize {
		return sizedReaderAt{ra, size}, nil
	}
	if seekable {
		b := r.grow(int(size))
		n, err := ra.ReadAt(b, 0)
		if n < len(b) {
			if err == nil || err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
		return wholeSource(b), nil
	}
	r.buf.Reset()
	r.buf.Write(head[:])
	if _, err := r.buf.ReadFrom(f); err != nil {
		return nil, err
	}
	return wholeSource(r.buf.Bytes()), nil
}

// grow returns the reader's buffer holding n bytes.
func (r *reader) grow(n int) []byte {
	r.buf.Reset()
	r.buf.Grow(n)
	return r.buf.Bytes()[:n]
}

func (r *reader) unzstd(in io.Reader) (source, error) {
	if r.zstd == nil {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderMaxMemory(zstdMaxMemory), zstd.WithDecoderMaxWindow(zstdMaxWindow))
		if err != nil {
			return nil, err
		}
		r.zstd = d
	}
	if err := r.zstd.Reset(in); err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	src, err := r.readLimited(r.zstd)
	if err != nil {
		return nil, fmt.Errorf("zstd: %w", err)
	}
	return src, nil
}

func (r *reader) unxz(in io.Reader) (source, error) {
	xr, err := xz.ReaderConfig{DictCap: xzDictCap}.NewReader(in)
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	src, err := r.readLimited(xr)
	if err != nil {
		return nil, fmt.Errorf("xz: %w", err)
	}
	return src, nil
}

// isKmodErr tells a failure kmod reports from errNoSymbols, which it does
// not.
func isKmodErr(err error) bool { return err != nil && !errors.Is(err, errNoSymbols) }
