package disk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
)

// Grown is a GPT disk seen at a larger size, as `sgdisk -e` would leave it
// after the disk grew: the backup GPT moved to the new end, the primary
// header's backup location and last usable sector moved with it, and the
// protective MBR covering the whole disk. The partitions and everything
// else stay where they were; the old backup and the added space read as
// zeros. An output that pads the raw disk (GCE's whole GiB) reads it
// through a Grown, so its GPT describes the disk its reader sees.
type Grown struct {
	src     io.ReaderAt
	size    int64 // of the disk in src
	newSize int64
	head    []byte // sectors 0 and 1: the protective MBR and primary header
	oldTail int64  // where the old backup GPT begins
	tail    []byte // the new backup GPT: the entries, then the header
	extents []Extent
}

// gptHeaderLBA is the primary GPT header's sector.
const gptHeaderLBA = 1

// Grow returns the disk of size bytes in src as a disk of newSize bytes.
// The disk must have a valid GPT whose backup is at its end; newSize must
// be whole sectors and no smaller.
func Grow(src io.ReaderAt, size, newSize int64) (*Grown, error) {
	if size%SectorSize != 0 || newSize%SectorSize != 0 || newSize < size {
		return nil, fmt.Errorf("gpt: cannot grow a disk of %d bytes to %d", size, newSize)
	}
	g := &Grown{src: src, size: size, newSize: newSize, oldTail: size}
	if newSize == size {
		g.extents = DataExtents(src, size)
		return g, nil
	}
	head := make([]byte, 2*SectorSize)
	if _, err := src.ReadAt(head, 0); err != nil {
		return nil, fmt.Errorf("gpt: reading the primary header: %w", err)
	}
	hdr := head[gptHeaderLBA*SectorSize:]
	h, err := parseGPTHeader(hdr, gptHeaderLBA)
	if err != nil {
		return nil, err
	}
	last := size/SectorSize - 1
	if h.alternate != uint64(last) {
		return nil, fmt.Errorf("gpt: the backup header is at sector %d, not at the disk's end (%d)", h.alternate, last)
	}
	entryBytes := int64(h.entries) * int64(h.entrySize)
	entrySectors := (entryBytes + SectorSize - 1) / SectorSize
	array := make([]byte, entrySectors*SectorSize)
	if _, err := src.ReadAt(array, int64(h.entryLBA)*SectorSize); err != nil {
		return nil, fmt.Errorf("gpt: reading the partition entries: %w", err)
	}
	if crc32.ChecksumIEEE(array[:entryBytes]) != h.entriesCRC {
		return nil, errors.New("gpt: the partition entries do not match their checksum")
	}
	backup := make([]byte, SectorSize)
	if _, err := src.ReadAt(backup, last*SectorSize); err != nil {
		return nil, fmt.Errorf("gpt: reading the backup header: %w", err)
	}
	b, err := parseGPTHeader(backup, uint64(last))
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if b.entryLBA != uint64(last-entrySectors) {
		return nil, fmt.Errorf("gpt: the backup entries are at sector %d, not just before the backup header", b.entryLBA)
	}
	g.oldTail = int64(b.entryLBA) * SectorSize

	newLast := uint64(newSize/SectorSize - 1)
	le := binary.LittleEndian
	le.PutUint64(hdr[32:], newLast)                        // AlternateLBA
	le.PutUint64(hdr[48:], newLast-uint64(entrySectors)-1) // LastUsableLBA
	sealGPTHeader(hdr, h.size)
	g.tail = make([]byte, (entrySectors+1)*SectorSize)
	copy(g.tail, array)
	bh := g.tail[entrySectors*SectorSize:]
	copy(bh, hdr[:SectorSize])
	le.PutUint64(bh[24:], newLast)                      // MyLBA
	le.PutUint64(bh[32:], gptHeaderLBA)                 // AlternateLBA
	le.PutUint64(bh[72:], newLast-uint64(entrySectors)) // PartitionEntryLBA
	sealGPTHeader(bh, h.size)
	// The protective MBR's partition covers the disk, or as much of it
	// as 32 bits of sectors count.
	for i := 0; i < 4; i++ {
		e := head[446+16*i : 446+16*(i+1)]
		if e[4] == 0xEE && le.Uint32(e[8:]) == gptHeaderLBA {
			le.PutUint32(e[12:], uint32(min(newLast, 0xFFFFFFFF)))
		}
	}
	g.head = head
	g.extents = g.growExtents(DataExtents(src, size))
	return g, nil
}

