package kmod

import (
	"bytes"
	"encoding/binary"
)

// testModule describes a kernel module for the hand-made trees: an ELF
// relocatable file with the sections depmod reads, as the kernel's modpost
// lays them out.
type testModule struct {
	// modinfo entries, key=value.
	modinfo []string
	// exports go into __ksymtab_strings, or with crcs as __crc_ symbols of
	// .symtab (the kernel's CONFIG_MODVERSIONS).
	exports []string
	crcs    bool
	// needs are undefined symbols, weak the weak ones among them.
	needs, weak []string
	// versions are __versions entries (modpost lists what the module
	// needs, and module_layout).
	versions []string
	// elf32 and msb make a 32-bit or big-endian file.
	elf32, msb bool
	machine    uint16
}

// bytes lays the module out: ELF header, section contents, section headers.
func (m testModule) bytes() []byte {
	var order binary.ByteOrder = binary.LittleEndian
	if m.msb {
		order = binary.BigEndian
	}
	is64 := !m.elf32
	ehdrSize, shdrSize, symSize := 64, 64, 24
	if !is64 {
		ehdrSize, shdrSize, symSize = 52, 40, 16
	}
	type sec struct {
		name  string
		typ   uint32
		data  []byte
		link  uint32
		entsz uint64
	}
	// .strtab and its symbols.
	var strtab bytes.Buffer
	strtab.WriteByte(0)
	str := func(s string) uint32 {
		off := uint32(strtab.Len())
		strtab.WriteString(s)
		strtab.WriteByte(0)
		return off
	}
	var symtab bytes.Buffer
	sym := func(name uint32, info uint8, shndx uint16) {
		b := make([]byte, symSize)
		if is64 {
			order.PutUint32(b[0:], name)
			b[4] = info
			order.PutUint16(b[6:], shndx)
		} else {
			order.PutUint32(b[0:], name)
			b[12] = info
			order.PutUint16(b[14:], shndx)
		}
		symtab.Write(b)
	}
	const (
		stbLocal, stbGlobal = 0, 1
		sttFunc, sttObject  = 2, 1
		textIdx             = 1
	)
	sym(0, 0, 0)
	sym(str("init_module"), stbGlobal<<4|sttFunc, textIdx)
	sym(str("local_helper"), stbLocal<<4|sttFunc, textIdx)
	if m.crcs {
		for _, e := range m.exports {
			sym(str("__crc_"+e), stbGlobal<<4|sttObject, textIdx)
		}
	}
	for _, n := range m.needs {
		bind := uint8(stbGlobal)
		for _, w := range m.weak {
			if w == n {
				bind = stbWeak
			}
		}
		sym(str(n), bind<<4, 0)
	}
	var ksym bytes.Buffer
	for _, e := range m.exports {
		ksym.WriteString(e)
		ksym.WriteByte(0)
	}
	var modinfo bytes.Buffer
	for _, kv := range m.modinfo {
		modinfo.WriteString(kv)
		modinfo.WriteByte(0)
	}
	var versions bytes.Buffer
	for i, v := range m.versions {
		e := make([]byte, modversionSize)
		crc := 0x1000 + i
		if is64 {
			order.PutUint64(e, uint64(crc))
			copy(e[8:], v)
		} else {
			order.PutUint32(e, uint32(crc))
			copy(e[4:], v)
		}
		versions.Write(e)
	}
	secs := []sec{
		{name: ".text", typ: 1, data: []byte{0xc3, 0, 0, 0}},
		{name: ".modinfo", typ: 1, data: modinfo.Bytes()},
		{name: "__ksymtab_strings", typ: 1, data: ksym.Bytes()},
		{name: "__versions", typ: 1, data: versions.Bytes()},
		{name: ".symtab", typ: 2, data: symtab.Bytes(), link: 6, entsz: uint64(symSize)},
		{name: ".strtab", typ: 3, data: strtab.Bytes()},
	}
	if len(m.exports) == 0 {
		secs[2].name = ".rodata"
	}
	if len(m.versions) == 0 {
		secs[3].name = ".data"
	}
	var shstr bytes.Buffer
	shstr.WriteByte(0)
	names := make([]uint32, len(secs)+1)
	for i, s := range secs {
		names[i] = uint32(shstr.Len())
		shstr.WriteString(s.name)
		shstr.WriteByte(0)
	}
	names[len(secs)] = uint32(shstr.Len())
	shstr.WriteString(".shstrtab")
	shstr.WriteByte(0)
	secs = append(secs, sec{name: ".shstrtab", typ: 3, data: shstr.Bytes()})

	out := make([]byte, ehdrSize)
	offsets := make([]int, len(secs))
	for i, s := range secs {
		for len(out)%8 != 0 {
			out = append(out, 0)
		}
		offsets[i] = len(out)
		out = append(out, s.data...)
	}
	for len(out)%8 != 0 {
		out = append(out, 0)
	}
	shoff := len(out)
	out = append(out, make([]byte, shdrSize)...) // the null section
	for i, s := range secs {
		h := make([]byte, shdrSize)
		if is64 {
			order.PutUint32(h[0:], names[i])
			order.PutUint32(h[4:], s.typ)
			order.PutUint64(h[24:], uint64(offsets[i]))
			order.PutUint64(h[32:], uint64(len(s.data)))
			order.PutUint32(h[40:], s.link)
			order.PutUint64(h[56:], s.entsz)
		} else {
			order.PutUint32(h[0:], names[i])
			order.PutUint32(h[4:], s.typ)
			order.PutUint32(h[16:], uint32(offsets[i]))
			order.PutUint32(h[20:], uint32(len(s.data)))
			order.PutUint32(h[24:], s.link)
			order.PutUint32(h[36:], uint32(s.entsz))
		}
		out = append(out, h...)
	}
	copy(out, "\x7fELF")
	out[4] = elfClass64
	if !is64 {
		out[4] = elfClass32
	}
	out[5] = elfData2LSB
	if m.msb {
		out[5] = elfData2MSB
	}
	out[6] = 1 // EV_CURRENT
	machine := m.machine
	if machine == 0 {
		machine = 62 // EM_X86_64
	}
	order.PutUint16(out[16:], 1) // ET_REL
	order.PutUint16(out[18:], machine)
	order.PutUint32(out[20:], 1)
	n := uint16(len(secs) + 1)
	if is64 {
		order.PutUint64(out[40:], uint64(shoff))
		order.PutUint16(out[52:], uint16(ehdrSize))
		order.PutUint16(out[58:], uint16(shdrSize))
		order.PutUint16(out[60:], n)
		order.PutUint16(out[62:], n-1)
	} else {
		order.PutUint32(out[32:], uint32(shoff))
		order.PutUint16(out[40:], uint16(ehdrSize))
		order.PutUint16(out[46:], uint16(shdrSize))
		order.PutUint16(out[48:], n)
		order.PutUint16(out[50:], n-1)
	}
	return out
}
