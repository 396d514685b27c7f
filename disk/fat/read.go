package fat

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"sync"
	"time"
	"unicode/utf16"
)

// FS reads a FAT12, FAT16 or FAT32 file system. It implements fs.FS and
// fs.ReadDirFS with io/fs paths ("EFI/BOOT", no leading slash); names match
// without regard to case, as FAT's do.
type FS struct {
	r        io.ReaderAt
	g        Geometry
	fat      []byte
	rootClus uint32
	mu       sync.Mutex
	owner    map[uint32]string // directory cluster -> the path that reached it first
	// VolumeID and Label are from the boot sector.
	VolumeID uint32
	Label    string
}

// maxFATBytes bounds the FAT a reader loads: 64 MiB covers 16 M clusters,
// far beyond any ESP, and keeps a corrupt BPB from costing gigabytes.
const maxFATBytes = 64 << 20

// maxDirBytes is the largest directory FAT allows: 65536 entries.
const maxDirBytes = 65536 * dirEntSize

// Open reads the boot sector and the first FAT of the file system in the
// first size bytes of r.
func Open(r io.ReaderAt, size int64) (*FS, error) {
	b := make([]byte, sectorSize)
	if _, err := r.ReadAt(b, 0); err != nil {
		return nil, fmt.Errorf("fat: boot sector: %w", err)
	}
	if b[510] != 0x55 || b[511] != 0xAA {
		return nil, errors.New("fat: no boot sector signature")
	}
	if bps := binary.LittleEndian.Uint16(b[11:]); bps != sectorSize {
		return nil, fmt.Errorf("fat: %d bytes per sector; only %d is read", bps, sectorSize)
	}
	g := Geometry{
		SectorsPerCluster: uint32(b[13]),
		Reserved:          uint32(binary.LittleEndian.Uint16(b[14:])),
		RootEntries:       uint32(binary.LittleEndian.Uint16(b[17:])),
		TotalSectors:      uint32(binary.LittleEndian.Uint16(b[19:])),
		FATSectors:        uint32(binary.LittleEndian.Uint16(b[22:])),
	}
	nfats := uint32(b[16])
	if g.TotalSectors == 0 {
		g.TotalSectors = binary.LittleEndian.Uint32(b[32:])
	}
	ext := 36
	if g.FATSectors == 0 {
		g.FATSectors = binary.LittleEndian.Uint32(b[36:])
		ext = 64
	}
	spc := g.SectorsPerCluster
	if spc == 0 || spc&(spc-1) != 0 || g.Reserved == 0 || nfats == 0 || g.FATSectors == 0 {
		return nil, errors.New("fat: the boot sector's geometry is not a FAT one")
	}
	if int64(g.TotalSectors)*sectorSize > size {
		return nil, fmt.Errorf("fat: the file system (%d sectors) is larger than its %d bytes", g.TotalSectors, size)
	}
	meta := g.Reserved + nfats*g.FATSectors + g.rootSectors()
	if meta >= g.TotalSectors {
		return nil, errors.New("fat: no room for data after the FATs")
	}
	g.Clusters = (g.TotalSectors - meta) / spc
	switch {
	case g.Clusters <= maxFAT12Clusters:
		g.Type = FAT12
	case g.Clusters <= maxFAT16Clusters:
		g.Type = FAT16
	default:
		g.Type = FAT32
	}
	if nfats != numFATs {
		// The offsets below assume two FATs; so does every writer in use.
		return nil, fmt.Errorf("fat: %d FATs; only %d are read", nfats, numFATs)
	}
	f := &FS{r: r, g: g}
	if ext == 64 {
		if g.Type != FAT32 {
			return nil, fmt.Errorf("fat: a FAT32 boot sector for %d clusters, which makes it %s", g.Clusters, g.Type)
		}
		f.rootClus = binary.LittleEndian.Uint32(b[44:])
	}
	if b[ext+2] == 0x29 {
		f.VolumeID = binary.LittleEndian.Uint32(b[ext+3:])
		f.Label = strings.TrimRight(string(b[ext+7:ext+18]), " ")
	}
	fatBytes := int64(g.FATSectors) * sectorSize
	if fatBytes > maxFATBytes {
		return nil, fmt.Errorf("fat: a FAT of %d bytes is larger than this reader loads", fatBytes)
	}
	f.fat = make([]byte, fatBytes)
	if _, err := r.ReadAt(f.fat, int64(g.Reserved)*sectorSize); err != nil {
		return nil, fmt.Errorf("fat: reading the FAT: %w", err)
	}
	return f, nil
}

