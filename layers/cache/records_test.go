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
