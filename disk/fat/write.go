package fat

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/disk"
)

// File is one entry to put in the file system.
type File struct {
	// Path is absolute and clean: "/EFI/BOOT/BOOTX64.EFI". Parents that are
	// not listed are created as directories.
	Path string
	Dir  bool
	// Size is the exact number of bytes Open yields, for regular files.
	Size int64
	// MTime is the entry's time; zero means Options.Epoch.
	MTime time.Time
	// Open returns the content of a regular file. It is called once, while
	// the file is written, and the reader is closed afterwards.
	Open func() (io.ReadCloser, error)
}

// Options say what to write besides the files.
type Options struct {
	// Size of the file system in bytes, a multiple of 512.
	Size     int64
	VolumeID uint32
	// Label is at most 11 characters that an 8.3 name may hold, or spaces;
	// it is upper-cased. Empty means no label ("NO NAME").
	Label string
	// Epoch is the time of every entry without its own MTime. FAT cannot
	// hold times before 1980-01-01, so earlier ones become that.
	Epoch time.Time
	// HiddenSectors is the partition's first sector on its disk, which the
	// BPB records for old readers; 0 for a bare file system image.
	HiddenSectors uint32
}

// node is one entry of the tree being laid out.
type node struct {
	name     string
	path     string
	dir      bool
	size     int64
	mtime    time.Time
	open     func() (io.ReadCloser, error)
	parent   *node
	children []*node // in byte order of name

	short  [11]byte
	lfn    bool
	slots  int    // directory entries this directory holds
	first  uint32 // first cluster; 0 when it has none
	nclust uint32
}

