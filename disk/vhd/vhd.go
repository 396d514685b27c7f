// Package vhd writes and reads Microsoft Virtual Hard Disk images (the
// "Virtual Hard Disk Image Format Specification", version 1.0) of a raw
// disk, fixed or dynamic.
//
// A fixed image is the raw disk followed by a 512-byte footer. A dynamic
// image is a copy of the footer, the dynamic disk header, the block
// allocation table (BAT), the blocks that hold data, each a sector bitmap
// and 2 MiB of disk, in guest order, and the footer. Blocks that read as
// zeros are left out. The layout is a function of the raw bytes and the
// options alone, so the same disk always gives the same image.
package vhd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

const (
	// Sector is the unit every VHD offset and size is counted in.
	Sector = 512
	// FooterSize is the size of the footer (and of its copy).
	FooterSize = 512
	// headerSize is the size of the dynamic disk header.
	headerSize = 1024
	// BlockSize is the dynamic image's block size: the specification's
	// default, and what qemu, Hyper-V and Azure's tools use.
	BlockSize = 2 << 20
	// bitmapSize is one block's sector bitmap (one bit per sector) padded
	// to a whole sector.
	bitmapSize = (BlockSize/Sector/8 + Sector - 1) / Sector * Sector

	footerCookie = "conectix"
	headerCookie = "cxsparse"

	// features: bit 1 is reserved and must always be set.
	features       = 0x00000002
	formatVersion  = 0x00010000
	headerVersion  = 0x00010000
	noOffset       = 0xFFFFFFFFFFFFFFFF
	unallocated    = 0xFFFFFFFF
	creatorVersion = 0x00010000

	// CreatorApp names stamp as the image's writer. qemu sizes an image
	// from a creator it does not know by its CHS geometry, the others by
	// the footer's current size: Write chooses a geometry whose product is
	// the current size (see GeometryFor), so both rules give one size.
	CreatorApp = "stmp"
	// creatorOS is "Wi2k", as qemu writes and Azure's tools accept; the
	// specification's other value, "Mac ", has no meaning for a disk stamp
	// builds.
	creatorOS = 0x5769326B

	// Disk types.
	TypeFixed   = 2
	TypeDynamic = 3
)

// vhdEpoch is the origin of the footer's time stamp.
var vhdEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Timestamp is t as a footer stores it: seconds since 2000-01-01 UTC, 0 for
// an earlier time (the field is unsigned), and capped where 32 bits end.
func Timestamp(t time.Time) uint32 {
	s := t.Unix() - vhdEpoch.Unix()
	switch {
	case s < 0:
		return 0
	case s > 0xFFFFFFFF:
		return 0xFFFFFFFF
	}
	return uint32(s)
}

// Geometry is a disk's cylinders, heads and sectors per track.
type Geometry struct {
	Cylinders uint16
	Heads     uint8
	Sectors   uint8
}

// CHS computes the geometry of a disk of size bytes by the specification's
// algorithm (its appendix "CHS Calculation"). The geometry is capped at
// 65535×16×255 sectors, so a larger disk's geometry covers less than it.
func CHS(size int64) Geometry {
	total := size / Sector
	if total > 65535*16*255 {
		total = 65535 * 16 * 255
	}
	var spt, heads, cth int64
	if total >= 65535*16*63 {
		spt, heads = 255, 16
		cth = total / spt
	} else {
		spt = 17
		cth = total / spt
		heads = max((cth+1023)/1024, 4)
		if cth >= heads*1024 || heads > 16 {
			spt, heads = 31, 16
			cth = total / spt
		}
		if cth >= heads*1024 {
			spt, heads = 63, 16
			cth = total / spt
		}
	}
	return Geometry{Cylinders: uint16(cth / heads), Heads: uint8(heads), Sectors: uint8(spt)}
}

// maxGeometry is the largest geometry a footer can state. qemu takes it as
// the sign that the geometry does not cover the disk, and reads the
// footer's current size instead, whoever the creator.
var maxGeometry = Geometry{Cylinders: 65535, Heads: 16, Sectors: 255}

// sectors is the number of sectors a geometry covers.
func (g Geometry) sectors() int64 { return int64(g.Cylinders) * int64(g.Heads) * int64(g.Sectors) }

// GeometryFor is the geometry Write states for a disk of size bytes: one
// that covers exactly size, so a reader that sizes the disk by its
// geometry (qemu, for a creator it does not know; Virtual PC) sees the
// size a reader of the current size (Hyper-V, Azure, VirtualBox) does.
// That is the specification's geometry when it covers size exactly;
// otherwise 16 heads, as the specification gives every disk past 255 MiB,
// and the fewest sectors per track from 63 up (the specification's count
// below 31 GiB) that divide the disk into at most 65535 cylinders, which
// exists for every whole-MiB size below 64 GiB; otherwise, for a larger
// disk with no such factoring, the maximum geometry, which qemu reads as
// "size by the footer".
func GeometryFor(size int64) Geometry {
	if g := CHS(size); g.sectors()*Sector == size {
		return g
	}
	total := size / Sector
	if size%Sector == 0 && total%16 == 0 {
		for spt := int64(63); spt <= 255; spt++ {
			if c := total / 16 / spt; total%(16*spt) == 0 && c <= 65535 {
				return Geometry{Cylinders: uint16(c), Heads: 16, Sectors: uint8(spt)}
			}
		}
	}
	return maxGeometry
}

