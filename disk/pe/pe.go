// Package pe reads and assembles PE/COFF images (Microsoft's "PE Format"),
// the executables UEFI firmware starts: it adds sections to an image (as a
// unified kernel image adds the kernel, its initrd and command line to
// systemd-stub), computes the image's Authenticode digest and PE checksum,
// and appends an attribute certificate table.
//
// An Image is laid out before any byte of it is written: its headers are
// held in memory and each section's content is opened from where it lives
// when it is hashed and again when it is written, so a kernel and an
// initrd of any size stream through. Nothing depends on the clock or on
// where the image is written, so the same inputs give the same bytes.
package pe

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Offsets and values of the format.
const (
	dosMagic      = "MZ"
	peMagic       = "PE\x00\x00"
	dosLfanew     = 0x3c // the DOS header's offset of the PE header
	coffSize      = 20   // the COFF file header after "PE\0\0"
	sectionSize   = 40   // one section header
	symbolSize    = 18   // one COFF symbol table entry
	maxHeaderSize = 1 << 20

	// MagicPE32 and MagicPE32Plus are the optional header's magic of 32-
	// and 64-bit images.
	MagicPE32     = 0x10b
	MagicPE32Plus = 0x20b

	// Offsets in the optional header, the same for PE32 and PE32+.
	optSizeOfCode     = 4
	optSizeOfInitData = 8
	optSectionAlign   = 32
	optFileAlign      = 36
	optSizeOfImage    = 56
	optSizeOfHeaders  = 60
	optCheckSum       = 64
	// Where the data directories start, and their count, by magic.
	optDirs32      = 96
	optDirs64      = 112
	optNumDirs32   = 92
	optNumDirs64   = 108
	dirSecurity    = 4 // the certificate table's data directory
	dirEntrySize   = 8
	fileCharStrip  = 0x0008 // IMAGE_FILE_LOCAL_SYMS_STRIPPED
	certAlign      = 8      // the certificate table and its entries are quadword aligned
	certHeaderSize = 8      // WIN_CERTIFICATE's dwLength, wRevision, wCertificateType
)

// Section characteristics (IMAGE_SCN_*).
const (
	SectionCode     = 0x00000020
	SectionInitData = 0x00000040
	SectionRead     = 0x40000000
)

// Machine types of the COFF header.
const (
	MachineAMD64 = 0x8664
	MachineARM64 = 0xaa64
)

// Certificate types and the revision of WIN_CERTIFICATE.
const (
	CertRevision2      = 0x0200
	CertTypePKCSSigned = 0x0002 // WIN_CERT_TYPE_PKCS_SIGNED_DATA: Authenticode
)

// Section is one section header.
type Section struct {
	Name             string
	VirtualSize      uint32
	VirtualAddress   uint32
	SizeOfRawData    uint32
	PointerToRawData uint32
	Characteristics  uint32
}

// Content is the bytes of a section, opened each time they are read: once
// for the digest and once when the image is written.
type Content struct {
	Size int64
	Open func() (io.ReadCloser, error)
}

// Bytes is content held in memory.
func Bytes(b []byte) Content {
	return Content{Size: int64(len(b)), Open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}}
}

// Image is a PE/COFF image laid out but not yet written.
type Image struct {
	head  []byte // [0, SizeOfHeaders), fields fixed up
	magic uint16
	opt   int // offset of the optional header in head
	// body is what the image held after its headers when it was opened;
	// added sections follow it, each padded to FileAlignment.
	body  []byte
	added []addedSection
	secs  []Section
	// cert is the attribute certificate table, appended 8-aligned.
	cert     []byte
	certPad  int
	sealed   bool
	checksum uint32
}

type addedSection struct {
	content Content
	pad     int64 // zeros after the content, to SizeOfRawData
}

// Open reads a PE/COFF image held in b (an EFI application or a stub to
// add sections to). b is kept and must not change.
func Open(b []byte) (*Image, error) {
	f, err := parseHeaders(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return nil, err
	}
	im := &Image{magic: f.Magic, opt: f.opt, secs: f.Sections}
	im.head = append([]byte(nil), b[:f.SizeOfHeaders]...)
	im.body = b[f.SizeOfHeaders:]
	if off, size := f.CertTable(); off != 0 || size != 0 {
		return nil, errors.New("the image is signed already (it has a certificate table)")
	}
	return im, nil
}