// Geometry is the file system's layout as its boot sector gives it.
func (f *FS) Geometry() Geometry { return f.g }

func (f *FS) entry(c uint32) uint32 {
	switch f.g.Type {
	case FAT12:
		off := c + c/2
		if int(off)+2 > len(f.fat) {
			return 0
		}
		v := uint32(binary.LittleEndian.Uint16(f.fat[off:]))
		if c&1 == 1 {
			return v >> 4
		}
		return v & 0xFFF
	case FAT16:
		if int(c)*2+2 > len(f.fat) {
			return 0
		}
		return uint32(binary.LittleEndian.Uint16(f.fat[c*2:]))
	}
	if int(c)*4+4 > len(f.fat) {
		return 0
	}
	return binary.LittleEndian.Uint32(f.fat[c*4:]) & 0x0FFFFFFF
}

// chain lists the clusters of the chain starting at first.
func (f *FS) chain(first uint32) ([]uint32, error) {
	var cs []uint32
	eoc := map[Type]uint32{FAT12: 0xFF8, FAT16: 0xFFF8, FAT32: 0x0FFFFFF8}[f.g.Type]
	for c := first; c != 0; {
		if c < 2 || c >= f.g.Clusters+2 {
			return nil, fmt.Errorf("fat: chain from cluster %d leads to cluster %d, outside the file system", first, c)
		}
		if len(cs) > int(f.g.Clusters) {
			return nil, fmt.Errorf("fat: chain from cluster %d loops", first)
		}
		cs = append(cs, c)
		next := f.entry(c)
		if next >= eoc {
			break
		}
		c = next
	}
	return cs, nil
}

// DirEntry is one entry of a directory. It is both the fs.DirEntry and the
// fs.FileInfo of the entry.
type DirEntry struct {
	// Long is the long name, or the short one when the entry has none.
	Long     string
	Short    string // the 8.3 alias as "NAME.EXT"
	Dir      bool
	FileSize int64
	MTime    time.Time
	First    uint32 // first cluster
}

func (e *DirEntry) Name() string               { return e.Long }
func (e *DirEntry) IsDir() bool                { return e.Dir }
func (e *DirEntry) Type() fs.FileMode          { return e.Mode().Type() }
func (e *DirEntry) Info() (fs.FileInfo, error) { return e, nil }
func (e *DirEntry) ModTime() time.Time         { return e.MTime }
func (e *DirEntry) Sys() any                   { return e }
func (e *DirEntry) Size() int64                { return e.FileSize }
func (e *DirEntry) Mode() fs.FileMode {
	if e.Dir {
		return fs.ModeDir | 0o755
	}
	return 0o644
}

// readDir parses the directory at cluster first (0: the root).
func (f *FS) readDir(first uint32) ([]*DirEntry, error) {
	raw, err := f.dirBytes(first)
	if err != nil {
		return nil, err
	}
	var out []*DirEntry
	var ln longName
	for p := 0; p+dirEntSize <= len(raw); p += dirEntSize {
		e := raw[p : p+dirEntSize]
		switch {
		case e[0] == 0:
			return out, nil
		case e[0] == deletedMark:
			ln.next = 0
			continue
		case e[11]&0x3F == attrLFN:
			ln.add(e)
			continue
		case e[11]&attrVolumeID != 0:
			ln.next = 0
			continue
		}
		var sn [11]byte
		copy(sn[:], e[:11])
		long := ln.take(sn)
		short, long, dots := entryNames(e, sn, long)
		if dots {
			continue
		}
		date, tm := binary.LittleEndian.Uint16(e[24:]), binary.LittleEndian.Uint16(e[22:])
		out = append(out, &DirEntry{
			Long: long, Short: short, Dir: e[11]&attrDir != 0,
			FileSize: int64(binary.LittleEndian.Uint32(e[28:])),
			MTime:    parseTime(date, tm, 0),
			First:    uint32(binary.LittleEndian.Uint16(e[20:]))<<16 | uint32(binary.LittleEndian.Uint16(e[26:])),
		})
	}
	return out, nil
}

