package fat

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

var epoch = time.Unix(1700000001, 0).UTC()

func content(f File) []byte {
	r, err := f.Open()
	if err != nil {
		panic(err)
	}
	b, _ := io.ReadAll(r)
	return b
}

func memFile(p string, b []byte) File {
	return File{Path: p, Size: int64(len(b)), Open: func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}}
}

// sampleFiles has what an ESP and the FAT corner cases need: 8.3 names, long
// and non-ASCII names, names that share a basis, a directory of many
// clusters, a file of many clusters, empty files and directories.
func sampleFiles(manyInDir int) []File {
	rng := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 300<<10+17)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	fs := []File{
		memFile("/EFI/BOOT/BOOTX64.EFI", big),
		memFile("/loader/loader.conf", []byte("default node.conf\ntimeout 0\nconsole-mode keep\n")),
		memFile("/loader/entries/node.conf", []byte("linux /vmlinuz\n")),
		memFile("/vmlinuz", big[:123457]),
		memFile("/README.TXT", []byte("upper-case 8.3 name\n")),
		memFile("/readme.md", []byte("lower-case name that fits 8.3\n")),
		memFile("/A name with spaces and.several.dots.txt", []byte("spaces")),
		memFile("/"+strings.Repeat("long-", 40)+"end.bin", []byte("a 205-character name")),
		memFile("/grüße-ñandú-日本.txt", []byte("non-ASCII")),
		memFile("/.hidden", []byte("leading dot")),
		memFile("/empty", nil),
		{Path: "/emptydir", Dir: true},
		{Path: "/deep/a/b/c/d/e", Dir: true},
	}
	for i := range manyInDir {
		fs = append(fs, memFile(fmt.Sprintf("/many/long file name number %03d.conf", i), []byte(fmt.Sprint(i))))
	}
	return fs
}

func writeImage(t *testing.T, files []File, o Options) (string, Geometry) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fat.img")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(o.Size); err != nil {
		t.Fatal(err)
	}
	g, err := Write(context.Background(), files, f, o)
	if err != nil {
		t.Fatalf("Write: %v", err)
	}
	return p, g
}

func fsck(t *testing.T, img string) string {
	t.Helper()
	out, err := exec.Command(harness.Tool(t, "fsck.vfat"), "-n", "-v", img).CombinedOutput()
	if err != nil {
		t.Fatalf("fsck.vfat -n %s: %v\n%s", img, err, out)
	}
	return string(out)
}

// checkMtools copies everything out with mtools and compares it with files.
func checkMtools(t *testing.T, img string, files []File) {
	t.Helper()
	out := t.TempDir()
	cmd := exec.Command(harness.Tool(t, "mcopy"), "-s", "-n", "-i", img, "::*", out+"/")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mcopy: %v\n%s", err, b)
	}
	for _, f := range files {
		p := filepath.Join(out, f.Path)
		fi, err := os.Stat(p)
		if err != nil {
			t.Errorf("mcopy did not produce %s: %v", f.Path, err)
			continue
		}
		if f.Dir {
			if !fi.IsDir() {
				t.Errorf("%s: not a directory after mcopy", f.Path)
			}
			continue
		}
		got, _ := os.ReadFile(p)
		if !bytes.Equal(got, content(f)) {
			t.Errorf("%s: mcopy read %d bytes that differ from the %d written", f.Path, len(got), f.Size)
		}
	}
	// Nothing more than was written.
	var n int
	filepath.Walk(out, func(string, os.FileInfo, error) error { n++; return nil })
	if want := countEntries(files) + 1; n != want {
		t.Errorf("mcopy produced %d entries, want %d", n, want)
	}
}

func countEntries(files []File) int {
	seen := map[string]bool{}
	for _, f := range files {
		for p := f.Path; p != "/"; p = filepath.Dir(p) {
			seen[p] = true
		}
	}
	return len(seen)
}

