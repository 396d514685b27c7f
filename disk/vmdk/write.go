package vmdk

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"strings"

	"github.com/klauspost/compress/zlib"
	"golang.org/x/sync/errgroup"

	"github.com/stamp-dev/stamp/disk"
)

// Options configure Write.
type Options struct {
	// Type is the kind of image; "" is StreamOptimized.
	Type Type
	// ID seeds the descriptor's content IDs and disk UUID; the caller
	// derives it from the recipe's seed so that rebuilds give the same bytes.
	ID [16]byte
	// FileName is the extent's name in the descriptor, the image's own file
	// name: a monolithic image's one extent is the file itself.
	FileName string
	// Workers compress grains concurrently; 0 means GOMAXPROCS. The image's
	// bytes do not depend on it.
	Workers int
	// Progress, when set, is told how many raw bytes have been consumed.
	Progress func(n int64)
}

// Stats say what Write stored.
type Stats struct {
	Capacity int64 // the disk's size in the image, in bytes
	Grains   int64 // grains stored
	FileSize int64
}

// level is the deflate level of stream-optimized grains. It is fixed, so
// the same grain always deflates to the same bytes; klauspost's level 5
// deflates a root file system's grains within a few percent of zlib's
// default, at a fraction of its time.
const level = 5

// chunk is how much of the raw disk is read at a time: whole grains.
const chunk = 64 * GrainSize

// Write encodes the raw disk of size bytes in src as a VMDK image written
// from offset 0 of w. When src is an *os.File its holes are skipped without
// reading them. A monolithic sparse image leaves pages of zeros inside its
// grains unwritten, so w must then give the file its length: an *os.File
// (anything with Truncate) does.
func Write(ctx context.Context, w io.WriterAt, src io.ReaderAt, size int64, o Options) (*Stats, error) {
	if size <= 0 || size%Sector != 0 {
		return nil, fmt.Errorf("vmdk: a disk of %d bytes is not whole 512-byte sectors", size)
	}
	if o.Type == "" {
		o.Type = StreamOptimized
	}
	if o.Workers <= 0 {
		o.Workers = runtime.GOMAXPROCS(0)
	}
	if size > MaxCapacity {
		return nil, fmt.Errorf("vmdk: a disk of %d bytes is past the %d a hosted sparse extent holds", size, int64(MaxCapacity))
	}
	if strings.ContainsAny(o.FileName, "\"\n") {
		return nil, fmt.Errorf("vmdk: the extent name %q cannot be quoted in a descriptor", o.FileName)
	}
	grains := (size + GrainSize - 1) / GrainSize
	wr := &writer{ctx: ctx, w: w, src: src, size: size, o: o, gt: make([]uint32, grains)}
	var err error
	switch o.Type {
	case StreamOptimized:
		err = wr.stream()
	case MonolithicSparse:
		err = wr.monolithic()
	default:
		err = fmt.Errorf("vmdk: type %q is not %s or %s", o.Type, StreamOptimized, MonolithicSparse)
	}
	if err != nil {
		return nil, err
	}
	return &wr.stats, nil
}

type writer struct {
	ctx   context.Context
	w     io.WriterAt
	src   io.ReaderAt
	size  int64
	o     Options
	gt    []uint32 // every grain's entry: its sector, 0 for none
	stats Stats
}

// header is the extent header of the image, its grain directory at gd.
func (wr *writer) header(gd uint64) *Header {
	h := &Header{Version: 1, Flags: flagNewline | flagRedundant, Capacity: uint64(wr.size / Sector), GrainSize: GrainSectors,
		DescOffset: descOffset, DescSize: descSectors, GTEntries: gtEntries, GDOffset: gd}
	if wr.o.Type == StreamOptimized {
		// Version 3 is what VMware writes for a stream-optimized extent
		// and reads as one; there is no redundant directory to flag.
		h.Version, h.Flags, h.Compression = 3, flagNewline|flagCompressed|flagMarkers, compressDeflate
		h.Overhead = GrainSectors
	}
	return h
}

