package ociremote_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/ociremote"
	"github.com/stamp-dev/stamp/test/harness"
)

func data(seed byte, n int) []byte {
	r := rand.New(rand.NewChaCha8([32]byte{seed}))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func newCache(t *testing.T) *cache.Cache {
	t.Helper()
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestResolvePullOffline(t *testing.T) {
	reg := harness.StartRegistry(t)
	ctx := context.Background()
	amd := harness.Artifact(t, harness.TitledFile{Title: "tool", Data: data(1, 100<<10)})
	arm := harness.Artifact(t, harness.TitledFile{Title: "tool", Data: data(2, 90<<10)})
	idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}},
		mutate.IndexAddendum{Add: arm, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "arm64"}}},
	)
	ref := reg.Addr + "/k8s/tool:v1"
	r, _ := name.ParseReference(ref)
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatal(err)
	}
	idxDigest, _ := idx.Digest()
	amdDigest, _ := amd.Digest()
	armDigest, _ := arm.Digest()

	c := newCache(t)
	cl := ociremote.New(c, ociremote.Options{})
	top, err := cl.Head(ctx, ref)
	if err != nil || top != idxDigest.String() {
		t.Fatalf("head: %s %v, want %s", top, err, idxDigest)
	}
	for arch, want := range map[string]v1.Hash{"amd64": amdDigest, "arm64": armDigest} {
		res, err := cl.Resolve(ctx, ref, top, ociremote.DefaultPlatform(arch))
		if err != nil {
			t.Fatal(err)
		}
		if res.Manifest != want.String() || res.Index != top || res.Platform != "linux/"+arch {
			t.Errorf("%s: %+v", arch, res)
		}
	}
	_, err = cl.Resolve(ctx, ref, top, "linux/riscv64")
	var pe *ociremote.PlatformError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), ref) || !strings.Contains(err.Error(), "linux/amd64, linux/arm64") {
		t.Errorf("missing platform: %v", err)
	}
	if err := cl.Pull(ctx, ref, amdDigest.String()); err != nil {
		t.Fatal(err)
	}
	ls, _ := amd.Layers()
	ld, _ := ls[0].Digest()
	if !c.Has(ld.String()) || !c.Has(amdDigest.String()) || !c.Has(idxDigest.String()) {
		t.Fatal("pull left blobs out of the cache")
	}

	// Offline: what was pulled is there, what was not is named.
	off := ociremote.New(c, ociremote.Options{Offline: true})
	if _, err := off.Head(ctx, ref); !isMissing(err, "") {
		t.Errorf("offline head of a tag: %v", err)
	}
	if err := off.Pull(ctx, ref, amdDigest.String()); err != nil {
		t.Errorf("offline pull of cached content: %v", err)
	}
	res, err := off.Resolve(ctx, ref, top, "linux/arm64")
	if err != nil {
		t.Fatalf("offline resolve from the cached index: %v", err)
	}
	armLayers, _ := arm.Layers()
	armLayer, _ := armLayers[0].Digest()
	if err := off.Pull(ctx, ref, res.Manifest); !isMissing(err, armLayer.String()) || !strings.Contains(err.Error(), ref) {
		t.Errorf("offline pull of a missing blob: %v", err)
	}
}

func isMissing(err error, digest string) bool {
	var me *cache.MissingError
	return errors.As(err, &me) && me.Digest == digest
}