// checkReader reads everything back with this package's reader.
func checkReader(t *testing.T, img string, files []File, wantTime time.Time) {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	fsys, err := Open(f, fi.Size())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	for _, want := range files {
		name := strings.TrimPrefix(want.Path, "/")
		st, err := fs.Stat(fsys, name)
		if err != nil {
			t.Errorf("reader: %v", err)
			continue
		}
		if !st.ModTime().Equal(wantTime) {
			t.Errorf("%s: mtime %s, want %s", name, st.ModTime(), wantTime)
		}
		if want.Dir {
			if !st.IsDir() {
				t.Errorf("%s: not a directory", name)
			}
			continue
		}
		got, err := fs.ReadFile(fsys, name)
		if err != nil || !bytes.Equal(got, content(want)) {
			t.Errorf("%s: reader got %d bytes (%v), want the %d written", name, len(got), err, want.Size)
		}
		// ReadAt across cluster boundaries, and past the end.
		if h, err := fsys.Open(name); err == nil && want.Size > 3 {
			ra := h.(io.ReaderAt)
			whole := content(want)
			off := want.Size / 3
			b := make([]byte, want.Size-off+10)
			n, err := ra.ReadAt(b, off)
			if err != io.EOF || int64(n) != want.Size-off || !bytes.Equal(b[:n], whole[off:]) {
				t.Errorf("%s: ReadAt at %d got %d bytes (%v)", name, off, n, err)
			}
		}
	}
	var n int
	if err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := countEntries(files) + 1; n != want {
		t.Errorf("reader walked %d entries, want %d", n, want)
	}
}

func TestGeometryFollowsTheSpecification(t *testing.T) {
	var sawFAT16, sawFAT32 bool
	for size := int64(3 << 20); size < 600<<20; size += 1<<20 + 7*512 {
		g, err := ChooseGeometry(size, 0)
		if err != nil {
			t.Fatalf("%d: %v", size, err)
		}
		// The count alone decides the type.
		switch {
		case g.Type == FAT16 && g.Clusters > maxFAT12Clusters+guard && g.Clusters < maxFAT16Clusters-guard:
			sawFAT16 = true
		case g.Type == FAT32 && g.Clusters > maxFAT16Clusters+guard:
			sawFAT32 = true
		default:
			t.Fatalf("%d bytes: %s with %d clusters", size, g.Type, g.Clusters)
		}
		if need := (uint64(g.Clusters) + 2) * uint64(g.entryBytes()); need > uint64(g.FATSectors)*sectorSize {
			t.Fatalf("%d bytes: FAT of %d sectors cannot hold %d clusters", size, g.FATSectors, g.Clusters)
		}
		if smaller := layout(g.TotalSectors, g.Type, g.SectorsPerCluster, g.RootEntries); smaller.FATSectors != g.FATSectors {
			t.Fatalf("layout is not a function of its inputs")
		}
		if g.FirstDataSector()%g.SectorsPerCluster != 0 {
			t.Fatalf("%d bytes: data area at sector %d is not cluster aligned", size, g.FirstDataSector())
		}
		if end := int64(g.FirstDataSector()+g.Clusters*g.SectorsPerCluster) * sectorSize; end > size {
			t.Fatalf("%d bytes: clusters end at %d", size, end)
		}
	}
	if !sawFAT16 || !sawFAT32 {
		t.Fatal("the sizes tried did not cover both types")
	}
	if _, err := ChooseGeometry(2<<20, 0); err == nil {
		t.Fatal("2 MiB: want an error, FAT16 needs more clusters")
	}
}

// boundary finds the smallest size, in MiB, that ChooseGeometry makes FAT32.
func boundary(t *testing.T) int64 {
	for mib := int64(3); mib < 100; mib++ {
		if g, _ := ChooseGeometry(mib<<20, 0); g.Type == FAT32 {
			return mib << 20
		}
	}
	t.Fatal("no FAT32 below 100 MiB")
	return 0
}