// descriptor is the embedded descriptor, padded to its sectors.
func (wr *writer) descriptor() ([]byte, error) {
	id := wr.o.ID
	cid := binary.BigEndian.Uint32(id[12:])
	if cid == 0xFFFFFFFF {
		// ffffffff is the parentCID of a disk with no parent.
		cid = 0xFFFFFFFE
	}
	cyl, heads, secs := Geometry(wr.size)
	// ddb.uuid is VMware's spelling of a UUID: bytes apart, a dash halfway.
	var uuid strings.Builder
	for i, b := range id {
		switch {
		case i == 8:
			uuid.WriteByte('-')
		case i > 0:
			uuid.WriteByte(' ')
		}
		fmt.Fprintf(&uuid, "%02x", b)
	}
	name := wr.o.FileName
	if name == "" {
		name = "disk.vmdk"
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Disk DescriptorFile\nversion=1\nencoding=\"UTF-8\"\nCID=%08x\nparentCID=ffffffff\ncreateType=\"%s\"\n\n", cid, wr.o.Type)
	fmt.Fprintf(&b, "# Extent description\nRW %d SPARSE \"%s\"\n\n", wr.size/Sector, name)
	// lsilogic is the adapter VMware states for SCSI disks and what an OVF
	// import expects of a stream-optimized disk; the virtual machine's own
	// controller is the OVF descriptor's to say.
	fmt.Fprintf(&b, "# The Disk Data Base\n#DDB\n\nddb.adapterType = \"lsilogic\"\n")
	fmt.Fprintf(&b, "ddb.geometry.cylinders = \"%d\"\nddb.geometry.heads = \"%d\"\nddb.geometry.sectors = \"%d\"\n", cyl, heads, secs)
	fmt.Fprintf(&b, "ddb.longContentID = \"%x\"\nddb.uuid = \"%s\"\nddb.virtualHWVersion = \"4\"\n", id, uuid.String())
	if b.Len() > descSectors*Sector {
		return nil, fmt.Errorf("vmdk: a descriptor of %d bytes does not fit its %d sectors (extent name %q)", b.Len(), descSectors, name)
	}
	out := make([]byte, descSectors*Sector)
	copy(out, b.Bytes())
	return out, nil
}

// grainJob is one grain of data on its way through the compressors.
type grainJob struct {
	index int64
	data  []byte
	out   []byte
	done  chan struct{}
}

// eachGrain calls fn, in guest order, with every grain of the disk that holds
// data, padded with zeros to a whole grain. The slice is fn's until it
// returns.
func (wr *writer) eachGrain(fn func(index int64, b []byte) error) error {
	buf := make([]byte, chunk)
	next := int64(0) // the first grain not yet seen
	for _, e := range disk.DataExtents(wr.src, wr.size) {
		first := max(e.Off/GrainSize, next)
		end := (e.Off + e.Len + GrainSize - 1) / GrainSize
		for g := first; g < end; g += chunk / GrainSize {
			if err := wr.ctx.Err(); err != nil {
				return err
			}
			off := g * GrainSize
			n := min(int64(chunk), (end-g)*GrainSize)
			want := min(n, wr.size-off)
			b := buf[:n]
			if k, err := wr.src.ReadAt(b[:want], off); k < int(want) {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return fmt.Errorf("vmdk: reading the raw disk at %d: %w", off, err)
			}
			clear(b[want:])
			if wr.o.Progress != nil {
				wr.o.Progress(want)
			}
			for i := int64(0); i < n/GrainSize; i++ {
				gb := b[i*GrainSize : (i+1)*GrainSize]
				if disk.IsZero(gb) {
					continue
				}
				if err := fn(g+i, gb); err != nil {
					return err
				}
			}
		}
		next = max(next, end)
	}
	return nil
}

