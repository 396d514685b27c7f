package ldcache

import (
	"bytes"
	"errors"
	"io"
	"strings"
)

// errSkip marks a file ldconfig does not take as a library (process_file
// returning non-zero): not ELF, not a shared object, no dynamic section...
var errSkip = errors.New("not a library ldconfig accepts")

// fileView reads a library as ldconfig's mmap of it, with the byte order of
// the ldconfig build (not the file's EI_DATA: ldconfig reads native structs).
type fileView struct {
	r    io.ReaderAt
	size int64
	a    *archInfo
}

func (f *fileView) bytes(off, n uint64) ([]byte, error) {
	if off > uint64(f.size) || n > uint64(f.size)-off {
		return nil, errSkip
	}
	b := make([]byte, n)
	if _, err := f.r.ReadAt(b, int64(off)); err != nil && !(err == io.EOF && n == 0) {
		return nil, err
	}
	return b, nil
}

func (f *fileView) u16(off uint64) (uint16, error) {
	b, err := f.bytes(off, 2)
	if err != nil {
		return 0, err
	}
	return f.a.order.Uint16(b), nil
}

func (f *fileView) u32(off uint64) (uint32, error) {
	b, err := f.bytes(off, 4)
	if err != nil {
		return 0, err
	}
	return f.a.order.Uint32(b), nil
}

func (f *fileView) u64(off uint64) (uint64, error) {
	b, err := f.bytes(off, 8)
	if err != nil {
		return 0, err
	}
	return f.a.order.Uint64(b), nil
}

// cstring reads a NUL-terminated string at off.
func (f *fileView) cstring(off uint64) (string, error) {
	if off > uint64(f.size) {
		return "", errSkip
	}
	var sb strings.Builder
	buf := make([]byte, 256)
	for {
		n, err := f.r.ReadAt(buf, int64(off))
		if i := bytes.IndexByte(buf[:n], 0); i >= 0 {
			sb.Write(buf[:i])
			return sb.String(), nil
		}
		sb.Write(buf[:n])
		off += uint64(n)
		if err == io.EOF || n == 0 {
			// Past the end: ldconfig would read the zero fill of the
			// mapping's last page, or fault.
			return "", errSkip
		}
		if err != nil {
			return "", err
		}
		if sb.Len() > 1<<20 {
			return "", errSkip
		}
	}
}

// libInfo is what process_file reports for one library.
type libInfo struct {
	flag    int32
	isa     uint32
	soname  string
	hasName bool
}

const (
	etDyn          = 3
	ptLoad         = 1
	ptDynamic      = 2
	ptInterp       = 3
	ptGNUProperty  = 0x6474e553
	dtNull         = 0
	dtNeeded       = 1
	dtStrtab       = 5
	dtSoname       = 14
	emX86_64       = 62
	em386          = 3
	emIA64         = 50
	ntGNUProperty0 = 5
	x86ISANeeded   = 0xc0008002
)

// processFile is ldconfig's process_file (readlib.c) with the architecture's
// process_elf_file. lib is the directory entry's name. errSkip means ldconfig
// ignores the file; other errors are I/O failures.
func (a *archInfo) processFile(f *fileView, lib string) (libInfo, error) {
	info := libInfo{flag: flagAny}
	ehdrSize := uint64(52)
	if a.is64 {
		ehdrSize = 64
	}
	if uint64(f.size) < ehdrSize {
		return info, errSkip
	}
	// a.out: N_MAGIC of the native unsigned long a_info.
	var magic uint64
	var err error
	if a.is64 {
		magic, err = f.u64(0)
	} else {
		var m uint32
		m, err = f.u32(0)
		magic = uint64(m)
	}
	if err != nil {
		return info, err
	}
	if m := magic & 0xffff; m == 0o413 || m == 0o314 {
		soname := lib
		if i := strings.Index(soname, ".so."); i >= 0 {
			if j := strings.IndexByte(soname[i+4:], '.'); j >= 0 {
				soname = soname[:i+4+j]
			}
		}
		return libInfo{flag: flagLibc4, soname: soname, hasName: true}, nil
	}
	ident, err := f.bytes(0, 16)
	if err != nil {
		return info, err
	}
	if string(ident[:4]) != "\x7fELF" {
		return info, errSkip
	}
	etype, err := f.u16(16)
	if err != nil {
		return info, err
	}
	if etype != etDyn {
		return info, errSkip
	}
	machine, err := f.u16(18)
	if err != nil {
		return info, err
	}
	switch a.fam {
	case famX86:
		return a.processX86(f, ident, machine)
	case famARM:
		return a.processARM(f, ident)
	case famPPC, famS390:
		if ident[4] == 1 {
			return a.processELF(f, ident, false)
		}
		info, err = a.processELF(f, ident, true)
		if err == nil {
			if a.fam == famPPC {
				info.flag = flagPPC64 | flagLibc6
			} else {
				info.flag = flagS390 | flagLibc6
			}
		}
		return info, err
	case famRISCV:
		return a.processRISCV(f, ident)
	}
	return info, errSkip
}

