package vhd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Reader reads the guest disk of a VHD image, fixed or dynamic. It is safe
// for concurrent use: it keeps nothing but the BAT, read once.
type Reader struct {
	r      io.ReaderAt
	footer *Footer
	size   int64
	block  int64    // dynamic: the block size
	bat    []uint32 // dynamic: each block's sector, or unallocated
}

// maxEntries bounds the BAT a reader loads (a 2 TiB disk of 2 MiB blocks
// needs 2^20 entries; this allows 16 times that).
const maxEntries = 1 << 24

// Open reads the footer at the end of the image in r, of fileSize bytes,
// and for a dynamic image its header and BAT.
func Open(r io.ReaderAt, fileSize int64) (*Reader, error) {
	if fileSize < FooterSize {
		return nil, fmt.Errorf("vhd: a file of %d bytes has no room for a footer", fileSize)
	}
	b := make([]byte, FooterSize)
	if _, err := r.ReadAt(b, fileSize-FooterSize); err != nil {
		return nil, fmt.Errorf("vhd: reading the footer: %w", err)
	}
	f, err := ParseFooter(b)
	if err != nil {
		return nil, err
	}
	v := &Reader{r: r, footer: f, size: int64(f.CurrentSize)}
	if v.size < 0 || v.size%Sector != 0 {
		return nil, fmt.Errorf("vhd: a disk of %d bytes is not whole sectors", f.CurrentSize)
	}
	switch f.Type {
	case TypeFixed:
		if v.size > fileSize-FooterSize {
			return nil, fmt.Errorf("vhd: a fixed disk of %d bytes does not fit a file of %d", v.size, fileSize)
		}
		return v, nil
	case TypeDynamic:
	default:
		return nil, fmt.Errorf("vhd: disk type %d is not fixed (2) or dynamic (3)", f.Type)
	}
	hb := make([]byte, headerSize)
	if _, err := r.ReadAt(hb, int64(f.DataOffset)); err != nil {
		return nil, fmt.Errorf("vhd: reading the dynamic header at %d: %w", f.DataOffset, err)
	}
	h, err := parseHeader(hb)
	if err != nil {
		return nil, err
	}
	v.block = int64(h.blockSize)
	need := (v.size + v.block - 1) / v.block
	if int64(h.entries) < need {
		return nil, fmt.Errorf("vhd: %d BAT entries cannot map %d bytes", h.entries, v.size)
	}
	if h.entries > maxEntries {
		return nil, fmt.Errorf("vhd: a BAT of %d entries is larger than this reader loads", h.entries)
	}
	raw := make([]byte, int64(h.entries)*4)
	if _, err := r.ReadAt(raw, int64(h.table)); err != nil {
		return nil, fmt.Errorf("vhd: reading the BAT at %d: %w", h.table, err)
	}
	v.bat = make([]uint32, h.entries)
	for i := range v.bat {
		v.bat[i] = binary.BigEndian.Uint32(raw[i*4:])
	}
	return v, nil
}

// Size is the size of the guest disk in bytes.
func (v *Reader) Size() int64 { return v.size }

// Footer is the image's footer.
func (v *Reader) Footer() Footer { return *v.footer }

// Dynamic reports whether the image is dynamic.
func (v *Reader) Dynamic() bool { return v.bat != nil }

// ReadAt reads the guest disk.
func (v *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, errors.New("vhd: negative offset")
	}
	var eof error
	if off >= v.size {
		return 0, io.EOF
	}
	if int64(len(p)) > v.size-off {
		p, eof = p[:v.size-off], io.EOF
	}
	if v.bat == nil {
		n, err := v.r.ReadAt(p, off)
		if err != nil {
			return n, fmt.Errorf("vhd: reading the disk at %d: %w", off, err)
		}
		return n, eof
	}
	n := 0
	for n < len(p) {
		blk, in := (off+int64(n))/v.block, (off+int64(n))%v.block
		k := int(min(int64(len(p)-n), v.block-in))
		if err := v.readIn(p[n:n+k], blk, in); err != nil {
			return n, err
		}
		n += k
	}
	return n, eof
}

// readIn reads p from offset in of block blk. A sector whose bitmap bit is
// clear reads as zeros, as in an unallocated block.
func (v *Reader) readIn(p []byte, blk, in int64) error {
	e := v.bat[blk]
	if e == unallocated {
		clear(p)
		return nil
	}
	bmLen := (v.block/Sector/8 + Sector - 1) / Sector * Sector
	data := int64(e)*Sector + bmLen
	if _, err := v.r.ReadAt(p, data+in); err != nil {
		return fmt.Errorf("vhd: reading block %d at %d: %w", blk, data+in, err)
	}
	bm := make([]byte, (in+int64(len(p))+Sector*8-1)/(Sector*8)-in/(Sector*8))
	if _, err := v.r.ReadAt(bm, int64(e)*Sector+in/(Sector*8)); err != nil {
		return fmt.Errorf("vhd: reading block %d's bitmap: %w", blk, err)
	}
	first := in / Sector
	for s := first; s*Sector < in+int64(len(p)); s++ {
		bit := bm[s/8-first/8] & (0x80 >> (s % 8))
		if bit != 0 {
			continue
		}
		lo, hi := max(s*Sector, in)-in, min((s+1)*Sector, in+int64(len(p)))-in
		clear(p[lo:hi])
	}
	return nil
}
