package cache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// These tests do not run in parallel: one of them changes the process umask.

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func randomBytes(seed uint64, n int) []byte {
	var key [32]byte
	key[0] = byte(seed)
	b := make([]byte, n)
	rand.NewChaCha8(key).Read(b)
	return b
}

func openCache(t testing.TB, opts Options) *Cache {
	t.Helper()
	c, err := Open(filepath.Join(t.TempDir(), "cache"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// names lists a cache subdirectory, sorted.
func names(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func blobNames(t testing.TB, c *Cache) []string {
	return names(t, filepath.Join(c.Dir(), "blobs", "sha256"))
}

func tmpNames(t testing.TB, c *Cache) []string {
	return names(t, filepath.Join(c.Dir(), "tmp"))
}

func readAll(t testing.TB, c *Cache, digest string) ([]byte, error) {
	t.Helper()
	rc, err := c.Open(digest)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func TestPutOpenRoundTrip(t *testing.T) {
	c := openCache(t, Options{})
	ctx := context.Background()
	data := randomBytes(1, 1<<20+17)
	want := sum(data)

	if c.Has(want) {
		t.Fatal("empty cache has the blob")
	}
	got, err := c.Put(ctx, bytes.NewReader(data), "")
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("Put = %s, want %s", got, want)
	}
	if !c.Has(want) || !c.Has(strings.TrimPrefix(want, "sha256:")) {
		t.Fatal("Has = false after Put")
	}
	p, err := c.Path(want)
	if err != nil {
		t.Fatal(err)
	}
	if p != filepath.Join(c.Dir(), "blobs", "sha256", strings.TrimPrefix(want, "sha256:")) {
		t.Errorf("Path = %s", p)
	}
	back, err := readAll(t, c, want)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, data) {
		t.Fatal("content read back differs")
	}
	if err := c.Verify(want); err != nil {
		t.Fatal(err)
	}
	// Putting the same content again, pinned, succeeds and changes nothing.
	if got, err := c.Put(ctx, bytes.NewReader(data), want); err != nil || got != want {
		t.Fatalf("second Put = %s, %v", got, err)
	}
	if n := blobNames(t, c); len(n) != 1 {
		t.Errorf("blobs = %v", n)
	}
	if n := tmpNames(t, c); len(n) != 0 {
		t.Errorf("temp files left: %v", n)
	}
	// The empty blob is a blob like any other.
	if got, err := c.Put(ctx, bytes.NewReader(nil), ""); err != nil || got != sum(nil) {
		t.Fatalf("empty Put = %s, %v", got, err)
	}
}

func TestMissingBlob(t *testing.T) {
	c := openCache(t, Options{})
	d := sum([]byte("absent"))
	if _, err := c.Open(d); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), d) {
		t.Errorf("Open missing = %v", err)
	}
	if _, err := c.Path(d); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Path missing = %v", err)
	}
	if err := c.Verify(d); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Verify missing = %v", err)
	}
	if _, err := c.Open("sha256:nothex"); !errors.Is(err, ErrBadDigest) {
		t.Errorf("Open malformed = %v", err)
	}
	if c.Has("md5:abc") {
		t.Error("Has malformed = true")
	}
}

func TestPutMismatchStoresNothing(t *testing.T) {
	c := openCache(t, Options{})
	data := []byte("the real content\n")
	wrong := sum([]byte("other content\n"))
	_, err := c.Put(context.Background(), bytes.NewReader(data), wrong)
	var me *MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("Put = %v, want *MismatchError", err)
	}
	if me.Want != wrong || me.Got != sum(data) {
		t.Errorf("MismatchError = %+v", me)
	}
	if !strings.Contains(err.Error(), "sha256 mismatch") || !strings.Contains(err.Error(), wrong) {
		t.Errorf("message %q", err)
	}
	if n := blobNames(t, c); len(n) != 0 {
		t.Errorf("blobs after mismatch: %v", n)
	}
	if n := tmpNames(t, c); len(n) != 0 {
		t.Errorf("temp files after mismatch: %v", n)
	}
	if c.Has(wrong) || c.Has(sum(data)) {
		t.Error("Has after mismatch")
	}
	if _, err := c.Put(context.Background(), bytes.NewReader(data), "sha256:short"); !errors.Is(err, ErrBadDigest) {
		t.Errorf("Put malformed want = %v", err)
	}
}

