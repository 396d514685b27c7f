package cache

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// A cache opened Unlocked keeps no prune waiting, and a blob it opened with
// OpenFile reads whole after a prune removed its name: a server serves
// from the cache without holding its lock.
func TestUnlockedReaderBesidePrune(t *testing.T) {
	c := openCache(t, Options{})
	data := randomBytes(1, 3<<20)
	d := putBlob(t, c, data)
	reader, err := Open(c.Dir(), Options{Unlocked: true})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close()
	f, err := reader.OpenFile(d)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := c.Prune(context.Background(), PruneOptions{}); err != nil {
		t.Fatalf("a prune beside an unlocked reader: %v", err)
	}
	if c.Has(d) {
		t.Fatal("the prune kept the blob; the test proves nothing")
	}
	got, err := io.ReadAll(f)
	if err != nil || sum(got) != sum(data) {
		t.Fatalf("the open blob after the prune: %d bytes, %v", len(got), err)
	}
	if _, err := reader.OpenFile(d); err == nil {
		t.Fatal("OpenFile of a pruned blob succeeded")
	}
	// Its Prune has no lock to take alone.
	if _, err := reader.Prune(context.Background(), PruneOptions{}); err == nil {
		t.Fatal("an unlocked cache pruned")
	}
}

// OpenFile hashes a blob it has not seen unchanged since it last hashed to
// its name, and a damaged one is removed and reported.
func TestOpenFileVerifies(t *testing.T) {
	c := openCache(t, Options{})
	data := randomBytes(2, 1<<20)
	d := putBlob(t, c, data)
	f, err := c.OpenFile(d)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	corruptBlob(t, c, d)
	_, err = c.OpenFile(d)
	var ce *CorruptError
	if !errors.As(err, &ce) || !ce.Removed || c.Has(d) {
		t.Fatalf("OpenFile of a damaged blob: %v", err)
	}
}

// HashTree digests a directory's names, modes, link targets and contents:
// a change to any one changes it.
func TestHashTree(t *testing.T) {
	c := openCache(t, Options{})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0o644)
	os.Mkdir(filepath.Join(dir, "d"), 0o755)
	os.Symlink("a", filepath.Join(dir, "d", "l"))
	seen := map[string]string{}
	step := func(what string) {
		t.Helper()
		h, err := c.HashTree(dir)
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := seen[h]; ok {
			t.Fatalf("%s: the digest of %s again", what, prev)
		}
		seen[h] = what
	}
	step("start")
	os.WriteFile(filepath.Join(dir, "a"), []byte("b"), 0o644)
	step("content")
	os.Chmod(filepath.Join(dir, "a"), 0o755)
	step("mode")
	os.Remove(filepath.Join(dir, "d", "l"))
	os.Symlink("b", filepath.Join(dir, "d", "l"))
	step("link target")
	os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "c"))
	step("name")
	if h, err := c.HashTree(filepath.Join(dir, "c")); err != nil || h == "" {
		t.Fatalf("a single file: %q %v", h, err)
	}
	if _, err := c.HashTree(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing path: %v", err)
	}
}
