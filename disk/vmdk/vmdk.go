// Package vmdk writes and reads VMware virtual disks (VMware "Virtual Disk
// Format 5.0") of a raw disk, as one hosted sparse extent: stream-optimized
// (deflated grains with markers, what vSphere and OVF packages import) or
// monolithic sparse (plain grains behind a redundant and a primary grain
// directory, what VMware Workstation and qemu run).
//
// Both are made of 64 KiB grains; a grain table maps 512 of them (32 MiB of
// disk) and the grain directory maps the tables. Grains that read as zeros
// are left out. The layout is a function of the raw bytes and the options
// alone, so the same disk always gives the same image.
package vmdk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

const (
	// Sector is the unit every VMDK offset and size is counted in.
	Sector = 512
	// GrainSectors is the grain size: the specification's default, and the
	// one qemu and VMware's tools write.
	GrainSectors = 128
	// GrainSize is a grain in bytes.
	GrainSize = GrainSectors * Sector
	// gtEntries is the number of grains a grain table maps.
	gtEntries = 512
	// gtSectors is a grain table's size.
	gtSectors = gtEntries * 4 / Sector
	// gtCover is the bytes of disk one grain table maps.
	gtCover = gtEntries * GrainSize
	// MaxCapacity is the largest disk a hosted sparse extent holds: its
	// tables address the file in 32-bit sectors.
	MaxCapacity = 2 << 40
	// descSectors is the room kept for the embedded descriptor, as qemu and
	// VMware keep it.
	descSectors = 20
	descOffset  = 1

	magic = "KDMV"

	flagNewline    = 1 << 0
	flagRedundant  = 1 << 1
	flagCompressed = 1 << 16
	flagMarkers    = 1 << 17

	// gdAtEnd in a stream-optimized header says the grain directory's
	// offset is in the footer.
	gdAtEnd = 0xFFFFFFFFFFFFFFFF

	compressDeflate = 1

	// Marker types of a stream-optimized extent.
	markerEOS    = 0
	markerGT     = 1
	markerGD     = 2
	markerFooter = 3
)

// Type is the kind of image (the descriptor's createType).
type Type string

const (
	StreamOptimized  Type = "streamOptimized"
	MonolithicSparse Type = "monolithicSparse"
)

// Header is the fields of a sparse extent header.
type Header struct {
	Version     uint32
	Flags       uint32
	Capacity    uint64 // sectors
	GrainSize   uint64 // sectors
	DescOffset  uint64 // sectors
	DescSize    uint64 // sectors
	GTEntries   uint32
	RGDOffset   uint64 // sectors
	GDOffset    uint64 // sectors
	Overhead    uint64 // sectors
	Compression uint16
	UncleanShut uint8
}

// Marshal encodes h as the extent header's sector.
func (h *Header) Marshal() []byte {
	b := make([]byte, Sector)
	le := binary.LittleEndian
	copy(b, magic)
	le.PutUint32(b[4:], h.Version)
	le.PutUint32(b[8:], h.Flags)
	le.PutUint64(b[12:], h.Capacity)
	le.PutUint64(b[20:], h.GrainSize)
	le.PutUint64(b[28:], h.DescOffset)
	le.PutUint64(b[36:], h.DescSize)
	le.PutUint32(b[44:], h.GTEntries)
	le.PutUint64(b[48:], h.RGDOffset)
	le.PutUint64(b[56:], h.GDOffset)
	le.PutUint64(b[64:], h.Overhead)
	b[72] = h.UncleanShut
	// The line-end characters that let a reader see the file was not
	// carried through a text-mode transfer.
	copy(b[73:77], "\n \r\n")
	le.PutUint16(b[77:], h.Compression)
	return b
}

// ParseHeader decodes an extent header's sector.
func ParseHeader(b []byte) (*Header, error) {
	if len(b) < Sector || string(b[:4]) != magic {
		return nil, errors.New("vmdk: no sparse extent header (magic KDMV)")
	}
	le := binary.LittleEndian
	h := &Header{
		Version:     le.Uint32(b[4:]),
		Flags:       le.Uint32(b[8:]),
		Capacity:    le.Uint64(b[12:]),
		GrainSize:   le.Uint64(b[20:]),
		DescOffset:  le.Uint64(b[28:]),
		DescSize:    le.Uint64(b[36:]),
		GTEntries:   le.Uint32(b[44:]),
		RGDOffset:   le.Uint64(b[48:]),
		GDOffset:    le.Uint64(b[56:]),
		Overhead:    le.Uint64(b[64:]),
		UncleanShut: b[72],
		Compression: le.Uint16(b[77:]),
	}
	if h.Flags&flagNewline != 0 && string(b[73:77]) != "\n \r\n" {
		return nil, errors.New("vmdk: the header's line-end check bytes are changed (a text-mode copy?)")
	}
	if h.Version < 1 || h.Version > 3 {
		return nil, fmt.Errorf("vmdk: version %d is not 1, 2 or 3", h.Version)
	}
	if h.GrainSize == 0 || h.GrainSize > 1<<11 || h.GrainSize&(h.GrainSize-1) != 0 {
		return nil, fmt.Errorf("vmdk: a grain of %d sectors is not a power of two up to 1 MiB", h.GrainSize)
	}
	if h.GTEntries == 0 || h.GTEntries > gtEntries {
		return nil, fmt.Errorf("vmdk: %d entries per grain table is not 1 to %d", h.GTEntries, gtEntries)
	}
	// Checked here, before any size is worked out from it: a capacity
	// near 2^64 sectors overflows the byte count and every count after it.
	if h.Capacity > MaxCapacity/Sector {
		return nil, fmt.Errorf("vmdk: a capacity of %d sectors is past the %d bytes a hosted sparse extent holds", h.Capacity, int64(MaxCapacity))
	}
	return h, nil
}

// marker is a stream-optimized metadata marker's sector: numSectors of
// metadata of type typ follow it.
func marker(numSectors uint64, typ uint32) []byte {
	b := make([]byte, Sector)
	binary.LittleEndian.PutUint64(b, numSectors)
	binary.LittleEndian.PutUint32(b[12:], typ)
	return b
}

// Geometry is the BIOS geometry the descriptor states: VMware's for a
// SCSI disk, 255 heads of 63 sectors, the cylinders capped where the
// field's 16 bits end.
func Geometry(size int64) (cylinders, heads, sectors int64) {
	return min(size/(255*63*Sector), 65535), 255, 63
}

// Descriptor is the fields of an embedded descriptor a reader reports.
type Descriptor struct {
	Text       string
	CreateType string
	CID        string
	Adapter    string
	Extents    []string
}

// ParseDescriptor reads the text of an embedded descriptor.
func ParseDescriptor(b []byte) Descriptor {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		b = b[:i]
	}
	d := Descriptor{Text: string(b)}
	for _, line := range strings.Split(d.Text, "\n") {
		line = strings.TrimSpace(line)
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			if strings.HasPrefix(line, "RW ") || strings.HasPrefix(line, "RDONLY ") {
				d.Extents = append(d.Extents, line)
			}
			continue
		}
		v = strings.Trim(strings.TrimSpace(v), `"`)
		switch strings.TrimSpace(k) {
		case "createType":
			d.CreateType = v
		case "CID":
			d.CID = v
		case "ddb.adapterType":
			d.Adapter = v
		}
	}
	return d
}
