// Package iso9660 writes and reads ISO 9660 images as stamp's iso output
// lays them out: one directory, the root, of files with level-1 names
// (8.3, upper case), an El Torito boot catalog with a BIOS and an EFI
// entry, and each file's extent placed on the boundary its caller asks for,
// so that a GPT written into the first 32 KiB (which ISO 9660 leaves to the
// system) can name the same extents as partitions: a hybrid image that
// boots from a CD and from a disk or USB stick it was copied to.
//
// Every byte follows from the files and the options: the dates are the
// epoch, the identifiers the caller's, the order of the extents the order
// of the files. The standards are ECMA-119 (ISO 9660) and the El Torito
// Bootable CD-ROM Format Specification 1.0.
package iso9660

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
)

// SectorSize is ISO 9660's logical block size.
const SectorSize = 2048

// systemSectors is the system area before the first volume descriptor.
const systemSectors = 16

// Platform is an El Torito boot entry's platform ID.
type Platform uint8

// The platforms stamp boots.
const (
	BIOS Platform = 0x00 // 80x86 PC
	EFI  Platform = 0xef // UEFI
)

func (p Platform) String() string {
	switch p {
	case BIOS:
		return "bios"
	case EFI:
		return "efi"
	}
	return fmt.Sprintf("platform 0x%02x", uint8(p))
}

// File is one file of the root directory.
type File struct {
	// Name is a level-1 name, upper case: at most eight characters of
	// A-Z, 0-9 and _, a dot and at most three more ("EFIBOOT.IMG"). The
	// version (";1") is added.
	Name string
	// Size is the content's length in bytes.
	Size int64
	// Align is the boundary, in bytes, the extent starts on: a multiple of
	// SectorSize; 0 is SectorSize.
	Align int64
	// Data is the content, or nil when Fill writes it.
	Data []byte
	// Fill writes the content, Size bytes from offset 0 of w, which is the
	// file's extent. w reads as zeros before, so Fill may leave zeros
	// unwritten.
	Fill func(ctx context.Context, w io.WriterAt) error
}

// BootEntry is one El Torito entry: the firmware of Platform loads File
// with no emulation.
type BootEntry struct {
	Platform Platform
	// File names a file of the image.
	File string
	// LoadSectors is how many 512-byte sectors a BIOS loads from the
	// file's start (4, a 2048-byte sector, is what boot loaders expect);
	// 0 is the whole file when it is at most 65535 sectors, else 0, which
	// EFI firmware takes as the rest of the medium.
	LoadSectors uint16
	// InfoTable patches the El Torito boot information table into bytes
	// 8 to 63 of the file (the primary volume descriptor's block, the
	// file's block, its length and a checksum of the rest), as mkisofs
	// -boot-info-table does; GRUB's cdboot.img loads the rest of itself
	// with it. The file must be given as Data.
	InfoTable bool
}

// Options are the image's identifiers and boot catalog.
type Options struct {
	// VolumeID is at most 32 characters of A-Z, 0-9 and _.
	VolumeID string
	// Epoch is every date the image records.
	Epoch time.Time
	// Boot is the boot catalog: the first entry is the default one. Empty
	// writes no catalog.
	Boot []BootEntry
	// Reserve is how many bytes the volume keeps free after the last
	// extent (for a backup GPT).
	Reserve int64
	// SizeAlign rounds the image's size up to a multiple of itself (a
	// multiple of SectorSize); 0 is SectorSize.
	SizeAlign int64
}

// CatalogName is the boot catalog's name in the root directory.
const CatalogName = "BOOT.CAT"

// Extent is where a file lies, in bytes from the image's start.
type Extent struct {
	Offset, Size int64
}

// Layout is where Plan put everything.
type Layout struct {
	// Size is the image's size in bytes, a multiple of SectorSize.
	Size int64
	// Extents are the files', by name (the catalog's too).
	Extents map[string]Extent

	files   []File // sorted by name, for the directory
	pvd     uint32 // sectors
	brvd    uint32
	term    uint32
	lpath   uint32
	mpath   uint32
	root    uint32
	catalog uint32
}