// corruptBlob flips one byte of a stored blob in place.
func corruptBlob(t *testing.T, c *Cache, digest string) {
	t.Helper()
	p, err := c.Path(digest)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCorruptBlob(t *testing.T) {
	c := openCache(t, Options{})
	ctx := context.Background()
	data := randomBytes(2, 300<<10)
	d, err := c.Put(ctx, bytes.NewReader(data), "")
	if err != nil {
		t.Fatal(err)
	}

	corruptBlob(t, c, d)
	rc, err := c.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(rc)
	rc.Close()
	var ce *CorruptError
	if !errors.As(err, &ce) {
		t.Fatalf("reading corrupt blob: err = %v, want *CorruptError", err)
	}
	if len(back) != len(data) {
		t.Errorf("read %d bytes before the error, want all %d", len(back), len(data))
	}
	if ce.Digest != d || !ce.Removed || !strings.Contains(err.Error(), d) {
		t.Errorf("CorruptError = %+v (%v)", ce, err)
	}
	if c.Has(d) {
		t.Error("corrupt blob still present")
	}

	// A fresh Put heals it; Verify then finds the same damage again.
	if _, err := c.Put(ctx, bytes.NewReader(data), d); err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(d); err != nil {
		t.Fatalf("Verify good blob: %v", err)
	}
	corruptBlob(t, c, d)
	if err := c.Verify(d); !errors.As(err, &ce) || ce.Digest != d {
		t.Fatalf("Verify corrupt blob = %v", err)
	}
	if c.Has(d) {
		t.Error("Verify left the corrupt blob")
	}

	// A truncated blob is corrupt too.
	if _, err := c.Put(ctx, bytes.NewReader(data), d); err != nil {
		t.Fatal(err)
	}
	p, _ := c.Path(d)
	if err := os.Truncate(p, 10); err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(d); !errors.As(err, &ce) {
		t.Fatalf("Verify truncated blob = %v", err)
	}
}

func TestConcurrentPut(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	data := randomBytes(3, 2<<20)
	want := sum(data)
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	got := make([]string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each worker opens its own Cache, as separate processes would,
			// including the race to create the directories.
			c, err := Open(dir, Options{})
			if err != nil {
				errs[i] = err
				return
			}
			got[i], errs[i] = c.Put(context.Background(), bytes.NewReader(data), want)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || got[i] != want {
			t.Errorf("worker %d: %s, %v", i, got[i], errs[i])
		}
	}
	c, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Verify(want); err != nil {
		t.Fatal(err)
	}
	if b := blobNames(t, c); len(b) != 1 {
		t.Errorf("blobs = %v", b)
	}
	if tmp := tmpNames(t, c); len(tmp) != 0 {
		t.Errorf("temp files left: %v", tmp)
	}
}

func TestPutCancelled(t *testing.T) {
	c := openCache(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	go func() {
		pw.Write(randomBytes(4, 1000))
		cancel()
		// The pipe blocks here until the reader gives up; the reader is
		// stopped by the context, not by the writer.
		pw.Write([]byte("more"))
	}()
	res := make(chan error, 1)
	go func() {
		_, err := c.Put(ctx, pr, "")
		res <- err
	}()
	var err error
	select {
	case err = <-res:
	case <-time.After(10 * time.Second):
		pr.CloseWithError(errors.New("test gave up"))
		t.Fatalf("Put did not stop when its context was cancelled: %v", <-res)
	}
	pr.Close()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Put = %v, want context.Canceled", err)
	}
	if b := blobNames(t, c); len(b) != 0 {
		t.Errorf("blobs = %v", b)
	}
	if tmp := tmpNames(t, c); len(tmp) != 0 {
		t.Errorf("temp files left: %v", tmp)
	}
}

func TestModesUnderUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)

	base := t.TempDir()
	dir := filepath.Join(base, "xdg", "stamp")
	c, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Put(context.Background(), strings.NewReader("readable by all\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.Path(d)
	checks := []struct {
		path string
		mode fs.FileMode
	}{
		{filepath.Join(base, "xdg"), 0o755}, // parents stamp creates count too
		{dir, 0o755},
		{filepath.Join(dir, "blobs"), 0o755},
		{filepath.Join(dir, "blobs", "sha256"), 0o755},
		{filepath.Join(dir, "tmp"), 0o755},
		{p, 0o644},
	}
	for _, ck := range checks {
		fi, err := os.Stat(ck.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != ck.mode {
			t.Errorf("%s: mode %o, want %o", ck.path, fi.Mode().Perm(), ck.mode)
		}
	}

	// A cache directory made by hand under the tight umask is widened on Open.
	tight := filepath.Join(base, "tight")
	if err := os.MkdirAll(filepath.Join(tight, "blobs", "sha256"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(tight, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{tight, filepath.Join(tight, "blobs"), filepath.Join(tight, "blobs", "sha256")} {
		if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o755 {
			t.Errorf("%s: %v %v, want mode 755", p, fi.Mode(), err)
		}
	}
}

func TestOpenSweepsStaleTempFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	if _, err := Open(dir, Options{}); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, "tmp", "blob-stale")
	fresh := filepath.Join(dir, "tmp", "blob-fresh")
	for _, p := range []string{stale, fresh} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	c, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(tmpNames(t, c)); got != "[blob-fresh]" {
		t.Errorf("temp files after Open: %s", got)
	}
}

func TestOpenErrors(t *testing.T) {
	if _, err := Open("", Options{}); err == nil {
		t.Error("Open(\"\") succeeded")
	}
	f := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(f, Options{}); err == nil || !strings.Contains(err.Error(), f) {
		t.Errorf("Open on a file = %v", err)
	}
}

func TestImport(t *testing.T) {
	c := openCache(t, Options{})
	ctx := context.Background()
	src := filepath.Join(t.TempDir(), "input.bin")
	data := randomBytes(5, 70000)
	if err := os.WriteFile(src, data, 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := c.Import(ctx, src)
	if err != nil || d != sum(data) {
		t.Fatalf("Import = %s, %v", d, err)
	}
	p, _ := c.Path(d)
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("imported blob mode %v %v", fi.Mode(), err)
	}
	// Importing again finds the blob by hash and does not rewrite it.
	before, _ := os.Stat(p)
	if d2, err := c.Import(ctx, src); err != nil || d2 != d {
		t.Fatalf("second Import = %s, %v", d2, err)
	}
	after, _ := os.Stat(p)
	if !os.SameFile(before, after) {
		t.Error("second Import replaced the blob")
	}
	if _, err := c.Import(ctx, filepath.Dir(src)); err == nil {
		t.Error("Import of a directory succeeded")
	}
	if _, err := c.Import(ctx, src+".missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Import missing = %v", err)
	}
}

func TestParseDigest(t *testing.T) {
	h := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		in, want string
	}{
		{"sha256:" + h, h},
		{h, h},
		{"sha256:" + strings.ToUpper(h), h},
	} {
		if got, err := ParseDigest(tc.in); err != nil || got != tc.want {
			t.Errorf("ParseDigest(%q) = %q, %v", tc.in, got, err)
		}
	}
	for _, in := range []string{
		"",
		"sha256:",
		"sha256:" + h[:63],
		"sha256:" + h + "0",
		"sha512:" + h,
		"SHA256:" + h,
		"sha256:" + h[:63] + "g",
		" " + h[1:],
		":" + h,
	} {
		if _, err := ParseDigest(in); !errors.Is(err, ErrBadDigest) {
			t.Errorf("ParseDigest(%q) = %v, want ErrBadDigest", in, err)
		}
	}
}

func TestDefaultDir(t *testing.T) {
	env := func(m map[string]string) func(string) string {
		return func(k string) string { return m[k] }
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"XDG_CACHE_HOME": "/x", "HOME": "/h"}, "/x/stamp"},
		{map[string]string{"XDG_CACHE_HOME": "rel", "HOME": "/h"}, "/h/.cache/stamp"},
		{map[string]string{"HOME": "/h"}, "/h/.cache/stamp"},
	} {
		if got, err := DefaultDir(env(tc.env)); err != nil || got != tc.want {
			t.Errorf("DefaultDir(%v) = %q, %v", tc.env, got, err)
		}
	}
	if _, err := DefaultDir(env(nil)); err == nil {
		t.Error("DefaultDir with no HOME succeeded")
	}
}

