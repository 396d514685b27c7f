package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
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

// A host file kept in the cache is copied once: kept again unchanged, it is
// not read, and a blob damaged since is copied anew.
func TestKeepFile(t *testing.T) {
	c := openCache(t, Options{})
	data := randomBytes(9, 2<<20)
	host := filepath.Join(t.TempDir(), "kubelet")
	if err := os.WriteFile(host, data, 0o755); err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256(data)
	want := hex.EncodeToString(h[:])
	kubeadm := filepath.Join(t.TempDir(), "kubeadm")
	adm := randomBytes(10, 3<<20)
	if err := os.WriteFile(kubeadm, adm, 0o755); err != nil {
		t.Fatal(err)
	}
	// Past the racy window, so that the host file is remembered.
	time.Sleep(racyWindow + 100*time.Millisecond)

	// A file the build's key hashed is copied and filed under that sum; one
	// changed since is hashed again.
	if _, err := c.HashFile(kubeadm); err != nil {
		t.Fatal(err)
	}
	admSum := sha256.Sum256(adm)
	admWant := hex.EncodeToString(admSum[:])
	if sum, _, err := c.KeepFile(context.Background(), kubeadm); err != nil || sum != admWant {
		t.Fatalf("KeepFile after HashFile: %s %v", sum, err)
	}
	if got, err := os.ReadFile(c.blobPath(admWant)); err != nil || !bytes.Equal(got, adm) || !c.blobVerified(admWant) {
		t.Fatalf("the blob of a hashed host file: %v", err)
	}
	adm[0] ^= 1
	if err := os.WriteFile(kubeadm, adm, 0o755); err != nil {
		t.Fatal(err)
	}
	admSum = sha256.Sum256(adm)
	if sum, _, err := c.KeepFile(context.Background(), kubeadm); err != nil || sum != hex.EncodeToString(admSum[:]) {
		t.Fatalf("KeepFile of a file changed since HashFile: %s %v", sum, err)
	}

	sum, size, err := c.KeepFile(context.Background(), host)
	if err != nil || sum != want || size != int64(len(data)) {
		t.Fatalf("KeepFile: %s %d %v, want %s", sum, size, err, want)
	}
	first, _ := os.Stat(c.blobPath(want))
	if sum, _, err := c.KeepFile(context.Background(), host); err != nil || sum != want {
		t.Fatalf("KeepFile again: %s %v", sum, err)
	}
	if again, _ := os.Stat(c.blobPath(want)); !os.SameFile(first, again) {
		t.Fatal("an unchanged host file was copied again")
	}

	w, err := os.OpenFile(c.blobPath(want), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	w.WriteAt([]byte("X"), 10)
	w.Close()
	if sum, _, err := c.KeepFile(context.Background(), host); err != nil || sum != want {
		t.Fatalf("KeepFile after damage: %s %v", sum, err)
	}
	if got, _ := os.ReadFile(c.blobPath(want)); !bytes.Equal(got, data) {
		t.Fatal("the damaged blob was not copied anew")
	}
}
