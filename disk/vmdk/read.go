package vmdk

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/zlib"
)

// Reader reads the guest disk of a hosted sparse VMDK extent,
// stream-optimized or monolithic sparse. It is safe for concurrent use.
type Reader struct {
	r      io.ReaderAt
	header *Header
	desc   Descriptor
	size   int64
	grain  int64 // bytes
	per    int64 // entries per grain table
	gd     []uint32
	// tables are the grain tables by sector. They are loaded once, in
	// Open, and shared where directory entries share a sector, so what a
	// reader holds is bounded by the file's size, whatever its header says.
	tables map[uint32][]uint32
	stored int64 // grains stored

	mu     sync.Mutex
	cached int64 // the grain in cache, -1 for none
	cache  []byte
}

// maxGrains bounds the tables a reader loads: 2^26 grains of 64 KiB is
// 4 TiB, twice what a sparse extent may hold.
const maxGrains = 1 << 26

// Open reads the header (or, when the directory is at the end, the footer)
// of the image in r, of fileSize bytes, its descriptor and its tables.
func Open(r io.ReaderAt, fileSize int64) (*Reader, error) {
	b := make([]byte, Sector)
	if _, err := r.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("vmdk: reading the header: %w", err)
	}
	h, err := ParseHeader(b)
	if err != nil {
		return nil, err
	}
	descAt, descLen := h.DescOffset, h.DescSize
	if h.GDOffset == gdAtEnd {
		// A stream ends in the footer's marker, the footer (the header
		// with the directory's offset filled) and the end-of-stream marker.
		if fileSize < 4*Sector {
			return nil, fmt.Errorf("vmdk: a stream of %d bytes has no room for a footer", fileSize)
		}
		f := make([]byte, 3*Sector)
		if _, err := r.ReadAt(f, fileSize-3*Sector); err != nil {
			return nil, fmt.Errorf("vmdk: reading the footer: %w", err)
		}
		le := binary.LittleEndian
		if le.Uint32(f[8:]) != 0 || le.Uint32(f[12:]) != markerFooter || le.Uint64(f[2*Sector:]) != 0 || le.Uint32(f[2*Sector+12:]) != markerEOS {
			return nil, errors.New("vmdk: a stream that does not end in a footer and an end-of-stream marker")
		}
		if h, err = ParseHeader(f[Sector : 2*Sector]); err != nil {
			return nil, fmt.Errorf("vmdk: footer: %w", err)
		}
		if h.GDOffset == gdAtEnd {
			return nil, errors.New("vmdk: the footer does not say where the grain directory is")
		}
	}
	v := &Reader{r: r, header: h, size: int64(h.Capacity) * Sector, grain: int64(h.GrainSize) * Sector, cached: -1}
	if descAt != 0 && descLen > 0 {
		if descLen > 2048 {
			return nil, fmt.Errorf("vmdk: a descriptor of %d sectors is larger than this reader loads", descLen)
		}
		d := make([]byte, descLen*Sector)
		if _, err := r.ReadAt(d, int64(descAt)*Sector); err != nil {
			return nil, fmt.Errorf("vmdk: reading the descriptor at sector %d: %w", descAt, err)
		}
		v.desc = ParseDescriptor(d)
	}
	if h.Compression != 0 && (h.Compression != compressDeflate || h.Flags&flagMarkers == 0) {
		return nil, fmt.Errorf("vmdk: compression %d without grain markers is not read here", h.Compression)
	}
	grains := (v.size + v.grain - 1) / v.grain
	if grains > maxGrains {
		return nil, fmt.Errorf("vmdk: a disk of %d grains is larger than this reader loads", grains)
	}
	v.per = int64(h.GTEntries)
	gts := (grains + v.per - 1) / v.per
	if gts*4 > fileSize {
		return nil, fmt.Errorf("vmdk: a grain directory of %d tables does not fit a file of %d bytes", gts, fileSize)
	}
	gd := make([]byte, gts*4)
	if _, err := r.ReadAt(gd, int64(h.GDOffset)*Sector); err != nil {
		return nil, fmt.Errorf("vmdk: reading the grain directory at sector %d: %w", h.GDOffset, err)
	}
	v.gd = make([]uint32, gts)
	v.tables = map[uint32][]uint32{}
	t := make([]byte, v.per*4)
	for i := range gts {
		at := binary.LittleEndian.Uint32(gd[i*4:])
		v.gd[i] = at
		if at == 0 {
			continue
		}
		table, ok := v.tables[at]
		if !ok {
			if _, err := r.ReadAt(t, int64(at)*Sector); err != nil {
				return nil, fmt.Errorf("vmdk: reading grain table %d at sector %d: %w", i, at, err)
			}
			table = make([]uint32, v.per)
			for j := range table {
				table[j] = binary.LittleEndian.Uint32(t[j*4:])
			}
			v.tables[at] = table
		}
		for j := int64(0); j < v.per && i*v.per+j < grains; j++ {
			if table[j] > 1 {
				v.stored++
			}
		}
	}
	return v, nil
}

