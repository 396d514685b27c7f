package formats

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"

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
// bytes has: size rounded up to a whole GiB, padded with zeros, as the VHD
// output pads to a MiB for Azure.
func GCEDiskSize(size int64) int64 { return (size + gib - 1) / gib * gib }

// gceFormat packages a raw disk output as Compute Engine imports one:
// disk.raw, the only member of a GNU tar (what `tar --format=oldgnu -Sczf`
// makes, and what the import documents), gzip-compressed. The gzip header
// has no name and mtime 0, so the archive depends on the disk alone; the
// member's mtime is the build's epoch.
type gceFormat struct{}

// gceLevel is the gzip level: fixed, so the bytes are; most of a disk is
// zeros, which any level shrinks to almost nothing, and the data deflates
// within a few percent of the default at a fraction of its time.
const gceLevel = 5

func (gceFormat) Write(ctx context.Context, src *Source, spec *Spec, dir, base string) (*Result, error) {
	if _, err := optionsOf[GCESpec](spec); err != nil {
		return nil, err
	}
	return encodeRaw(src, spec, dir, base+".tar.gz", func(out, in *os.File, size int64, progress func(int64)) error {
		zw, err := gzip.NewWriterLevel(out, gceLevel)
		if err != nil {
			return err
		}
		tw := tar.NewWriter(zw)
		padded := GCEDiskSize(size)
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: GCEDiskName, Mode: 0o644, Size: padded, ModTime: src.Epoch, Format: tar.FormatGNU}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", GCEDiskName, err)
		}
		if err := copyDisk(ctx, tw, in, size, padded, progress); err != nil {
			return err
		}
		if err := tw.Close(); err != nil {
			return err
		}
		return zw.Close()
	})
}

// copyDisk writes the raw disk of size bytes in in to w, then zeros up to
// padded; holes are written as zeros without being read.
func copyDisk(ctx context.Context, w io.Writer, in *os.File, size, padded int64, progress func(int64)) error {
	buf := make([]byte, 1<<20)
	zeros := make([]byte, len(buf))
	at := int64(0)
	fill := func(end int64) error {
		for at < end {
			n := min(int64(len(zeros)), end-at)
			if _, err := w.Write(zeros[:n]); err != nil {
				return err
			}
			at += n
		}
		return nil
	}
	for _, e := range disk.DataExtents(in, size) {
		if err := fill(e.Off); err != nil {
			return err
		}
		for at < e.Off+e.Len {
			if err := ctx.Err(); err != nil {
				return err
			}
			n := min(int64(len(buf)), e.Off+e.Len-at)
			if _, err := in.ReadAt(buf[:n], at); err != nil {
				return fmt.Errorf("reading the raw disk at %d: %w", at, err)
			}
			if _, err := w.Write(buf[:n]); err != nil {
				return err
			}
			at += n
			if progress != nil {
				progress(n)
			}
		}
	}
	return fill(padded)
}
