// Package ldcache writes glibc's dynamic linker cache, /etc/ld.so.cache, for
// a tree without running anything: the bytes Debian bookworm's ldconfig
// (glibc 2.36) writes when run as "chroot TREE /sbin/ldconfig".
//
// It follows ldconfig step by step: /etc/ld.so.conf and its include globs,
// then the built-in system directories (Debian's multiarch SYSTEM_DIRS),
// duplicates dropped by identity (a path through the merged-/usr symlinks is
// the same directory), glibc-hwcaps and legacy hwcap subdirectories, the
// library files read as ldconfig reads them (soname, flags, x86 ISA level),
// one library per soname and directory, the entries sorted as cache.c's
// compare() keeps them, and the "new" cache format with its string table
// and extension section. Unlike ldconfig it never creates soname links or
// changes the tree.
package ldcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"sort"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
)

// CachePath is where the dynamic linker looks for the cache.
const CachePath = "/etc/ld.so.cache"

// confPath is ldconfig's LD_SO_CONF.
const confPath = "/etc/ld.so.conf"

// ldconfigPaths are where the generator string is looked for: the program
// itself, or Ubuntu's ldconfig.real behind a wrapper script.
var ldconfigPaths = []string{"/sbin/ldconfig", "/usr/sbin/ldconfig", "/sbin/ldconfig.real", "/usr/sbin/ldconfig.real"}

var libTypes = []struct {
	name string
	flag int32
}{{"libc4", flagLibc4}, {"libc5", flagLibc5}, {"libc6", flagLibc6}, {"glibc2", flagLibc6}}

// hwcapsSub is a glibc-hwcaps subdirectory name (struct
// glibc_hwcaps_subdirectory).
type hwcapsSub struct {
	name  string
	used  bool
	index uint32
}

// dirEntry is one directory to scan (struct dir_entry).
type dirEntry struct {
	path   string // as given, not canonical
	flag   int32
	id     *rootfs.Inode // stands for st_dev/st_ino
	hwcaps *hwcapsSub
}

type cacheEntry struct {
	lib, path string
	flags     int32
	isa       uint32
	hwcap     uint64
	bits      int
	hwcaps    *hwcapsSub
}

type dlib struct {
	name, soname string
	flag         int32
	isLink       bool
	isa          uint32
}

type builder struct {
	t       *rootfs.Tree
	a       *archInfo
	dirs    []*dirEntry
	hwcaps  []*hwcapsSub
	strings map[string]bool
	entries []*cacheEntry
}

// Build returns the bytes of /etc/ld.so.cache for the tree, as glibc 2.36's
// ldconfig would write them. arch is a Debian architecture name ("amd64",
// "arm64", ...). The generator string in the cache is the one compiled into
// the tree's own ldconfig, which must therefore be present.
func Build(t *rootfs.Tree, arch string) ([]byte, error) {
	a := arches[arch]
	if a == nil {
		return nil, fmt.Errorf("ldcache: unsupported architecture %q", arch)
	}
	gen, err := Generator(t)
	if err != nil {
		return nil, err
	}
	b := &builder{t: t, a: a, strings: map[string]bool{}}
	if err := b.parseConf(confPath, 0); err != nil {
		return nil, err
	}
	for _, d := range a.systemDirs {
		b.addDir(d)
	}
	for i := 0; i < len(b.dirs); i++ { // grows with legacy hwcap subdirectories
		if err := b.searchDir(b.dirs[i]); err != nil {
			return nil, err
		}
	}
	return b.save(gen)
}

