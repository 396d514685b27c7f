package pe

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"sort"
)

// digester computes, in one pass over an image's bytes in file order, its
// Authenticode digest and the sum its PE checksum is made of.
//
// The Authenticode digest (Microsoft's "Windows Authenticode Portable
// Executable Signature Format") covers the headers without the checksum
// and the certificate table's data directory entry, then the sections in
// the order of their raw data, then whatever follows them up to the
// certificate table. The images this package writes have their sections
// back to back from the end of the headers, so that is every byte of the
// file but those two fields and the table, in order; seal checks it.
type digester struct {
	h      hash.Hash
	skip   [][2]int64 // ranges left out of the digest, sorted
	off    int64
	ck     checksum
	layout error
}

func newDigester(im *Image, size int64, ck, cd int) *digester {
	d := &digester{h: sha256.New(), skip: [][2]int64{{int64(ck), int64(ck) + 4}, {int64(cd), int64(cd) + dirEntrySize}}}
	sort.Slice(d.skip, func(i, j int) bool { return d.skip[i][0] < d.skip[j][0] })
	d.layout = contiguous(im.secs, int64(len(im.head)), size)
	return d
}

// contiguous checks that sections with raw data follow each other from the
// end of the headers, so that hashing the file in order is hashing them in
// the order of their raw data, and that they end within size.
func contiguous(secs []Section, headers, size int64) error {
	var raw []Section
	for _, s := range secs {
		if s.SizeOfRawData > 0 {
			raw = append(raw, s)
		}
	}
	sort.Slice(raw, func(i, j int) bool { return raw[i].PointerToRawData < raw[j].PointerToRawData })
	at := headers
	for _, s := range raw {
		if int64(s.PointerToRawData) != at {
			return fmt.Errorf("section %s's raw data starts at %#x, not right after the previous one's (%#x)", s.Name, s.PointerToRawData, at)
		}
		at += int64(s.SizeOfRawData)
	}
	if at > size {
		return fmt.Errorf("the sections' raw data ends at %#x, past the image's %#x bytes", at, size)
	}
	return nil
}

func (d *digester) Write(b []byte) (int, error) {
	if d.layout != nil {
		return 0, d.layout
	}
	d.ck.add(b, d.off)
	start, end := d.off, d.off+int64(len(b))
	at := start
	for _, s := range d.skip {
		if s[1] <= at || s[0] >= end {
			continue
		}
		if s[0] > at {
			d.h.Write(b[at-start : s[0]-start])
		}
		at = min(s[1], end)
	}
	if at < end {
		d.h.Write(b[at-start:])
	}
	d.off = end
	return len(b), nil
}

func (d *digester) sum() []byte { return d.h.Sum(nil) }

// checksum is the PE checksum's running sum: the file's little-endian
// 16-bit words added up (the checksum field itself read as zero), folded
// to 16 bits with end-around carry, plus the file's length. The words are
// added as plain numbers and folded once at the end, which gives the same
// value as folding after every word.
type checksum struct{ sum uint64 }

// add adds b, found at offset off of the file.
func (c *checksum) add(b []byte, off int64) {
	if len(b) == 0 {
		return
	}
	if off%2 == 1 {
		c.sum += uint64(b[0]) << 8
		b = b[1:]
	}
	for len(b) >= 8 {
		v := binary.LittleEndian.Uint64(b)
		c.sum += v&0xffff + v>>16&0xffff + v>>32&0xffff + v>>48
		b = b[8:]
	}
	for len(b) >= 2 {
		c.sum += uint64(binary.LittleEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		c.sum += uint64(b[0])
	}
}

func (c *checksum) finish(size uint32) uint32 {
	s := c.sum
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint32(s) + size
}

// Checksum computes the PE checksum of the image in r (size bytes), as the
// loader checks it: the checksum field is read as zero.
func Checksum(r io.ReaderAt, size int64) (uint32, error) {
	f, err := Parse(r, size)
	if err != nil {
		return 0, err
	}
	var c checksum
	buf := make([]byte, 1<<20)
	ck := int64(f.opt + optCheckSum)
	for off := int64(0); off < size; {
		n, err := r.ReadAt(buf[:min(int64(len(buf)), size-off)], off)
		if n == 0 && err != nil {
			return 0, err
		}
		b := buf[:n]
		if off <= ck && ck < off+int64(n) {
			b = append([]byte(nil), b...)
			for i := ck; i < ck+4 && i < off+int64(n); i++ {
				b[i-off] = 0
			}
		}
		c.add(b, off)
		off += int64(n)
	}
	return c.finish(uint32(size)), nil
}

// Digest computes the Authenticode digest (SHA-256) of the image in r
// (size bytes), as a verifier does: the headers without the checksum and
// the certificate table entry, the sections in the order of their raw
// data, and what follows them up to the certificate table. It also returns
// the certificate table, if the image has one.
func Digest(r io.ReaderAt, size int64) (digest, certTable []byte, err error) {
	f, err := Parse(r, size)
	if err != nil {
		return nil, nil, err
	}
	coff, csize := f.CertTable()
	end := size
	if coff != 0 || csize != 0 {
		if int64(coff)+int64(csize) != size || coff%certAlign != 0 {
			return nil, nil, fmt.Errorf("the certificate table (%d bytes at %#x) does not end the %d-byte file on a quadword boundary", csize, coff, size)
		}
		end = int64(coff)
		certTable = make([]byte, csize)
		if _, err := r.ReadAt(certTable, int64(coff)); err != nil {
			return nil, nil, err
		}
	}
	h := sha256.New()
	ck, cd := int64(f.opt+optCheckSum), int64(f.dirOffset(dirSecurity))
	hdr := int64(f.SizeOfHeaders)
	h.Write(f.head[:ck])
	h.Write(f.head[ck+4 : cd])
	h.Write(f.head[cd+dirEntrySize : hdr])
	secs := append([]Section(nil), f.Sections...)
	sort.Slice(secs, func(i, j int) bool { return secs[i].PointerToRawData < secs[j].PointerToRawData })
	hashed := hdr
	for _, s := range secs {
		if s.SizeOfRawData == 0 {
			continue
		}
		if _, err := io.Copy(h, io.NewSectionReader(r, int64(s.PointerToRawData), int64(s.SizeOfRawData))); err != nil {
			return nil, nil, err
		}
		hashed += int64(s.SizeOfRawData)
	}
	// The specification counts the bytes hashed and takes what follows
	// that count, not the last section's end, as the extra data.
	if hashed < end {
		if _, err := io.Copy(h, io.NewSectionReader(r, hashed, end-hashed)); err != nil {
			return nil, nil, err
		}
	} else if hashed > end {
		return nil, nil, errors.New("the sections' raw data is larger than the file before its certificate table")
	}
	return h.Sum(nil), certTable, nil
}
