package iso9660

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

var testEpoch = time.Unix(1700000000, 0).UTC()

// testFiles are a BIOS boot file given as bytes, an EFI image written by
// Fill on a 1 MiB boundary, and a plain file.
func testFiles() ([]File, Options) {
	bios := bytes.Repeat([]byte("grub-eltorito-"), 300)
	efi := bytes.Repeat([]byte("fat-image-bytes!"), 5000)
	files := []File{
		{Name: "BIOS.IMG", Size: int64(len(bios)), Data: bios},
		{Name: "EFIBOOT.IMG", Size: int64(len(efi)), Align: 1 << 20, Fill: func(_ context.Context, w io.WriterAt) error {
			_, err := w.WriteAt(efi, 0)
			return err
		}},
		{Name: "README.TXT", Size: 6, Data: []byte("hello\n")},
	}
	return files, Options{VolumeID: "STAMP_LIVE", Epoch: testEpoch, Reserve: 33 * 512, SizeAlign: 1 << 20,
		Boot: []BootEntry{{Platform: BIOS, File: "BIOS.IMG", LoadSectors: 4, InfoTable: true}, {Platform: EFI, File: "EFIBOOT.IMG"}}}
}

func writeTest(t *testing.T, files []File, o Options) (string, *Layout) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "test.iso")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, err := Write(context.Background(), f, files, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(l.Size); err != nil {
		t.Fatal(err)
	}
	return p, l
}

// The image reads back with this package's reader and with xorriso and
// isoinfo (the judges): the volume, the files' bytes, the boot
// catalog's entries, the boot information table, and -check_media finds
// every block readable.
func TestWriteReadsBack(t *testing.T) {
	files, o := testFiles()
	p, l := writeTest(t, files, o)
	img, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if l.Size%(1<<20) != 0 || l.Extents["EFIBOOT.IMG"].Offset%(1<<20) != 0 {
		t.Errorf("size %d, EFI image at %d: not on 1 MiB boundaries", l.Size, l.Extents["EFIBOOT.IMG"].Offset)
	}
	if end := l.Extents["EFIBOOT.IMG"].Offset + l.Extents["EFIBOOT.IMG"].Size; l.Size-end < o.Reserve {
		t.Errorf("only %d bytes after the last extent; %d reserved", l.Size-end, o.Reserve)
	}
	v, err := Open(bytes.NewReader(img), int64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	if v.ID != "STAMP_LIVE" || v.Size != l.Size {
		t.Errorf("volume %q of %d bytes, want STAMP_LIVE of %d", v.ID, v.Size, l.Size)
	}
	var names []string
	for _, f := range v.Files {
		names = append(names, f.Name)
	}
	if got := strings.Join(names, " "); got != "BIOS.IMG BOOT.CAT EFIBOOT.IMG README.TXT" {
		t.Errorf("root directory: %s", got)
	}
	for _, f := range files {
		fi := v.File(f.Name)
		if fi == nil {
			t.Fatalf("no %s", f.Name)
		}
		got := img[fi.Offset : fi.Offset+fi.Size]
		want := f.Data
		if f.Name == "EFIBOOT.IMG" {
			want = bytes.Repeat([]byte("fat-image-bytes!"), 5000)
		}
		if f.Name == "BIOS.IMG" {
			got, want = got[64:], want[64:] // the information table is patched in
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: bytes differ", f.Name)
		}
	}
	if len(v.Boot) != 2 || v.Boot[0].Platform != BIOS || v.Boot[0].Sectors != 4 || v.Boot[0].Offset != v.File("BIOS.IMG").Offset ||
		v.Boot[1].Platform != EFI || v.Boot[1].Offset != v.File("EFIBOOT.IMG").Offset || int(v.Boot[1].Sectors) != (80000+511)/512 {
		t.Errorf("boot entries %+v", v.Boot)
	}
	bios := img[v.File("BIOS.IMG").Offset:]
	var sum uint32
	for i := 64; i < len(files[0].Data); i += 4 {
		var w [4]byte
		copy(w[:], bios[i:min(i+4, len(files[0].Data))])
		sum += binary.LittleEndian.Uint32(w[:])
	}
	if binary.LittleEndian.Uint32(bios[8:]) != 16 || int64(binary.LittleEndian.Uint32(bios[12:]))*SectorSize != v.File("BIOS.IMG").Offset ||
		binary.LittleEndian.Uint32(bios[16:]) != uint32(len(files[0].Data)) || binary.LittleEndian.Uint32(bios[20:]) != sum {
		t.Errorf("boot information table % x", bios[8:24])
	}

	isoinfo := harness.Tool(t, "isoinfo")
	out, err := exec.Command(isoinfo, "-d", "-i", p).CombinedOutput()
	if err != nil {
		t.Fatalf("isoinfo -d: %v\n%s", err, out)
	}
	for _, want := range []string{"Volume id: STAMP_LIVE", "Logical block size is: 2048", "El Torito VD version 1 found",
		"Bootid 88 (bootable)", "Boot media 0 (No Emulation Boot)", "Nsect 4", "Arch 0 (x86)"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("isoinfo -d lacks %q:\n%s", want, out)
		}
	}
	xorriso := harness.Tool(t, "xorriso")
	out, err = exec.Command(xorriso, "-abort_on", "WARNING", "-indev", p, "-check_media", "--", "-report_el_torito", "plain").CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso -check_media: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "+ good") {
		t.Errorf("xorriso -check_media found no good region:\n%s", out)
	}
	if strings.Contains(string(out), "- unreadable") || strings.Contains(string(out), "- bad") {
		t.Errorf("xorriso -check_media:\n%s", out)
	}
	for _, want := range []string{"El Torito boot img :   1  BIOS  y   none", "El Torito boot img :   2  UEFI  y   none"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("xorriso -report_el_torito lacks %q:\n%s", want, out)
		}
	}
	dir := t.TempDir()
	out, err = exec.Command(xorriso, "-osirrox", "on", "-indev", p, "-extract", "/", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("xorriso -extract: %v\n%s", err, out)
	}
	got, err := os.ReadFile(filepath.Join(dir, "README.TXT"))
	if err != nil || string(got) != "hello\n" {
		t.Errorf("README.TXT extracted as %q (%v)", got, err)
	}
}

