package stamp

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestRemoveTree removes a tree of many directories, files, hard links, a
// fifo and symbolic links, some to a directory and a file outside it, and
// leaves what those links point at alone.
func TestRemoveTree(t *testing.T) {
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	must(t, os.MkdirAll(filepath.Join(outside, "keep"), 0o755))
	must(t, os.WriteFile(filepath.Join(outside, "keep", "f"), []byte("kept"), 0o644))
	work := filepath.Join(base, "work")
	for i := range 40 {
		d := filepath.Join(work, "tree", string(rune('a'+i%26)), "x", string(rune('a'+i/26)))
		must(t, os.MkdirAll(d, 0o755))
		must(t, os.WriteFile(filepath.Join(d, "file"), []byte("data"), 0o600))
		must(t, os.Link(filepath.Join(d, "file"), filepath.Join(d, "link")))
	}
	must(t, os.MkdirAll(filepath.Join(work, "empty", "deeper"), 0o755))
	must(t, os.Symlink(outside, filepath.Join(work, "tree", "to-dir")))
	must(t, os.Symlink(filepath.Join(outside, "keep", "f"), filepath.Join(work, "tree", "a", "to-file")))
	must(t, os.Symlink("../../..", filepath.Join(work, "tree", "b", "up")))
	must(t, syscall.Mkfifo(filepath.Join(work, "fifo"), 0o644))
	if err := removeTree(work); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(work); !os.IsNotExist(err) {
		t.Fatalf("work directory still there: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "keep", "f")); err != nil || string(b) != "kept" {
		t.Fatalf("outside the tree: %q, %v", b, err)
	}
	if err := removeTree(filepath.Join(base, "missing")); err != nil {
		t.Fatalf("a missing directory: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