// stream writes a stream-optimized image: the header (its directory at the
// end), the descriptor, the deflated grains in guest order, each behind its
// marker, then the grain tables that hold any grain, the directory, the
// footer and the end-of-stream marker, each behind its marker. Everything
// is written in one pass from the start, as a stream reader takes it.
func (wr *writer) stream() error {
	out := &streamOut{bw: bufio.NewWriterSize(io.NewOffsetWriter(wr.w, 0), 1<<20)}
	desc, err := wr.descriptor()
	if err != nil {
		return err
	}
	out.put(wr.header(gdAtEnd).Marshal())
	out.put(desc)
	// The grains start a grain into the file, as VMware's do: the header
	// and descriptor fit before it.
	out.put(make([]byte, GrainSize-out.pos))
	if err := wr.streamGrains(out); err != nil {
		return err
	}
	if out.pos/Sector >= 1<<32 {
		return fmt.Errorf("vmdk: a stream of %d bytes is past what a grain table addresses", out.pos)
	}
	gdAt := wr.streamTables(out)
	out.put(marker(1, markerFooter))
	out.put(wr.header(gdAt).Marshal())
	out.put(marker(0, markerEOS))
	if err := out.bw.Flush(); err != nil {
		return fmt.Errorf("vmdk: writing the image: %w", err)
	}
	wr.stats.Capacity, wr.stats.FileSize = wr.size, out.pos
	return nil
}

// streamOut is a stream-optimized image being written from its start.
type streamOut struct {
	bw  *bufio.Writer
	pos int64 // bytes put so far
}

func (s *streamOut) put(b []byte) {
	s.bw.Write(b) // its error is kept and returned by Flush
	s.pos += int64(len(b))
}