// The same files and options give the same bytes.
func TestWriteIsDeterministic(t *testing.T) {
	files, o := testFiles()
	a, _ := writeTest(t, files, o)
	b, _ := writeTest(t, files, o)
	x, _ := os.ReadFile(a)
	y, _ := os.ReadFile(b)
	if !bytes.Equal(x, y) {
		t.Fatal("two writes differ")
	}
}

// A big EFI image gets the sector count 0, which EDK2 takes as the rest
// of the medium, as xorriso writes it.
func TestBigEFIImageCountsZero(t *testing.T) {
	files := []File{{Name: "EFIBOOT.IMG", Size: 40 << 20, Fill: func(context.Context, io.WriterAt) error { return nil }}}
	o := Options{VolumeID: "BIG", Epoch: testEpoch, Boot: []BootEntry{{Platform: EFI, File: "EFIBOOT.IMG"}}}
	p, _ := writeTest(t, files, o)
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	v, err := Open(f, fi.Size())
	if err != nil {
		t.Fatal(err)
	}
	if len(v.Boot) != 1 || v.Boot[0].Platform != EFI || v.Boot[0].Sectors != 0 {
		t.Errorf("boot entries %+v", v.Boot)
	}
}

func TestRefusals(t *testing.T) {
	for name, c := range map[string]struct {
		files []File
		o     Options
		want  string
	}{
		"long name":    {[]File{{Name: "TOOLONGNAME.IMG"}}, Options{VolumeID: "X"}, "8.3"},
		"lower case":   {[]File{{Name: "boot.img"}}, Options{VolumeID: "X"}, "A-Z"},
		"volume id":    {nil, Options{VolumeID: "live cd"}, "volume ID"},
		"no boot file": {nil, Options{VolumeID: "X", Boot: []BootEntry{{File: "NONE.IMG"}}}, "no file"},
		"twice":        {[]File{{Name: "A"}, {Name: "A"}}, Options{VolumeID: "X"}, "twice"},
		"alignment":    {[]File{{Name: "A", Align: 1000}}, Options{VolumeID: "X"}, "alignment"},
		"table bytes":  {[]File{{Name: "A", Size: 100, Fill: func(context.Context, io.WriterAt) error { return nil }}}, Options{VolumeID: "X", Boot: []BootEntry{{File: "A", InfoTable: true}}}, "information table"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Plan(c.files, c.o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want an error with %q", err, c.want)
			}
		})
	}
}

// A damaged or foreign image is refused, never a panic. The input is the
// first fuzzSlice bytes of each sector from the first volume descriptor
// on, where everything Open reads lies in a small image; a short input
// keeps the fuzzer fast.
func FuzzOpen(f *testing.F) {
	files, o := testFiles()
	var buf writerBuffer
	if _, err := Write(context.Background(), &buf, files, o); err != nil {
		f.Fatal(err)
	}
	var seed []byte
	for n := systemSectors; n < systemSectors+fuzzSectors; n++ {
		seed = append(seed, buf.b[n*SectorSize:n*SectorSize+fuzzSlice]...)
	}
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		img := make([]byte, (systemSectors+fuzzSectors)*SectorSize)
		for i := 0; i < fuzzSectors && i*fuzzSlice < len(data); i++ {
			copy(img[(systemSectors+i)*SectorSize:], data[i*fuzzSlice:min(len(data), (i+1)*fuzzSlice)])
		}
		Open(bytes.NewReader(img), int64(len(img)))
	})
}

const (
	fuzzSectors = 8
	fuzzSlice   = 256
)

type writerBuffer struct{ b []byte }

func (w *writerBuffer) WriteAt(p []byte, off int64) (int, error) {
	if end := int(off) + len(p); end > len(w.b) {
		w.b = append(w.b, make([]byte, end-len(w.b))...)
	}
	return copy(w.b[off:], p), nil
}