func BenchmarkPut(b *testing.B) {
	data := randomBytes(6, 100<<20)
	c := openCache(b, Options{})
	ctx := context.Background()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := c.Put(ctx, bytes.NewReader(data), ""); err != nil {
			b.Fatal(err)
		}
	}
}

func TestImportRemembersUnchangedFiles(t *testing.T) {
	c, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "input")
	os.WriteFile(p, []byte("one"), 0o644)
	// A file written a moment ago is not remembered (its timestamps tick coarsely).
	if _, err := c.Import(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.statKey(p)); err == nil {
		t.Fatal("a file changed within the racy window was remembered")
	}
	time.Sleep(racyWindow + 100*time.Millisecond)
	d1, err := c.Import(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.statKey(p)); err != nil {
		t.Fatal("no stat record written")
	}
	d2, _ := c.Import(context.Background(), p)
	if d1 != d2 {
		t.Fatal("same file, different digest")
	}
	// Same size, even the same mtime: ctime still moves, so the edit is seen.
	fi, _ := os.Stat(p)
	os.WriteFile(p, []byte("two"), 0o644)
	os.Chtimes(p, fi.ModTime(), fi.ModTime())
	d3, err := c.Import(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	if d3 == d1 {
		t.Fatal("an edited file kept its old digest")
	}
}
