package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"testing"
	"time"
)

// An archive written through the store is filed under its sha256, opened
// again without hashing while it is unchanged, and a damaged one is
// reported and removed rather than read.
func TestArchiveStore(t *testing.T) {
	c := openCache(t, Options{})
	s := c.Archives()
	data := randomBytes(7, 3<<20)
	f, err := s.CreateTemp()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	f.Close()
	h := sha256.Sum256(data)
	hexSum := hex.EncodeToString(h[:])
	p, err := s.Keep(f.Name(), hexSum)
	if err != nil {
		t.Fatal(err)
	}
	if p != c.blobPath(hexSum) || !c.Has("sha256:"+hexSum) {
		t.Fatalf("kept at %s, not as blob %s", p, hexSum)
	}
	if left := names(t, c.tmp); len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
	if !c.blobVerified(hexSum) {
		t.Fatal("a kept archive is not remembered as verified")
	}
	a, err := s.Open(hexSum)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(a)
	a.Close()
	if string(got) != string(data) {
		t.Fatal("the archive reads other bytes")
	}

	// Damage it in place, keeping its size, and make its mtime look old
	// but different from the one remembered.
	w, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteAt([]byte("X"), 1<<20)
	w.Close()
	old := time.Now().Add(-time.Hour)
	os.Chtimes(p, old, old)
	_, err = s.Open(hexSum)
	var ce *CorruptError
	if !errors.As(err, &ce) || !ce.Removed {
		t.Fatalf("opening a damaged archive: %v, want a *CorruptError that removed it", err)
	}
	if c.Has("sha256:" + hexSum) {
		t.Fatal("the damaged archive is still in the cache")
	}
	if _, err := s.Keep(f.Name(), "abc"); !errors.Is(err, ErrBadDigest) {
		t.Fatalf("Keep with a malformed sum: %v", err)
	}
}