func TestWriteIsCleanOnBothSidesOfTheBoundary(t *testing.T) {
	harness.RequireTools(t, "fsck.vfat", "mcopy")
	b := boundary(t)
	for _, c := range []struct {
		size int64
		typ  Type
		many int
	}{
		{4 << 20, FAT16, 60},
		{b - 1<<20, FAT16, 60},
		{b, FAT32, 60},
		// 4 KiB clusters: 300 names of three slots fill 8 clusters.
		{300 << 20, FAT32, 300},
	} {
		t.Run(fmt.Sprintf("%dKiB", c.size>>10), func(t *testing.T) {
			files := sampleFiles(c.many)
			img, g := writeImage(t, files, Options{Size: c.size, VolumeID: 0xCAFE1234, Label: "esp", Epoch: epoch})
			if g.Type != c.typ {
				t.Fatalf("%d bytes: %s, want %s", c.size, g.Type, c.typ)
			}
			out := fsck(t, img)
			if !strings.Contains(out, fmt.Sprintf("%d bit entries", map[Type]int{FAT16: 16, FAT32: 32}[c.typ])) {
				t.Errorf("fsck.vfat does not see %s:\n%s", c.typ, out)
			}
			// The test must exercise a directory of several clusters.
			fsys := openImage(t, img)
			many, err := fsys.lookup("stat", "many")
			if err != nil {
				t.Fatal(err)
			}
			if cs, _ := fsys.chain(many.First); len(cs) < 2 {
				t.Errorf("/many spans %d cluster(s); the test wants several", len(cs))
			}
			if fsys.VolumeID != 0xCAFE1234 || fsys.Label != "ESP" {
				t.Errorf("volume id %08x label %q", fsys.VolumeID, fsys.Label)
			}
			checkMtools(t, img, files)
			checkReader(t, img, files, epoch.Truncate(2*time.Second))
		})
	}
}

func openImage(t *testing.T, img string) *FS {
	t.Helper()
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := Open(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

func TestEpochBefore1980(t *testing.T) {
	harness.RequireTools(t, "fsck.vfat", "mdir")
	files := sampleFiles(3)
	img, _ := writeImage(t, files, Options{Size: 8 << 20, Epoch: time.Unix(0, 0)})
	fsck(t, img)
	out, err := exec.Command(harness.Tool(t, "mdir"), "-i", img, "::/loader").CombinedOutput()
	if err != nil {
		t.Fatalf("mdir: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "1980-01-01") {
		t.Errorf("mdir does not show 1980-01-01:\n%s", out)
	}
	checkReader(t, img, files, minTime)
}

func TestWriteIsDeterministic(t *testing.T) {
	o := Options{Size: 40 << 20, VolumeID: 7, Label: "X", Epoch: epoch}
	a, _ := writeImage(t, sampleFiles(50), o)
	// The same files in another order give the same bytes.
	files := sampleFiles(50)
	rand.New(rand.NewPCG(3, 4)).Shuffle(len(files), func(i, j int) { files[i], files[j] = files[j], files[i] })
	b, _ := writeImage(t, files, o)
	if sum(t, a) != sum(t, b) {
		t.Fatal("two writes of the same files differ")
	}
}

func sum(t *testing.T, p string) [32]byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b)
}

func TestFsckCatchesACorruptImage(t *testing.T) {
	// The validator the tests rely on must be able to fail: a wrong free
	// count in FSInfo is an error fsck.vfat -n reports.
	img, _ := writeImage(t, sampleFiles(3), Options{Size: 40 << 20, Epoch: epoch})
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{1, 2, 3, 0}, sectorSize+488)
	f.Close()
	if out, err := exec.Command(harness.Tool(t, "fsck.vfat"), "-n", img).CombinedOutput(); err == nil {
		t.Fatalf("fsck.vfat accepted a wrong free count:\n%s", out)
	}
}

