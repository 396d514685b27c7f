package formats

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/stamp-dev/stamp/disk"
)

// GCESpec is a gce output's options; it has none yet.
type GCESpec struct{}

// GCEDiskName is the one member of a GCE image archive, the name Compute
// Engine's image import requires.
const GCEDiskName = "disk.raw"

// gib is the unit Compute Engine requires an imported disk's size to be a
// whole number of.
const gib = 1 << 30

// GCEDiskSize is the size the disk in a GCE archive of a raw disk of size
// bytes has: size rounded up to a whole GiB. The raw is padded with zeros
// and its backup GPT moved to the new end (disk.Grow), so the GPT
// describes the disk Compute Engine attaches.
func GCEDiskSize(size int64) int64 { return (size + gib - 1) / gib * gib }

// gceFormat packages a raw disk output as Compute Engine imports one:
// disk.raw, the only member of a GNU tar, gzip-compressed, as `tar
// --format=oldgnu -Sczf` makes it (what the import documents). The member
// is an old-GNU sparse file ('S'): only the raw's data extents are stored,
// its holes and the padding are in the sparse map, so the archive costs
// what the data costs. The gzip header has no name and mtime 0, so the
// archive depends on the disk alone; the member's mtime is the build's
// epoch.
type gceFormat struct{}

// gceLevel is the gzip level: fixed, so the bytes are; the data deflates
// within a few percent of the default at a fraction of its time.
const gceLevel = 5

func (gceFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	if _, err := optionsOf[GCESpec](spec); err != nil {
		return nil, err
	}
	return encodeRaw(src, spec, dir, base+".tar.gz", func(out *os.File, in io.ReaderAt, size int64, progress func(int64)) error {
		zw, err := gzip.NewWriterLevel(out, gceLevel)
		if err != nil {
			return err
		}
		bw := bufio.NewWriterSize(zw, 1<<20)
		grown, err := disk.Grow(in, size, GCEDiskSize(size))
		if err != nil {
			return fmt.Errorf("from: %w", err)
		}
		extents := grown.Extents()
		hdr, err := gnuSparseHeader(GCEDiskName, src.Epoch, grown.Size(), extents)
		if err != nil {
			return err
		}
		bw.Write(hdr)
		var stored int64
		buf := make([]byte, 1<<20)
		for _, e := range extents {
			for at := e.Off; at < e.Off+e.Len; {
				if err := ctx.Err(); err != nil {
					return err
				}
				n := min(int64(len(buf)), e.Off+e.Len-at)
				if _, err := grown.ReadAt(buf[:n], at); err != nil {
					return fmt.Errorf("reading the raw disk at %d: %w", at, err)
				}
				bw.Write(buf[:n])
				at += n
				stored += n
				if progress != nil {
					progress(n)
				}
			}
		}
		// The data's padding to a block, then the two zero blocks that end
		// an archive.
		bw.Write(make([]byte, (blockSize-stored%blockSize)%blockSize+2*blockSize))
		if err := bw.Flush(); err != nil {
			return err
		}
		return zw.Close()
	})
}

// blockSize is a tar block.
const blockSize = 512

// gnuSparseHeader is the header blocks of an old-GNU sparse member (type
// 'S') named name, of size bytes, whose data is the extents' bytes in
// order: the first four map entries in the header, 21 in each extension
// block after it. archive/tar reads such members but does not write them.
// A map that stops short of the end gets a last, empty entry there, as
// GNU tar writes it, so the member's size is stated twice.
func gnuSparseHeader(name string, mtime time.Time, size int64, extents []disk.Extent) ([]byte, error) {
	if len(name) >= 100 {
		return nil, fmt.Errorf("%s: a name of %d bytes does not fit an old-GNU header", name, len(name))
	}
	m := append([]disk.Extent(nil), extents...)
	if len(m) == 0 || m[len(m)-1].Off+m[len(m)-1].Len < size {
		m = append(m, disk.Extent{Off: size})
	}
	var stored int64
	for _, e := range m {
		stored += e.Len
	}
	ext := 0
	if len(m) > 4 {
		ext = (len(m) - 4 + 20) / 21
	}
	b := make([]byte, blockSize*(1+ext))
	h := b[:blockSize]
	copy(h, name)
	copy(h[100:], "0000644\x00")
	copy(h[108:], "0000000\x00")
	copy(h[116:], "0000000\x00")
	tarNumber(h[124:136], stored)
	tarNumber(h[136:148], mtime.Unix())
	h[156] = 'S'
	copy(h[257:], "ustar  \x00")
	tarNumber(h[483:495], size)
	entry := func(dst []byte, e disk.Extent) {
		tarNumber(dst[:12], e.Off)
		tarNumber(dst[12:24], e.Len)
	}
	for i := 0; i < min(4, len(m)); i++ {
		entry(h[386+24*i:], m[i])
	}
	if ext > 0 {
		h[482] = 1
	}
	for k := range ext {
		blk := b[blockSize*(1+k) : blockSize*(2+k)]
		first := 4 + 21*k
		for i := 0; i < 21 && first+i < len(m); i++ {
			entry(blk[24*i:], m[first+i])
		}
		if k < ext-1 {
			blk[504] = 1
		}
	}
	// The checksum counts its own field as spaces.
	copy(h[148:156], "        ")
	var sum int64
	for _, c := range h {
		sum += int64(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b, nil
}

// tarNumber writes v into a numeric field of 12 bytes: octal where it
// fits, else GNU's base-256 (a disk past 8 GiB).
func tarNumber(dst []byte, v int64) {
	if v < 1<<33 {
		copy(dst, fmt.Sprintf("%011o\x00", v))
		return
	}
	clear(dst)
	dst[0] = 0x80
	for i := len(dst) - 1; i > 0 && v > 0; i-- {
		dst[i] = byte(v)
		v >>= 8
	}
}
