package share

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math/rand"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/cache/sign"
	"github.com/stamp-dev/stamp/test/harness"
)

const kind = "output"

// fastRetry tries each request twice, briefly: a registry the tests stop
// answers no better the fifth time.
var fastRetry = cache.Retry{Attempts: 2, Backoff: 10 * time.Millisecond, IdleTimeout: 2 * time.Second}

func newCache(t *testing.T) *cache.Cache {
	t.Helper()
	c, err := cache.Open(t.TempDir(), cache.Options{Retry: fastRetry})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func put(t *testing.T, c *cache.Cache, b []byte) string {
	t.Helper()
	d, err := c.Put(context.Background(), bytes.NewReader(b), "")
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// fixture fills c with a small blob and an 8 MiB one that is mostly zeros,
// as a raw disk output is, and files a record of them under a key made of
// seed.
func fixture(t *testing.T, c *cache.Cache, seed string) *cache.Record {
	t.Helper()
	small := []byte("manifest of " + seed + "\n")
	disk := make([]byte, 8<<20)
	rand.New(rand.NewSource(int64(len(seed)))).Read(disk[1<<20 : 1<<20+4096])
	copy(disk[5<<20:], seed)
	parts := []cache.Part{{Name: "recipe", Digest: put(t, c, []byte("recipe "+seed))}}
	r := &cache.Record{
		Kind:    kind,
		Key:     cache.KeyOf(parts),
		Subject: "disk.raw",
		Parts:   parts,
		Blobs: []cache.RecordBlob{
			{Name: "manifest", Digest: put(t, c, small), Size: int64(len(small))},
			{Name: "disk.raw", Digest: put(t, c, disk), Size: int64(len(disk))},
		},
		Data: json.RawMessage(`{"mode":420}`),
	}
	if err := c.PutRecord(r); err != nil {
		t.Fatal(err)
	}
	return r
}

func blob(t *testing.T, c *cache.Cache, d string) []byte {
	t.Helper()
	rc, err := c.Open(d)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pushAs uploads r from c under an arbitrary tag, with edit applied to the
// manifest first, to make the entries a broken or hostile registry serves.
func pushAs(t *testing.T, c *cache.Cache, repo, tag string, r *cache.Record, edit func(m map[string]any)) {
	t.Helper()
	pushSigned(t, c, repo, tag, r, nil, edit)
}

// pushSigned is pushAs with the entry signed by s (nil: unsigned).
func pushSigned(t *testing.T, c *cache.Cache, repo, tag string, r *cache.Record, s *sign.Signer, edit func(m map[string]any)) {
	t.Helper()
	a, err := newArtifact(c, r, s)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		var m map[string]any
		if err := json.Unmarshal(a.manifest, &m); err != nil {
			t.Fatal(err)
		}
		edit(m)
		if a.manifest, err = json.Marshal(m); err != nil {
			t.Fatal(err)
		}
	}
	img, err := partial.CompressedToImage(a)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(repo + ":" + tag)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
}

// nothingFrom fails the test if c holds a record for key or any blob of r.
func nothingFrom(t *testing.T, c *cache.Cache, key string, r *cache.Record) {
	t.Helper()
	if got, err := c.Record(kind, key); got != nil || err != nil {
		t.Errorf("cache holds record %+v (%v) for %s after a failed pull", got, err, key)
	}
	if c.LastRecord(kind, r.Subject) != nil {
		t.Errorf("cache has a latest record for %s after a failed pull", r.Subject)
	}
	for _, b := range r.Blobs {
		if c.Has(b.Digest) {
			t.Errorf("cache holds blob %s (%s) of a failed pull", b.Digest, b.Name)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	reg := harness.StartRegistry(t)
	repo := reg.Addr + "/stamp-cache"
	ctx := context.Background()
	a, b := newCache(t), newCache(t)
	r := fixture(t, a, "one")

	if err := Push(ctx, a, repo, r, Options{}); err != nil {
		t.Fatal(err)
	}
	found, err := Pull(ctx, b, repo, kind, r.Key, Options{})
	if err != nil || !found {
		t.Fatalf("Pull = %v, %v; want found", found, err)
	}
	want, err := a.Record(kind, r.Key)
	if err != nil {
		t.Fatal(err)
	}
	got, err := b.Record(kind, r.Key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Pulled == nil || got.Pulled.From != repo+":"+Tag(kind, r.Key) || got.Pulled.Signer != "" {
		t.Errorf("pulled record notes its origin as %+v", got.Pulled)
	}
	got.Pulled = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pulled record\n%+v\nwant\n%+v", got, want)
	}
	if b.LastRecord(kind, r.Subject) == nil {
		t.Error("pulled record is not its subject's latest")
	}
	for _, rb := range r.Blobs {
		if !bytes.Equal(blob(t, b, rb.Digest), blob(t, a, rb.Digest)) {
			t.Errorf("blob %s differs after the round trip", rb.Name)
		}
	}

	// The manifest is what the brief says, as the registry serves it.
	desc, err := remote.Get(mustTag(t, repo+":"+Tag(kind, r.Key)))
	if err != nil {
		t.Fatal(err)
	}
	m := desc.Manifest
	var mf struct {
		MediaType    string `json:"mediaType"`
		ArtifactType string `json:"artifactType"`
		Config       struct{ MediaType string }
		Layers       []struct{ MediaType, Digest string }
	}
	if err := json.Unmarshal(m, &mf); err != nil {
		t.Fatal(err)
	}
	if mf.MediaType != "application/vnd.oci.image.manifest.v1+json" || mf.ArtifactType != string(RecordType) ||
		mf.Config.MediaType != string(RecordType) || len(mf.Layers) != 2 ||
		mf.Layers[1].MediaType != string(BlobType) || mf.Layers[1].Digest != r.Blobs[1].Digest {
		t.Errorf("manifest %s", m)
	}

	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	if err := Push(ctx, a, repo, r, Options{Log: log}); err != nil {
		t.Fatal(err)
	}
	if e := hook.LastEntry(); e == nil || !strings.Contains(e.Message, "already has") {
		t.Errorf("second push did not say the registry has the entry: %v", e)
	}

	// A second pull into a cache that has the blobs files the record again.
	found, err = Pull(ctx, b, repo, kind, r.Key, Options{})
	if err != nil || !found {
		t.Fatalf("second Pull = %v, %v", found, err)
	}
}

func mustTag(t *testing.T, s string) name.Tag {
	t.Helper()
	ref, err := name.NewTag(s)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

func TestNoBlobs(t *testing.T) {
	reg := harness.StartRegistry(t)
	repo := reg.Addr + "/stamp-cache"
	ctx := context.Background()
	a, b := newCache(t), newCache(t)
	parts := []cache.Part{{Name: "nothing", Digest: put(t, a, []byte("x"))}}
	r := &cache.Record{Kind: "sealed", Key: cache.KeyOf(parts), Parts: parts, Blobs: []cache.RecordBlob{}}
	if err := Push(ctx, a, repo, r, Options{}); err != nil {
		t.Fatal(err)
	}
	if found, err := Pull(ctx, b, repo, "sealed", r.Key, Options{}); err != nil || !found {
		t.Fatalf("Pull = %v, %v", found, err)
	}
}

func TestMiss(t *testing.T) {
	reg := harness.StartRegistry(t)
	ctx := context.Background()
	a, b := newCache(t), newCache(t)
	unknown := cache.KeyOf([]cache.Part{{Name: "never", Digest: put(t, a, []byte("built"))}})

	// A repository nobody pushed to, then one that has other entries.
	for _, repo := range []string{reg.Addr + "/empty", reg.Addr + "/stamp-cache"} {
		if strings.HasSuffix(repo, "stamp-cache") {
			if err := Push(ctx, a, repo, fixture(t, a, "other"), Options{}); err != nil {
				t.Fatal(err)
			}
		}
		found, err := Pull(ctx, b, repo, kind, unknown, Options{})
		if found || err != nil {
			t.Errorf("Pull from %s of an unknown key = %v, %v; want a miss", repo, found, err)
		}
	}
}

func TestUnreachable(t *testing.T) {
	reg := harness.StartRegistry(t)
	addr := reg.Addr
	reg.Stop()
	b := newCache(t)
	key := cache.KeyOf(nil)
	found, err := Pull(context.Background(), b, addr+"/stamp-cache", kind, key, Options{})
	if found || err == nil || !strings.Contains(err.Error(), addr) || !errors.Is(err, ErrUnavailable) {
		t.Errorf("Pull from a stopped registry = %v, %v; want an error naming it", found, err)
	}
}

func TestCorruptBlob(t *testing.T) {
	reg := harness.StartRegistry(t)
	repo := reg.Addr + "/stamp-cache"
	ctx := context.Background()
	a, b := newCache(t), newCache(t)
	r := fixture(t, a, "one")
	if err := Push(ctx, a, repo, r, Options{}); err != nil {
		t.Fatal(err)
	}
	// Same length, other bytes: only hashing can tell.
	bad := r.Blobs[1].Digest
	p := reg.BlobPath(strings.TrimPrefix(bad, "sha256:"))
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, bytes.Repeat([]byte{7}, int(fi.Size())), 0o644); err != nil {
		t.Fatal(err)
	}

	found, err := Pull(ctx, b, repo, kind, r.Key, Options{})
	if err == nil {
		t.Fatalf("Pull of a corrupt entry = %v, nil", found)
	}
	if !strings.Contains(err.Error(), bad) || !strings.Contains(err.Error(), Tag(kind, r.Key)) {
		t.Errorf("error %q does not name the blob and the reference", err)
	}
	t.Log(err)
	if got, err := b.Record(kind, r.Key); got != nil || err != nil {
		t.Errorf("cache holds record %v (%v) after a failed pull", got, err)
	}
	if b.Has(bad) {
		t.Error("cache holds the corrupt blob")
	}
}

func TestForeignEntry(t *testing.T) {
	reg := harness.StartRegistry(t)
	repo := reg.Addr + "/stamp-cache"
	ctx := context.Background()
	a := newCache(t)
	asked := fixture(t, a, "asked")
	other := fixture(t, a, "other one")
	tag := Tag(kind, asked.Key)

	// Filed under the asked key, but its parts are another record's.
	lying := *other
	lying.Key = asked.Key

	swap := func(m map[string]any) {
		l := m["layers"].([]any)
		l[0], l[1] = l[1], l[0]
	}
	cases := []struct {
		name string
		push func(t *testing.T, repo string)
	}{
		{"other key", func(t *testing.T, repo string) { pushAs(t, a, repo, tag, other, nil) }},
		{"other kind", func(t *testing.T, repo string) {
			k := *asked
			k.Kind = "sealed"
			pushAs(t, a, repo, tag, &k, nil)
		}},
		{"parts not of the key", func(t *testing.T, repo string) { pushAs(t, a, repo, tag, &lying, nil) }},
		{"layers not the blobs", func(t *testing.T, repo string) { pushAs(t, a, repo, tag, asked, swap) }},
		{"layer of another type", func(t *testing.T, repo string) {
			pushAs(t, a, repo, tag, asked, func(m map[string]any) {
				m["layers"].([]any)[0].(map[string]any)["mediaType"] = "application/vnd.oci.image.layer.v1.tar"
			})
		}},
		{"an image", func(t *testing.T, repo string) {
			img, err := random.Image(1024, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := remote.Write(mustTag(t, repo+":"+tag), img); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			repo := repo + string(rune('a'+i))
			tc.push(t, repo)
			b := newCache(t)
			found, err := Pull(ctx, b, repo, kind, asked.Key, Options{})
			if err == nil {
				t.Fatalf("Pull of a foreign entry = %v, nil", found)
			}
			if !errors.Is(err, cache.ErrBadRecord) || !strings.Contains(err.Error(), tag) {
				t.Errorf("error %q does not wrap ErrBadRecord and name the reference", err)
			}
			t.Log(err)
			nothingFrom(t, b, asked.Key, asked)
			nothingFrom(t, b, other.Key, other)
		})
	}
}

func TestPushCorruptLocalBlob(t *testing.T) {
	reg := harness.StartRegistry(t)
	repo := reg.Addr + "/stamp-cache"
	ctx := context.Background()
	a := newCache(t)
	r := fixture(t, a, "one")
	p, err := a.Path(r.Blobs[1].Digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, make([]byte, r.Blobs[1].Size), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Push(ctx, a, repo, r, Options{}); err == nil {
		t.Fatal("Push of a record whose blob is damaged on disk succeeded")
	} else {
		t.Log(err)
	}
	if _, err := remote.Head(mustTag(t, repo+":"+Tag(kind, r.Key))); err == nil {
		t.Error("the registry has an entry for a failed push")
	}
}

// TestLoginFromDockerConfig shares through a registry that wants a login:
// the credentials come from the docker config chain ($DOCKER_CONFIG), as
// pulls and stamp push take them, and without them both ways fail, naming
// the reference.
func TestLoginFromDockerConfig(t *testing.T) {
	reg := harness.StartRegistryWithAuth(t, "ci", "s3cret")
	repo := reg.Addr + "/stamp-cache"
	a := newCache(t)
	r := fixture(t, a, "login")

	t.Setenv("DOCKER_CONFIG", t.TempDir())
	if err := Push(context.Background(), a, repo, r, Options{}); err == nil || !strings.Contains(err.Error(), repo) {
		t.Fatalf("push without credentials: %v", err)
	}
	cfg := `{"auths": {"` + reg.Addr + `": {"auth": "` + base64.StdEncoding.EncodeToString([]byte("ci:s3cret")) + `"}}}`
	if err := os.WriteFile(filepath.Join(os.Getenv("DOCKER_CONFIG"), "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Push(context.Background(), a, repo, r, Options{}); err != nil {
		t.Fatalf("push with the docker config's credentials: %v", err)
	}
	b := newCache(t)
	found, err := Pull(context.Background(), b, repo, r.Kind, r.Key, Options{})
	if err != nil || !found {
		t.Fatalf("pull with credentials: %v, %v", found, err)
	}
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	if found, err := Pull(context.Background(), newCache(t), repo, r.Kind, r.Key, Options{}); err == nil || found {
		t.Fatalf("pull without credentials: %v, %v", found, err)
	}
}

// TestPullThroughFaults: the shared cache pulls through the registry
// client that meets faults of the network: a 503 for the entry's manifest
// is tried again, a raw disk cut short is resumed where it stopped, and the
// record and its blobs arrive whole.
func TestPullThroughFaults(t *testing.T) {
	reg := harness.StartRegistry(t)
	ctx := context.Background()
	a, b := newCache(t), newCache(t)
	r := fixture(t, a, "faults")
	if err := Push(ctx, a, reg.Addr+"/stamp-cache", r, Options{}); err != nil {
		t.Fatal(err)
	}
	target, _ := url.Parse("http://" + reg.Addr)
	front := harness.NewFaultServer(t, httputil.NewSingleHostReverseProxy(target))
	disk := harness.PathHas("/blobs/" + r.Blobs[1].Digest)
	front.Add(
		harness.Fault{Kind: harness.Status, Status: 503, Match: harness.PathHas("/manifests/"), Times: 1},
		harness.Fault{Kind: harness.Truncate, After: 3 << 20, Match: disk, Times: 1},
	)
	repo := front.Listener.Addr().String() + "/stamp-cache"
	found, err := Pull(ctx, b, repo, kind, r.Key, Options{})
	if err != nil || !found {
		t.Fatalf("Pull = %v, %v\n%+v", found, err, front.Seen())
	}
	for _, rb := range r.Blobs {
		if !bytes.Equal(blob(t, b, rb.Digest), blob(t, a, rb.Digest)) {
			t.Errorf("blob %s differs after faults", rb.Name)
		}
	}
	var ranges []string
	for _, s := range front.Seen() {
		if strings.Contains(s.Path, r.Blobs[1].Digest) {
			ranges = append(ranges, s.Range)
		}
	}
	if strings.Join(ranges, ",") != ",bytes=3145728-" {
		t.Errorf("the raw disk was asked for with ranges %q", ranges)
	}
}
