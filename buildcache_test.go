package stamp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/test/harness"
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

// The keys of the signed shared cache are read, and their flags checked,
// before the build: a key of the wrong kind or a flag without the registry
// it works on is a usage error naming the flag and the file.
func TestCacheKeysAreCheckedBeforeTheBuild(t *testing.T) {
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k := harness.NewSigningKey(t, t.TempDir(), "ci")
	const reg = "reg.invalid/stamp-cache"
	for _, tc := range []struct {
		o    Options
		says string
	}{
		{Options{CacheSign: k.Private}, "give --cache-to"},
		{Options{CacheTrust: []string{k.Public}}, "give --cache-from"},
		{Options{CacheTo: reg, CacheSign: k.Public}, "--cache-sign: signing key " + k.Public},
		{Options{CacheFrom: reg, CacheTrust: []string{k.Public, k.Private}}, "--cache-trust: trusted key " + k.Private},
		{Options{CacheFrom: reg, CacheTrust: []string{k.Public + ".missing"}}, "--cache-trust: trusted key " + k.Public + ".missing"},
	} {
		_, err := tc.o.openBuildCache(c)
		if !IsUsage(err) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%+v: %v; want a usage error saying %q", tc.o, err, tc.says)
		}
	}
	o := Options{CacheFrom: reg, CacheTo: reg, CacheSign: k.Private, CacheTrust: []string{k.Public}}
	bc, err := o.openBuildCache(c)
	if err != nil {
		t.Fatal(err)
	}
	id := bc.shared.opts.Signer.KeyID()
	if !bc.shared.opts.Trust.Trusts(id) {
		t.Errorf("the trust set does not hold the signer's public key %s", id)
	}

	// Under --cache-trust a record in the local cache is believed if this
	// machine made it or a trusted signature was checked when it was pulled.
	for _, tc := range []struct {
		pulled *cache.Pulled
		want   bool
	}{
		{nil, true},
		{&cache.Pulled{From: reg + ":x", Signer: id}, true},
		{&cache.Pulled{From: reg + ":x"}, false},
		{&cache.Pulled{From: reg + ":x", Signer: "sha256:" + strings.Repeat("0", 64)}, false},
	} {
		if got := bc.shared.believe(&cache.Record{Kind: "output", Subject: "s", Pulled: tc.pulled}); got != tc.want {
			t.Errorf("believe(pulled %+v) = %v", tc.pulled, got)
		}
	}
	untrusting, err := (&Options{CacheFrom: reg}).openBuildCache(c)
	if err != nil {
		t.Fatal(err)
	}
	if !untrusting.shared.believe(&cache.Record{Pulled: &cache.Pulled{From: reg + ":x"}}) {
		t.Error("without --cache-trust a pulled record is not believed")
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

// A shared cache that does not answer costs a build one round of retries,
// not one per record: after the first failure it is asked nothing more.
func TestSharedCacheDownIsAskedOnce(t *testing.T) {
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"),
		cache.Options{Retry: cache.Retry{Attempts: 2, Backoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String() + "/stamp-cache"
	l.Close()
	log, hook := logtest.NewNullLogger()
	bc, err := (&Options{CacheFrom: gone, CacheTo: gone, Log: log}).openBuildCache(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		if r := bc.shared.pull(ctx, "output", "s", cache.KeyOf([]cache.Part{{Name: "n", Digest: textDigest(fmt.Sprint(i))}})); r != nil {
			t.Fatal("a record from nowhere")
		}
	}
	d, err := c.Put(ctx, strings.NewReader("x"), "")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		parts := []cache.Part{{Name: "x", Digest: d}}
		bc.shared.push(ctx, &cache.Record{Kind: "output", Key: cache.KeyOf(parts), Subject: "s", Parts: parts})
	}
	var said []string
	for _, e := range hook.AllEntries() {
		said = append(said, e.Message)
	}
	all := strings.Join(said, "\n")
	if n := strings.Count(all, "ignoring the shared"); n != 1 || strings.Count(all, "asks it for nothing more") != 1 {
		t.Errorf("%d pulls tried of three:\n%s", n, all)
	}
	if n := strings.Count(all, "cannot share"); n != 1 || strings.Count(all, "shares nothing more") != 1 {
		t.Errorf("%d pushes tried of three:\n%s", n, all)
	}
}

// TestWorthKeeping holds the phase cache's choice to what the layers say:
// packages keep a phase wherever they are, a tarball keeps it unless a host
// process runs on the tree after it, and files alone do not.
func TestWorthKeeping(t *testing.T) {
	phaseOf := func(ls ...layers.Layer) phase {
		ph := phase{name: "customize"}
		for _, l := range ls {
			ph.steps = append(ph.steps, step{label: l.Kind(), layer: l})
		}
		return ph
	}
	for _, tc := range []struct {
		name string
		ph   phase
		want bool
	}{
		{"files", phaseOf(&layers.Files{}), false},
		{"tarball", phaseOf(&layers.Tarball{}, &layers.Files{}), true},
		{"tarball then hook", phaseOf(&layers.Tarball{}, &layers.Hook{}), false},
		{"hook then tarball", phaseOf(&layers.Hook{}, &layers.Tarball{}), true},
		{"tarball then run", phaseOf(&layers.Tarball{}, &layers.Run{}), false},
		{"debs then hook", phaseOf(&layers.Debs{}, &layers.Hook{}), true},
		{"run then debs", phaseOf(&layers.Run{}, &layers.Debs{}), true},
		{"images", phaseOf(&layers.Images{Into: layers.IntoContainerd}), false},
	} {
		if got := worthKeeping(tc.ph); got != tc.want {
			t.Errorf("%s: worthKeeping = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestKeptSteps holds which tree of a phase the cache keeps: after the
// last package install when only layers quick to redo follow it, else the
// whole phase when it is worth keeping, else none.
func TestKeptSteps(t *testing.T) {
	phaseOf := func(ls ...layers.Layer) phase {
		ph := phase{name: "customize"}
		for i, l := range ls {
			ph.steps = append(ph.steps, step{label: l.Kind(), layer: l, index: i})
		}
		return ph
	}
	for _, tc := range []struct {
		name string
		ph   phase
		want int
	}{
		{"files", phaseOf(&layers.Files{}), 0},
		{"debs", phaseOf(&layers.Debs{}), 1},
		{"debs then files", phaseOf(&layers.Debs{}, &layers.Files{}), 1},
		{"debs, debs, files, units", phaseOf(&layers.Debs{}, &layers.Debs{}, &layers.Files{}, &layers.Systemd{}), 2},
		{"debs then hook", phaseOf(&layers.Debs{}, &layers.Hook{}), 1},
		{"debs then tarball", phaseOf(&layers.Debs{}, &layers.Tarball{}), 2},
		{"files then debs", phaseOf(&layers.Files{}, &layers.Debs{}), 2},
		{"tarball then files", phaseOf(&layers.Tarball{}, &layers.Files{}), 2},
	} {
		if got := keptSteps(tc.ph); got != tc.want {
			t.Errorf("%s: keptSteps = %d, want %d", tc.name, got, tc.want)
		}
	}
	// The base is kept whole: its hooks have no place in a recipe's layers.
	base := phase{name: "base", steps: []step{{label: "base.debs", layer: &layers.Debs{}, index: -1}, {label: "base.post[0]", layer: &layers.Hook{}, index: -1}}}
	if got := keptSteps(base); got != 2 {
		t.Errorf("base.debs then a hook: keptSteps = %d, want 2", got)
	}
}