// Size is the size of the guest disk in bytes.
func (v *Reader) Size() int64 { return v.size }

// Header is the extent's header (the footer's, for a stream).
func (v *Reader) Header() Header { return *v.header }

// Descriptor is the embedded descriptor.
func (v *Reader) Descriptor() Descriptor { return v.desc }

// Grains is how many grains the image stores.
func (v *Reader) Grains() int64 { return v.stored }

// Compressed reports whether grains are deflated (a stream-optimized extent).
func (v *Reader) Compressed() bool { return v.header.Compression == compressDeflate }

// ReadAt reads the guest disk.
func (v *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("vmdk: negative offset")
	}
	if off >= v.size {
		return 0, io.EOF
	}
	var eof error
	if int64(len(p)) > v.size-off {
		p, eof = p[:v.size-off], io.EOF
	}
	n := 0
	for n < len(p) {
		g, in := (off+int64(n))/v.grain, (off+int64(n))%v.grain
		k := int(min(int64(len(p)-n), v.grain-in))
		if err := v.readIn(p[n:n+k], g, in); err != nil {
			return n, err
		}
		n += k
	}
	return n, eof
}

// readIn reads p from offset in of grain g. Entry 0 is a grain never
// written and 1 a grain written as zeros (a version 2 extent's zeroed
// grain); both read as zeros.
func (v *Reader) readIn(p []byte, g, in int64) error {
	var e int64
	if at := v.gd[g/v.per]; at != 0 {
		e = int64(v.tables[at][g%v.per])
	}
	if e <= 1 {
		clear(p)
		return nil
	}
	if !v.Compressed() {
		if _, err := v.r.ReadAt(p, e*Sector+in); err != nil {
			return fmt.Errorf("vmdk: reading grain %d at sector %d: %w", g, e, err)
		}
		return nil
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cached != g {
		if err := v.inflate(g, e); err != nil {
			v.cached = -1
			return err
		}
		v.cached = g
	}
	copy(p, v.cache[in:])
	return nil
}

// inflate reads the deflated grain g, whose marker is at sector e, into the
// cache.
func (v *Reader) inflate(g, e int64) error {
	m := make([]byte, 12)
	if _, err := v.r.ReadAt(m, e*Sector); err != nil {
		return fmt.Errorf("vmdk: reading grain %d's marker at sector %d: %w", g, e, err)
	}
	lba, n := binary.LittleEndian.Uint64(m), int64(binary.LittleEndian.Uint32(m[8:]))
	if lba != uint64(g*v.grain/Sector) {
		return fmt.Errorf("vmdk: the marker at sector %d is of sector %d, its table says grain %d (sector %d)", e, lba, g, g*v.grain/Sector)
	}
	if n == 0 || n > 2*v.grain {
		return fmt.Errorf("vmdk: grain %d's marker gives %d bytes of deflate", g, n)
	}
	z := make([]byte, n)
	if _, err := v.r.ReadAt(z, e*Sector+12); err != nil {
		return fmt.Errorf("vmdk: reading grain %d at sector %d: %w", g, e, err)
	}
	zr, err := zlib.NewReader(bytes.NewReader(z))
	if err != nil {
		return fmt.Errorf("vmdk: grain %d: %w", g, err)
	}
	if v.cache == nil {
		v.cache = make([]byte, v.grain)
	}
	k, err := io.ReadFull(zr, v.cache)
	if err != nil && err != io.ErrUnexpectedEOF {
		return fmt.Errorf("vmdk: inflating grain %d: %w", g, err)
	}
	// A writer may deflate only the disk's part of its last grain.
	clear(v.cache[k:])
	return nil
}
