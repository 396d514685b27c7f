package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// putRecord files a record of kind "output" for subject naming blobs, and
// inputs by its parts.
func putRecord(t *testing.T, c *Cache, subject string, blobs []string, inputs ...string) *Record {
	t.Helper()
	parts := []Part{{"subject", "sha256:" + strings.Repeat("0", 63) + fmt.Sprint(len(subject)%10)}, {"name", subject}}
	for i, in := range inputs {
		parts = append(parts, Part{fmt.Sprintf("input %d", i), in})
	}
	r := &Record{Kind: "output", Key: KeyOf(parts), Subject: subject, Parts: parts}
	for i, b := range blobs {
		r.Blobs = append(r.Blobs, RecordBlob{Name: fmt.Sprint(i), Digest: b})
	}
	if err := c.PutRecord(r); err != nil {
		t.Fatal(err)
	}
	return r
}

func putBlob(t *testing.T, c *Cache, data []byte) string {
	t.Helper()
	d, err := c.Put(context.Background(), bytes.NewReader(data), "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func setUsed(t *testing.T, c *Cache, r *Record, when time.Time) {
	t.Helper()
	p, err := c.recordPath(r.Kind, r.Key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, when, when); err != nil {
		t.Fatal(err)
	}
}

// Prune keeps what builds used lately: a record looked up or filed within
// KeepFor with every blob it names, by its blobs or by its parts (an
// input), and a blob no record names that was stored within KeepFor. It
// removes the rest, the pointers and stat entries left dangling, and every
// temp file.
func TestPruneKeepsWhatWasUsed(t *testing.T) {
	ctx := context.Background()
	c := openCache(t, Options{})
	input := putBlob(t, c, []byte("a base tarball"))
	oldOut := putBlob(t, c, []byte("last week's disk"))
	oldOrphan := putBlob(t, c, []byte("an input no build names"))
	remember := func(d string) {
		h, _ := ParseDigest(d)
		c.rememberWritten(h)
		if !c.blobVerified(h) {
			t.Fatalf("%s is not remembered as verified", d)
		}
	}
	remember(oldOut)
	oldRec := putRecord(t, c, "node/old", []string{oldOut})
	used := putRecord(t, c, "node/raw", nil, input)
	// Blob ages are ctimes, which nothing can set back: wait past KeepFor.
	const keepFor = 1500 * time.Millisecond
	time.Sleep(keepFor + 100*time.Millisecond)
	out := putBlob(t, c, []byte("today's disk"))
	remember(out)
	freshOrphan := putBlob(t, c, []byte("an input fetched for --offline"))
	current := putRecord(t, c, "node/qcow2", []string{out})
	week := time.Now().Add(-7 * 24 * time.Hour)
	setUsed(t, c, oldRec, week)
	setUsed(t, c, used, week)
	// A lookup is a use.
	if r, err := c.Record(used.Kind, used.Key); r == nil || err != nil {
		t.Fatalf("lookup: %v %v", r, err)
	}
	if err := os.WriteFile(filepath.Join(c.Dir(), "tmp", "blob-partial"), []byte("partial"), 0o600); err != nil {
		t.Fatal(err)
	}

	dry, err := c.Prune(ctx, PruneOptions{KeepFor: keepFor, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(blobNames(t, c)) != 5 {
		t.Fatalf("a dry run removed blobs: %v", blobNames(t, c))
	}
	rep, err := c.Prune(ctx, PruneOptions{KeepFor: keepFor})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != 1 || rep.Blobs != 2 || rep.KeptRecords != 2 || rep.KeptBlobs != 3 || rep.Freed <= 0 {
		t.Fatalf("report %+v", rep)
	}
	if dry.Records != rep.Records || dry.Blobs != rep.Blobs || dry.Kept != rep.Kept {
		t.Fatalf("the dry run said %+v, the prune did %+v", dry, rep)
	}
	for _, d := range []string{input, out, freshOrphan} {
		if !c.Has(d) {
			t.Errorf("%s is gone", d)
		}
	}
	for _, d := range []string{oldOut, oldOrphan} {
		if c.Has(d) {
			t.Errorf("%s is still there", d)
		}
	}
	for _, r := range []*Record{used, current} {
		if got, err := c.Record(r.Kind, r.Key); got == nil || err != nil {
			t.Errorf("record of %s: %v %v", r.Subject, got, err)
		}
	}
	if got, _ := c.Record(oldRec.Kind, oldRec.Key); got != nil {
		t.Error("last week's record is still there")
	}
	if _, err := os.Stat(c.lastPath(oldRec.Kind, oldRec.Subject)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the pointer to last week's record: %v", err)
	}
	if c.LastRecord(current.Kind, current.Subject) == nil {
		t.Error("the pointer to today's record is gone")
	}
	if got := tmpNames(t, c); len(got) != 0 {
		t.Errorf("temp files left: %v", got)
	}
	// A kept blob is still remembered as verified; a removed one is not.
	if h, _ := ParseDigest(out); !c.blobVerified(h) {
		t.Error("the kept output is no longer remembered as verified")
	}
	if h, _ := ParseDigest(oldOut); fileExists(c.statKey(c.blobPath(h))) {
		t.Error("the removed blob's stat entry is left")
	}

	// KeepFor zero keeps nothing.
	if rep, err := c.Prune(ctx, PruneOptions{}); err != nil || rep.KeptRecords != 0 || rep.KeptBlobs != 0 || len(blobNames(t, c)) != 0 {
		t.Fatalf("pruning all: %+v %v, left %v", rep, err, blobNames(t, c))
	}
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// With MaxSize, the records used longest ago go first, whatever their age,
// and no older record is kept in place of one that did not fit.
func TestPruneMaxSize(t *testing.T) {
	ctx := context.Background()
	c := openCache(t, Options{})
	var recs []*Record
	var blobs []string
	now := time.Now()
	for i, n := range []int{64 << 10, 256 << 10, 16 << 10} {
		d := putBlob(t, c, randomBytes(uint64(i), n))
		blobs = append(blobs, d)
		recs = append(recs, putRecord(t, c, fmt.Sprintf("r%d", i), []string{d}))
		setUsed(t, c, recs[i], now.Add(-time.Duration(i)*time.Hour))
	}
	rep, err := c.Prune(ctx, PruneOptions{KeepFor: 24 * time.Hour, MaxSize: 200 << 10})
	if err != nil {
		t.Fatal(err)
	}
	if rep.KeptRecords != 1 || rep.Records != 2 || rep.Kept > 200<<10 {
		t.Fatalf("report %+v", rep)
	}
	if !c.Has(blobs[0]) || c.Has(blobs[1]) || c.Has(blobs[2]) {
		t.Fatalf("left %v", blobNames(t, c))
	}
}

// A prune waits until no other process has the cache open.
func TestPruneWaitsForBuilds(t *testing.T) {
	c := openCache(t, Options{})
	build, err := Open(c.Dir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 600*time.Millisecond)
	defer cancel()
	if _, err := c.Prune(ctx, PruneOptions{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("prune beside an open cache: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Prune(context.Background(), PruneOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("the prune did not wait: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	build.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// A read-only cache cannot be pruned.
	ro := &Cache{dir: c.dir}
	if _, err := ro.Prune(context.Background(), PruneOptions{}); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("read-only: %v", err)
	}
}