// buildTree turns the file list into a tree with every directory's names
// assigned and counted.
func buildTree(files []File, epoch time.Time) (*node, error) {
	sorted := append([]File(nil), files...)
	slices.SortStableFunc(sorted, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	root := &node{path: "/", dir: true, mtime: epoch}
	byPath := map[string]*node{"/": root}
	var ensure func(p string) (*node, error)
	ensure = func(p string) (*node, error) {
		if n := byPath[p]; n != nil {
			if !n.dir {
				return nil, fmt.Errorf("%s: is a file, yet entries are listed under it", p)
			}
			return n, nil
		}
		parent, err := ensure(path.Dir(p))
		if err != nil {
			return nil, err
		}
		n := &node{name: path.Base(p), path: p, dir: true, mtime: epoch, parent: parent}
		parent.children = append(parent.children, n)
		byPath[p] = n
		return n, nil
	}
	for _, f := range sorted {
		if !strings.HasPrefix(f.Path, "/") || path.Clean(f.Path) != f.Path {
			return nil, fmt.Errorf("%q: paths must be absolute and clean", f.Path)
		}
		mt := f.MTime
		if mt.IsZero() {
			mt = epoch
		}
		if f.Path == "/" {
			if !f.Dir {
				return nil, fmt.Errorf("/: the root must be a directory")
			}
			root.mtime = mt
			continue
		}
		if err := checkName(path.Base(f.Path)); err != nil {
			return nil, fmt.Errorf("%s: %w", f.Path, err)
		}
		if old := byPath[f.Path]; old != nil {
			// A directory created for a child may be listed afterwards; sorting
			// puts "/a" before "/a/b", so any earlier one is a duplicate.
			return nil, fmt.Errorf("%s: listed twice", f.Path)
		}
		if !f.Dir && f.Size > maxFileSize {
			return nil, fmt.Errorf("%s: %d bytes is more than a FAT file holds (4 GiB - 1)", f.Path, f.Size)
		}
		if !f.Dir && (f.Size < 0 || f.Open == nil && f.Size > 0) {
			return nil, fmt.Errorf("%s: a file needs a size and content", f.Path)
		}
		parent, err := ensure(path.Dir(f.Path))
		if err != nil {
			return nil, err
		}
		n := &node{name: path.Base(f.Path), path: f.Path, dir: f.Dir, size: f.Size, mtime: mt, open: f.Open, parent: parent}
		parent.children = append(parent.children, n)
		byPath[f.Path] = n
	}
	var assign func(n *node) error
	assign = func(n *node) error {
		slices.SortFunc(n.children, func(a, b *node) int { return strings.Compare(a.name, b.name) })
		names := make([]string, len(n.children))
		for i, c := range n.children {
			names[i] = c.name
		}
		short, lfn, err := assignShortNames(names)
		if err != nil {
			return fmt.Errorf("%s: %w", n.path, err)
		}
		if n != root {
			n.slots = 2 // "." and ".."
		}
		for i, c := range n.children {
			c.short, c.lfn = short[i], lfn[i]
			n.slots++
			if c.lfn {
				n.slots += lfnSlots(c.name)
			}
			if c.dir {
				if err := assign(c); err != nil {
					return err
				}
			}
		}
		if n.slots > 65536 {
			return fmt.Errorf("%s: %d directory entries; FAT allows 65536", n.path, n.slots)
		}
		return nil
	}
	return root, assign(root)
}

// walk visits n and everything under it, each directory before its
// children and children in byte order of name. This is the allocation order.
func walk(n *node, fn func(*node) error) error {
	if err := fn(n); err != nil {
		return err
	}
	for _, c := range n.children {
		if err := walk(c, fn); err != nil {
			return err
		}
	}
	return nil
}

// clustersNeeded is how many clusters the tree takes in geometry g.
func clustersNeeded(root *node, g Geometry) uint64 {
	cs := g.ClusterSize()
	var total uint64
	walk(root, func(n *node) error {
		switch {
		case n.dir && n.parent == nil && g.Type != FAT32:
			// The FAT16 root lives in its own region.
		case n.dir:
			total += uint64(max(1, (int64(n.slots)*dirEntSize+cs-1)/cs))
		default:
			total += uint64((n.size + cs - 1) / cs)
		}
		return nil
	})
	return total
}

func rootSlots(root *node, label string) int {
	if label != "" {
		return root.slots + 1
	}
	return root.slots
}

// normLabel checks and upper-cases a volume label.
func normLabel(label string) (string, error) {
	l := strings.ToUpper(label)
	if len(l) > 11 {
		return "", fmt.Errorf("label %q is longer than 11 characters", label)
	}
	for _, c := range l {
		if c != ' ' && !shortChar(c) {
			return "", fmt.Errorf("label %q holds %q, which a FAT label cannot", label, c)
		}
	}
	return strings.TrimRight(l, " "), nil
}

// MinSize is the smallest size, in bytes and a multiple of 512, whose file
// system holds files.
func MinSize(files []File, label string) (int64, error) {
	label, err := normLabel(label)
	if err != nil {
		return 0, err
	}
	root, err := buildTree(files, minTime)
	if err != nil {
		return 0, err
	}
	var content int64
	walk(root, func(n *node) error { content += n.size + int64(n.slots)*dirEntSize; return nil })
	size := max(3<<20, content+content/16) / sectorSize * sectorSize
	for {
		g, err := ChooseGeometry(size, rootSlots(root, label))
		if err == nil && clustersNeeded(root, g) <= uint64(g.Clusters) {
			return size, nil
		}
		if size > 1<<41 {
			return 0, errors.New("the files do not fit any FAT32 file system")
		}
		size += max(size/64, 64<<10) / sectorSize * sectorSize
	}
}

// Write lays files out as a FAT file system of o.Size bytes at offset 0 of
// w and returns its geometry. The type and cluster size follow from the size
// (see ChooseGeometry).
//
// w must read as zeros over the whole size, as a new or truncated file
// does: Write leaves free clusters, unused FAT entries and the slack of the
// reserved area unwritten, so a sparse image stays sparse.
func Write(ctx context.Context, files []File, w io.WriterAt, o Options) (Geometry, error) {
	label, err := normLabel(o.Label)
	if err != nil {
		return Geometry{}, err
	}
	root, err := buildTree(files, o.Epoch)
	if err != nil {
		return Geometry{}, err
	}
	g, err := ChooseGeometry(o.Size, rootSlots(root, label))
	if err != nil {
		return Geometry{}, err
	}
	if g.Type == FAT16 && uint32(rootSlots(root, label)) > g.RootEntries {
		return g, fmt.Errorf("/: %d entries do not fit the FAT16 root directory of %d", rootSlots(root, label), g.RootEntries)
	}
	if need := clustersNeeded(root, g); need > uint64(g.Clusters) {
		min, _ := MinSize(files, label)
		return g, fmt.Errorf("the files need %d clusters of %d bytes, the %s file system of %d bytes has %d; it needs at least %d bytes",
			need, g.ClusterSize(), g.Type, o.Size, g.Clusters, min)
	}
	wr := &writer{ctx: ctx, w: w, g: g, o: o, label: label, root: root, next: 2, buf: make([]byte, 1<<20)}
	return g, wr.write()
}

type writer struct {
	ctx   context.Context
	w     io.WriterAt
	g     Geometry
	o     Options
	label string
	root  *node
	next  uint32 // next free cluster
	runs  []*node
	buf   []byte
}

func (wr *writer) write() error {
	g := wr.g
	cs := g.ClusterSize()
	// Allocate in walk order, one contiguous run per entry, so the FAT is a
	// function of the tree alone.
	walk(wr.root, func(n *node) error {
		var k int64
		switch {
		case n.dir && n == wr.root && g.Type != FAT32:
		case n.dir:
			k = max(1, (int64(n.slots)*dirEntSize+cs-1)/cs)
		default:
			k = (n.size + cs - 1) / cs
		}
		if k > 0 {
			n.first, n.nclust = wr.next, uint32(k)
			wr.next += uint32(k)
			wr.runs = append(wr.runs, n)
		}
		return nil
	})
	err := walk(wr.root, func(n *node) error {
		if err := wr.ctx.Err(); err != nil {
			return err
		}
		if n.dir {
			return wr.writeDir(n)
		}
		return wr.writeFile(n)
	})
	if err != nil {
		return err
	}
	if err := wr.writeFATs(); err != nil {
		return err
	}
	return wr.writeBoot()
}

func (wr *writer) at(b []byte, off int64, what string) error {
	if _, err := wr.w.WriteAt(b, off); err != nil {
		return fmt.Errorf("writing %s: %w", what, err)
	}
	return nil
}

func (wr *writer) writeDir(n *node) error {
	g := wr.g
	var b []byte
	var off int64
	if n == wr.root && g.Type != FAT32 {
		b, off = make([]byte, g.rootSectors()*sectorSize), g.rootOffset()
	} else {
		b, off = make([]byte, int64(n.nclust)*g.ClusterSize()), g.clusterOffset(n.first)
	}
	p := 0
	if n == wr.root {
		if wr.label != "" {
			putEntry(b[p:], shortName(wr.label[:min(8, len(wr.label))], wr.label[min(8, len(wr.label)):]), attrVolumeID, 0, 0, n.mtime)
			p += dirEntSize
		}
	} else {
		putEntry(b[p:], shortName(".", ""), attrDir, n.first, 0, n.mtime)
		p += dirEntSize
		// ".." of a directory in the root names cluster 0, on FAT32 too.
		var up uint32
		if n.parent != wr.root {
			up = n.parent.first
		}
		putEntry(b[p:], shortName("..", ""), attrDir, up, 0, n.parent.mtime)
		p += dirEntSize
	}
	for _, c := range n.children {
		if c.lfn {
			p += putLFN(b[p:], c.name, checksum(c.short))
		}
		attr := byte(attrArchive)
		if c.dir {
			attr = attrDir
		}
		putEntry(b[p:], c.short, attr, c.first, uint32(c.size), c.mtime)
		p += dirEntSize
	}
	return wr.at(b, off, n.path)
}

func putEntry(b []byte, name [11]byte, attr byte, first, size uint32, t time.Time) {
	copy(b[0:11], name[:])
	b[11] = attr
	date, tm, tenth := fatTime(t)
	b[13] = tenth
	binary.LittleEndian.PutUint16(b[14:], tm)
	binary.LittleEndian.PutUint16(b[16:], date)
	binary.LittleEndian.PutUint16(b[18:], date)
	binary.LittleEndian.PutUint16(b[20:], uint16(first>>16))
	binary.LittleEndian.PutUint16(b[22:], tm)
	binary.LittleEndian.PutUint16(b[24:], date)
	binary.LittleEndian.PutUint16(b[26:], uint16(first))
	binary.LittleEndian.PutUint32(b[28:], size)
}

func (wr *writer) writeFile(n *node) (err error) {
	if n.size == 0 {
		return nil
	}
	r, err := n.open()
	if err != nil {
		return fmt.Errorf("%s: %w", n.path, err)
	}
	defer func() {
		if cerr := r.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("%s: %w", n.path, cerr)
		}
	}()
	off := wr.g.clusterOffset(n.first)
	var done int64
	for done < n.size {
		k, err := io.ReadFull(r, wr.buf[:min(int64(len(wr.buf)), n.size-done)])
		if err != nil {
			return fmt.Errorf("%s: reading after %d of %d bytes: %w", n.path, done+int64(k), n.size, err)
		}
		// The target reads as zeros already; skipping zero runs keeps it sparse.
		if !disk.IsZero(wr.buf[:k]) {
			if err := wr.at(wr.buf[:k], off+done, n.path); err != nil {
				return err
			}
		}
		done += int64(k)
	}
	var one [1]byte
	if k, _ := r.Read(one[:]); k > 0 {
		return fmt.Errorf("%s: content is longer than its size %d", n.path, n.size)
	}
	return nil
}

