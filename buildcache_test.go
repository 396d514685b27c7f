package stamp

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/layers/cache"
)

func TestCacheRefsAreCheckedBeforeTheBuild(t *testing.T) {
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []Options{{CacheFrom: "reg.invalid/cache:tag"}, {CacheTo: "Not A Ref"}} {
		_, err := o.openBuildCache(c)
		if !IsUsage(err) || !strings.Contains(err.Error(), "--cache-") {
			t.Errorf("%+v: %v", o, err)
		}
	}
	o := Options{CacheFrom: "reg.invalid/stamp-cache", CacheTo: "reg.invalid/stamp-cache", NoCache: true}
	bc, err := o.openBuildCache(c)
	if err != nil || bc.shared == nil || bc.read || bc.write {
		t.Fatalf("%+v, %v", bc, err)
	}
}

// A record from a shared registry is as trusted as whoever could push it,
// but no name in it may lead out of the output directory.
func TestRestoreRefusesNamesOutsideStaging(t *testing.T) {
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	d, err := c.Put(ctx, strings.NewReader("disk"), "")
	if err != nil {
		t.Fatal(err)
	}
	bc := &buildCache{c: c, log: (&Options{}).log()}
	out := t.TempDir()
	staging := filepath.Join(out, "staging")
	if err := os.Mkdir(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		files []string
		blob  string
	}{
		{[]string{"../escape.raw"}, "../escape.raw"},
		{[]string{"../escape.raw"}, "node.raw"},
		{[]string{"/etc/passwd"}, "node.raw"},
		{[]string{"sub/node.raw"}, "sub/node.raw"},
		{[]string{"node.raw", "other.raw"}, "node.raw"},
	} {
		data, _ := json.Marshal(outputData{Files: tc.files})
		parts := []cache.Part{{Name: "x", Digest: d}}
		r := &cache.Record{Kind: recordOutput, Key: cache.KeyOf(parts), Parts: parts, Data: data,
			Blobs: []cache.RecordBlob{{Name: tc.blob, Digest: d, Size: 4}}}
		if _, err := bc.restoreOutput(ctx, r, staging); !errors.Is(err, cache.ErrBadRecord) {
			t.Errorf("files %q, blob %q: %v", tc.files, tc.blob, err)
		}
	}
	if ents, _ := os.ReadDir(out); len(ents) != 1 {
		t.Errorf("something was written beside staging: %v", ents)
	}
}