// Footer is the fields of a VHD footer stamp sets or reads.
type Footer struct {
	DataOffset   uint64 // the dynamic header's offset; noOffset for fixed
	Timestamp    uint32
	CreatorApp   [4]byte
	CreatorVer   uint32
	CreatorOS    uint32
	OriginalSize uint64
	CurrentSize  uint64
	Geometry     Geometry
	Type         uint32
	UniqueID     [16]byte
	SavedState   uint8
}

// checksum is the one's complement of the byte sum of b, the checksum
// field itself counted as zero by the caller.
func checksum(b []byte) uint32 {
	var s uint32
	for _, c := range b {
		s += uint32(c)
	}
	return ^s
}

// Marshal encodes f as the 512 bytes of a footer, its checksum filled.
func (f *Footer) Marshal() []byte {
	b := make([]byte, FooterSize)
	be := binary.BigEndian
	copy(b[0:], footerCookie)
	be.PutUint32(b[8:], features)
	be.PutUint32(b[12:], formatVersion)
	be.PutUint64(b[16:], f.DataOffset)
	be.PutUint32(b[24:], f.Timestamp)
	copy(b[28:32], f.CreatorApp[:])
	be.PutUint32(b[32:], f.CreatorVer)
	be.PutUint32(b[36:], f.CreatorOS)
	be.PutUint64(b[40:], f.OriginalSize)
	be.PutUint64(b[48:], f.CurrentSize)
	be.PutUint16(b[56:], f.Geometry.Cylinders)
	b[58] = f.Geometry.Heads
	b[59] = f.Geometry.Sectors
	be.PutUint32(b[60:], f.Type)
	copy(b[68:84], f.UniqueID[:])
	b[84] = f.SavedState
	be.PutUint32(b[64:], checksum(b))
	return b
}

// ParseFooter decodes a footer and checks its cookie and checksum.
func ParseFooter(b []byte) (*Footer, error) {
	if len(b) < FooterSize {
		return nil, fmt.Errorf("vhd: a footer of %d bytes is too short", len(b))
	}
	b = b[:FooterSize]
	if string(b[:8]) != footerCookie {
		return nil, errors.New("vhd: no footer (cookie conectix)")
	}
	be := binary.BigEndian
	want := be.Uint32(b[64:])
	c := append([]byte(nil), b...)
	clear(c[64:68])
	if got := checksum(c); got != want {
		return nil, fmt.Errorf("vhd: footer checksum is %#08x, its bytes sum to %#08x", want, got)
	}
	f := &Footer{
		DataOffset:   be.Uint64(b[16:]),
		Timestamp:    be.Uint32(b[24:]),
		CreatorVer:   be.Uint32(b[32:]),
		CreatorOS:    be.Uint32(b[36:]),
		OriginalSize: be.Uint64(b[40:]),
		CurrentSize:  be.Uint64(b[48:]),
		Geometry:     Geometry{Cylinders: be.Uint16(b[56:]), Heads: b[58], Sectors: b[59]},
		Type:         be.Uint32(b[60:]),
		SavedState:   b[84],
	}
	copy(f.CreatorApp[:], b[28:32])
	copy(f.UniqueID[:], b[68:84])
	return f, nil
}

// dynamicHeader encodes the dynamic disk header of an image whose BAT, of
// entries entries, is at table.
func dynamicHeader(table uint64, entries uint32) []byte {
	b := make([]byte, headerSize)
	be := binary.BigEndian
	copy(b[0:], headerCookie)
	be.PutUint64(b[8:], noOffset)
	be.PutUint64(b[16:], table)
	be.PutUint32(b[24:], headerVersion)
	be.PutUint32(b[28:], entries)
	be.PutUint32(b[32:], BlockSize)
	be.PutUint32(b[36:], checksum(b))
	return b
}

// header is what a reader needs of a dynamic disk header.
type header struct {
	table     uint64
	entries   uint32
	blockSize uint32
}

func parseHeader(b []byte) (*header, error) {
	if len(b) < headerSize || string(b[:8]) != headerCookie {
		return nil, errors.New("vhd: no dynamic disk header (cookie cxsparse)")
	}
	be := binary.BigEndian
	want := be.Uint32(b[36:])
	c := append([]byte(nil), b[:headerSize]...)
	clear(c[36:40])
	if got := checksum(c); got != want {
		return nil, fmt.Errorf("vhd: dynamic header checksum is %#08x, its bytes sum to %#08x", want, got)
	}
	h := &header{table: be.Uint64(b[16:]), entries: be.Uint32(b[28:]), blockSize: be.Uint32(b[32:])}
	if h.blockSize == 0 || h.blockSize%Sector != 0 {
		return nil, fmt.Errorf("vhd: a block size of %d bytes is not whole sectors", h.blockSize)
	}
	return h, nil
}

// batSize is the bytes a BAT of n entries takes, padded to a sector.
func batSize(n uint32) int64 { return (int64(n)*4 + Sector - 1) / Sector * Sector }
