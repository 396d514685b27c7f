package disk

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/diskfs/go-diskfs/partition/gpt"
)

const (
	// SectorSize is the logical sector size of every disk this package lays out.
	SectorSize = 512
	// Alignment is where partitions start and how their sizes round: 1 MiB,
	// as fdisk, sgdisk and systemd-repart align, so every partition starts on
	// a boundary of any physical sector or erase block size in use.
	Alignment = 1 << 20
	// gptEntries is the size of the partition array every tool writes.
	gptEntries = 128
	// backupSectors is the backup GPT at the end: the array and the header.
	backupSectors = gptEntries*128/SectorSize + 1
)

// Partition type GUIDs, from the Discoverable Partitions Specification and
// the UEFI specification.
const (
	TypeESP       = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B"
	TypeRootAMD64 = "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"
	TypeRootARM64 = "B921B045-1DF0-41C3-AF44-4C6F280D3FAE"
	TypeXBOOTLDR  = "BC13C2FF-59E6-4262-A352-B275FD6F7172"
	TypeSwap      = "0657FD6D-A4AB-43C4-84E5-0933C84B4F4F"
	TypeLinux     = "0FC63DAF-8483-4772-8E79-3D69D8477DE4"
	TypeBIOSBoot  = "21686148-6449-6E6F-744E-656564454649"
	// /usr and its dm-verity hash partition.
	TypeUsrAMD64       = "8484680C-9521-48C6-9C11-B0720656F69E"
	TypeUsrARM64       = "B0E01050-EE5F-4390-949A-9101B17104E9"
	TypeUsrVerityAMD64 = "77FF5F63-E7B6-4633-ACF4-1565B864C0E6"
	TypeUsrVerityARM64 = "6E11A4E7-FBCA-4DED-B9E9-E1A512BB664E"
)

// AttrReadOnly is the GPT attribute (bit 60) of the Discoverable Partitions
// Specification that has a root or /usr partition mounted read-only.
const AttrReadOnly = 1 << 60

// TypeGUID is the type GUID of a partition by the recipe's name for its type.
// The root's type depends on the architecture, so that a generic boot loader
// or systemd-gpt-auto-generator finds the root for the machine it runs on.
func TypeGUID(typ, arch string) (string, error) {
	switch typ {
	case "esp":
		return TypeESP, nil
	case "xbootldr":
		return TypeXBOOTLDR, nil
	case "swap":
		return TypeSwap, nil
	case "linux":
		return TypeLinux, nil
	case "bios":
		return TypeBIOSBoot, nil
	case "root", "usr", "usr-verity":
		byArch := map[string][2]string{
			"root":       {TypeRootAMD64, TypeRootARM64},
			"usr":        {TypeUsrAMD64, TypeUsrARM64},
			"usr-verity": {TypeUsrVerityAMD64, TypeUsrVerityARM64},
		}[typ]
		switch arch {
		case "amd64":
			return byArch[0], nil
		case "arm64":
			return byArch[1], nil
		}
		return "", fmt.Errorf("no %s partition type for architecture %q (amd64 or arm64)", typ, arch)
	}
	return "", fmt.Errorf("unknown partition type %q", typ)
}

// Partition is one GPT entry. Start and Size are in bytes.
type Partition struct {
	Name       string // the GPT partition label, at most 36 UTF-16 units
	Type       string // type GUID, e.g. TypeESP
	GUID       [16]byte
	Start      int64
	Size       int64
	Attributes uint64
}

// End is the first byte after the partition.
func (p *Partition) End() int64 { return p.Start + p.Size }

// AlignUp rounds n up to the partition alignment.
func AlignUp(n int64) int64 { return (n + Alignment - 1) / Alignment * Alignment }

// Place gives each partition, in order, the first aligned start after the
// one before. Sizes must be multiples of the alignment. It returns the end
// of the last one.
func Place(parts []Partition) (int64, error) {
	at := int64(Alignment) // the primary GPT fits well before 1 MiB
	for i := range parts {
		if parts[i].Size <= 0 || parts[i].Size%Alignment != 0 {
			return 0, fmt.Errorf("partition %q: size %d is not a positive multiple of 1 MiB", parts[i].Name, parts[i].Size)
		}
		parts[i].Start = at
		at += parts[i].Size
	}
	return at, nil
}