// Plan places the files: the volume descriptors, the path tables, the root
// directory and the boot catalog first, then each file in the order given,
// each on its boundary.
func Plan(files []File, o Options) (*Layout, error) {
	if err := checkID(o.VolumeID, 32); err != nil {
		return nil, fmt.Errorf("iso9660: volume ID: %w", err)
	}
	if o.SizeAlign%SectorSize != 0 || o.Reserve < 0 {
		return nil, fmt.Errorf("iso9660: size alignment %d or reserve %d", o.SizeAlign, o.Reserve)
	}
	l := &Layout{Extents: map[string]Extent{}}
	next := uint32(systemSectors)
	take := func() uint32 { next++; return next - 1 }
	l.pvd = take()
	if len(o.Boot) > 0 {
		l.brvd = take()
	}
	l.term = take()
	l.lpath, l.mpath, l.root = take(), take(), take()
	all := append([]File(nil), files...)
	if len(o.Boot) > 0 {
		l.catalog = take()
		l.Extents[CatalogName] = Extent{int64(l.catalog) * SectorSize, SectorSize}
		all = append(all, File{Name: CatalogName, Size: SectorSize})
	}
	at := int64(next) * SectorSize
	for _, f := range files {
		if err := checkName(f.Name); err != nil {
			return nil, fmt.Errorf("iso9660: %q: %w", f.Name, err)
		}
		if _, dup := l.Extents[f.Name]; dup {
			return nil, fmt.Errorf("iso9660: %s twice", f.Name)
		}
		align := f.Align
		if align == 0 {
			align = SectorSize
		}
		if align%SectorSize != 0 || align < 0 {
			return nil, fmt.Errorf("iso9660: %s: alignment %d is not a multiple of %d", f.Name, align, SectorSize)
		}
		if f.Size < 0 || f.Size > 0xffffffff || (f.Data != nil && int64(len(f.Data)) != f.Size) || (f.Data == nil && f.Fill == nil && f.Size > 0) {
			return nil, fmt.Errorf("iso9660: %s: size %d (ISO 9660 files hold at most 4 GiB - 1 in one extent)", f.Name, f.Size)
		}
		at = (at + align - 1) / align * align
		l.Extents[f.Name] = Extent{at, f.Size}
		at += (f.Size + SectorSize - 1) / SectorSize * SectorSize
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	l.files = all
	if n := dirSize(all); n > SectorSize {
		return nil, fmt.Errorf("iso9660: %d files do not fit the one sector of the root directory", len(files))
	}
	for _, b := range o.Boot {
		f := l.file(b.File)
		switch {
		case f == nil || b.File == CatalogName:
			return nil, fmt.Errorf("iso9660: boot entry: no file %q", b.File)
		case b.InfoTable && (f.Data == nil || f.Size < 64):
			return nil, fmt.Errorf("iso9660: boot entry %s: a boot information table needs the file's bytes, at least 64", b.File)
		}
	}
	align := max(o.SizeAlign, SectorSize)
	l.Size = (at + o.Reserve + align - 1) / align * align
	if l.Size/SectorSize > 0xffffffff {
		return nil, errors.New("iso9660: the image is too large")
	}
	return l, nil
}

func (l *Layout) file(name string) *File {
	for i := range l.files {
		if l.files[i].Name == name {
			return &l.files[i]
		}
	}
	return nil
}

// Write writes the image laid out as Plan lays it out to w, which must read
// as zeros over Layout.Size bytes (a new or truncated file): the system
// area and the gaps between extents are left unwritten.
func Write(ctx context.Context, w io.WriterAt, files []File, o Options) (*Layout, error) {
	l, err := Plan(files, o)
	if err != nil {
		return nil, err
	}
	put := func(sector uint32, b []byte) error {
		_, err := w.WriteAt(b, int64(sector)*SectorSize)
		return err
	}
	date := dirDate(o.Epoch)
	root := dirRecord(l.root, SectorSize, true, date, "\x00")
	vol := volumeDescriptor(1)
	copy(vol[8:40], pad("", 32))
	copy(vol[40:72], pad(o.VolumeID, 32))
	both32(vol[80:], uint32(l.Size/SectorSize))
	both16(vol[120:], 1) // volume set size
	both16(vol[124:], 1) // volume sequence number
	both16(vol[128:], SectorSize)
	pt := pathTable(l.root, binary.LittleEndian)
	both32(vol[132:], uint32(len(pt)))
	binary.LittleEndian.PutUint32(vol[140:], l.lpath)
	binary.BigEndian.PutUint32(vol[148:], l.mpath)
	copy(vol[156:190], root)
	for _, f := range [][2]int{{190, 128}, {318, 128}, {446, 128}, {574, 128}, {702, 37}, {739, 37}, {776, 37}} {
		copy(vol[f[0]:f[0]+f[1]], pad("", f[1]))
	}
	copy(vol[574:702], pad("STAMP", 128)) // application
	vd := volDate(o.Epoch)
	copy(vol[813:830], vd) // creation
	copy(vol[830:847], vd) // modification
	copy(vol[847:864], volDate(time.Time{}))
	copy(vol[864:881], volDate(time.Time{}))
	vol[881] = 1 // file structure version
	if err := put(l.pvd, vol); err != nil {
		return nil, err
	}
	if len(o.Boot) > 0 {
		br := volumeDescriptor(0)
		copy(br[7:39], "EL TORITO SPECIFICATION")
		binary.LittleEndian.PutUint32(br[0x47:], l.catalog)
		if err := put(l.brvd, br); err != nil {
			return nil, err
		}
		cat, err := l.catalogSector(o.Boot)
		if err != nil {
			return nil, err
		}
		if err := put(l.catalog, cat); err != nil {
			return nil, err
		}
	}
	if err := put(l.term, volumeDescriptor(255)); err != nil {
		return nil, err
	}
	if err := put(l.lpath, pt); err != nil {
		return nil, err
	}
	if err := put(l.mpath, pathTable(l.root, binary.BigEndian)); err != nil {
		return nil, err
	}
	dir := bytes.Clone(root)
	dir = append(dir, dirRecord(l.root, SectorSize, true, date, "\x01")...)
	for _, f := range l.files {
		e := l.Extents[f.Name]
		dir = append(dir, dirRecord(uint32(e.Offset/SectorSize), uint32(e.Size), false, date, f.Name+";1")...)
	}
	if err := put(l.root, dir); err != nil {
		return nil, err
	}
	for _, f := range files {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		e := l.Extents[f.Name]
		if f.Data != nil {
			data := f.Data
			for _, b := range o.Boot {
				if b.File == f.Name && b.InfoTable {
					data = bytes.Clone(data)
					infoTable(data, l.pvd, uint32(e.Offset/SectorSize))
				}
			}
			if _, err := w.WriteAt(data, e.Offset); err != nil {
				return nil, err
			}
			continue
		}
		if f.Fill != nil {
			if err := f.Fill(ctx, io.NewOffsetWriter(writerAt{w}, e.Offset)); err != nil {
				return nil, fmt.Errorf("iso9660: %s: %w", f.Name, err)
			}
		}
	}
	return l, nil
}

// writerAt hides what else w is from io.NewOffsetWriter's callers.
type writerAt struct{ w io.WriterAt }

func (w writerAt) WriteAt(b []byte, off int64) (int, error) { return w.w.WriteAt(b, off) }

// catalogSector is the El Torito boot catalog: the validation entry, the
// default entry, and a section of one entry for each further platform.
func (l *Layout) catalogSector(boot []BootEntry) ([]byte, error) {
	cat := make([]byte, SectorSize)
	cat[0] = 1
	cat[1] = byte(boot[0].Platform)
	cat[30], cat[31] = 0x55, 0xaa
	var sum uint16
	for i := 0; i < 32; i += 2 {
		sum += binary.LittleEndian.Uint16(cat[i:])
	}
	binary.LittleEndian.PutUint16(cat[28:], -sum)
	at := 32
	for i, b := range boot {
		if i > 0 {
			if at+64 > SectorSize {
				return nil, errors.New("iso9660: too many boot entries")
			}
			cat[at] = 0x90
			if i == len(boot)-1 {
				cat[at] = 0x91
			}
			cat[at+1] = byte(b.Platform)
			binary.LittleEndian.PutUint16(cat[at+2:], 1)
			at += 32
		}
		e := l.Extents[b.File]
		count := b.LoadSectors
		if count == 0 {
			if n := (e.Size + 511) / 512; n <= 0xffff {
				count = uint16(n)
			}
		}
		cat[at] = 0x88 // bootable, no emulation, the default load segment
		binary.LittleEndian.PutUint16(cat[at+6:], count)
		binary.LittleEndian.PutUint32(cat[at+8:], uint32(e.Offset/SectorSize))
		at += 32
	}
	return cat, nil
}

// infoTable patches the boot information table into a boot file placed at
// block file.
func infoTable(data []byte, pvd, file uint32) {
	clear(data[8:64])
	binary.LittleEndian.PutUint32(data[8:], pvd)
	binary.LittleEndian.PutUint32(data[12:], file)
	binary.LittleEndian.PutUint32(data[16:], uint32(len(data)))
	var sum uint32
	for i := 64; i < len(data); i += 4 {
		var word [4]byte
		copy(word[:], data[i:])
		sum += binary.LittleEndian.Uint32(word[:])
	}
	binary.LittleEndian.PutUint32(data[20:], sum)
}

func volumeDescriptor(typ byte) []byte {
	b := make([]byte, SectorSize)
	b[0] = typ
	copy(b[1:6], "CD001")
	b[6] = 1
	return b
}

// dirRecord is a directory record of the extent at sector, size bytes long.
func dirRecord(sector, size uint32, dir bool, date [7]byte, name string) []byte {
	n := 33 + len(name)
	n += n % 2
	r := make([]byte, n)
	r[0] = byte(n)
	both32(r[2:], sector)
	both32(r[10:], size)
	copy(r[18:25], date[:])
	if dir {
		r[25] = 2
	}
	both16(r[28:], 1)
	r[32] = byte(len(name))
	copy(r[33:], name)
	return r
}

// dirSize is the root directory's length in bytes: "." and "..", then a
// record per file.
func dirSize(files []File) int {
	n := 34 * 2
	for _, f := range files {
		r := 33 + len(f.Name) + 2
		n += r + r%2
	}
	return n
}

// pathTable is the path table of the one directory, in the byte order of
// its kind (L is little endian, M big).
func pathTable(root uint32, order binary.ByteOrder) []byte {
	b := make([]byte, 10)
	b[0] = 1
	order.PutUint32(b[2:], root)
	order.PutUint16(b[6:], 1)
	return b
}

func dirDate(t time.Time) [7]byte {
	t = t.UTC()
	return [7]byte{byte(t.Year() - 1900), byte(t.Month()), byte(t.Day()), byte(t.Hour()), byte(t.Minute()), byte(t.Second()), 0}
}

// volDate is a volume descriptor's date; the zero time is "not specified".
func volDate(t time.Time) []byte {
	if t.IsZero() {
		return append([]byte("0000000000000000"), 0)
	}
	t = t.UTC()
	return append([]byte(fmt.Sprintf("%04d%02d%02d%02d%02d%02d%02d", t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond()/1e7)), 0)
}

func both16(b []byte, v uint16) {
	binary.LittleEndian.PutUint16(b, v)
	binary.BigEndian.PutUint16(b[2:], v)
}

func both32(b []byte, v uint32) {
	binary.LittleEndian.PutUint32(b, v)
	binary.BigEndian.PutUint32(b[4:], v)
}

func pad(s string, n int) []byte {
	return []byte(s + strings.Repeat(" ", n-len(s)))
}

func dChar(c byte) bool { return c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' }

func checkID(s string, n int) error {
	if s == "" || len(s) > n {
		return fmt.Errorf("%q: 1 to %d characters", s, n)
	}
	for i := 0; i < len(s); i++ {
		if !dChar(s[i]) {
			return fmt.Errorf("%q: only A-Z, 0-9 and _", s)
		}
	}
	return nil
}

func checkName(name string) error {
	base, ext, _ := strings.Cut(name, ".")
	if base == "" || len(base) > 8 || len(ext) > 3 {
		return errors.New("not an 8.3 name")
	}
	for _, s := range []string{base, ext} {
		for i := 0; i < len(s); i++ {
			if !dChar(s[i]) {
				return errors.New("only A-Z, 0-9, _ and one dot")
			}
		}
	}
	return nil
}

// VolumeID makes a volume ID of s: upper case, other characters as _,
// at most 32.
func VolumeID(s string) string {
	b := []byte(strings.ToUpper(s))
	for i := range b {
		if !dChar(b[i]) {
			b[i] = '_'
		}
	}
	if len(b) > 32 {
		b = b[:32]
	}
	if len(b) == 0 {
		return "STAMP"
	}
	return string(b)
}
