// Package fat writes and reads FAT16 and FAT32 file systems, for EFI system
// partitions.
//
// The writer lays a whole file system out from a list of files in one pass:
// the FAT type follows from the cluster count exactly as Microsoft's FAT
// specification (fatgen103) defines it, cluster sizes come from the
// specification's tables, names get VFAT long-name entries and
// deterministic 8.3 aliases, and every timestamp is the build's epoch. The
// same files and options always give the same bytes.
package fat

import (
	"fmt"
)

// Type is the FAT variant.
type Type int

// The FAT variants this package writes. FAT12 is only ever read.
const (
	FAT12 Type = 12
	FAT16 Type = 16
	FAT32 Type = 32
)

func (t Type) String() string { return fmt.Sprintf("FAT%d", int(t)) }

const (
	sectorSize = 512
	dirEntSize = 32
	numFATs    = 2

	// The cluster counts that decide the type (fatgen103, "FAT Type
	// Determination"): the count alone decides, whatever the BPB says.
	maxFAT12Clusters = 4084
	maxFAT16Clusters = 65524
	// guard keeps the count this far from either boundary, as the
	// specification advises, so that no reader that counts slightly
	// differently sees another type.
	guard = 16

	// defaultRootEntries is the FAT16 root directory size every
	// implementation expects (fatgen103: "always use 512").
	defaultRootEntries = 512
	// fat32Reserved is the reserved area of FAT32: boot sector, FSInfo and
	// their backups at sectors 6 and 7.
	fat32Reserved   = 32
	fat32FSInfo     = 1
	fat32BackupBoot = 6
	fat32RootClus   = 2

	maxFileSize = 1<<32 - 1
)

// Geometry is the layout of a FAT file system, all in sectors of 512 bytes
// except where a name says otherwise.
type Geometry struct {
	Type              Type
	TotalSectors      uint32
	SectorsPerCluster uint32
	Reserved          uint32 // sectors before the first FAT
	FATSectors        uint32 // sectors of one FAT
	RootEntries       uint32 // FAT16 fixed root directory entries; 0 on FAT32
	Clusters          uint32 // data clusters, numbered from 2
}

// ClusterSize is the size of a cluster in bytes.
func (g Geometry) ClusterSize() int64 { return int64(g.SectorsPerCluster) * sectorSize }

func (g Geometry) rootSectors() uint32 {
	return (g.RootEntries*dirEntSize + sectorSize - 1) / sectorSize
}

// FirstDataSector is the sector of cluster 2.
func (g Geometry) FirstDataSector() uint32 {
	return g.Reserved + numFATs*g.FATSectors + g.rootSectors()
}

// rootOffset is the byte offset of the FAT16 fixed root directory.
func (g Geometry) rootOffset() int64 {
	return int64(g.Reserved+numFATs*g.FATSectors) * sectorSize
}

func (g Geometry) clusterOffset(c uint32) int64 {
	return int64(g.FirstDataSector())*sectorSize + int64(c-2)*g.ClusterSize()
}

func (g Geometry) entryBytes() uint32 {
	if g.Type == FAT32 {
		return 4
	}
	return 2
}

// layout computes the geometry of a file system of total sectors with the
// given type, cluster size and root directory size: the smallest FAT that
// covers every cluster, and a data area that starts on a cluster boundary.
func layout(total uint32, t Type, spc, rootEntries uint32) Geometry {
	g := Geometry{Type: t, TotalSectors: total, SectorsPerCluster: spc, RootEntries: rootEntries, Reserved: 1}
	if t == FAT32 {
		g.Reserved, g.RootEntries = fat32Reserved, 0
	}
	clusters := func(fatSectors uint32) uint32 {
		meta := g.Reserved + numFATs*fatSectors + g.rootSectors()
		if meta >= total {
			return 0
		}
		return (total - meta) / spc
	}
	need := func(clusters uint32) uint32 {
		return uint32((uint64(clusters+2)*uint64(g.entryBytes()) + sectorSize - 1) / sectorSize)
	}
	// Start from a FAT that covers every sector as a cluster, then shrink it
	// while a smaller one still covers the clusters that remain. need is
	// monotone, so this stops at the smallest sufficient FAT.
	g.FATSectors = need(total / spc)
	for g.FATSectors > 1 && need(clusters(g.FATSectors-1)) <= g.FATSectors-1 {
		g.FATSectors--
	}
	// Align the data area to the cluster size, as mkfs.fat does, so clusters
	// line up with the pages and erase blocks under them.
	if pad := (spc - g.FirstDataSector()%spc) % spc; pad != 0 {
		g.Reserved += pad
	}
	g.Clusters = clusters(g.FATSectors)
	return g
}

// fat32ClusterSectors is fatgen103's DskTableFAT32: the cluster size
// Microsoft's format uses for a FAT32 volume of a given size.
func fat32ClusterSectors(total uint32) uint32 {
	switch {
	case total <= 532480: // 260 MB
		return 1
	case total <= 16777216: // 8 GB
		return 8
	case total <= 33554432: // 16 GB
		return 16
	case total <= 67108864: // 32 GB
		return 32
	}
	return 64
}

// ChooseGeometry picks the file system for size bytes whose root directory
// needs rootSlots directory entries. FAT32 with the specification's cluster
// size when that gives a FAT32 cluster count; otherwise FAT16 with the
// smallest cluster that keeps the count a FAT16 one.
func ChooseGeometry(size int64, rootSlots int) (Geometry, error) {
	if size%sectorSize != 0 {
		return Geometry{}, fmt.Errorf("size %d is not a multiple of %d", size, sectorSize)
	}
	if size/sectorSize > 0xFFFFFFFF {
		return Geometry{}, fmt.Errorf("size %d is larger than FAT32 allows (2 TiB)", size)
	}
	total := uint32(size / sectorSize)
	if g := layout(total, FAT32, fat32ClusterSectors(total), 0); g.Clusters > maxFAT16Clusters+guard {
		return g, nil
	}
	root := uint32(defaultRootEntries)
	if uint32(rootSlots) > root {
		root = (uint32(rootSlots) + 15) / 16 * 16
	}
	var g Geometry
	for spc := uint32(1); spc <= 64; spc *= 2 {
		g = layout(total, FAT16, spc, root)
		if g.Clusters < maxFAT16Clusters-guard {
			break
		}
	}
	if g.Clusters <= maxFAT12Clusters+guard {
		return Geometry{}, fmt.Errorf("size %d is too small for FAT16 (%d clusters of %d bytes; it needs more than %d): use at least 3 MiB",
			size, g.Clusters, g.ClusterSize(), maxFAT12Clusters+guard)
	}
	return g, nil
}