// gptHeader is what Grow needs of a GPT header.
type gptHeader struct {
	size                uint32
	alternate, entryLBA uint64
	entries, entrySize  uint32
	entriesCRC          uint32
}

// parseGPTHeader checks a GPT header's signature, size, checksum and own
// location.
func parseGPTHeader(b []byte, lba uint64) (*gptHeader, error) {
	le := binary.LittleEndian
	if string(b[:8]) != "EFI PART" {
		return nil, fmt.Errorf("gpt: no GPT header at sector %d", lba)
	}
	h := &gptHeader{size: le.Uint32(b[12:]), alternate: le.Uint64(b[32:]), entryLBA: le.Uint64(b[72:]),
		entries: le.Uint32(b[80:]), entrySize: le.Uint32(b[84:]), entriesCRC: le.Uint32(b[88:])}
	if h.size < 92 || h.size > SectorSize {
		return nil, fmt.Errorf("gpt: a header of %d bytes at sector %d", h.size, lba)
	}
	c := append([]byte(nil), b[:h.size]...)
	clear(c[16:20])
	if crc32.ChecksumIEEE(c) != le.Uint32(b[16:]) {
		return nil, fmt.Errorf("gpt: the header at sector %d does not match its checksum", lba)
	}
	if le.Uint64(b[24:]) != lba {
		return nil, fmt.Errorf("gpt: the header at sector %d says it is at %d", lba, le.Uint64(b[24:]))
	}
	if h.entrySize < 128 || h.entries == 0 || int64(h.entries)*int64(h.entrySize) > 1<<24 {
		return nil, fmt.Errorf("gpt: %d partition entries of %d bytes", h.entries, h.entrySize)
	}
	return h, nil
}

// sealGPTHeader fills the checksum of a header of size bytes.
func sealGPTHeader(b []byte, size uint32) {
	clear(b[16:20])
	binary.LittleEndian.PutUint32(b[16:], crc32.ChecksumIEEE(b[:size]))
}

// growExtents are the grown disk's data extents from the original's: its
// extents but for the old backup, the head, and the new backup.
func (g *Grown) growExtents(src []Extent) []Extent {
	out := []Extent{{0, int64(len(g.head))}}
	for _, e := range src {
		if end := min(e.Off+e.Len, g.oldTail); end > e.Off {
			out = append(out, Extent{e.Off, end - e.Off})
		}
	}
	out = append(out, Extent{g.newSize - int64(len(g.tail)), int64(len(g.tail))})
	sort.Slice(out, func(i, j int) bool { return out[i].Off < out[j].Off })
	merged := out[:1]
	for _, e := range out[1:] {
		l := &merged[len(merged)-1]
		if e.Off <= l.Off+l.Len {
			l.Len = max(l.Len, e.Off+e.Len-l.Off)
			continue
		}
		merged = append(merged, e)
	}
	return merged
}

// Size is the grown disk's size.
func (g *Grown) Size() int64 { return g.newSize }

// Extents lists where the grown disk may hold data, as DataExtents does
// for a file.
func (g *Grown) Extents() []Extent { return g.extents }

// ReadAt reads the grown disk.
func (g *Grown) ReadAt(b []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("gpt: read at %d", off)
	}
	n := 0
	for n < len(b) {
		at := off + int64(n)
		if at >= g.newSize {
			return n, io.EOF
		}
		p := b[n:]
		tailAt := g.newSize - int64(len(g.tail))
		switch {
		case at < int64(len(g.head)):
			n += copy(p, g.head[at:])
		case at >= tailAt:
			n += copy(p, g.tail[at-tailAt:])
		case at >= g.oldTail:
			k := min(int64(len(p)), tailAt-at)
			clear(p[:k])
			n += int(k)
		default:
			k := min(int64(len(p)), g.oldTail-at)
			if m, err := g.src.ReadAt(p[:k], at); int64(m) < k {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return n + m, err
			}
			n += int(k)
		}
	}
	return n, nil
}