// streamGrains puts every grain that holds data, deflated behind its
// marker, in guest order, and notes each in the grain tables. Grains are
// deflated concurrently and written in order, so the image is the same
// whatever the timing.
func (wr *writer) streamGrains(out *streamOut) error {
	g, ctx := errgroup.WithContext(wr.ctx)
	jobs := make(chan *grainJob, 4*wr.o.Workers)
	order := make(chan *grainJob, 4*wr.o.Workers)
	// Grain buffers go round through free rather than the garbage
	// collector: at most every grain in the channels is held at once.
	free := make(chan []byte, 8*wr.o.Workers+wr.o.Workers)
	get := func() []byte {
		select {
		case b := <-free:
			return b
		default:
			return make([]byte, GrainSize)
		}
	}
	g.Go(func() error {
		defer close(jobs)
		defer close(order)
		return wr.eachGrain(func(index int64, b []byte) error {
			j := &grainJob{index: index, data: get(), done: make(chan struct{})}
			copy(j.data, b)
			for _, c := range []chan *grainJob{order, jobs} {
				select {
				case c <- j:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			return nil
		})
	})
	for range wr.o.Workers {
		g.Go(func() error { return deflateGrains(jobs, free) })
	}
	g.Go(func() error {
		for j := range order {
			select {
			case <-j.done:
			case <-ctx.Done():
				return ctx.Err()
			}
			wr.gt[j.index] = uint32(out.pos / Sector)
			out.put(j.out)
			wr.stats.Grains++
		}
		return nil
	})
	return g.Wait()
}

// deflateGrains deflates each job's grain into its marker and stream,
// padded to a sector, and hands the grain's buffer back to free.
func deflateGrains(jobs <-chan *grainJob, free chan<- []byte) error {
	var buf bytes.Buffer
	zw, err := zlib.NewWriterLevel(&buf, level)
	if err != nil {
		return err
	}
	for j := range jobs {
		buf.Reset()
		// The marker's 12 bytes go before the stream, so the grain
		// is written with one copy.
		buf.Write(make([]byte, 12))
		zw.Reset(&buf)
		if _, err := zw.Write(j.data); err != nil {
			return fmt.Errorf("vmdk: deflating grain %d: %w", j.index, err)
		}
		if err := zw.Close(); err != nil {
			return fmt.Errorf("vmdk: deflating grain %d: %w", j.index, err)
		}
		out := buf.Bytes()
		binary.LittleEndian.PutUint64(out, uint64(j.index*GrainSectors))
		binary.LittleEndian.PutUint32(out[8:], uint32(len(out)-12))
		padded := (len(out) + Sector - 1) / Sector * Sector
		j.out = make([]byte, padded)
		copy(j.out, out)
		select {
		case free <- j.data:
		default:
		}
		j.data = nil
		close(j.done)
	}
	return nil
}

// streamTables puts the grain tables that hold any grain and the grain
// directory, each behind its marker, and returns the directory's sector.
func (wr *writer) streamTables(out *streamOut) uint64 {
	gts := (int64(len(wr.gt)) + gtEntries - 1) / gtEntries
	gd := make([]byte, roundSector(gts*4))
	table := make([]byte, gtSectors*Sector)
	for t := range gts {
		entries := wr.gt[t*gtEntries : min((t+1)*gtEntries, int64(len(wr.gt)))]
		if allZero(entries) {
			continue
		}
		out.put(marker(gtSectors, markerGT))
		binary.LittleEndian.PutUint32(gd[t*4:], uint32(out.pos/Sector))
		clear(table)
		for i, e := range entries {
			binary.LittleEndian.PutUint32(table[i*4:], e)
		}
		out.put(table)
	}
	out.put(marker(uint64(len(gd)/Sector), markerGD))
	gdAt := uint64(out.pos / Sector)
	out.put(gd)
	return gdAt
}

// monolithic writes a monolithic sparse image as qemu lays one out: the
// header, the descriptor, the redundant directory and its tables, the
// directory and its tables (every table allocated), then from the next
// grain boundary the grains that hold data, in guest order.
func (wr *writer) monolithic() error {
	gts := (int64(len(wr.gt)) + gtEntries - 1) / gtEntries
	gdSectors := roundSector(gts*4) / Sector
	rgd := int64(descOffset + descSectors)
	gd := rgd + gdSectors + gts*gtSectors
	overhead := (gd + gdSectors + gts*gtSectors + GrainSectors - 1) / GrainSectors * GrainSectors
	pos := overhead * Sector
	trunc, sparse := wr.w.(interface{ Truncate(int64) error })
	err := wr.eachGrain(func(index int64, b []byte) error {
		var err error
		if sparse {
			err = disk.WriteNonZero(wr.w, b, pos)
		} else {
			_, err = wr.w.WriteAt(b, pos)
		}
		if err != nil {
			return fmt.Errorf("vmdk: writing grain %d: %w", index, err)
		}
		wr.gt[index] = uint32(pos / Sector)
		pos += GrainSize
		wr.stats.Grains++
		return nil
	})
	if err != nil {
		return err
	}
	if pos/Sector >= 1<<32 {
		return fmt.Errorf("vmdk: an image of %d bytes is past what a grain table addresses", pos)
	}
	desc, err := wr.descriptor()
	if err != nil {
		return err
	}
	tables := func(dir int64) ([]byte, []byte) {
		d := make([]byte, gdSectors*Sector)
		t := make([]byte, gts*gtSectors*Sector)
		for i := range gts {
			binary.LittleEndian.PutUint32(d[i*4:], uint32(dir+gdSectors+i*gtSectors))
		}
		for i, e := range wr.gt {
			binary.LittleEndian.PutUint32(t[i*4:], e)
		}
		return d, t
	}
	h := wr.header(uint64(gd))
	h.RGDOffset, h.Overhead = uint64(rgd), uint64(overhead)
	rd, rt := tables(rgd)
	pd, pt := tables(gd)
	for _, p := range []struct {
		what string
		b    []byte
		at   int64
	}{
		{"the header", h.Marshal(), 0},
		{"the descriptor", desc, descOffset * Sector},
		{"the redundant grain directory", rd, rgd * Sector},
		{"the redundant grain tables", rt, (rgd + gdSectors) * Sector},
		{"the grain directory", pd, gd * Sector},
		{"the grain tables", pt, (gd + gdSectors) * Sector},
	} {
		if _, err := wr.w.WriteAt(p.b, p.at); err != nil {
			return fmt.Errorf("vmdk: writing %s: %w", p.what, err)
		}
	}
	if sparse {
		if err := trunc.Truncate(pos); err != nil {
			return fmt.Errorf("vmdk: setting the image's length: %w", err)
		}
	}
	wr.stats.Capacity, wr.stats.FileSize = wr.size, pos
	return nil
}

func roundSector(n int64) int64 { return (n + Sector - 1) / Sector * Sector }

func allZero(s []uint32) bool {
	for _, v := range s {
		if v != 0 {
			return false
		}
	}
	return true
}