// processX86 is sysdeps/unix/sysv/linux/x86/readelflib.c: the flag comes
// from the machine and class, i386's from the ELF file itself.
func (a *archInfo) processX86(f *fileView, ident []byte, machine uint16) (libInfo, error) {
	var fileFlag int32
	switch {
	case machine == emX86_64:
		if ident[4] == 2 {
			fileFlag = flagX8664 | flagLibc6
		} else {
			fileFlag = flagX32 | flagLibc6
		}
	case machine == emIA64 && !a.x86_64 && ident[4] == 2:
		fileFlag = flagIA64 | flagLibc6
	case machine == em386 && ident[4] == 1:
	default:
		return libInfo{flag: flagAny}, errSkip
	}
	info, err := a.processELF(f, ident, ident[4] == 2)
	if err == nil && fileFlag != 0 {
		info.flag = fileFlag
	}
	return info, err
}

// processARM is arm's readelflib.c: a 32-bit object's float ABI comes from
// its flags, or from its attributes when the flags say nothing.
func (a *archInfo) processARM(f *fileView, ident []byte) (libInfo, error) {
	if ident[4] != 1 {
		info, err := a.processELF(f, ident, true)
		if err == nil {
			info.flag = flagAArch64 | flagLibc6
		}
		return info, err
	}
	info, err := a.processELF(f, ident, false)
	if err != nil {
		return info, err
	}
	eflags, err := f.u32(36)
	if err != nil {
		return info, err
	}
	if eflags&0xff000000 == 0x05000000 {
		switch {
		case eflags&0x400 != 0:
			info.flag = flagARMHF | flagLibc6
		case eflags&0x200 != 0:
			info.flag = flagARMSF | flagLibc6
		case a.armLibraryHF(f):
			info.flag = flagARMHF | flagLibc6
		default:
			info.flag = flagLibc6
		}
	}
	return info, nil
}

// processRISCV is riscv's readelflib.c: the float ABI from the flags, and
// any other flag makes the file one ldconfig skips.
func (a *archInfo) processRISCV(f *fileView, ident []byte) (libInfo, error) {
	var eflags uint32
	var info libInfo
	var err error
	if ident[4] == 1 {
		info, err = a.processELF(f, ident, false)
		eflags, _ = f.u32(36)
	} else {
		info, err = a.processELF(f, ident, true)
		eflags, _ = f.u32(48)
	}
	if err != nil && err != errSkip {
		return info, err
	}
	switch eflags & 0x6 {
	case 0:
		info.flag |= flagRVSoft
	case 4:
		info.flag |= flagRVDbl
	default:
		return info, errSkip
	}
	if eflags&^0x7 != 0 {
		return info, errSkip
	}
	return info, err
}

// processELF is elf/readelflib.c's process_elf_file for one ELF class:
// flag from the interpreter or the DT_NEEDED of libc, the x86 ISA level from
// the GNU property note, and DT_SONAME, read through the program headers.
func (a *archInfo) processELF(f *fileView, ident []byte, is64 bool) (libInfo, error) {
	info := libInfo{flag: flagAny}
	wantClass := byte(1)
	if is64 {
		wantClass = 2
	}
	if ident[4] != wantClass {
		return info, errSkip
	}
	o := &elfObject{f: f, a: a, is64: is64}
	phoff, phnum, err := o.phdrTable()
	if err != nil {
		return info, err
	}
	if phoff > uint64(f.size) {
		return info, errSkip
	}
	info.flag = flagELF
	info.isa = 0
	if err := o.readPhdrs(phoff, phnum); err != nil {
		return info, err
	}
	if err := o.scanSegments(&info); err != nil {
		return info, err
	}
	if o.dynSize == 0 {
		return info, errSkip
	}
	strtab, ok, err := o.strtab()
	if err != nil {
		return info, err
	}
	if !ok || strtab > uint64(f.size) {
		return info, errSkip
	}
	err = o.readNames(strtab, &info)
	return info, err
}

// elfPhdr is the part of a program header that ldconfig reads.
type elfPhdr struct{ typ, offset, vaddr, filesz, align uint64 }

// elfObject is an ELF file of one class read through its program headers.
type elfObject struct {
	f       *fileView
	a       *archInfo
	is64    bool
	phdrs   []elfPhdr
	dynAddr uint32 // unsigned int in readelflib.c
	dynSize uint64
}

