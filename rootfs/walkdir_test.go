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
	walk := func() []string {
		var got []string
		err := WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
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
	sorted := walk()
	if want := []string{".", "a", "a/x", "a/y", "b", "c", "c/z", "c/z/w"}; !slices.Equal(sorted, want) {
		t.Fatalf("sorted walk %v, want %v", sorted, want)
	}
	t.Setenv(ReverseReaddirEnv, "1")
	if got, want := walk(), []string{".", "c", "c/z", "c/z/w", "b", "a", "a/y", "a/x"}; !slices.Equal(got, want) {
		t.Errorf("reversed walk %v, want %v", got, want)
	}
}