// File is the headers of a PE/COFF image read back.
type File struct {
	Machine          uint16
	Magic            uint16
	SectionAlignment uint32
	FileAlignment    uint32
	SizeOfHeaders    uint32
	SizeOfImage      uint32
	CheckSum         uint32
	Sections         []Section
	// SymbolTable and Symbols locate the COFF symbol table, which an
	// image should not have but linkers of EFI stubs leave in.
	SymbolTable uint32
	Symbols     uint32
	head        []byte
	opt         int
	size        int64
}

// Parse reads the headers of the PE/COFF image in r, of size bytes.
func Parse(r io.ReaderAt, size int64) (*File, error) { return parseHeaders(r, size) }

func parseHeaders(r io.ReaderAt, size int64) (*File, error) {
	dos := make([]byte, 64)
	if _, err := r.ReadAt(dos, 0); err != nil || string(dos[:2]) != dosMagic {
		return nil, errors.New("not a PE/COFF image (no MZ header)")
	}
	pe := int64(binary.LittleEndian.Uint32(dos[dosLfanew:]))
	if pe < 64 || pe%8 != 0 || pe > maxHeaderSize {
		return nil, fmt.Errorf("not a PE/COFF image (PE header offset %#x)", pe)
	}
	fix := make([]byte, 4+coffSize)
	if _, err := r.ReadAt(fix, pe); err != nil || string(fix[:4]) != peMagic {
		return nil, errors.New("not a PE/COFF image (no PE signature)")
	}
	coff := fix[4:]
	f := &File{Machine: le16(coff[0:]), SymbolTable: le32(coff[8:]), Symbols: le32(coff[12:]), size: size}
	nsec := int64(le16(coff[2:]))
	optSize := int64(le16(coff[16:]))
	f.opt = int(pe + 4 + coffSize)
	tableEnd := int64(f.opt) + optSize + nsec*sectionSize
	if optSize < optDirs32 || tableEnd > maxHeaderSize || tableEnd > size {
		return nil, fmt.Errorf("not a PE/COFF image (optional header of %d bytes, %d sections)", optSize, nsec)
	}
	head := make([]byte, tableEnd)
	if _, err := r.ReadAt(head, 0); err != nil {
		return nil, err
	}
	opt := head[f.opt:]
	f.Magic = le16(opt)
	dirs, ndirs := optDirs64, le32(opt[optNumDirs64:])
	switch f.Magic {
	case MagicPE32Plus:
	case MagicPE32:
		dirs, ndirs = optDirs32, le32(opt[optNumDirs32:])
	default:
		return nil, fmt.Errorf("not a PE32 or PE32+ image (magic %#x)", f.Magic)
	}
	if ndirs <= dirSecurity || int64(dirs)+int64(ndirs)*dirEntrySize > optSize {
		return nil, fmt.Errorf("the optional header has %d data directories, too few for a certificate table", ndirs)
	}
	f.SectionAlignment = le32(opt[optSectionAlign:])
	f.FileAlignment = le32(opt[optFileAlign:])
	f.SizeOfImage = le32(opt[optSizeOfImage:])
	f.SizeOfHeaders = le32(opt[optSizeOfHeaders:])
	f.CheckSum = le32(opt[optCheckSum:])
	if f.FileAlignment == 0 || f.FileAlignment&(f.FileAlignment-1) != 0 || f.SectionAlignment < f.FileAlignment {
		return nil, fmt.Errorf("file alignment %#x and section alignment %#x are not powers of two, the second at least the first", f.FileAlignment, f.SectionAlignment)
	}
	if int64(f.SizeOfHeaders) < tableEnd || int64(f.SizeOfHeaders) > size || f.SizeOfHeaders > maxHeaderSize {
		return nil, fmt.Errorf("SizeOfHeaders %#x does not hold the section table (%#x) or lies outside the file", f.SizeOfHeaders, tableEnd)
	}
	f.head = make([]byte, f.SizeOfHeaders)
	if _, err := r.ReadAt(f.head, 0); err != nil {
		return nil, err
	}
	st := f.head[int64(f.opt)+optSize:]
	for i := int64(0); i < nsec; i++ {
		h := st[i*sectionSize:]
		s := Section{Name: string(bytes.TrimRight(h[:8], "\x00")), VirtualSize: le32(h[8:]), VirtualAddress: le32(h[12:]),
			SizeOfRawData: le32(h[16:]), PointerToRawData: le32(h[20:]), Characteristics: le32(h[36:])}
		if s.SizeOfRawData > 0 && int64(s.PointerToRawData)+int64(s.SizeOfRawData) > size {
			return nil, fmt.Errorf("section %q (%d bytes at %#x) lies outside the file's %d bytes", s.Name, s.SizeOfRawData, s.PointerToRawData, size)
		}
		f.Sections = append(f.Sections, s)
	}
	return f, nil
}

