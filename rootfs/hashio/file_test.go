package hashio

import (
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestFileMatchesSha256sum checks File against coreutils' sha256sum, and
// that noFollow refuses a symlink that File otherwise follows.
func TestFileMatchesSha256sum(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	data := strings.Repeat("stamp\n", 100000)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sha256sum", p).Output()
	if err != nil {
		t.Fatalf("sha256sum: %v", err)
	}
	want := strings.Fields(string(out))[0]
	sum, n, err := File(p, true)
	if err != nil || sum != want || n != int64(len(data)) {
		t.Errorf("File = %s %d %v, want %s %d", sum, n, err, want, len(data))
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("f", link); err != nil {
		t.Fatal(err)
	}
	if sum, _, err := File(link, false); err != nil || sum != want {
		t.Errorf("following a symlink: %s %v", sum, err)
	}
	if _, _, err := File(link, true); !errors.Is(err, syscall.ELOOP) {
		t.Errorf("noFollow on a symlink: err = %v, want ELOOP", err)
	}
}

// TestFileSparse hashes a sparse file (holes at its start, between data and
// at its end) as sha256sum reads it.
func TestFileSparse(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sparse")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int64{3<<20 + 17, 9 << 20} {
		if _, err := f.WriteAt([]byte(strings.Repeat("data", 300000)), off); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(16<<20 + 5); err != nil {
		t.Fatal(err)
	}
	f.Close()
	out, err := exec.Command("sha256sum", p).Output()
	if err != nil {
		t.Fatalf("sha256sum: %v", err)
	}
	want := strings.Fields(string(out))[0]
	sum, n, err := File(p, true)
	if err != nil || sum != want || n != 16<<20+5 {
		t.Errorf("File = %s %d %v, want %s %d", sum, n, err, want, 16<<20+5)
	}
	// Past the page cache: whole units read at the end, where 5 bytes
	// are left, and data that starts inside a block.
	sum, n, err = FileUncached(p)
	if err != nil || sum != want || n != 16<<20+5 {
		t.Errorf("FileUncached = %s %d %v, want %s %d", sum, n, err, want, 16<<20+5)
	}
}

// TestFileLargeMatchesSha256sum hashes a file large enough to be hashed on
// a goroutine while the next chunks are read, every chunk different, so a
// buffer read into again before its hash was done would change the sum.
func TestFileLargeMatchesSha256sum(t *testing.T) {
	p := filepath.Join(t.TempDir(), "large")
	data := make([]byte, 13*readSize+123)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sha256sum", p).Output()
	if err != nil {
		t.Fatalf("sha256sum: %v", err)
	}
	want := strings.Fields(string(out))[0]
	for name, hash := range map[string]func(string) (string, int64, error){
		"File":         func(p string) (string, int64, error) { return File(p, false) },
		"FileUncached": FileUncached,
	} {
		for range 3 {
			if sum, n, err := hash(p); err != nil || sum != want || n != int64(len(data)) {
				t.Errorf("%s = %s %d %v, want %s %d", name, sum, n, err, want, len(data))
			}
		}
	}
}