func TestCorruptRegistryBlob(t *testing.T) {
	reg := harness.StartRegistry(t)
	ctx := context.Background()
	payload := data(3, 64<<10)
	img := harness.Artifact(t, harness.TitledFile{Title: "tool", Data: payload})
	ref := reg.Addr + "/k8s/tool:v1"
	d := harness.Push(t, ref, img)
	ls, _ := img.Layers()
	ld, _ := ls[0].Digest()
	p := reg.BlobPath(ld.Hex)
	bad := bytes.Clone(payload)
	bad[1000] ^= 0xff
	if err := os.WriteFile(p, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	c := newCache(t)
	err := ociremote.New(c, ociremote.Options{}).Pull(ctx, ref, d)
	var mm *cache.MismatchError
	if !errors.As(err, &mm) || !strings.Contains(err.Error(), ld.String()) {
		t.Fatalf("corrupt blob: %v", err)
	}
	if c.Has(ld.String()) {
		t.Error("the corrupt blob was stored")
	}
	ents, _ := os.ReadDir(filepath.Join(c.Dir(), "tmp"))
	if len(ents) != 0 {
		t.Errorf("temp files left: %v", ents)
	}
}

// A blob damaged in the cache is found when the next pull verifies it, and
// fetched again while online.
func TestCorruptCacheBlobHealsOnline(t *testing.T) {
	reg := harness.StartRegistry(t)
	ctx := context.Background()
	payload := data(4, 32<<10)
	img := harness.Artifact(t, harness.TitledFile{Title: "tool", Data: payload})
	ref := reg.Addr + "/k8s/tool:v1"
	d := harness.Push(t, ref, img)
	c := newCache(t)
	cl := ociremote.New(c, ociremote.Options{})
	if err := cl.Pull(ctx, ref, d); err != nil {
		t.Fatal(err)
	}
	ls, _ := img.Layers()
	ld, _ := ls[0].Digest()
	p, _ := c.Path(ld.String())
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, []byte("garbage"), 0o644); err != nil {
		t.Fatal(err)
	}
	off := ociremote.New(c, ociremote.Options{Offline: true})
	var ce *cache.CorruptError
	if err := off.Pull(ctx, ref, d); !errors.As(err, &ce) {
		t.Errorf("offline pull over a corrupt blob: %v", err)
	}
	if err := cl.Pull(ctx, ref, d); err != nil {
		t.Fatalf("online pull over a corrupt blob: %v", err)
	}
	if err := c.Verify(ld.String()); err != nil {
		t.Errorf("blob after healing: %v", err)
	}
}

// --insecure-registry makes stamp speak plain HTTP to a host that is not on
// loopback; without it the client insists on HTTPS.
func TestInsecureRegistry(t *testing.T) {
	reg := harness.StartRegistry(t)
	img := harness.Artifact(t, harness.TitledFile{Title: "tool", Data: data(5, 1000)})
	d := harness.Push(t, reg.Addr+"/k8s/tool:v1", img)
	// A name that is not loopback, resolved to the registry by the transport.
	const host = "registry.stamp.test:5000"
	target, _ := url.Parse("http://" + reg.Addr)
	var hits atomic.Int64
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if strings.HasPrefix(addr, "registry.stamp.test:") {
			addr = srv.Listener.Addr().String()
		}
		return dial(ctx, network, addr)
	}
	ref := host + "/k8s/tool:v1"
	secure := ociremote.New(newCache(t), ociremote.Options{Transport: tr})
	if _, err := secure.Head(context.Background(), ref); err == nil {
		t.Error("plain HTTP to a non-loopback registry worked without --insecure-registry")
	}
	for _, ins := range []string{host, "registry.stamp.test"} {
		hits.Store(0)
		cl := ociremote.New(newCache(t), ociremote.Options{Transport: tr, Insecure: []string{ins}})
		got, err := cl.Head(context.Background(), ref)
		if err != nil || got != d {
			t.Fatalf("insecure %s: %s %v", ins, got, err)
		}
		if err := cl.Pull(context.Background(), ref, d); err != nil {
			t.Fatal(err)
		}
		if hits.Load() == 0 {
			t.Error("the requests did not go through the test's server")
		}
	}
}

// Pulls running at once that share blobs fetch each blob once.
func TestConcurrentPullsShareBlobs(t *testing.T) {
	reg := harness.StartRegistry(t)
	img := harness.Artifact(t, harness.TitledFile{Title: "a", Data: data(6, 512<<10)}, harness.TitledFile{Title: "b", Data: data(7, 512<<10)})
	d := harness.Push(t, reg.Addr+"/k8s/tool:v1", img)
	target, _ := url.Parse("http://" + reg.Addr)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var blobGets atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			blobGets.Add(1)
		}
		proxy.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ref := srv.Listener.Addr().String() + "/k8s/tool:v1"
	c := newCache(t)
	cl := ociremote.New(c, ociremote.Options{Jobs: 2})
	errs := make(chan error, 4)
	for range 4 {
		go func() { errs <- cl.Pull(context.Background(), ref, d) }()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	// config + two layers; a Pull that starts after another finished
	// verifies from the cache instead of fetching.
	if n := blobGets.Load(); n != 3 {
		t.Errorf("%d blob downloads for 3 distinct blobs", n)
	}
}
