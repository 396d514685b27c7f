package iso9660

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Volume is what Open reads of an image: the primary volume descriptor,
// the root directory and the El Torito boot catalog.
type Volume struct {
	ID string
	// Size is the volume space in bytes.
	Size int64
	// Files are the root directory's entries but "." and "..", in its
	// order, named without their version.
	Files []FileInfo
	// Boot are the boot catalog's entries, the default one first; none
	// without a catalog.
	Boot []BootInfo
}

// FileInfo is one entry of the root directory.
type FileInfo struct {
	Name string
	Dir  bool
	Extent
}

// BootInfo is one boot catalog entry.
type BootInfo struct {
	Platform Platform
	// Bootable is the entry's indicator (0x88).
	Bootable bool
	// Media is the emulation: 0 is none.
	Media byte
	// Sectors is the count of 512-byte sectors the entry loads.
	Sectors uint16
	// Offset is where its image starts, in bytes.
	Offset int64
}

// File returns the root directory's file of that name, nil if none.
func (v *Volume) File(name string) *FileInfo {
	for i := range v.Files {
		if v.Files[i].Name == name {
			return &v.Files[i]
		}
	}
	return nil
}

// Open reads the volume descriptors, the root directory and the boot
// catalog of an image of size bytes.
func Open(r io.ReaderAt, size int64) (*Volume, error) {
	v := &Volume{}
	im := &image{r: r, size: size, sector: make([]byte, SectorSize)}
	pvd, catalog, err := im.descriptors()
	if err != nil {
		return nil, err
	}
	if bs := binary.LittleEndian.Uint16(pvd[128:]); bs != SectorSize {
		return nil, fmt.Errorf("iso9660: logical block size %d; only %d is read", bs, SectorSize)
	}
	v.ID = strings.TrimRight(string(pvd[40:72]), " ")
	v.Size = int64(binary.LittleEndian.Uint32(pvd[80:])) * SectorSize
	if v.Files, err = im.rootFiles(pvd[156:190]); err != nil {
		return nil, err
	}
	if catalog == 0 {
		return v, nil
	}
	if v.Boot, err = im.bootCatalog(catalog); err != nil {
		return nil, err
	}
	return v, nil
}

// image is an image being opened, read a sector at a time.
type image struct {
	r      io.ReaderAt
	size   int64
	sector []byte // the sector read last
}

func (im *image) read(n uint32) error {
	off := int64(n) * SectorSize
	if off+SectorSize > im.size {
		return fmt.Errorf("iso9660: sector %d is past the end of the %d-byte image", n, im.size)
	}
	_, err := im.r.ReadAt(im.sector, off)
	return err
}

// descriptors reads the volume descriptor set: it returns the primary
// volume descriptor, and the boot catalog's sector that an El Torito boot
// record names (0 for none).
func (im *image) descriptors() (pvd []byte, catalog uint32, err error) {
	sector := im.sector
	for n, done := uint32(systemSectors), false; !done; n++ {
		if n > systemSectors+32 {
			return nil, 0, errors.New("iso9660: no volume descriptor set terminator")
		}
		if err := im.read(n); err != nil {
			return nil, 0, err
		}
		if string(sector[1:6]) != "CD001" || sector[6] != 1 {
			return nil, 0, fmt.Errorf("iso9660: sector %d is no volume descriptor", n)
		}
		switch sector[0] {
		case 1:
			if pvd == nil {
				pvd = bytes.Clone(sector)
			}
		case 0:
			if strings.TrimRight(string(sector[7:39]), "\x00") == "EL TORITO SPECIFICATION" {
				catalog = binary.LittleEndian.Uint32(sector[0x47:])
			}
		case 255:
			done = true
		}
	}
	if pvd == nil {
		return nil, 0, errors.New("iso9660: no primary volume descriptor")
	}
	return pvd, catalog, nil
}

// rootFiles lists the root directory, whose directory record is root.
func (im *image) rootFiles(root []byte) ([]FileInfo, error) {
	if root[0] != 34 || root[25]&2 == 0 {
		return nil, errors.New("iso9660: the root directory record is damaged")
	}
	rootAt, rootLen := binary.LittleEndian.Uint32(root[2:]), binary.LittleEndian.Uint32(root[10:])
	if rootLen > 1<<20 || int64(rootAt)*SectorSize+int64(rootLen) > im.size {
		return nil, fmt.Errorf("iso9660: root directory of %d bytes at sector %d", rootLen, rootAt)
	}
	dir := make([]byte, rootLen)
	if _, err := im.r.ReadAt(dir, int64(rootAt)*SectorSize); err != nil {
		return nil, err
	}
	var files []FileInfo
	for at := 0; at < len(dir); {
		n := int(dir[at])
		if n == 0 { // records do not cross sectors: the rest of this one is empty
			at = (at/SectorSize + 1) * SectorSize
			continue
		}
		if n < 34 || at+n > len(dir) || 33+int(dir[at+32]) > n {
			return nil, fmt.Errorf("iso9660: root directory record at %d is damaged", at)
		}
		rec := dir[at : at+n]
		at += n
		name := string(rec[33 : 33+int(rec[32])])
		if name == "\x00" || name == "\x01" {
			continue
		}
		name, _, _ = strings.Cut(name, ";")
		f := FileInfo{Name: strings.TrimSuffix(name, "."), Dir: rec[25]&2 != 0,
			Extent: Extent{int64(binary.LittleEndian.Uint32(rec[2:])) * SectorSize, int64(binary.LittleEndian.Uint32(rec[10:]))}}
		if f.Offset+f.Size > im.size {
			return nil, fmt.Errorf("iso9660: %s ends past the image", f.Name)
		}
		files = append(files, f)
	}
	return files, nil
}

// bootCatalog reads the El Torito boot catalog at sector catalog: the
// default entry, then each section's entries.
func (im *image) bootCatalog(catalog uint32) ([]BootInfo, error) {
	if err := im.read(catalog); err != nil {
		return nil, fmt.Errorf("iso9660: boot catalog: %w", err)
	}
	sector := im.sector
	var sum uint16
	for i := 0; i < 32; i += 2 {
		sum += binary.LittleEndian.Uint16(sector[i:])
	}
	if sector[0] != 1 || sector[30] != 0x55 || sector[31] != 0xaa || sum != 0 {
		return nil, errors.New("iso9660: the boot catalog's validation entry is damaged")
	}
	var boot []BootInfo
	entry := func(e []byte, p Platform) {
		boot = append(boot, BootInfo{Platform: p, Bootable: e[0] == 0x88, Media: e[1] & 0x0f,
			Sectors: binary.LittleEndian.Uint16(e[6:]), Offset: int64(binary.LittleEndian.Uint32(e[8:])) * SectorSize})
	}
	entry(sector[32:64], Platform(sector[1]))
	for at := 64; at+32 <= SectorSize; {
		h := sector[at : at+32]
		if h[0] != 0x90 && h[0] != 0x91 {
			break
		}
		n := int(binary.LittleEndian.Uint16(h[2:]))
		at += 32
		for i := 0; i < n && at+32 <= SectorSize; i++ {
			entry(sector[at:at+32], Platform(h[1]))
			at += 32
		}
		if h[0] == 0x91 {
			break
		}
	}
	return boot, nil
}