// phdrTable is where the program headers are and how many there are.
func (o *elfObject) phdrTable() (phoff uint64, phnum uint16, err error) {
	if o.is64 {
		if phoff, err = o.f.u64(32); err != nil {
			return 0, 0, err
		}
		phnum, err = o.f.u16(56)
		return phoff, phnum, err
	}
	v, err := o.f.u32(28)
	if err != nil {
		return 0, 0, err
	}
	phnum, err = o.f.u16(44)
	return uint64(v), phnum, err
}

func (o *elfObject) readPhdrs(phoff uint64, phnum uint16) error {
	phentsize := uint64(32)
	if o.is64 {
		phentsize = 56
	}
	o.phdrs = make([]elfPhdr, 0, phnum)
	for i := 0; i < int(phnum); i++ {
		b, err := o.f.bytes(phoff+uint64(i)*phentsize, phentsize)
		if err != nil {
			return err
		}
		ord := o.a.order
		if o.is64 {
			o.phdrs = append(o.phdrs, elfPhdr{uint64(ord.Uint32(b[0:])), ord.Uint64(b[8:]), ord.Uint64(b[16:]), ord.Uint64(b[32:]), ord.Uint64(b[48:])})
		} else {
			o.phdrs = append(o.phdrs, elfPhdr{uint64(ord.Uint32(b[0:])), uint64(ord.Uint32(b[4:])), uint64(ord.Uint32(b[8:])), uint64(ord.Uint32(b[16:])), uint64(ord.Uint32(b[28:]))})
		}
	}
	return nil
}