func (wr *writer) eoc() uint32 {
	if wr.g.Type == FAT32 {
		return 0x0FFFFFFF
	}
	return 0xFFFF
}

// writeFATs writes both copies of the FAT, in chunks, up to the last used
// cluster; the rest is free and reads as zero already.
func (wr *writer) writeFATs() error {
	g := wr.g
	eb := int64(g.entryBytes())
	used := int64(wr.next) * eb
	chunk := make([]byte, 64<<10)
	ri := 0
	for base := int64(0); base < used; base += int64(len(chunk)) {
		b := chunk[:min(int64(len(chunk)), used-base)]
		clear(b)
		for i := int64(0); i < int64(len(b))/eb; i++ {
			c := uint32(base/eb + i)
			var v uint32
			switch {
			case c == 0:
				v = 0x0FFFFF00 | 0xF8
			case c == 1:
				v = wr.eoc()
			default:
				for ri < len(wr.runs) && wr.runs[ri].first+wr.runs[ri].nclust <= c {
					ri++
				}
				if ri < len(wr.runs) && c+1 < wr.runs[ri].first+wr.runs[ri].nclust {
					v = c + 1
				} else if ri < len(wr.runs) {
					v = wr.eoc()
				}
			}
			if eb == 4 {
				binary.LittleEndian.PutUint32(b[i*4:], v)
			} else {
				binary.LittleEndian.PutUint16(b[i*2:], uint16(v))
			}
		}
		for k := int64(0); k < numFATs; k++ {
			off := int64(g.Reserved+uint32(k)*g.FATSectors)*sectorSize + base
			if err := wr.at(b, off, "FAT"); err != nil {
				return err
			}
		}
	}
	return nil
}

