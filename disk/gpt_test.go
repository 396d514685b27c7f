package disk

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

func testLayout(t *testing.T, arch string) (int64, []Partition) {
	t.Helper()
	root, err := TypeGUID("root", arch)
	if err != nil {
		t.Fatal(err)
	}
	parts := []Partition{
		{Name: "esp", Type: TypeESP, GUID: PartitionGUID("test", "esp"), Size: 16 << 20},
		{Name: "root", Type: root, GUID: PartitionGUID("test", "root"), Size: 40 << 20},
	}
	end, err := Place(parts)
	if err != nil {
		t.Fatal(err)
	}
	return DiskSize(end), parts
}

func writeDisk(t *testing.T, size int64, parts []Partition) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	if err := WriteGPT(f, size, DiskGUID("test"), parts); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGPTIsValidAndDeterministic(t *testing.T) {
	sgdisk := harness.Tool(t, "sgdisk")
	for _, arch := range []string{"amd64", "arm64"} {
		size, parts := testLayout(t, arch)
		if size != 58<<20 {
			t.Fatalf("disk size %d, want 58 MiB (1 MiB, two partitions, 1 MiB for the backup GPT)", size)
		}
		img := writeDisk(t, size, parts)
		if out, ok := sgdiskClean(sgdisk, img); !ok {
			t.Fatalf("sgdisk -v:\n%s", out)
		}
		for i, p := range parts {
			out, err := exec.Command(sgdisk, "-i", string(rune('1'+i)), img).CombinedOutput()
			if err != nil {
				t.Fatalf("sgdisk -i: %v\n%s", err, out)
			}
			s := string(out)
			for _, want := range []string{
				"Partition GUID code: " + p.Type,
				"Partition unique GUID: " + strings.ToUpper(FormatUUID(p.GUID)),
				"First sector: " + strconv.FormatInt(p.Start/SectorSize, 10),
				"Partition name: '" + p.Name + "'",
			} {
				if !strings.Contains(s, want) {
					t.Errorf("%s partition %d: no %q in\n%s", arch, i+1, want, s)
				}
			}
		}
		out, _ := exec.Command(sgdisk, "-p", img).CombinedOutput()
		if !strings.Contains(string(out), "Disk identifier (GUID): "+strings.ToUpper(FormatUUID(DiskGUID("test")))) {
			t.Errorf("disk GUID not as derived:\n%s", out)
		}
		// The unique GUID sits in the entry in GPT's mixed-endian form.
		b, _ := os.ReadFile(img)
		entry := b[2*SectorSize : 2*SectorSize+128]
		g := GUIDBytes(parts[0].GUID)
		if !bytes.Equal(entry[16:32], g[:]) {
			t.Errorf("entry GUID bytes % x, want % x", entry[16:32], g)
		}
		// The backup header is the last sector.
		if !bytes.Equal(b[len(b)-SectorSize:len(b)-SectorSize+8], []byte("EFI PART")) {
			t.Error("no backup GPT header in the last sector")
		}
		if again := writeDisk(t, size, parts); !bytes.Equal(b, mustRead(t, again)) {
			t.Error("two writes differ")
		}
		f, _ := os.Open(img)
		guid, got, err := ReadGPT(f, size)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if guid != FormatUUID(DiskGUID("test")) || len(got) != 2 || got[1] != parts[1] {
			t.Errorf("ReadGPT: %s %+v", guid, got)
		}
	}
}

func TestSgdiskCatchesABadTable(t *testing.T) {
	// The check above must be able to fail: a GPT without its backup is a
	// problem sgdisk -v reports.
	size, parts := testLayout(t, "amd64")
	img := writeDisk(t, size, parts)
	f, _ := os.OpenFile(img, os.O_RDWR, 0)
	f.WriteAt(make([]byte, SectorSize), size-SectorSize)
	f.Close()
	if out, ok := sgdiskClean(harness.Tool(t, "sgdisk"), img); ok {
		t.Fatalf("sgdisk -v found no problem with the backup header zeroed:\n%s", out)
	}
}

// sgdiskClean runs sgdisk -v. "No problems found" alone proves little:
// sgdisk repairs a damaged table in memory before it verifies, and says so
// only in warnings, so any warning counts as a problem too.
func sgdiskClean(sgdisk, img string) (string, bool) {
	b, err := exec.Command(sgdisk, "-v", img).CombinedOutput()
	out := string(b)
	ok := err == nil && strings.Contains(out, "No problems found")
	for _, bad := range []string{"Warning", "Caution", "ERROR", "Problem:"} {
		ok = ok && !strings.Contains(out, bad)
	}
	return out, ok
}

func TestGPTErrors(t *testing.T) {
	if _, err := Place([]Partition{{Name: "a", Size: 1000}}); err == nil {
		t.Error("Place accepted an unaligned size")
	}
	size, parts := testLayout(t, "amd64")
	parts[1].Size += Alignment
	if err := WriteGPT(nopWriter{}, size, DiskGUID("x"), parts); err == nil || !strings.Contains(err.Error(), "past the last usable byte") {
		t.Errorf("a partition over the backup GPT: %v", err)
	}
	if _, err := TypeGUID("root", "riscv64"); err == nil {
		t.Error("TypeGUID accepted riscv64")
	}
	if _, err := TypeGUID("home", "amd64"); err == nil {
		t.Error("TypeGUID accepted an unknown type")
	}
}

func mustRead(t *testing.T, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type nopWriter struct{}

func (nopWriter) WriteAt(b []byte, _ int64) (int, error) { return len(b), nil }
