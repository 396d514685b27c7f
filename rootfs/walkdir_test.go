package rootfs

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWalkDirReverse(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a/x", "a/y", "b", "c/z/w"} {
		full := filepath.Join(dir, p)
		os.MkdirAll(filepath.Dir(full), 0o755)
		os.WriteFile(full, nil, 0o644)
	}
	walk := func(reverse bool) []string {
		var got []string
		err := WalkDir(dir, reverse, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			got = append(got, rel)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	sorted := walk(false)
	if want := []string{".", "a", "a/x", "a/y", "b", "c", "c/z", "c/z/w"}; !slices.Equal(sorted, want) {
		t.Fatalf("sorted walk %v, want %v", sorted, want)
	}
	if got, want := walk(true), []string{".", "c", "c/z", "c/z/w", "b", "a", "a/y", "a/x"}; !slices.Equal(got, want) {
		t.Errorf("reversed walk %v, want %v", got, want)
	}
}

// TestRescanReverseReaddir shows the option reaching the rescan: what a hook
// added is found in reverse order, and the index is the same either way.
func TestRescanReverseReaddir(t *testing.T) {
	rescan := func(reverse bool) ([]string, string) {
		tr, err := New(filepath.Join(t.TempDir(), "tree"), Options{ReverseReaddir: reverse})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		for _, p := range []string{"a/x", "b", "c"} {
			full := filepath.Join(tr.Dir(), p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte(p), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ch, err := tr.Rescan(t.Context(), Origin{Layer: "hook"})
		if err != nil {
			t.Fatal(err)
		}
		return ch.Added, Digest(tr.Entries())
	}
	sorted, d1 := rescan(false)
	if want := []string{"/a", "/a/x", "/b", "/c"}; !slices.Equal(sorted, want) {
		t.Fatalf("sorted rescan added %v, want %v", sorted, want)
	}
	reversed, d2 := rescan(true)
	if want := []string{"/c", "/b", "/a", "/a/x"}; !slices.Equal(reversed, want) {
		t.Errorf("reversed rescan added %v, want %v", reversed, want)
	}
	if d1 != d2 {
		t.Errorf("tree digest %s sorted, %s reversed", d1, d2)
	}
}
