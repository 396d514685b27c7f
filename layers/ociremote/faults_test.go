package ociremote_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/ociremote"
	"github.com/stamp-dev/stamp/test/harness"
)

// login is a keychain that has one login for every registry.
type login struct{ user, password string }

func (l login) Resolve(authn.Resource) (authn.Authenticator, error) {
	return authn.FromConfig(authn.AuthConfig{Username: l.user, Password: l.password}), nil
}

var fastRetry = cache.Retry{Attempts: 3, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond,
	MaxRetryAfter: 2 * time.Second, IdleTimeout: 2 * time.Second}

// storage serves a registry's blobs straight from its storage, with an
// ETag and Range, as the object store a registry redirects to does; it asks
// for no login.
func storage(reg *harness.Registry) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hex := filepath.Base(r.URL.Path)
		f, err := os.Open(reg.BlobPath(hex))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		w.Header().Set("ETag", `"`+hex+`"`)
		http.ServeContent(w, r, "", time.Time{}, f)
	})
}

// TestPullFaults holds the registry client (which stamp's oci and images
// layers and the shared cache pull through) to a real registry behind a
// login, with a server in front that breaks requests the ways a network or
// a registry does. Each fault is met by retrying and resuming, and ends
// with the image's blobs in the cache, or with an error naming the URL and
// no blob of it, nor temp file, in the cache.
func TestPullFaults(t *testing.T) {
	reg := harness.StartRegistryWithAuth(t, "ci", "s3cret")
	keys := login{"ci", "s3cret"}
	layer := data(20, 1<<20)
	img := harness.Artifact(t, harness.TitledFile{Title: "kubelet", Data: layer})
	tag, err := name.NewTag(reg.Addr + "/k8s/tool:v1")
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(tag, img, remote.WithAuthFromKeychain(keys)); err != nil {
		t.Fatal(err)
	}
	manifest := harness.Digest(t, img)
	ls, _ := img.Layers()
	ld, _ := ls[0].Digest()
	layerPath := "/blobs/" + ld.String()
	target, _ := url.Parse("http://" + reg.Addr)
	const half = 300 << 10
	isPing := func(r *http.Request) bool { return r.URL.Path == "/v2/" }
	blob := harness.PathHas(layerPath)
	manifests := harness.PathHas("/manifests/")
	type check func(t *testing.T, blobRanges []string, seen []harness.Seen)
	ranges := func(want ...string) check {
		return func(t *testing.T, got []string, _ []harness.Seen) {
			if !harness.RangesMatch(got, want) {
				t.Errorf("the layer's Range headers %q, want %q", got, want)
			}
		}
	}
	for _, tc := range []struct {
		name    string
		faults  []harness.Fault
		wantErr string
		checks  []check
	}{
		{name: "reset at the ping", faults: []harness.Fault{{Kind: harness.Reset, Match: isPing, Times: 1}}},
		{name: "500 at the ping", faults: []harness.Fault{{Kind: harness.Status, Status: 500, Match: isPing, Times: 1}}},
		{name: "manifest stalls before its head", faults: []harness.Fault{{Kind: harness.StallHead, Match: manifests, Times: 1}}},
		{name: "503 for the manifest", faults: []harness.Fault{{Kind: harness.Status, Status: 503, Match: manifests, Times: 2}}},
		{name: "manifest cut short", faults: []harness.Fault{{Kind: harness.Truncate, After: 100, Match: harness.PathHas("/manifests/sha256:"), Times: 1}}},
		{name: "429 with Retry-After for the layer", faults: []harness.Fault{{Kind: harness.Status, Status: 429, RetryAfter: "1", Match: blob, Times: 1}},
			checks: []check{ranges("", ""), func(t *testing.T, _ []string, seen []harness.Seen) {
				var at []time.Time
				for _, s := range seen {
					if strings.Contains(s.Path, layerPath) {
						at = append(at, s.At)
					}
				}
				if len(at) != 2 || at[1].Sub(at[0]) < time.Second {
					t.Errorf("the layer was asked for at %v, not a second apart", at)
				}
			}}},
		{name: "layer reset mid-body", faults: []harness.Fault{{Kind: harness.ResetMidBody, After: half, Match: blob, Times: 1}},
			checks: []check{ranges("", "resume")}},
		{name: "layer truncated twice", faults: []harness.Fault{{Kind: harness.Truncate, After: half, Match: blob, Times: 2}},
			checks: []check{ranges("", "bytes=307200-", "bytes=614400-")}},
		{name: "layer stalls mid-body", faults: []harness.Fault{{Kind: harness.Stall, After: half, Match: blob, Times: 1}},
			checks: []check{ranges("", "bytes=307200-")}},
		{name: "Content-Length promises more", faults: []harness.Fault{{Kind: harness.LieLength, LengthDelta: 4096, Match: blob, Times: 1}},
			checks: []check{ranges("")}},
		{name: "Content-Length promises less", faults: []harness.Fault{{Kind: harness.LieLength, LengthDelta: -half, Match: blob, Times: 1}},
			checks: []check{ranges("", "bytes=741376-")}},
		{name: "layer redirected to storage on another host", faults: []harness.Fault{{Kind: harness.Redirect, Match: blob}}},
		// Failures.
		{name: "503 for the layer every time", faults: []harness.Fault{{Kind: harness.Status, Status: 503, Match: blob}},
			wantErr: "gave up after 3 attempts"},
		{name: "layer stalls every time", faults: []harness.Fault{{Kind: harness.Stall, After: 1000, Match: blob}},
			wantErr: "gave up after 3 attempts: stalled: nothing arrived for 2s"},
		{name: "layer not found", faults: []harness.Fault{{Kind: harness.Status, Status: 404, Match: blob}},
			wantErr: "404", checks: []check{ranges("")}},
		{name: "Retry-After too long", faults: []harness.Fault{{Kind: harness.Status, Status: 429, RetryAfter: "600", Match: blob}},
			wantErr: "asks to try again after 10m0s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := harness.NewFaultServer(t, storage(reg))
			front := harness.NewFaultServer(t, httputil.NewSingleHostReverseProxy(target))
			for i := range tc.faults {
				if tc.faults[i].Kind == harness.Redirect {
					tc.faults[i].Location = store.URL + "/store/" + ld.Hex
				}
			}
			front.Add(tc.faults...)
			c, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{Retry: fastRetry})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cl := ociremote.New(c, ociremote.Options{Keychain: keys})
			ref := front.Listener.Addr().String() + "/k8s/tool:v1"
			ctx := context.Background()
			got, err := cl.Head(ctx, ref)
			if err == nil && got != manifest {
				t.Fatalf("Head = %s, want %s", got, manifest)
			}
			if err == nil {
				err = cl.Pull(ctx, ref, manifest)
			}
			blobURL := "http://" + front.Listener.Addr().String() + "/v2/k8s/tool" + layerPath
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("pull: %v\n%+v", err, front.Seen())
				}
				rc, err := c.Open(ld.String())
				if err != nil {
					t.Fatal(err)
				}
				b, err := io.ReadAll(rc)
				rc.Close()
				if err != nil || !bytes.Equal(b, layer) {
					t.Fatalf("the cached layer is not the image's (%v)", err)
				}
			} else {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), blobURL) {
					t.Fatalf("pull = %v; want an error naming %s and saying %q", err, blobURL, tc.wantErr)
				}
				t.Log(err)
				if c.Has(ld.String()) {
					t.Error("the layer is in the cache after a failed pull")
				}
			}
			if ents, _ := os.ReadDir(filepath.Join(c.Dir(), "tmp")); len(ents) != 0 {
				t.Errorf("temp files left: %v", ents)
			}
			var blobRanges []string
			logins := false
			for _, s := range front.Seen() {
				if s.Method == http.MethodGet && strings.Contains(s.Path, layerPath) {
					blobRanges = append(blobRanges, s.Range)
				}
				logins = logins || s.Authorization
			}
			if !logins {
				t.Error("no request to the registry carried the login")
			}
			for _, s := range store.Seen() {
				if s.Authorization {
					t.Errorf("the registry's credentials went to the storage host: %+v", s)
				}
			}
			for _, ch := range tc.checks {
				ch(t, blobRanges, append(front.Seen(), store.Seen()...))
			}
		})
	}
}
