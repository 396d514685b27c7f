package cache

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs/hashio"
)

func TestRecordRoundTrip(t *testing.T) {
	c := openCache(t, Options{})
	ctx := context.Background()
	d, err := c.Put(ctx, strings.NewReader("disk"), "")
	if err != nil {
		t.Fatal(err)
	}
	parts := []Part{{"stamp", "sha256:" + strings.Repeat("1", 64)}, {"recipe", "sha256:" + strings.Repeat("2", 64)}}
	key := KeyOf(parts)
	if r, err := c.Record("output", key); r != nil || err != nil {
		t.Fatalf("empty cache: %v, %v", r, err)
	}
	r := &Record{Kind: "output", Key: key, Subject: "node/raw", Parts: parts, Blobs: []RecordBlob{{Name: "node.raw", Digest: d, Size: 4}}}
	if err := c.PutRecord(r); err != nil {
		t.Fatal(err)
	}
	got, err := c.Record("output", key)
	if err != nil || got == nil || got.Blobs[0].Digest != d {
		t.Fatalf("got %+v, %v", got, err)
	}
	if last := c.LastRecord("output", "node/raw"); last == nil || last.Key != key {
		t.Fatalf("last record: %+v", last)
	}
	// Another kind under the same key is a miss, not this record.
	if r, err := c.Record("sealed", key); r != nil || err != nil {
		t.Fatalf("other kind: %v, %v", r, err)
	}

	// What changed since the last record is named part by part.
	now := []Part{{"stamp", parts[0].Digest}, {"recipe", "sha256:" + strings.Repeat("3", 64)}, {"input base.tarball", parts[0].Digest}}
	ch := Changed(got, now)
	if len(ch) != 2 || !strings.HasPrefix(ch[0], "recipe changed (333333333333, was 222222222222)") || ch[1] != "input base.tarball is new" {
		t.Fatalf("changed: %q", ch)
	}
}

