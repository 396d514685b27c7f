package kmod

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The ELF reading below is what libkmod-elf.c reads of a module: the
// section headers, .modinfo, the exported symbols (the __crc_ entries of
// .symtab, else __ksymtab_strings) and the symbols the module needs (the
// undefined entries of .symtab, then the __versions entries none of them
// named). It reads the sections it needs, not the whole file, and accepts
// and refuses what libkmod accepts and refuses.

var (
	errNoExec  = errors.New("not an ELF file")
	errInvalid = errors.New("invalid ELF file")
	// errNoSymbols is libkmod's ENOENT from a module that exports nothing
	// it can find: depmod says nothing about it.
	errNoSymbols = errors.New("no symbols")
)

const (
	eiNident        = 16
	elfClass32      = 1
	elfClass64      = 2
	elfData2LSB     = 1
	elfData2MSB     = 2
	emSPARC         = 2
	emSPARCV9       = 43
	sttRegister     = 13
	stbWeak         = 2
	modversionSize  = 64 // struct kmod_modversion{32,64}: crc, then the name
	crcPrefix       = "__crc_"
	sectionModinfo  = ".modinfo"
	sectionSymtab   = ".symtab"
	sectionStrtab   = ".strtab"
	sectionVersions = "__versions"
	sectionKsymtab  = "__ksymtab_strings"
)

// source is a module's (uncompressed) content.
type source interface {
	io.ReaderAt
	Size() int64
}

type section struct {
	offset, size uint64
	nameoff      uint32
	valid        bool // inside the file
}

type elfFile struct {
	r     source
	limit int64 // of a section read from r
	// whole is the whole file when it is in memory: sections are then
	// slices of it.
	whole    []byte
	size     uint64
	is64     bool
	order    binary.ByteOrder
	machine  uint16
	sections []section
	names    []byte // the section name strings
	// syms and strtab are .symtab and .strtab, read once.
	syms    []symbol
	strtab  []byte
	symErr  error
	symRead bool
}

func (f *elfFile) read(off, n uint64) ([]byte, error) {
	if f.whole != nil {
		return f.whole[off : off+n : off+n], nil
	}
	if n > uint64(f.limit) {
		// A sparse file in place can claim any size; its sections are
		// read into memory only up to the bound compressed modules have.
		return nil, fmt.Errorf("a section of %d bytes, more than %d", n, f.limit)
	}
	b := make([]byte, n)
	if _, err := f.r.ReadAt(b, int64(off)); err != nil && !(err == io.EOF && n == 0) {
		return nil, err
	}
	return b, nil
}

// openELF reads the header and the section headers as kmod_elf_new does,
// reading no section of more than limit bytes into memory.
func openELF(r source, limit int64) (*elfFile, error) {
	size := uint64(r.Size())
	var ident [eiNident + 1]byte
	if size <= eiNident {
		return nil, errNoExec
	}
	f := &elfFile{r: r, limit: limit, size: size}
	if w, ok := r.(wholeSource); ok {
		f.whole = w.Bytes()
	}
	if _, err := r.ReadAt(ident[:], 0); err != nil {
		return nil, err
	}
	if !bytes.Equal(ident[:4], []byte("\x7fELF")) {
		return nil, errNoExec
	}
	var ehdrSize, shdrSize uint64
	switch ident[4] {
	case elfClass32:
		ehdrSize, shdrSize = 52, 40
	case elfClass64:
		ehdrSize, shdrSize, f.is64 = 64, 64, true
	default:
		return nil, errInvalid
	}
	if size <= ehdrSize {
		return nil, errInvalid
	}
	switch ident[5] {
	case elfData2LSB:
		f.order = binary.LittleEndian
	case elfData2MSB:
		f.order = binary.BigEndian
	default:
		return nil, errInvalid
	}
	h, err := f.read(0, ehdrSize)
	if err != nil {
		return nil, err
	}
	var shoff uint64
	var shentsize, shnum, shstrndx uint16
	f.machine = f.order.Uint16(h[18:])
	if f.is64 {
		shoff = f.order.Uint64(h[40:])
		shentsize, shnum, shstrndx = f.order.Uint16(h[58:]), f.order.Uint16(h[60:]), f.order.Uint16(h[62:])
	} else {
		shoff = uint64(f.order.Uint32(h[32:]))
		shentsize, shnum, shstrndx = f.order.Uint16(h[46:]), f.order.Uint16(h[48:]), f.order.Uint16(h[50:])
	}
	if uint64(shentsize) != shdrSize {
		return nil, errInvalid
	}
	tableSize := shdrSize * uint64(shnum)
	if end := shoff + tableSize; end < shoff || end > size {
		return nil, errInvalid
	}
	table, err := f.read(shoff, tableSize)
	if err != nil {
		return nil, err
	}
	f.sections = make([]section, shnum)
	for i := range f.sections {
		s := table[uint64(i)*shdrSize:]
		var sec section
		if f.is64 {
			sec = section{offset: f.order.Uint64(s[24:]), size: f.order.Uint64(s[32:]), nameoff: f.order.Uint32(s[0:])}
		} else {
			sec = section{offset: uint64(f.order.Uint32(s[16:])), size: uint64(f.order.Uint32(s[20:])), nameoff: f.order.Uint32(s[0:])}
		}
		end := sec.offset + sec.size
		sec.valid = end >= sec.offset && end <= size
		f.sections[i] = sec
	}
	if shstrndx == 0 || shstrndx >= shnum || !f.sections[shstrndx].valid {
		return nil, errInvalid
	}
	strs := f.sections[shstrndx]
	if strs.size == 0 {
		return nil, errInvalid
	}
	if f.names, err = f.read(strs.offset, strs.size); err != nil {
		return nil, err
	}
	if f.names[len(f.names)-1] != 0 {
		return nil, errInvalid
	}
	return f, nil
}