// dirOffset is the offset in the headers of data directory i.
func (f *File) dirOffset(i int) int {
	if f.Magic == MagicPE32 {
		return f.opt + optDirs32 + i*dirEntrySize
	}
	return f.opt + optDirs64 + i*dirEntrySize
}

// CertTable is the file offset and size of the attribute certificate table,
// zero when the image carries none.
func (f *File) CertTable() (off, size uint32) {
	d := f.dirOffset(dirSecurity)
	return le32(f.head[d:]), le32(f.head[d+4:])
}

// Section returns the header of the section named name, nil if there is none.
func (f *File) Section(name string) *Section {
	for i := range f.Sections {
		if f.Sections[i].Name == name {
			return &f.Sections[i]
		}
	}
	return nil
}

// SectionData reads s's content as the loader maps it: VirtualSize bytes,
// zeros past the raw data.
func SectionData(r io.ReaderAt, s *Section) ([]byte, error) {
	b := make([]byte, s.VirtualSize)
	n := min(s.VirtualSize, s.SizeOfRawData)
	if _, err := r.ReadAt(b[:n], int64(s.PointerToRawData)); err != nil {
		return nil, fmt.Errorf("section %s: %w", s.Name, err)
	}
	return b, nil
}

// Sections lists the image's section headers as they will be written.
func (im *Image) Sections() []Section { return append([]Section(nil), im.secs...) }

func (im *Image) u32(off int) uint32      { return le32(im.head[im.opt+off:]) }
func (im *Image) put32(off int, v uint32) { binary.LittleEndian.PutUint32(im.head[im.opt+off:], v) }
func (im *Image) coff() []byte            { return im.head[im.opt-coffSize:] }
func (im *Image) sectionTable() int       { return im.opt + int(le16(im.coff()[16:])) }
func (im *Image) fileAlign() int64        { return int64(im.u32(optFileAlign)) }
func (im *Image) bodyEnd() int64          { return int64(len(im.head)) + int64(len(im.body)) }
func alignUp(n, a int64) int64            { return (n + a - 1) / a * a }
func le16(b []byte) uint16                { return binary.LittleEndian.Uint16(b) }
func le32(b []byte) uint32                { return binary.LittleEndian.Uint32(b) }
func (im *Image) dirOffset(i int) int     { return (&File{Magic: im.magic, opt: im.opt}).dirOffset(i) }
func (im *Image) putDir(i int, a, b uint32) {
	d := im.dirOffset(i)
	binary.LittleEndian.PutUint32(im.head[d:], a)
	binary.LittleEndian.PutUint32(im.head[d+4:], b)
}

