package harness

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/ulikunitz/xz"
)

// compressWriter returns a writer that compresses into w as the file name's
// extension asks. Levels and concurrency are fixed so the bytes depend only on
// the input. Close flushes the compressor but leaves w open.
func compressWriter(w io.Writer, name string) (io.WriteCloser, error) {
	switch {
	case strings.HasSuffix(name, ".tar"):
		return nopCloser{w}, nil
	case strings.HasSuffix(name, ".tar.gz"), strings.HasSuffix(name, ".tgz"):
		// No name and a zero ModTime keep the gzip header free of host facts.
		return gzip.NewWriterLevel(w, gzip.BestSpeed)
	case strings.HasSuffix(name, ".tar.zst"), strings.HasSuffix(name, ".tzst"):
		return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedDefault), zstd.WithEncoderConcurrency(1))
	case strings.HasSuffix(name, ".tar.xz"), strings.HasSuffix(name, ".txz"):
		// The default matcher is the hash chain; the binary tree one is far too slow.
		return xz.WriterConfig{}.NewWriter(w)
	}
	return nil, fmt.Errorf("%s: unknown extension (want .tar, .tar.gz, .tar.zst or .tar.xz)", name)
}

type nopCloser struct{ io.Writer }

func (nopCloser) Close() error { return nil }

// decompressReader sniffs the magic bytes rather than trusting a file name,
// so a reader of any output works whatever it is called.
func decompressReader(r io.Reader) (io.ReadCloser, error) {
	br := bufio.NewReader(r)
	magic, _ := br.Peek(6)
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		return zr, nil
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return nil, err
		}
		return zr.IOReadCloser(), nil
	case bytes.HasPrefix(magic, []byte{0xfd, '7', 'z', 'X', 'Z', 0x00}):
		xr, err := xz.NewReader(br)
		if err != nil {
			return nil, err
		}
		return io.NopCloser(xr), nil
	}
	return io.NopCloser(br), nil
}
