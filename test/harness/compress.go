package harness

import (
	"fmt"
	"io"
	"strings"

	"github.com/stamp-dev/stamp/rootfs/compress"
)

// tarExts maps a tarball's extension to its compression; the file name is
// all mkbase is told.
var tarExts = []struct {
	ext string
	alg compress.Algorithm
}{
	{".tar", compress.None},
	{".tar.gz", compress.Gzip}, {".tgz", compress.Gzip},
	{".tar.zst", compress.Zstd}, {".tzst", compress.Zstd},
	{".tar.xz", compress.XZ}, {".txz", compress.XZ},
}

// compressWriter returns stamp's own encoder for the file name's extension,
// so a base is compressed exactly as stamp compresses its outputs. Close
// flushes the compressor but leaves w open.
func compressWriter(w io.Writer, name string) (io.WriteCloser, error) {
	for _, e := range tarExts {
		if strings.HasSuffix(name, e.ext) {
			return compress.NewWriter(e.alg, w, compress.WriterOptions{})
		}
	}
	return nil, fmt.Errorf("%s: unknown extension (want .tar, .tar.gz, .tar.zst or .tar.xz)", name)
}

// decompressReader sniffs the magic bytes rather than trusting a file name,
// so a reader of any output works whatever it is called.
func decompressReader(r io.Reader) (io.ReadCloser, error) {
	rc, _, err := compress.NewReaderAuto(r)
	return rc, err
}