func TestMinSize(t *testing.T) {
	for _, files := range [][]File{sampleFiles(3), {memFile("/big", make([]byte, 40<<20))}} {
		size, err := MinSize(files, "")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(t.TempDir(), "img")
		f, _ := os.Create(p)
		f.Truncate(size)
		if _, err := Write(context.Background(), files, f, Options{Size: size, Epoch: epoch}); err != nil {
			t.Errorf("Write at MinSize %d: %v", size, err)
		}
		f.Close()
	}
}

func TestWriteErrors(t *testing.T) {
	ctx := context.Background()
	discard := &zeroWriter{}
	for _, c := range []struct {
		name  string
		files []File
		o     Options
		want  string
	}{
		{"case", []File{memFile("/EFI", nil), memFile("/efi", nil)}, Options{Size: 8 << 20}, "differ only in case"},
		{"long case", []File{memFile("/Long Name", nil), memFile("/long name", nil)}, Options{Size: 8 << 20}, "differ only in case"},
		{"full", []File{memFile("/big", make([]byte, 9<<20))}, Options{Size: 8 << 20}, "it needs at least"},
		{"bad char", []File{memFile("/a:b", nil)}, Options{Size: 8 << 20}, "does not allow"},
		{"trailing dot", []File{memFile("/a.", nil)}, Options{Size: 8 << 20}, "ends in a dot"},
		{"small", nil, Options{Size: 1 << 20}, "too small"},
		{"odd size", nil, Options{Size: 8<<20 + 1}, "multiple of 512"},
		{"label", nil, Options{Size: 8 << 20, Label: "a:b"}, "label"},
		{"file parent", []File{memFile("/a", nil), memFile("/a/b", nil)}, Options{Size: 8 << 20}, "is a file"},
		{"twice", []File{memFile("/a", nil), memFile("/a", nil)}, Options{Size: 8 << 20}, "listed twice"},
		{"short read", []File{{Path: "/a", Size: 10, Open: func() (io.ReadCloser, error) {
			return io.NopCloser(strings.NewReader("abc")), nil
		}}}, Options{Size: 8 << 20}, "reading after 3 of 10"},
		{"long read", []File{{Path: "/a", Size: 2, Open: func() (io.ReadCloser, error) {
			return io.NopCloser(strings.NewReader("abc")), nil
		}}}, Options{Size: 8 << 20}, "longer than its size"},
	} {
		_, err := Write(ctx, c.files, discard, c.o)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error with %q", c.name, err, c.want)
		}
	}
}

type zeroWriter struct{}

func (*zeroWriter) WriteAt(b []byte, off int64) (int, error) { return len(b), nil }

func TestShortNames(t *testing.T) {
	names := []string{"BOOTX64.EFI", "LONGFI~1.TXT", "Makefile", "long file name 1.txt", "long file name 2.txt",
		"loader", "x.tar.gz", ".bashrc", "node.conf"}
	short, lfn, err := assignShortNames(names)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		short string
		lfn   bool
	}{
		{"BOOTX64 EFI", false}, {"LONGFI~1TXT", false}, {"MAKEFILE   ", true},
		// ~1 is taken by a name that fits 8.3 and so claims it first.
		{"LONGFI~2TXT", true}, {"LONGFI~3TXT", true},
		{"LOADER     ", true}, {"X~1     GZ ", true}, {"BASHRC~1   ", true}, {"NODE~1  CON", true},
	}
	for i, w := range want {
		if string(short[i][:]) != w.short || lfn[i] != w.lfn {
			t.Errorf("%q: short %q lfn %v, want %q %v", names[i], short[i], lfn[i], w.short, w.lfn)
		}
	}
}