// scanSegments finds the dynamic segment, takes the flag from the
// interpreter and the x86 ISA level from the GNU property note.
func (o *elfObject) scanSegments(info *libInfo) error {
	a := o.a
	for _, p := range o.phdrs {
		switch p.typ {
		case ptDynamic:
			o.dynAddr = uint32(p.offset)
			o.dynSize = p.filesz
		case ptInterp:
			interp, err := o.f.cstring(p.offset)
			if err != nil {
				return err
			}
			for _, k := range a.interpreters {
				if interp == k.name {
					info.flag = k.flag
					break
				}
			}
		case ptGNUProperty:
			if a.fam == famX86 {
				if err := a.x86Property(o.f, p.offset, p.filesz, p.align, o.is64, &info.isa); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// dyn is the tag and value of the dynamic segment's entry i.
func (o *elfObject) dyn(i uint64) (int64, uint64, error) {
	f := o.f
	if o.is64 {
		off := uint64(o.dynAddr) + i*16
		tag, err := f.u64(off)
		if err != nil {
			return 0, 0, err
		}
		val, err := f.u64(off + 8)
		return int64(tag), val, err
	}
	off := uint64(o.dynAddr) + i*8
	tag, err := f.u32(off)
	if err != nil {
		return 0, 0, err
	}
	val, err := f.u32(off + 4)
	return int64(int32(tag)), uint64(val), err
}

// strtab is the file offset of the string table DT_STRTAB names, through
// the load segment that holds its address; ok is false without one.
func (o *elfObject) strtab() (strtab uint64, ok bool, err error) {
	for i := uint64(0); ; i++ {
		tag, val, err := o.dyn(i)
		if err != nil {
			return 0, false, err
		}
		if tag == dtNull {
			return 0, false, nil
		}
		if tag == dtStrtab {
			loadoff := uint64(0)
			for _, p := range o.phdrs {
				if p.typ == ptLoad && val >= p.vaddr && val-p.vaddr < p.filesz {
					loadoff = p.vaddr - p.offset
					break
				}
			}
			return val - loadoff, true, nil
		}
	}
}

// readNames takes the flag from the first DT_NEEDED naming a known libc,
// and the soname from DT_SONAME, stopping once it has both.
func (o *elfObject) readNames(strtab uint64, info *libInfo) error {
	for i := uint64(0); ; i++ {
		tag, val, err := o.dyn(i)
		if err != nil {
			return err
		}
		if tag == dtNull {
			return nil
		}
		if tag != dtNeeded && tag != dtSoname {
			continue
		}
		name, err := o.f.cstring(strtab + val)
		if err != nil {
			return err
		}
		if tag == dtNeeded {
			if info.flag == flagELF {
				for _, k := range o.a.knownLibs {
					if name == k.name {
						info.flag = k.flag
						break
					}
				}
			}
		} else {
			info.soname, info.hasName = name, true
		}
		if info.hasName && info.flag != flagELF {
			return nil
		}
	}
}

// x86Property reads GNU_PROPERTY_X86_ISA_1_NEEDED from a PT_GNU_PROPERTY
// segment as readelflib.c and the x86 elf-read-prop.h do.
func (a *archInfo) x86Property(f *fileView, off, size, align uint64, is64 bool, isa *uint32) error {
	addr := uint64(4)
	if is64 {
		addr = 8
	}
	if align != addr {
		return nil
	}
	alignUp := func(v, al uint64) uint64 { return (v + al - 1) &^ (al - 1) }
	note := uint64(0)
	for note+12 < size {
		hdr, err := f.bytes(off+note, 12)
		if err != nil {
			return nil
		}
		namesz := uint64(a.order.Uint32(hdr[0:]))
		descsz := uint64(a.order.Uint32(hdr[4:]))
		typ := a.order.Uint32(hdr[8:])
		if namesz == 4 && typ == ntGNUProperty0 {
			name, err := f.bytes(off+note+12, 4)
			if err != nil {
				return nil
			}
			if string(name) == "GNU\x00" {
				if descsz < 8 || descsz%addr != 0 {
					return nil
				}
				ptr := off + note + 16
				end := ptr + descsz
				var last uint32
				for {
					pb, err := f.bytes(ptr, 8)
					if err != nil {
						return nil
					}
					ptype := a.order.Uint32(pb[0:])
					datasz := uint64(a.order.Uint32(pb[4:]))
					if ptype < last {
						return nil
					}
					ptr += 8
					if ptr+datasz > end {
						return nil
					}
					last = ptype
					if ptype > x86ISANeeded {
						return nil
					}
					if ptype == x86ISANeeded {
						if datasz == 4 {
							v, err := f.u32(ptr)
							if err != nil {
								return nil
							}
							if v != 0 {
								level := uint32(31)
								for v&(1<<level) == 0 {
									level--
								}
								*isa = level
							}
						}
						return nil
					}
					ptr += alignUp(datasz, addr)
					if end < ptr || end-ptr < 8 {
						return nil
					}
				}
			}
		}
		// ELF_NOTE_NEXT_OFFSET
		note += alignUp(alignUp(12+namesz, align)+descsz, align)
	}
	return nil
}

// armLibraryHF is Debian's is_library_hf (arm/unsubmitted-ldconfig-cache-
// abi.diff): whether an EABI5 object without float ABI flags says in its
// .ARM.attributes that it passes VFP arguments in VFP registers.
func (a *archInfo) armLibraryHF(f *fileView) bool {
	shoff, err := f.u32(32)
	if err != nil {
		return false
	}
	shnum, err := f.u16(48)
	if err != nil {
		return false
	}
	for i := uint64(0); i < uint64(shnum); i++ {
		sh, err := f.bytes(uint64(shoff)+i*40, 40)
		if err != nil {
			return false
		}
		if a.order.Uint32(sh[4:]) != 0x70000003 {
			continue
		}
		secOff := uint64(a.order.Uint32(sh[16:]))
		secSize := uint64(a.order.Uint32(sh[20:]))
		data, err := f.bytes(secOff, secSize)
		if err != nil || len(data) == 0 || data[0] != 'A' {
			continue
		}
		if armAttrsHF(data[1:]) {
			return true
		}
	}
	return false
}

func armAttrsHF(p []byte) bool {
	le32 := func(b []byte) uint64 {
		return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24
	}
	uleb := func(b []byte) (uint64, []byte, bool) {
		var v uint64
		var shift uint
		for i, c := range b {
			if shift < 64 {
				v |= uint64(c&0x7f) << shift
			}
			shift += 7
			if c&0x80 == 0 {
				return v, b[i+1:], true
			}
		}
		return 0, nil, false
	}
	length := uint64(len(p))
	for length > 0 {
		if len(p) < 4 {
			return false
		}
		secLen := le32(p)
		if secLen > length {
			secLen = length
		}
		p = p[4:]
		length -= secLen
		if secLen < 4 {
			return false
		}
		secLen -= 4
		if secLen > uint64(len(p)) {
			return false
		}
		nul := bytes.IndexByte(p, 0)
		if nul < 0 {
			return false
		}
		if string(p[:nul]) != "aeabi" {
			p = p[secLen:]
			continue
		}
		if uint64(nul+1) > secLen {
			return false
		}
		sub := p[nul+1 : secLen]
		p = p[secLen:]
		for len(sub) > 0 {
			var val uint64
			if len(sub) < 5 {
				return false
			}
			tag := sub[0]
			size := le32(sub[1:])
			if size > uint64(len(sub)) {
				size = uint64(len(sub))
			}
			if size < 5 {
				return false
			}
			body := sub[5:size]
			sub = sub[size:]
			if tag != 1 {
				continue
			}
			for len(body) > 0 {
				t, rest, ok := uleb(body)
				if !ok {
					return false
				}
				body = rest
				if t == 4 || t == 5 || t == 67 {
					nul := bytes.IndexByte(body, 0)
					if nul < 0 {
						return false
					}
					body = body[nul+1:]
				} else {
					val, body, ok = uleb(body)
					if !ok {
						return false
					}
				}
				if t == 28 && val == 1 {
					return true
				}
			}
		}
	}
	return false
}