func TestRecordRefusesWhatItIsNot(t *testing.T) {
	c := openCache(t, Options{})
	parts := []Part{{"a", "sha256:" + strings.Repeat("1", 64)}}
	key := KeyOf(parts)
	missing := &Record{Kind: "output", Key: key, Parts: parts, Blobs: []RecordBlob{{Name: "x", Digest: "sha256:" + strings.Repeat("f", 64)}}}
	if err := c.PutRecord(missing); !errors.Is(err, ErrBadRecord) {
		t.Fatalf("record naming a missing blob: %v", err)
	}
	// A record filed under a key its parts do not hash to (edited, or
	// copied from elsewhere) is refused on read.
	other := KeyOf([]Part{{"a", "sha256:" + strings.Repeat("2", 64)}})
	p, _ := c.recordPath("output", other)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	forged := `{"kind":"output","key":"` + other + `","parts":[{"name":"a","digest":"sha256:` + strings.Repeat("1", 64) + `"}],"blobs":[]}`
	if err := os.WriteFile(p, []byte(forged), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Record("output", other); r != nil || !errors.Is(err, ErrBadRecord) {
		t.Fatalf("forged record: %v, %v", r, err)
	}
	if err := os.WriteFile(p, []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Record("output", other); r != nil || !errors.Is(err, ErrBadRecord) {
		t.Fatalf("torn record: %v, %v", r, err)
	}
}

func TestBlobsKeepHoles(t *testing.T) {
	c := openCache(t, Options{})
	ctx := context.Background()
	// 8 MiB of zeros with a little data in the middle and at the end.
	img := make([]byte, 8<<20)
	copy(img[3<<20:], "boot")
	copy(img[len(img)-3:], "end")
	d, err := c.Put(ctx, bytes.NewReader(img), "")
	if err != nil {
		t.Fatal(err)
	}
	p, _ := c.Path(d)
	out := filepath.Join(t.TempDir(), "disk.raw")
	if err := c.Extract(ctx, d, out); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{p, out} {
		fi, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() != int64(len(img)) {
			t.Fatalf("%s: size %d", f, fi.Size())
		}
		if used := fi.Sys().(*syscall.Stat_t).Blocks * 512; used > 64<<10 {
			t.Errorf("%s uses %d bytes for 8 bytes of data: not sparse", f, used)
		}
	}
	back, _ := os.ReadFile(out)
	if !bytes.Equal(back, img) {
		t.Fatal("extracted blob differs")
	}
	// A blob damaged on disk is found on extraction and removed.
	if err := os.WriteFile(p, []byte("damaged"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ce *CorruptError
	if err := c.Extract(ctx, d, out); !errors.As(err, &ce) || c.Has(d) {
		t.Fatalf("damaged blob: %v (still there: %v)", err, c.Has(d))
	}
}

func TestAdoptAndRestore(t *testing.T) {
	c := openCache(t, Options{})
	ctx := context.Background()
	dir := t.TempDir()
	out := filepath.Join(dir, "disk.raw")
	if err := os.WriteFile(out, []byte("a disk image"), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := "6a4f4f0e0d5d50e1c5b1f3b8ae7a0b6f6c6e8c7b1d0e4a1c5f2b9e3d7a8c6b40" // not the content's
	if _, err := c.Adopt(ctx, out, sum); err == nil {
		// A wrong sum must not be taken on trust when a link is made...
		if c.Has(sum) {
			if err := c.Verify("sha256:" + sum); err == nil {
				t.Fatal("a file adopted under a wrong sum verifies")
			}
		}
	}
	h, _, err := hashio.File(out, false)
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.Adopt(ctx, out, h)
	if err != nil {
		t.Fatal(err)
	}
	back := filepath.Join(dir, "back.raw")
	if err := c.Restore(ctx, d, back); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(back); string(b) != "a disk image" {
		t.Fatalf("restored %q", b)
	}
	// Writing into the restored file (the same inode, or shared blocks) is
	// found on the next restore.
	if err := os.WriteFile(back, []byte("a disk IMAGE"), 0o644); err != nil {
		t.Fatal(err)
	}
	again := filepath.Join(dir, "again.raw")
	err = c.Restore(ctx, d, again)
	if p, _ := c.Path(d); err == nil {
		if b, _ := os.ReadFile(again); string(b) != "a disk image" {
			t.Fatalf("restored a changed blob (%s): %q", p, b)
		}
	} else {
		var ce *CorruptError
		if !errors.As(err, &ce) || c.Has(d) {
			t.Fatalf("changed blob: %v", err)
		}
	}
}

func TestHashFileRemembers(t *testing.T) {
	c := openCache(t, Options{})
	p := filepath.Join(t.TempDir(), "kubelet")
	if err := os.WriteFile(p, []byte("v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	// A file changed within the racy window is not remembered.
	time.Sleep(racyWindow + 100*time.Millisecond)
	a, err := c.HashFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.statKey("hash\x00" + p)); err != nil {
		t.Fatalf("the hash was not remembered: %v", err)
	}
	// Same length, same mtime: only ctime (and the stat cache's check of
	// it) tells the edit apart.
	if err := os.WriteFile(p, []byte("v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	b, err := c.HashFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatal("an edited file kept its remembered hash")
	}
}

// A blob is remembered however recently it was hard-linked (every restore
// links it, which makes its ctime new), and forgotten once written to.
func TestBlobRememberedAfterALink(t *testing.T) {
	c := openCache(t, Options{})
	d, err := c.Put(context.Background(), strings.NewReader("disk"), "")
	if err != nil {
		t.Fatal(err)
	}
	hexSum := strings.TrimPrefix(d, "sha256:")
	p := c.blobPath(hexSum)
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(p, old, old); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(p, filepath.Join(t.TempDir(), "out.raw")); err != nil {
		t.Fatal(err)
	}
	c.rememberBlob(hexSum)
	if !c.blobVerified(hexSum) {
		t.Fatal("a blob linked just now was not remembered")
	}
	if err := os.WriteFile(p, []byte("DISK"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.blobVerified(hexSum) {
		t.Fatal("a blob written to is still taken as verified")
	}
}

// An output just written and hashed by its build is adopted as verified,
// so the first rebuild restores it without hashing it again; a write into
// it afterwards is still found.
func TestAdoptedBlobIsVerified(t *testing.T) {
	c := openCache(t, Options{})
	p := filepath.Join(t.TempDir(), "out.raw")
	if err := os.WriteFile(p, []byte("disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	hexSum, _, err := hashio.File(p, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Adopt(context.Background(), p, hexSum); err != nil {
		t.Fatal(err)
	}
	if !c.blobVerified(hexSum) {
		t.Fatal("an adopted blob is not taken as verified")
	}
	if err := os.WriteFile(p, []byte("DISK"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.blobVerified(hexSum) {
		t.Fatal("an adopted blob written to through its output is still taken as verified")
	}
}

// A blob Put stores is remembered as verified, since Put hashed what it
// wrote: opening it does not hash it again. A write into it afterwards is
// still found.
func TestPutBlobIsVerified(t *testing.T) {
	c := openCache(t, Options{})
	d, err := c.Put(context.Background(), strings.NewReader("a kept tree's content"), "")
	if err != nil {
		t.Fatal(err)
	}
	hexSum := strings.TrimPrefix(d, "sha256:")
	if !c.blobVerified(hexSum) {
		t.Fatal("a blob Put stored is not taken as verified")
	}
	if err := os.Chmod(c.blobPath(hexSum), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(c.blobPath(hexSum), []byte("a kept tree's CONTENT"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.blobVerified(hexSum) {
		t.Fatal("a blob written to after Put is still taken as verified")
	}
	if _, err := c.OpenFile(d); err == nil {
		t.Fatal("OpenFile handed out a blob that no longer hashes to its name")
	}
}

// ReadBlob hands out a small blob only when it hashes to its name, and
// refuses one larger than asked for.
func TestReadBlob(t *testing.T) {
	c := openCache(t, Options{})
	d, err := c.Put(context.Background(), strings.NewReader("manifest"), "")
	if err != nil {
		t.Fatal(err)
	}
	if b, err := c.ReadBlob(d, 1<<20); err != nil || string(b) != "manifest" {
		t.Fatalf("ReadBlob: %q, %v", b, err)
	}
	if _, err := c.ReadBlob(d, 4); err == nil {
		t.Fatal("a blob over the limit was read")
	}
	p, err := c.Path(d)
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, []byte("MANIFEST"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ce *CorruptError
	if _, err := c.ReadBlob(d, 1<<20); !errors.As(err, &ce) || !ce.Removed || c.Has(d) {
		t.Fatalf("a corrupt blob: %v", err)
	}
}

// The cache syncs neither the outputs it adopts nor its records, so a crash
// may leave a blob cut short under its name, or a record empty. Each is
// found and built again, never used.
func TestWhatACrashLeaves(t *testing.T) {
	c := openCache(t, Options{})
	ctx := context.Background()
	data := bytes.Repeat([]byte("output "), 1<<16)
	out := filepath.Join(t.TempDir(), "node.raw")
	if err := os.WriteFile(out, data, 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := c.Adopt(ctx, out, strings.TrimPrefix(sum(data), "sha256:"))
	if err != nil {
		t.Fatal(err)
	}
	parts := []Part{{"stamp", "sha256:" + strings.Repeat("1", 64)}}
	key := KeyOf(parts)
	r := &Record{Kind: "output", Key: key, Subject: "node/raw", Parts: parts, Blobs: []RecordBlob{{Name: "node.raw", Digest: d, Size: int64(len(data))}}}
	if err := c.PutRecord(r); err != nil {
		t.Fatal(err)
	}

	// The blob's data lost past some point, its times kept.
	p, _ := c.Path(d)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 4096); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	var ce *CorruptError
	if f, err := c.OpenFile(d); !errors.As(err, &ce) || !ce.Removed {
		if f != nil {
			f.Close()
		}
		t.Fatalf("blob cut short: %v", err)
	}
	if r, err := c.Record("output", key); r != nil || !errors.Is(err, ErrBadRecord) {
		t.Fatalf("record of a dropped blob: %v, %v", r, err)
	}

	// A record and the subject's last pointer left empty.
	rp, _ := c.recordPath("output", key)
	for _, f := range []string{rp, c.lastPath("output", "node/raw")} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := c.Record("output", key); r != nil || !errors.Is(err, ErrBadRecord) {
		t.Fatalf("empty record: %v, %v", r, err)
	}
	if last := c.LastRecord("output", "node/raw"); last != nil {
		t.Fatalf("empty last pointer: %+v", last)
	}
}