// AddSection appends a section holding c, named name (at most 8 bytes),
// placed after the last one in memory and in the file as ukify places it:
// its address the end of the last section rounded up to SectionAlignment,
// its raw data at the end of the file rounded up to FileAlignment. code
// marks it as code (a kernel the loader may run in place), else as
// initialized data; it is readable either way. A COFF symbol table left at
// the end of the image is dropped first, since the new section would
// otherwise follow data no section covers.
func (im *Image) AddSection(name string, c Content, code bool) error {
	if im.sealed {
		return errors.New("the image is sealed")
	}
	if len(name) == 0 || len(name) > 8 {
		return fmt.Errorf("section name %q: 1 to 8 bytes", name)
	}
	for _, s := range im.secs {
		if s.Name == name {
			return fmt.Errorf("the image has a section %s already", name)
		}
	}
	if c.Size < 0 || c.Size > 1<<32-1 {
		return fmt.Errorf("section %s: %d bytes do not fit a PE section", name, c.Size)
	}
	if len(im.added) == 0 {
		if err := im.StripSymbolTable(); err != nil {
			return err
		}
	}
	table := im.sectionTable() + len(im.secs)*sectionSize
	if table+sectionSize > len(im.head) {
		return fmt.Errorf("no room in the headers (SizeOfHeaders %#x) for the header of section %s", len(im.head), name)
	}
	last := im.secs[len(im.secs)-1]
	salign := int64(im.u32(optSectionAlign))
	va := alignUp(int64(last.VirtualAddress)+int64(last.VirtualSize), salign)
	ptr := im.fileEnd()
	raw := alignUp(c.Size, im.fileAlign())
	if va+c.Size > 1<<32-1 || ptr+raw > 1<<32-1 {
		return fmt.Errorf("section %s: the image would outgrow 4 GiB", name)
	}
	s := Section{Name: name, VirtualSize: uint32(c.Size), VirtualAddress: uint32(va), SizeOfRawData: uint32(raw),
		PointerToRawData: uint32(ptr), Characteristics: SectionRead | SectionInitData}
	if code {
		s.Characteristics = SectionRead | SectionCode
	}
	h := im.head[table : table+sectionSize]
	copy(h[:8], append([]byte(name), make([]byte, 8-len(name))...))
	binary.LittleEndian.PutUint32(h[8:], s.VirtualSize)
	binary.LittleEndian.PutUint32(h[12:], s.VirtualAddress)
	binary.LittleEndian.PutUint32(h[16:], s.SizeOfRawData)
	binary.LittleEndian.PutUint32(h[20:], s.PointerToRawData)
	binary.LittleEndian.PutUint32(h[36:], s.Characteristics)
	coff := im.coff()
	binary.LittleEndian.PutUint16(coff[2:], uint16(len(im.secs)+1))
	im.put32(optSizeOfInitData, im.u32(optSizeOfInitData)+s.VirtualSize)
	im.put32(optSizeOfImage, uint32(alignUp(va+c.Size, salign)))
	im.secs = append(im.secs, s)
	im.added = append(im.added, addedSection{content: c, pad: raw - c.Size})
	return nil
}

// StripSymbolTable removes a COFF symbol table (and its string table) that
// ends the image, as ukify does: an image needs none, and data after the
// last section is covered by no section. Any other data there is refused,
// since a section added after it would leave it covered by nothing.
func (im *Image) StripSymbolTable() error {
	if im.sealed || len(im.added) > 0 {
		return errors.New("the image has sections added or is sealed")
	}
	var end int64
	for _, s := range im.secs {
		end = max(end, int64(s.PointerToRawData)+int64(s.SizeOfRawData))
	}
	if len(im.secs) == 0 {
		return errors.New("the image has no sections")
	}
	if end%im.fileAlign() != 0 {
		return fmt.Errorf("the last section ends at %#x, not at a multiple of the file alignment %#x", end, im.fileAlign())
	}
	if end < int64(len(im.head)) {
		end = int64(len(im.head))
	}
	total := im.bodyEnd()
	if end == total {
		return nil
	}
	coff := im.coff()
	sym, nsym := int64(le32(coff[8:])), int64(le32(coff[12:]))
	if sym == end {
		strtab := sym + nsym*symbolSize
		if strtab+4 <= total {
			n := int64(le32(im.body[strtab-int64(len(im.head)):]))
			if strtab+n == total {
				im.body = im.body[:end-int64(len(im.head))]
				binary.LittleEndian.PutUint32(coff[8:], 0)
				binary.LittleEndian.PutUint32(coff[12:], 0)
				binary.LittleEndian.PutUint16(coff[18:], le16(coff[18:])|fileCharStrip)
				return nil
			}
		}
	}
	return fmt.Errorf("%d bytes after the last section are not a symbol table", total-end)
}

// fileEnd is where the next added section's raw data goes.
func (im *Image) fileEnd() int64 {
	end := im.bodyEnd()
	for _, a := range im.added {
		end += a.content.Size + a.pad
	}
	return alignUp(end, im.fileAlign())
}

// dataSize is the image's size without its certificate table.
func (im *Image) dataSize() int64 {
	end := im.bodyEnd()
	if len(im.added) > 0 {
		return im.fileEnd()
	}
	return end
}

// Size is the size of the image as written, certificate table included.
func (im *Image) Size() int64 {
	if len(im.cert) == 0 {
		return im.dataSize()
	}
	return im.dataSize() + int64(im.certPad) + int64(len(im.cert))
}