// DiskSize is the smallest aligned disk size that holds partitions ending at
// end and the backup GPT after them.
func DiskSize(end int64) int64 { return AlignUp(end + backupSectors*SectorSize) }

// LastUsable is the first byte after the space partitions may use on a disk
// of size bytes: the backup GPT takes the rest.
func LastUsable(size int64) int64 { return size - backupSectors*SectorSize }

// WriteGPT writes a protective MBR, the primary GPT at the start and the
// backup GPT at the end of a disk of size bytes. It writes nothing else:
// the bytes between stay as they are.
func WriteGPT(w io.WriterAt, size int64, diskGUID [16]byte, parts []Partition) error {
	if size%SectorSize != 0 {
		return fmt.Errorf("gpt: disk size %d is not a multiple of %d", size, SectorSize)
	}
	if len(parts) > gptEntries {
		return fmt.Errorf("gpt: %d partitions; a GPT holds %d", len(parts), gptEntries)
	}
	t := &gpt.Table{
		LogicalSectorSize:  SectorSize,
		PhysicalSectorSize: SectorSize,
		ProtectiveMBR:      true,
		GUID:               strings.ToUpper(FormatUUID(diskGUID)),
	}
	prevEnd := int64(0)
	for i, p := range parts {
		switch {
		case p.Start%Alignment != 0:
			return fmt.Errorf("gpt: partition %q starts at %d, not on a 1 MiB boundary", p.Name, p.Start)
		case p.Start < prevEnd || p.Start < Alignment:
			return fmt.Errorf("gpt: partition %q at %d overlaps what comes before it", p.Name, p.Start)
		case p.Size <= 0 || p.Size%SectorSize != 0:
			return fmt.Errorf("gpt: partition %q has size %d", p.Name, p.Size)
		case p.End() > LastUsable(size):
			return fmt.Errorf("gpt: partition %q ends at %d, past the last usable byte %d of a %d-byte disk", p.Name, p.End(), LastUsable(size), size)
		}
		prevEnd = p.End()
		t.Partitions = append(t.Partitions, &gpt.Partition{
			Index:      i + 1,
			Start:      uint64(p.Start / SectorSize),
			End:        uint64(p.End()/SectorSize - 1),
			Size:       uint64(p.Size),
			Type:       gpt.Type(p.Type),
			Name:       p.Name,
			GUID:       strings.ToUpper(FormatUUID(p.GUID)),
			Attributes: p.Attributes,
		})
	}
	if err := t.Write(WriteOnly(w, size), size); err != nil {
		return fmt.Errorf("gpt: %w", err)
	}
	return nil
}

// ReadGPT reads the partition table of a disk of size bytes.
func ReadGPT(r io.ReaderAt, size int64) (diskGUID string, parts []Partition, err error) {
	t, err := gpt.Read(ReadOnly(r, size), SectorSize, SectorSize)
	if err != nil {
		return "", nil, fmt.Errorf("gpt: %w", err)
	}
	if t.RecoveredFromBackup {
		return "", nil, errors.New("gpt: the primary table is damaged (the backup is intact)")
	}
	for _, p := range t.Partitions {
		if p.Type == gpt.Unused {
			continue
		}
		var id [16]byte
		if u, err := parseUUID(p.GUID); err == nil {
			id = u
		}
		parts = append(parts, Partition{Name: p.Name, Type: string(p.Type), GUID: id,
			Start: int64(p.Start) * SectorSize, Size: int64(p.End-p.Start+1) * SectorSize, Attributes: p.Attributes})
	}
	return strings.ToLower(t.GUID), parts, nil
}

// parseUUID reads the canonical text form of a UUID.
func parseUUID(s string) ([16]byte, error) {
	var u [16]byte
	h := strings.ReplaceAll(s, "-", "")
	if len(h) != 32 || len(s) != 36 {
		return u, fmt.Errorf("%q is not a UUID", s)
	}
	for i := range u {
		var b byte
		for _, c := range h[2*i : 2*i+2] {
			b <<= 4
			switch {
			case c >= '0' && c <= '9':
				b |= byte(c - '0')
			case c >= 'a' && c <= 'f':
				b |= byte(c - 'a' + 10)
			case c >= 'A' && c <= 'F':
				b |= byte(c - 'A' + 10)
			default:
				return u, fmt.Errorf("%q is not a UUID", s)
			}
		}
		u[i] = b
	}
	return u, nil
}