// TestReadsWhatMtoolsWrites reads an image made by mkfs.vfat and mcopy: the
// reader, and the long-name checksum it verifies, agree with another
// implementation.
func TestReadsWhatMtoolsWrites(t *testing.T) {
	tools := harness.RequireTools(t, "mkfs.vfat", "mcopy")
	for _, fatType := range []string{"16", "32"} {
		dir := t.TempDir()
		img := filepath.Join(dir, "img")
		src := filepath.Join(dir, "src")
		files := sampleFiles(40)
		for _, f := range files {
			p := filepath.Join(src, f.Path)
			if f.Dir {
				os.MkdirAll(p, 0o755)
				continue
			}
			os.MkdirAll(filepath.Dir(p), 0o755)
			os.WriteFile(p, content(f), 0o644)
			os.Chtimes(p, epoch, epoch)
		}
		filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
			if fi.IsDir() {
				os.Chtimes(p, epoch, epoch)
			}
			return nil
		})
		if out, err := exec.Command(tools[0], "-F", fatType, "-C", img, "40960").CombinedOutput(); err != nil {
			t.Fatalf("mkfs.vfat: %v\n%s", err, out)
		}
		ents, _ := os.ReadDir(src)
		args := []string{"-s", "-m", "-i", img}
		for _, e := range ents {
			args = append(args, filepath.Join(src, e.Name()))
		}
		cmd := exec.Command(tools[1], append(args, "::")...)
		cmd.Env = append(os.Environ(), "TZ=UTC")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("mcopy: %v\n%s", err, out)
		}
		if g := openImage(t, img).Geometry(); g.Type.String() != "FAT"+fatType {
			t.Fatalf("mkfs.vfat -F %s made %s", fatType, g.Type)
		}
		checkReader(t, img, files, epoch.Truncate(2*time.Second))
	}
}

func TestFatTime(t *testing.T) {
	d, tm, tenth := fatTime(time.Date(2023, 11, 14, 22, 13, 21, 0, time.UTC))
	if got := parseTime(d, tm, tenth); !got.Equal(time.Date(2023, 11, 14, 22, 13, 21, 0, time.UTC)) {
		t.Errorf("round trip with tenths: %s", got)
	}
	if got := parseTime(d, tm, 0); !got.Equal(time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)) {
		t.Errorf("2-second step: %s", got)
	}
	if d, tm, _ := fatTime(time.Unix(0, 0)); parseTime(d, tm, 0) != minTime {
		t.Errorf("1970 does not clamp to 1980")
	}
	if d, tm, _ := fatTime(time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)); parseTime(d, tm, 0) != maxTime {
		t.Errorf("2200 does not clamp to 2107")
	}
}

// FuzzOpen feeds damaged images to the reader, which inspect runs on files
// it did not make: it must return errors, never panic or loop.
func FuzzOpen(f *testing.F) {
	for _, size := range []int64{4 << 20, 34 << 20} {
		p := filepath.Join(f.TempDir(), "seed.img")
		w, _ := os.Create(p)
		w.Truncate(size)
		Write(context.Background(), sampleFiles(20), w, Options{Size: size, Label: "x", Epoch: epoch})
		w.Close()
		b, _ := os.ReadFile(p)
		// The metadata and the first files are at the front; the rest reads
		// as zeros.
		f.Add(b[:128<<10], size, int64(0))
	}
	f.Fuzz(func(t *testing.T, head []byte, size, flip int64) {
		if size < 0 || size > 64<<20 {
			return
		}
		img := append([]byte(nil), head...)
		if len(img) > 0 {
			i := int(uint64(flip) % uint64(len(img)))
			img[i] ^= byte(flip >> 32)
		}
		fsys, err := Open(&padded{img, size}, size)
		if err != nil {
			return
		}
		fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				fs.ReadFile(fsys, p)
			}
			return nil
		})
	})
}

// padded reads b followed by zeros up to size.
type padded struct {
	b    []byte
	size int64
}

func (p *padded) ReadAt(out []byte, off int64) (int, error) {
	if off >= p.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(out)), p.size-off))
	clear(out[:n])
	if off < int64(len(p.b)) {
		copy(out[:n], p.b[off:])
	}
	if n < len(out) {
		return n, io.EOF
	}
	return n, nil
}
