package pe

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// uki adds sections to the real systemd-stub of Debian's systemd-boot-efi
// and seals the image unsigned.
func uki(t *testing.T, stub []byte, sections map[string][]byte, order []string) (*Image, []byte) {
	t.Helper()
	im, err := Open(stub)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range order {
		if err := im.AddSection(name, Bytes(sections[name]), name == ".linux"); err != nil {
			t.Fatal(err)
		}
	}
	digest, err := im.Seal(nil)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	n, err := im.WriteTo(&b)
	if err != nil {
		t.Fatal(err)
	}
	if n != im.Size() || int64(b.Len()) != n {
		t.Fatalf("wrote %d bytes, Size says %d", n, im.Size())
	}
	got, cert, err := Digest(bytes.NewReader(b.Bytes()), int64(b.Len()))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, digest) || cert != nil {
		t.Fatalf("the digest read back is %x (certificate table %d bytes); sealing said %x", got, len(cert), digest)
	}
	return im, b.Bytes()
}

// TestAddSectionsToTheStub lays out a unified kernel image on Debian's
// systemd-stub and holds the result to objdump: every section where the
// headers say, aligned as ukify aligns them, the symbol table gone, and
// the checksum what the PE checksum algorithm gives for the file.
func TestAddSectionsToTheStub(t *testing.T) {
	objdump := harness.Tool(t, "objdump")
	kit := harness.BootParts(t)
	stub, err := os.ReadFile(kit.LinuxStub)
	if err != nil {
		t.Fatal(err)
	}
	kernel, err := os.ReadFile(kit.Vmlinuz)
	if err != nil {
		t.Fatal(err)
	}
	sections := map[string][]byte{
		".osrel":   []byte("ID=stamp-test\n"),
		".cmdline": []byte("console=ttyS0 panic=-1"),
		".initrd":  bytes.Repeat([]byte("initrd"), 1000),
		".linux":   kernel,
	}
	order := []string{".osrel", ".cmdline", ".initrd", ".linux"}
	im, b := uki(t, stub, sections, order)
	p := filepath.Join(t.TempDir(), "uki.efi")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(objdump, "-h", p).CombinedOutput()
	if err != nil {
		t.Fatalf("objdump -h: %v\n%s", err, out)
	}
	t.Logf("objdump -h:\n%s", out)
	// "  8 .osrel        0000000e  0000000000019200  0000000000019200  00011400  2**2"
	row := regexp.MustCompile(`(?m)^\s*\d+\s+(\S+)\s+([0-9a-f]+)\s+([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)`)
	var names []string
	for _, m := range row.FindAllStringSubmatch(string(out), -1) {
		names = append(names, m[1])
		for _, s := range im.Sections() {
			if s.Name != m[1] {
				continue
			}
			want := []string{hex32(s.VirtualSize), hex64(s.VirtualAddress), hex32(s.PointerToRawData)}
			if got := []string{m[2], m[3], m[4]}; strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("objdump says %s is %v (size, address, file offset), the headers %v", m[1], got, want)
			}
		}
	}
	wantNames := ".text .reloc .data .dynamic .rela .dynsym .sbat .sdmagic .osrel .cmdline .initrd .linux"
	if strings.Join(names, " ") != wantNames {
		t.Errorf("objdump lists %v, want %s", names, wantNames)
	}
	f, err := Parse(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if f.SymbolTable != 0 || f.Symbols != 0 {
		t.Errorf("the symbol table is still named: %#x, %d symbols", f.SymbolTable, f.Symbols)
	}
	prev := f.Sections[7]
	for _, s := range f.Sections[8:] {
		if s.VirtualAddress%f.SectionAlignment != 0 || s.VirtualAddress < prev.VirtualAddress+prev.VirtualSize ||
			s.PointerToRawData%f.FileAlignment != 0 || s.SizeOfRawData%f.FileAlignment != 0 {
			t.Errorf("section %s is not aligned after %s: %+v", s.Name, prev.Name, s)
		}
		data, err := SectionData(bytes.NewReader(b), &s)
		if err != nil || !bytes.Equal(data, sections[s.Name]) {
			t.Errorf("section %s reads back %d bytes (%v), not its %d", s.Name, len(data), err, len(sections[s.Name]))
		}
		prev = s
	}
	if want := (prev.VirtualAddress + prev.VirtualSize + f.SectionAlignment - 1) / f.SectionAlignment * f.SectionAlignment; f.SizeOfImage != want {
		t.Errorf("SizeOfImage %#x, want %#x", f.SizeOfImage, want)
	}
	ck, err := Checksum(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if ck != f.CheckSum || ck == 0 {
		t.Errorf("the checksum field is %#x; the file's checksum is %#x", f.CheckSum, ck)
	}
	// The stub itself: its own checksum checks, so the algorithm agrees
	// with the linker that wrote it.
	sf, _ := Parse(bytes.NewReader(stub), int64(len(stub)))
	if ck, _ := Checksum(bytes.NewReader(stub), int64(len(stub))); ck != sf.CheckSum {
		t.Errorf("the stub's checksum field is %#x, the algorithm gives %#x", sf.CheckSum, ck)
	}

	// The same inputs give the same bytes.
	if _, again := uki(t, stub, sections, order); !bytes.Equal(again, b) {
		t.Error("two assemblies of the same sections differ")
	}
}

func hex32(v uint32) string { return fmt.Sprintf("%08x", v) }
func hex64(v uint32) string { return fmt.Sprintf("%016x", v) }

// TestAddSectionRefusals: what cannot be laid out is refused before any
// byte is written.
func TestAddSectionRefusals(t *testing.T) {
	kit := harness.BootParts(t)
	stub, err := os.ReadFile(kit.LinuxStub)
	if err != nil {
		t.Fatal(err)
	}
	im, err := Open(stub)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.AddSection(".sbat", Bytes(nil), false); err == nil || !strings.Contains(err.Error(), "has a section .sbat already") {
		t.Errorf("a second .sbat: %v", err)
	}
	if err := im.AddSection(".toolongname", Bytes(nil), false); err == nil {
		t.Error("a 12-byte section name was taken")
	}
	var last error
	for i := 0; i < 20 && last == nil; i++ {
		last = im.AddSection(fmt.Sprintf(".s%d", i), Bytes([]byte{1}), false)
	}
	if last == nil || !strings.Contains(last.Error(), "no room in the headers") {
		t.Errorf("20 sections more than the headers hold: %v", last)
	}
	if _, err := Open([]byte("MZ not a pe")); err == nil {
		t.Error("a file that is no PE image was opened")
	}
	// A signed image is refused: a section added after its certificate
	// table would break the table.
	signed := append([]byte(nil), stub...)
	f, _ := Parse(bytes.NewReader(signed), int64(len(signed)))
	d := f.dirOffset(dirSecurity)
	signed[d], signed[d+4] = 8, 8
	if _, err := Open(signed); err == nil || !strings.Contains(err.Error(), "signed already") {
		t.Errorf("a signed stub: %v", err)
	}
}
