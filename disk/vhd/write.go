package vhd

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/stamp-dev/stamp/disk"
)

// Options configure Write.
type Options struct {
	// Dynamic writes a dynamic image; the default is fixed.
	Dynamic bool
	// UniqueID is the footer's identifier; the caller derives it from the
	// recipe's seed so that rebuilds give the same bytes.
	UniqueID [16]byte
	// Time is the footer's time stamp, the build's epoch.
	Time time.Time
	// Progress, when set, is told how many raw bytes have been consumed.
	Progress func(n int64)
}

// Stats say what Write stored.
type Stats struct {
	VirtualSize int64 // the disk's size in the image
	Blocks      int64 // dynamic: blocks stored
	FileSize    int64
}

// mib is the unit Azure requires a VHD's virtual size to be a whole number
// of.
const mib = 1 << 20

// VirtualSize is the size the image of a raw disk of size bytes has: size
// rounded up to a whole MiB, because Azure refuses any other, whichever
// type the image is, so that converting between types keeps it valid.
func VirtualSize(size int64) int64 { return (size + mib - 1) / mib * mib }

// chunk is how much of the raw disk a fixed image copies at a time.
const chunk = 4 << 20

// Write encodes the raw disk of size bytes in src as a VHD image written
// from offset 0 of w; the disk is padded with zeros to VirtualSize. When
// src is an *os.File (or a disk.Grown) its holes are skipped without reading them, and
// nothing is written where the disk reads as zeros, so a sparse raw disk
// gives a sparse image when w is a file.
func Write(ctx context.Context, w io.WriterAt, src io.ReaderAt, size int64, o Options) (*Stats, error) {
	if size < 0 || size%Sector != 0 {
		return nil, fmt.Errorf("vhd: a disk of %d bytes is not whole 512-byte sectors", size)
	}
	virtual := VirtualSize(size)
	f := Footer{
		DataOffset:   noOffset,
		Timestamp:    Timestamp(o.Time),
		CreatorVer:   creatorVersion,
		CreatorOS:    creatorOS,
		OriginalSize: uint64(virtual),
		CurrentSize:  uint64(virtual),
		Geometry:     GeometryFor(virtual),
		Type:         TypeFixed,
		UniqueID:     o.UniqueID,
	}
	copy(f.CreatorApp[:], CreatorApp)
	extents := disk.DataExtents(src, size)
	st := &Stats{VirtualSize: virtual}
	var err error
	if o.Dynamic {
		f.DataOffset = FooterSize
		f.Type = TypeDynamic
		err = writeDynamic(ctx, w, src, size, extents, &f, st, o.Progress)
	} else {
		err = writeFixed(ctx, w, src, size, extents, &f, st, o.Progress)
	}
	if err != nil {
		return nil, err
	}
	return st, nil
}

func writeFixed(ctx context.Context, w io.WriterAt, src io.ReaderAt, size int64, extents []disk.Extent, f *Footer, st *Stats, progress func(int64)) error {
	buf := make([]byte, chunk)
	for _, e := range extents {
		for off := e.Off; off < e.Off+e.Len; off += chunk {
			if err := ctx.Err(); err != nil {
				return err
			}
			b := buf[:min(chunk, e.Off+e.Len-off)]
			if err := readFull(src, b, off); err != nil {
				return err
			}
			if err := disk.WriteNonZero(w, b, off); err != nil {
				return fmt.Errorf("vhd: writing the disk at %d: %w", off, err)
			}
			if progress != nil {
				progress(int64(len(b)))
			}
		}
	}
	// The footer after the padded disk also gives the file its length,
	// whatever was left unwritten before it.
	if _, err := w.WriteAt(f.Marshal(), st.VirtualSize); err != nil {
		return fmt.Errorf("vhd: writing the footer: %w", err)
	}
	st.FileSize = st.VirtualSize + FooterSize
	return nil
}

func writeDynamic(ctx context.Context, w io.WriterAt, src io.ReaderAt, size int64, extents []disk.Extent, f *Footer, st *Stats, progress func(int64)) error {
	entries := uint32((st.VirtualSize + BlockSize - 1) / BlockSize)
	const table = FooterSize + headerSize
	bat := make([]byte, batSize(entries))
	for i := range bat {
		// The padding after the last entry is unallocated too, as qemu
		// leaves it.
		bat[i] = 0xFF
	}
	pos := table + int64(len(bat))
	// Every sector of a stored block is marked present: the block was read
	// whole, and a reader may then take its data as it stands.
	bitmap := bytes.Repeat([]byte{0xFF}, bitmapSize)
	buf := make([]byte, BlockSize)
	next := int64(0) // the first block not yet seen
	for _, e := range extents {
		first := max(e.Off/BlockSize, next)
		end := (e.Off + e.Len + BlockSize - 1) / BlockSize
		for blk := first; blk < end; blk++ {
			if err := ctx.Err(); err != nil {
				return err
			}
			off := blk * BlockSize
			want := min(BlockSize, size-off)
			if err := readFull(src, buf[:want], off); err != nil {
				return err
			}
			clear(buf[want:])
			if progress != nil {
				progress(want)
			}
			if disk.IsZero(buf) {
				continue
			}
			binary.BigEndian.PutUint32(bat[blk*4:], uint32(pos/Sector))
			if _, err := w.WriteAt(bitmap, pos); err != nil {
				return fmt.Errorf("vhd: writing block %d: %w", blk, err)
			}
			if err := disk.WriteNonZero(w, buf, pos+bitmapSize); err != nil {
				return fmt.Errorf("vhd: writing block %d: %w", blk, err)
			}
			pos += bitmapSize + BlockSize
			st.Blocks++
		}
		next = max(next, end)
	}
	if pos/Sector > unallocated-1 {
		return fmt.Errorf("vhd: a dynamic image of %d bytes is past what a BAT can address", pos)
	}
	ft := f.Marshal()
	for _, p := range []struct {
		what string
		b    []byte
		off  int64
	}{
		{"the footer copy", ft, 0},
		{"the dynamic header", dynamicHeader(table, entries), FooterSize},
		{"the BAT", bat, table},
		{"the footer", ft, pos},
	} {
		if _, err := w.WriteAt(p.b, p.off); err != nil {
			return fmt.Errorf("vhd: writing %s: %w", p.what, err)
		}
	}
	st.FileSize = pos + FooterSize
	return nil
}

func readFull(src io.ReaderAt, b []byte, off int64) error {
	k, err := src.ReadAt(b, off)
	if k < len(b) {
		if err == nil || err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("vhd: reading the raw disk at %d: %w", off, err)
	}
	return nil
}