// Generator returns the generator string the tree's ldconfig writes into
// the cache, such as "ldconfig (Debian GLIBC 2.36-9+deb12u13) stable release
// version 2.36", read from the program's read-only data.
func Generator(t *rootfs.Tree) (string, error) {
	var found []string
	for _, p := range ldconfigPaths {
		rp, err := t.Resolve(p, true)
		if err != nil {
			continue
		}
		e := t.Get(rp)
		if e == nil || e.Type != rootfs.TypeRegular {
			continue
		}
		found = append(found, p)
		f, err := t.Open(rp)
		if err != nil {
			return "", fmt.Errorf("ldcache: %s: %w", p, err)
		}
		data, err := io.ReadAll(f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("ldcache: %s: %w", p, err)
		}
		if g, ok := generatorIn(data); ok {
			return g, nil
		}
	}
	if len(found) == 0 {
		return "", fmt.Errorf("ldcache: %s: %w", ldconfigPaths[0], rootfs.ErrNotExist)
	}
	return "", fmt.Errorf("ldcache: %s: no ldconfig generator string in the program", strings.Join(found, ", "))
}

// generatorIn finds the NUL-terminated "ldconfig ... release version ..."
// string in a program's bytes.
func generatorIn(data []byte) (string, bool) {
	marker := []byte(" release version ")
	for off := 0; ; {
		i := bytes.Index(data[off:], marker)
		if i < 0 {
			return "", false
		}
		i += off
		start := bytes.LastIndexByte(data[:i], 0) + 1
		end := bytes.IndexByte(data[i:], 0)
		if end < 0 {
			return "", false
		}
		s := data[start : i+end]
		if bytes.HasPrefix(s, []byte("ldconfig ")) && printable(s) {
			return string(s), true
		}
		off = i + len(marker)
	}
}