// section returns the content of the first section named name, or
// errNoSection.
func (f *elfFile) section(name string) ([]byte, error) {
	for i := 1; i < len(f.sections); i++ {
		s := f.sections[i]
		if !s.valid || uint64(s.nameoff) >= uint64(len(f.names)) {
			continue
		}
		if cString(f.names[s.nameoff:]) != name {
			continue
		}
		if s.offset >= f.size {
			// libkmod asserts here; a section can have no bytes there.
			return nil, errInvalid
		}
		return f.read(s.offset, s.size)
	}
	return nil, errNoSection
}

var errNoSection = errors.New("no such section")

// cString is the NUL-terminated string at the start of b.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// cStrings splits a section of NUL-separated strings as
// kmod_elf_get_strings does: leading NULs skipped, empty strings dropped,
// and a remainder of one byte taken for padding.
func cStrings(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	for len(b) > 1 && b[0] == 0 {
		b = b[1:]
	}
	if len(b) <= 1 {
		return nil
	}
	var out []string
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			i = len(b)
		}
		if i > 0 {
			out = append(out, string(b[:i]))
		}
		if i == len(b) {
			break
		}
		b = b[i+1:]
	}
	return out
}

// symbol is one entry of .symtab.
type symbol struct {
	name  uint32
	info  uint8
	shndx uint16
}

// symtab returns .symtab's entries (the null one first) and .strtab.
func (f *elfFile) symtab() ([]symbol, []byte, error) {
	if !f.symRead {
		f.syms, f.strtab, f.symErr = f.readSymtab()
		f.symRead = true
	}
	return f.syms, f.strtab, f.symErr
}

func (f *elfFile) readSymtab() ([]symbol, []byte, error) {
	strtab, err := f.section(sectionStrtab)
	if err != nil {
		return nil, nil, err
	}
	raw, err := f.section(sectionSymtab)
	if err != nil {
		return nil, nil, err
	}
	entSize := 16
	if f.is64 {
		entSize = 24
	}
	if len(raw)%entSize != 0 {
		return nil, nil, errInvalid
	}
	syms := make([]symbol, len(raw)/entSize)
	for i := range syms {
		e := raw[i*entSize:]
		if f.is64 {
			syms[i] = symbol{f.order.Uint32(e[0:]), e[4], f.order.Uint16(e[6:])}
		} else {
			syms[i] = symbol{f.order.Uint32(e[0:]), e[12], f.order.Uint16(e[14:])}
		}
	}
	return syms, strtab, nil
}

// exportedSymbols is kmod_elf_get_symbols: the names of the __crc_
// entries of .symtab, or when there are none (or the table cannot be
// read), the strings of __ksymtab_strings.
func (f *elfFile) exportedSymbols() ([]string, error) {
	if syms, strtab, err := f.symtab(); err == nil {
		var names []string
		ok := true
		for _, s := range syms[min(1, len(syms)):] {
			if uint64(s.name) >= uint64(len(strtab)) {
				ok = false
				break
			}
			if name := strtab[s.name:]; bytes.HasPrefix(name, []byte(crcPrefix)) {
				names = append(names, cString(name[len(crcPrefix):]))
			}
		}
		if ok && len(names) > 0 {
			return names, nil
		}
	}
	b, err := f.section(sectionKsymtab)
	if err == errNoSection {
		return nil, errNoSymbols
	}
	if err != nil {
		return nil, err
	}
	return cStrings(b), nil
}

// depSymbol is a symbol a module needs from elsewhere.
type depSymbol struct {
	name string
	weak bool
}

// dependencySymbols is kmod_elf_get_dependency_symbols.
func (f *elfFile) dependencySymbols() ([]depSymbol, error) {
	versions, err := f.section(sectionVersions)
	if err != nil && err != errNoSection {
		return nil, err
	}
	if len(versions)%modversionSize != 0 {
		versions = nil
	}
	syms, strtab, err := f.symtab()
	if err != nil {
		if err == errNoSection {
			err = errInvalid
		}
		return nil, err
	}
	crcLen := 4
	if f.is64 {
		crcLen = 8
	}
	nver := len(versions) / modversionSize
	verName := func(i int) string { return cString(versions[i*modversionSize+crcLen:]) }
	verNames := make(map[string]int, nver)
	for i := nver - 1; i >= 0; i-- {
		verNames[verName(i)] = i
	}
	visited := make([]bool, nver)
	registers := f.machine == emSPARC || f.machine == emSPARCV9
	var out []depSymbol
	for _, s := range syms[min(1, len(syms)):] {
		if s.shndx != 0 {
			continue
		}
		if registers && s.info&0xf == sttRegister {
			continue
		}
		if uint64(s.name) >= uint64(len(strtab)) {
			return nil, fmt.Errorf("%w: symbol name outside .strtab", errInvalid)
		}
		name := cString(strtab[s.name:])
		if name == "" {
			continue
		}
		if i, ok := verNames[name]; ok {
			visited[i] = true
		}
		out = append(out, depSymbol{name: name, weak: s.info>>4 == stbWeak})
	}
	// What no undefined symbol named (module_layout) is needed too.
	for i := 0; i < nver; i++ {
		if !visited[i] {
			out = append(out, depSymbol{name: verName(i)})
		}
	}
	return out, nil
}