// dirBytes reads the directory at cluster first (0: the root): FAT12 and
// FAT16 keep the root in a region of its own, FAT32 in a cluster chain.
func (f *FS) dirBytes(first uint32) ([]byte, error) {
	if first == 0 && f.g.Type != FAT32 {
		raw := make([]byte, f.g.rootSectors()*sectorSize)
		if _, err := f.r.ReadAt(raw, f.g.rootOffset()); err != nil {
			return nil, fmt.Errorf("fat: root directory: %w", err)
		}
		return raw, nil
	}
	if first == 0 {
		first = f.rootClus
	}
	cs, err := f.chain(first)
	if err != nil {
		return nil, err
	}
	if int64(len(cs))*f.g.ClusterSize() > maxDirBytes {
		return nil, fmt.Errorf("fat: the directory at cluster %d spans %d clusters, more than 65536 entries", first, len(cs))
	}
	raw := make([]byte, int64(len(cs))*f.g.ClusterSize())
	for i, c := range cs {
		if _, err := f.r.ReadAt(raw[int64(i)*f.g.ClusterSize():int64(i+1)*f.g.ClusterSize()], f.g.clusterOffset(c)); err != nil {
			return nil, fmt.Errorf("fat: directory cluster %d: %w", c, err)
		}
	}
	return raw, nil
}

// longName is a VFAT long name being gathered from the entries before a
// short entry, last part first.
type longName struct {
	chars []uint16
	sum   uint8 // the short name's checksum every part carries
	next  int   // the sequence number the next long-name entry must have
}

// add takes in the long-name entry e; one out of sequence, or with another
// checksum, spoils the name.
func (ln *longName) add(e []byte) {
	seq := int(e[0] & 0x1F)
	if e[0]&lfnLast != 0 {
		ln.chars, ln.sum, ln.next = make([]uint16, seq*lfnChars), e[13], seq
	}
	if seq == 0 || seq != ln.next || e[13] != ln.sum {
		ln.next = 0
		return
	}
	part := ln.chars[(seq-1)*lfnChars : seq*lfnChars]
	for k := range part {
		at := 1 + 2*k
		if k >= 11 {
			at = 28 + 2*(k-11)
		} else if k >= 5 {
			at = 14 + 2*(k-5)
		}
		part[k] = binary.LittleEndian.Uint16(e[at:])
	}
	ln.next--
}

// take returns the long name gathered for the short name sn, "" if none
// is whole and matches it, and starts a new one.
func (ln *longName) take(sn [11]byte) string {
	long := ""
	if ln.next == 0 && ln.chars != nil && checksum(sn) == ln.sum {
		u := ln.chars
		for i, c := range u {
			if c == 0 {
				u = u[:i]
				break
			}
		}
		long = string(utf16.Decode(u))
	}
	ln.chars, ln.next = nil, 0
	return long
}

// entryNames are the 8.3 name of the short entry e, whose name field is
// sn, and its long name: long, or else the 8.3 name in the case its flags
// say. dots is true for the "." and ".." entries.
func entryNames(e []byte, sn [11]byte, long string) (short, name string, dots bool) {
	if sn[0] == 0x05 {
		sn[0] = deletedMark
	}
	base := strings.TrimRight(string(sn[:8]), " ")
	ext := strings.TrimRight(string(sn[8:]), " ")
	if base == "." || base == ".." {
		return "", "", true
	}
	short = base
	if ext != "" {
		short += "." + ext
	}
	if long != "" {
		return short, long, false
	}
	// Windows NT and Linux mark all-lower-case 8.3 names with these
	// bits instead of writing a long name.
	if e[12]&0x08 != 0 {
		base = strings.ToLower(base)
	}
	if e[12]&0x10 != 0 {
		ext = strings.ToLower(ext)
	}
	name = base
	if ext != "" {
		name += "." + ext
	}
	return short, name, false
}

// lookup finds the entry at an io/fs path; "." is the root, returned as nil.
func (f *FS) lookup(op, name string) (*DirEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return nil, nil
	}
	var cur *DirEntry
	at := ""
	for _, comp := range strings.Split(name, "/") {
		var first uint32
		if cur != nil {
			if !cur.Dir {
				return nil, &fs.PathError{Op: op, Path: name, Err: errors.New("not a directory")}
			}
			first = cur.First
		}
		ents, err := f.readDir(first)
		if err != nil {
			return nil, &fs.PathError{Op: op, Path: name, Err: err}
		}
		var found *DirEntry
		for _, e := range ents {
			if strings.EqualFold(e.Long, comp) || strings.EqualFold(e.Short, comp) {
				found = e
				break
			}
		}
		if found == nil {
			return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
		}
		at = path.Join(at, strings.ToLower(found.Long))
		if found.Dir {
			if err := f.claim(found.First, at); err != nil {
				return nil, &fs.PathError{Op: op, Path: name, Err: err}
			}
		}
		cur = found
	}
	return cur, nil
}