func (wr *writer) writeBoot() error {
	g := wr.g
	b := make([]byte, sectorSize)
	copy(b[3:11], "MSWIN4.1") // what fatgen103 recommends for compatibility
	binary.LittleEndian.PutUint16(b[11:], sectorSize)
	b[13] = byte(g.SectorsPerCluster)
	binary.LittleEndian.PutUint16(b[14:], uint16(g.Reserved))
	b[16] = numFATs
	binary.LittleEndian.PutUint16(b[17:], uint16(g.RootEntries))
	if g.TotalSectors < 0x10000 && g.Type != FAT32 {
		binary.LittleEndian.PutUint16(b[19:], uint16(g.TotalSectors))
	} else {
		binary.LittleEndian.PutUint32(b[32:], g.TotalSectors)
	}
	b[21] = 0xF8 // fixed disk
	binary.LittleEndian.PutUint16(b[24:], 63)
	binary.LittleEndian.PutUint16(b[26:], 255)
	binary.LittleEndian.PutUint32(b[28:], wr.o.HiddenSectors)
	ext := 36 // the extended BPB
	if g.Type == FAT32 {
		binary.LittleEndian.PutUint32(b[36:], g.FATSectors)
		binary.LittleEndian.PutUint32(b[44:], fat32RootClus)
		binary.LittleEndian.PutUint16(b[48:], fat32FSInfo)
		binary.LittleEndian.PutUint16(b[50:], fat32BackupBoot)
		ext = 64
	} else {
		binary.LittleEndian.PutUint16(b[22:], uint16(g.FATSectors))
	}
	b[ext] = 0x80 // drive number
	b[ext+2] = 0x29
	binary.LittleEndian.PutUint32(b[ext+3:], wr.o.VolumeID)
	label := wr.label
	if label == "" {
		label = "NO NAME"
	}
	copy(b[ext+7:ext+18], fmt.Sprintf("%-11s", label))
	copy(b[ext+18:ext+26], fmt.Sprintf("%-8s", g.Type.String()))
	// The jump lands on "cli; hlt; jmp $-1": a BIOS that boots this by
	// mistake stops instead of running the zeros after the BPB.
	code := ext + 26
	b[0], b[1], b[2] = 0xEB, byte(code-2), 0x90
	copy(b[code:], []byte{0xFA, 0xF4, 0xEB, 0xFD})
	b[510], b[511] = 0x55, 0xAA
	if err := wr.at(b, 0, "boot sector"); err != nil {
		return err
	}
	if g.Type != FAT32 {
		return nil
	}
	info := make([]byte, sectorSize)
	binary.LittleEndian.PutUint32(info[0:], 0x41615252)
	binary.LittleEndian.PutUint32(info[484:], 0x61417272)
	binary.LittleEndian.PutUint32(info[488:], g.Clusters-(wr.next-2))
	nextFree := wr.next
	if wr.next-2 >= g.Clusters {
		nextFree = 0xFFFFFFFF
	}
	binary.LittleEndian.PutUint32(info[492:], nextFree)
	binary.LittleEndian.PutUint32(info[508:], 0xAA550000)
	for _, s := range []int64{fat32FSInfo, fat32BackupBoot + fat32FSInfo} {
		if err := wr.at(info, s*sectorSize, "FSInfo"); err != nil {
			return err
		}
	}
	return wr.at(b, fat32BackupBoot*sectorSize, "backup boot sector")
}
