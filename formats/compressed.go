package formats

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// CompressedSpec is a compressed output's options.
type CompressedSpec struct {
	// Compression is the stream's codec: zstd (the default), xz or gzip.
	Compression compress.Algorithm
}

// compressedExt is a compressed raw's file name suffix per codec, the
// ones Tinkerbell's image2disk and `xz -d`, `gzip -d` and `zstd -d` know.
var compressedExt = map[compress.Algorithm]string{compress.Zstd: ".raw.zst", compress.XZ: ".raw.xz", compress.Gzip: ".raw.gz"}

// compressedFormat is "format: compressed": the raw disk it is made from
// as one compressed stream, BASE.raw.zst (.xz, .gz), which provisioners
// that stream an image onto a disk take. It is the raw's bytes, holes
// included as zeros, through the codec's fixed settings (rootfs/compress),
// so decompressing it gives the raw byte for byte and the same raw always
// gives the same stream.
type compressedFormat struct{}

func (compressedFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	so, err := optionsOf[CompressedSpec](spec)
	if err != nil {
		return nil, err
	}
	alg := so.Compression
	if alg == "" {
		alg = compress.Zstd
	}
	ext, ok := compressedExt[alg]
	if !ok {
		return nil, fmt.Errorf("compressed: compression %q (zstd, xz or gzip)", alg)
	}
	return encodeRaw(src, spec, dir, base+ext, func(out *os.File, in io.ReaderAt, size int64, progress func(int64)) error {
		bw := bufio.NewWriterSize(out, 1<<20)
		zw, err := compress.NewWriter(alg, bw, compress.WriterOptions{})
		if err != nil {
			return err
		}
		var r io.Reader = &tarCtxReader{ctx: ctx, r: io.NewSectionReader(in, 0, size)}
		if progress != nil {
			r = rootfs.CountReader(r, progress)
		}
		if _, err := io.CopyBuffer(zw, r, make([]byte, 1<<20)); err != nil {
			return err
		}
		if err := zw.Close(); err != nil {
			return err
		}
		return bw.Flush()
	})
}