// claim records that the directory at cluster c is the one at path p. A
// damaged image can point two directory entries at one directory, or one
// at an ancestor, and a walk would never end; the second path to claim a
// directory gets an error instead.
func (f *FS) claim(c uint32, p string) error {
	if c == 0 || c == f.rootClus {
		return fmt.Errorf("fat: %s points back at the root directory", p)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.owner == nil {
		f.owner = map[uint32]string{}
	}
	if prev, ok := f.owner[c]; ok && prev != p {
		return fmt.Errorf("fat: %s and %s are the same directory (cluster %d)", prev, p, c)
	}
	f.owner[c] = p
	return nil
}

// ReadDir lists the directory at name in on-disk order.
func (f *FS) ReadDir(name string) ([]fs.DirEntry, error) {
	e, err := f.lookup("readdir", name)
	if err != nil {
		return nil, err
	}
	var first uint32
	if e != nil {
		if !e.Dir {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
		}
		first = e.First
	}
	ents, err := f.readDir(first)
	if err != nil {
		return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
	}
	out := make([]fs.DirEntry, len(ents))
	for i, e := range ents {
		out[i] = e
	}
	return out, nil
}

// Open opens the file or directory at name.
func (f *FS) Open(name string) (fs.File, error) {
	e, err := f.lookup("open", name)
	if err != nil {
		return nil, err
	}
	if e == nil {
		e = &DirEntry{Long: ".", Dir: true}
	}
	h := &handle{fs: f, e: e, name: name}
	if !e.Dir && e.FileSize > 0 {
		cs, err := f.chain(e.First)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		if int64(len(cs))*f.g.ClusterSize() < e.FileSize {
			return nil, &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%d bytes in a chain of %d clusters", e.FileSize, len(cs))}
		}
		h.clusters = cs
	}
	return h, nil
}

type handle struct {
	fs       *FS
	e        *DirEntry
	name     string
	clusters []uint32
	off      int64
	listed   bool
}

func (h *handle) Stat() (fs.FileInfo, error) { return h.e, nil }
func (h *handle) Close() error               { return nil }

func (h *handle) Read(b []byte) (int, error) {
	if h.e.Dir {
		return 0, &fs.PathError{Op: "read", Path: h.name, Err: errors.New("is a directory")}
	}
	if h.off >= h.e.FileSize {
		return 0, io.EOF
	}
	cs := h.fs.g.ClusterSize()
	in := h.off % cs
	n := min(int64(len(b)), cs-in, h.e.FileSize-h.off)
	k, err := h.fs.r.ReadAt(b[:n], h.fs.g.clusterOffset(h.clusters[h.off/cs])+in)
	h.off += int64(k)
	if err == io.EOF && int64(k) == n {
		err = nil
	}
	return k, err
}

// ReadAt reads a regular file at off, so an opened file is an io.ReaderAt
// (a file system image inside the file, read in place).
func (h *handle) ReadAt(b []byte, off int64) (int, error) {
	if h.e.Dir {
		return 0, &fs.PathError{Op: "read", Path: h.name, Err: errors.New("is a directory")}
	}
	if off < 0 {
		return 0, &fs.PathError{Op: "read", Path: h.name, Err: errors.New("negative offset")}
	}
	cs := h.fs.g.ClusterSize()
	n := 0
	for n < len(b) {
		if off >= h.e.FileSize {
			return n, io.EOF
		}
		in := off % cs
		k := min(int64(len(b)-n), cs-in, h.e.FileSize-off)
		got, err := h.fs.r.ReadAt(b[n:n+int(k)], h.fs.g.clusterOffset(h.clusters[off/cs])+in)
		n += got
		off += int64(got)
		if err != nil && !(err == io.EOF && int64(got) == k) {
			return n, err
		}
	}
	return n, nil
}

// ReadDir lists a directory opened with Open, all at once.
func (h *handle) ReadDir(n int) ([]fs.DirEntry, error) {
	if !h.e.Dir {
		return nil, &fs.PathError{Op: "readdir", Path: h.name, Err: errors.New("not a directory")}
	}
	if h.listed {
		if n > 0 {
			return nil, io.EOF
		}
		return nil, nil
	}
	h.listed = true
	return h.fs.ReadDir(path.Clean(h.name))
}