// Signer makes the attribute certificate table entry for an Authenticode
// digest (SHA-256) of an image: a WIN_CERTIFICATE holding PKCS#7 signed
// data. The entry's size must not depend on the digest's value.
type Signer func(digest []byte) ([]byte, error)

// Seal fixes the image's bytes: it computes the Authenticode digest and,
// when sign is not nil, appends the certificate table sign makes for it;
// then the PE checksum of the whole. Nothing can be added afterwards.
// It returns the Authenticode digest.
func (im *Image) Seal(sign Signer) ([]byte, error) {
	if im.sealed {
		return nil, errors.New("the image is sealed already")
	}
	size := im.dataSize()
	pad := int(alignUp(size, certAlign) - size)
	ck := im.opt + optCheckSum
	cd := im.dirOffset(dirSecurity)
	im.put32(optCheckSum, 0)
	im.putDir(dirSecurity, 0, 0)
	d := newDigester(im, size, ck, cd)
	if err := im.stream(d, false); err != nil {
		return nil, err
	}
	if sign != nil {
		// The zero padding before the table is data after the last
		// section, which the digest covers.
		if _, err := d.Write(make([]byte, pad)); err != nil {
			return nil, err
		}
	}
	digest := d.sum()
	if sign != nil {
		cert, err := sign(digest)
		if err != nil {
			return nil, err
		}
		if len(cert) < certHeaderSize || len(cert)%certAlign != 0 {
			return nil, fmt.Errorf("a certificate table entry of %d bytes is not a whole number of quadwords", len(cert))
		}
		im.cert, im.certPad = cert, pad
		im.putDir(dirSecurity, uint32(size+int64(pad)), uint32(len(cert)))
		d.ck.add(im.head[cd:cd+dirEntrySize], int64(cd))
		d.ck.add(cert, size+int64(pad))
	}
	im.checksum = d.ck.finish(uint32(im.Size()))
	im.put32(optCheckSum, im.checksum)
	im.sealed = true
	return digest, nil
}

// SealBytes seals the image (see Seal) and returns its bytes, for an image
// small enough to hold in memory.
func (im *Image) SealBytes(sign Signer) ([]byte, error) {
	if _, err := im.Seal(sign); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.Grow(int(im.Size()))
	if _, err := im.WriteTo(&b); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// WriteTo writes the sealed image.
func (im *Image) WriteTo(w io.Writer) (int64, error) {
	if !im.sealed {
		return 0, errors.New("the image is not sealed")
	}
	cw := &countWriter{w: w}
	if err := im.stream(cw, true); err != nil {
		return cw.n, err
	}
	return cw.n, nil
}

// stream writes the image's bytes in order to w: with cert, the certificate
// table and the padding before it too.
func (im *Image) stream(w io.Writer, cert bool) error {
	if _, err := w.Write(im.head); err != nil {
		return err
	}
	if _, err := w.Write(im.body); err != nil {
		return err
	}
	if len(im.added) > 0 {
		if gap := alignUp(im.bodyEnd(), im.fileAlign()) - im.bodyEnd(); gap > 0 {
			if _, err := w.Write(make([]byte, gap)); err != nil {
				return err
			}
		}
	}
	for i, a := range im.added {
		if err := copyContent(w, a.content, im.secs[len(im.secs)-len(im.added)+i].Name); err != nil {
			return err
		}
		if _, err := w.Write(make([]byte, a.pad)); err != nil {
			return err
		}
	}
	if cert && len(im.cert) > 0 {
		if _, err := w.Write(make([]byte, im.certPad)); err != nil {
			return err
		}
		if _, err := w.Write(im.cert); err != nil {
			return err
		}
	}
	return nil
}

// copyContent copies c to w and fails unless it holds exactly c.Size bytes,
// since the headers were laid out for that size.
func copyContent(w io.Writer, c Content, name string) error {
	r, err := c.Open()
	if err != nil {
		return fmt.Errorf("section %s: %w", name, err)
	}
	defer r.Close()
	n, err := io.Copy(w, io.LimitReader(r, c.Size))
	if err != nil {
		return fmt.Errorf("section %s: %w", name, err)
	}
	if n != c.Size {
		return fmt.Errorf("section %s: %d bytes, not the %d laid out", name, n, c.Size)
	}
	var one [1]byte
	if m, _ := r.Read(one[:]); m != 0 {
		return fmt.Errorf("section %s: more than the %d bytes laid out", name, c.Size)
	}
	return nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