func printable(s []byte) bool {
	for _, c := range s {
		if c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// intern adds a string to the string table (stringtable_add).
func (b *builder) intern(s string) { b.strings[s] = true }

// addDir is ldconfig's add_dir_1 for a configuration line or built-in
// directory: an optional "=TYPE", trailing blanks and slashes dropped, the
// directory kept if it exists and is not already listed.
func (b *builder) addDir(line string) {
	p, flag := line, flagAny
	if i := strings.IndexByte(p, '='); i >= 0 {
		typ := p[i+1:]
		p = p[:i]
		for _, lt := range libTypes {
			if typ == lt.name {
				flag = lt.flag
				break
			}
		}
	}
	i := len(p)
	for i > 0 && isSpace(p[i-1]) {
		i--
	}
	for i > 0 && p[i-1] == '/' {
		i--
	}
	p = p[:i]
	if p == "" {
		return
	}
	e, err := b.t.Lookup(p, true)
	if err != nil {
		return // "Can't stat"
	}
	d := &dirEntry{path: p, flag: flag, id: e.Inode}
	if b.addSingleDir(d) {
		b.addGlibcHwcaps(d)
	}
}

// addSingleDir is add_single_dir: a directory already listed (the same
// inode, by whatever path) only takes the newer flag.
func (b *builder) addSingleDir(d *dirEntry) bool {
	for _, o := range b.dirs {
		if o.id == d.id {
			o.flag = d.flag
			return false
		}
	}
	b.dirs = append(b.dirs, d)
	return true
}

// addGlibcHwcaps is add_glibc_hwcaps_subdirectories.
func (b *builder) addGlibcHwcaps(d *dirEntry) {
	dir := d.path + "/glibc-hwcaps"
	rp, err := b.t.Resolve(dir, true)
	if err != nil {
		return
	}
	if e := b.t.Get(rp); e == nil || e.Type != rootfs.TypeDir {
		return
	}
	for _, name := range b.t.Children(rp) {
		ce := b.t.Get(join(rp, name))
		if ce == nil || strings.HasPrefix(name, ".") || ce.Type == rootfs.TypeRegular || strings.Contains(name, ":") {
			continue
		}
		te, err := b.t.Lookup(join(rp, name), true)
		if err != nil || te.Type != rootfs.TypeDir {
			continue
		}
		sub := &dirEntry{path: d.path + "/glibc-hwcaps/" + name, flag: d.flag, id: te.Inode, hwcaps: b.newHwcaps(name)}
		b.addSingleDir(sub)
	}
}

// newHwcaps is new_glibc_hwcaps_subdirectory; the name goes into the string
// table whether or not a library ends up using it.
func (b *builder) newHwcaps(name string) *hwcapsSub {
	b.intern(name)
	for _, h := range b.hwcaps {
		if h.name == name {
			return h
		}
	}
	h := &hwcapsSub{name: name}
	b.hwcaps = append(b.hwcaps, h)
	return h
}

func join(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// searchDir is ldconfig's search_dir without the link creation.
func (b *builder) searchDir(d *dirEntry) error {
	a := b.a
	var hwcap uint64
	if d.hwcaps == nil {
		hwcap = a.pathHwcap(d.path)
	}
	rp, err := b.t.Resolve(d.path, true)
	if err != nil {
		return nil
	}
	if e := b.t.Get(rp); e == nil || e.Type != rootfs.TypeDir {
		return nil // "Can't open directory"
	}
	var dlibs []*dlib // in readdir order; ldconfig's list is the reverse
	for _, name := range b.t.Children(rp) {
		cp := join(rp, name)
		ce := b.t.Get(cp)
		if ce == nil || !a.considered(d, name, ce.Type) {
			continue
		}
		isLink := ce.Type == rootfs.TypeSymlink
		target := ce
		if isLink {
			te, err := b.t.Lookup(cp, true)
			if err != nil {
				continue // dangling: ldconfig removes it if named *.so.*
			}
			target = te
		}
		isDir := target.Type == rootfs.TypeDir
		if d.hwcaps == nil && isDir && a.isHwcapPlatform(name) {
			b.addSingleDir(&dirEntry{path: d.path + "/" + name, flag: d.flag, id: target.Inode})
			continue
		}
		if ce.Type != rootfs.TypeRegular && !isLink {
			continue
		}
		if target.Type != rootfs.TypeRegular {
			continue // process_file fails on anything but a file
		}
		info, err := b.processFile(target.Path, d.path+"/"+name, name)
		if errors.Is(err, errSkip) {
			continue
		}
		if err != nil {
			return err
		}
		soname, isLink := sonameOf(name, info, isLink)
		flag := info.flag
		if flag == flagELF && (d.flag == flagLibc5 || d.flag == flagLibc6) {
			flag = d.flag
		}
		dlibs = a.addDlib(dlibs, &dlib{name: name, soname: soname, flag: flag, isLink: isLink, isa: info.isa})
	}
	for i := len(dlibs) - 1; i >= 0; i-- {
		l := dlibs[i]
		filename := l.soname
		if d.hwcaps != nil {
			filename = l.name
		}
		b.addToCache(d.path, filename, l.soname, l.flag, l.isa, hwcap, d.hwcaps)
	}
	return nil
}

// considered reports whether search_dir looks further at the directory
// entry name of type typ in d: a file, link or directory named as a shared
// object, or a hwcap platform's directory, and no prelink temporary.
func (a *archInfo) considered(d *dirEntry, name string, typ rootfs.Type) bool {
	if typ != rootfs.TypeRegular && typ != rootfs.TypeSymlink && typ != rootfs.TypeDir {
		return false
	}
	if !isDSO(name) && (typ == rootfs.TypeRegular || (d.hwcaps == nil && !a.isHwcapPlatform(name))) {
		return false
	}
	return !strings.HasSuffix(name, ".#prelink#") &&
		!(len(name) >= 17 && strings.HasPrefix(name[len(name)-17:], ".#prelink#."))
}

// sonameOf is the soname the library at directory entry name goes under,
// and whether it counts as a link: only a link named as the soname, or a
// "libfoo.so" development link to it, does; others are taken as files.
func sonameOf(name string, info libInfo, isLink bool) (string, bool) {
	soname := name // implicit_soname: only a.out names are shortened
	if info.hasName {
		soname = info.soname
	}
	if isLink && name != soname {
		if !strings.HasSuffix(name, ".so") || !strings.HasPrefix(soname, name) {
			isLink = false
		}
	}
	if isLink {
		soname = name
	}
	return soname, isLink
}

// addDlib adds l to dlibs, or, when a library of its soname is there, lets
// l take its place if ldconfig prefers it: a file over a link, else the
// higher version.
func (a *archInfo) addDlib(dlibs []*dlib, l *dlib) []*dlib {
	var found *dlib
	for _, o := range dlibs {
		if o.soname == l.soname {
			found = o
			break
		}
	}
	if found == nil {
		return append(dlibs, l)
	}
	if (!l.isLink && found.isLink) || (l.isLink == found.isLink && libcmp(found.name, l.name, a.signedChar) < 0) {
		if found.flag != l.flag {
			if found.flag == flagELF && (l.flag == flagLibc5 || l.flag == flagLibc6) {
				found.flag = l.flag
			} else if (found.flag == flagLibc5 || found.flag == flagLibc6) && l.flag == flagELF {
				found.flag = l.flag
			}
		}
		found.name, found.isLink, found.isa = l.name, l.isLink, l.isa
	}
	return dlibs
}

// processFile reads the library at the exact tree path p; shown names it
// in errors, lib is its directory entry's name.
func (b *builder) processFile(p, shown, lib string) (libInfo, error) {
	f, err := b.t.Open(p)
	if err != nil {
		return libInfo{}, fmt.Errorf("ldcache: %s: %w", shown, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return libInfo{}, fmt.Errorf("ldcache: %s: %w", shown, err)
	}
	info, err := b.a.processFile(&fileView{r: f, size: st.Size(), a: b.a}, lib)
	if err != nil && !errors.Is(err, errSkip) {
		return info, fmt.Errorf("ldcache: %s: %w", shown, err)
	}
	return info, err
}

// addToCache is cache.c's add_to_cache: the entry goes after every entry
// that does not compare greater, so equal entries keep their order.
func (b *builder) addToCache(dir, filename, soname string, flags int32, isa uint32, hwcap uint64, hwcaps *hwcapsSub) {
	e := &cacheEntry{lib: soname, path: dir + "/" + filename, flags: flags, isa: isa, hwcap: hwcap,
		bits: bits.OnesCount64(hwcap), hwcaps: hwcaps}
	b.intern(e.path)
	b.intern(e.lib)
	if hwcaps != nil {
		hwcaps.used = true
	}
	i := 0
	for i < len(b.entries) && b.compare(b.entries[i], e) <= 0 {
		i++
	}
	b.entries = append(b.entries, nil)
	copy(b.entries[i+1:], b.entries[i:])
	b.entries[i] = e
}

// compare is cache.c's compare: sonames in descending _dl_cache_libcmp
// order, then higher flags, glibc-hwcaps entries first and by name, then the
// more specific legacy hwcaps.
func (b *builder) compare(e1, e2 *cacheEntry) int32 {
	res := libcmp(e2.lib, e1.lib, b.a.signedChar)
	if res != 0 {
		return res
	}
	switch {
	case e1.flags < e2.flags:
		return 1
	case e1.flags > e2.flags:
		return -1
	case e1.hwcaps != nil && e2.hwcaps == nil:
		return -1
	case e1.hwcaps == nil && e2.hwcaps != nil:
		return 1
	case e1.hwcaps != nil && e2.hwcaps != nil:
		if c := strings.Compare(e1.hwcaps.name, e2.hwcaps.name); c != 0 {
			return int32(c)
		}
	}
	switch {
	case e2.bits > e1.bits:
		return 1
	case e2.bits < e1.bits:
		return -1
	case e2.hwcap > e1.hwcap:
		return 1
	case e2.hwcap < e1.hwcap:
		return -1
	}
	return 0
}

// Layout of the new format (dl-cache.h).
const (
	cacheMagicNew    = "glibc-ld.so.cache1.1"
	headerSize       = 48
	fileEntrySize    = 24
	extensionMagic   = 0xeaa42174 // (uint32_t) -358342284
	extTagGenerator  = 0
	extTagHwcaps     = 1
	hwcapExtension   = uint64(1) << 62
	isaLevelMask     = 1<<10 - 1
	extensionDirSize = 8 + 2*16 // header and both section descriptors
)

// save is cache.c's save_cache for the new format.
func (b *builder) save(generator string) ([]byte, error) {
	order := b.a.order
	// assign_glibc_hwcaps_indices
	var used []*hwcapsSub
	for _, h := range b.hwcaps {
		if h.used {
			used = append(used, h)
		}
	}
	sort.Slice(used, func(i, j int) bool { return used[i].name < used[j].name })
	for i, h := range used {
		h.index = uint32(i)
	}

	strs, offsets := finalizeStrings(b.strings)
	n := len(b.entries)
	strOffset := uint32(headerSize + n*fileEntrySize)
	extOffset := (int(strOffset) + len(strs) + 3) &^ 3

	out := make([]byte, extOffset, extOffset+extensionDirSize+4*len(used)+len(generator))
	copy(out, cacheMagicNew)
	order.PutUint32(out[20:], uint32(n))
	order.PutUint32(out[24:], uint32(len(strs)))
	if order == byteOrder(binary.BigEndian) {
		out[28] = 3
	} else {
		out[28] = 2
	}
	order.PutUint32(out[32:], uint32(extOffset))
	for i, e := range b.entries {
		rec := out[headerSize+i*fileEntrySize:]
		order.PutUint32(rec[0:], uint32(e.flags))
		order.PutUint32(rec[4:], strOffset+offsets[e.lib])
		order.PutUint32(rec[8:], strOffset+offsets[e.path])
		hwcap := e.hwcap
		if e.hwcaps != nil {
			if e.isa > isaLevelMask {
				return nil, fmt.Errorf("ldcache: %s: ISA level is too high (%d > %d)", e.path, e.isa, isaLevelMask)
			}
			hwcap = hwcapExtension | uint64(e.isa)<<32 | uint64(e.hwcaps.index)
		}
		order.PutUint64(rec[16:], hwcap)
	}
	copy(out[strOffset:], strs)

	// write_extensions
	hwcapsOffset := uint32(extOffset + extensionDirSize)
	hwcapsSize := uint32(4 * len(used))
	genOffset := hwcapsOffset - 16
	count := uint32(1)
	if len(used) > 0 {
		genOffset = hwcapsOffset + hwcapsSize
		count = 2
	}
	put := func(v uint32) { out = order.AppendUint32(out, v) }
	put(extensionMagic)
	put(count)
	put(extTagGenerator)
	put(0)
	put(genOffset)
	put(uint32(len(generator)))
	if len(used) > 0 {
		put(extTagHwcaps)
		put(0)
		put(hwcapsOffset)
		put(hwcapsSize)
		for _, h := range used {
			put(strOffset + offsets[h.name])
		}
	}
	out = append(out, generator...)
	return out, nil
}

// finalizeStrings is stringtable_finalize: the strings sorted by their
// reversed bytes in descending order (longer first on a common tail), each
// stored as the tail of the one before it when it can be.
func finalizeStrings(set map[string]bool) ([]byte, map[string]uint32) {
	offsets := make(map[string]uint32, len(set))
	if len(set) == 0 {
		return nil, offsets
	}
	list := make([]string, 0, len(set))
	for s := range set {
		list = append(list, s)
	}
	sort.Slice(list, func(i, j int) bool { return finalizeLess(list[i], list[j]) })
	var off uint32
	var prev string
	for i, s := range list {
		if i > 0 {
			if len(prev) >= len(s) && strings.HasSuffix(prev, s) {
				off = offsets[prev] + uint32(len(prev)-len(s))
			} else {
				off = offsets[prev] + uint32(len(prev)) + 1
			}
		}
		offsets[s] = off
		prev = s
	}
	last := list[len(list)-1]
	size := offsets[last] + uint32(len(last)) + 1
	buf := make([]byte, size)
	for _, s := range list {
		copy(buf[offsets[s]:], s)
	}
	return buf, offsets
}

// finalizeLess is finalize_compare(l, r) < 0.
func finalizeLess(l, r string) bool {
	n := min(len(l), len(r))
	for i := 1; i <= n; i++ {
		lc, rc := l[len(l)-i], r[len(r)-i]
		if lc != rc {
			return rc < lc
		}
	}
	return len(l) > len(r)
}
