package stamp

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/ociremote"
	"github.com/stamp-dev/stamp/recipes/lock"
	"github.com/stamp-dev/stamp/test/harness"
)

// memRegistry serves go-containerregistry's in-memory registry on
// 127.0.0.1 (plain HTTP, as for every loopback registry) and returns its
// host:port and a function that stops it.
func memRegistry(t *testing.T) (string, func()) {
	t.Helper()
	s := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(s.Close)
	return strings.TrimPrefix(s.URL, "http://"), s.Close
}

// twoArch pushes an index of two one-layer images as ref and returns the
// digests of the index and of the amd64 and arm64 manifests.
func twoArch(t *testing.T, ref, seed string) (idx, amd, arm string) {
	t.Helper()
	a := harness.Image(t, "amd64", harness.TarLayer(t, harness.TarFile{Name: "tool", Body: seed + " for amd64", Mode: 0o755}))
	b := harness.Image(t, "arm64", harness.TarLayer(t, harness.TarFile{Name: "tool", Body: seed + " for arm64", Mode: 0o755}))
	idx = harness.PushIndex(t, ref, harness.Index(
		harness.PlatformImage{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Image: a},
		harness.PlatformImage{Platform: v1.Platform{OS: "linux", Architecture: "arm64"}, Image: b}))
	return idx, harness.Digest(t, a), harness.Digest(t, b)
}

type resolveKit struct {
	cache *cache.Cache
	opts  *Options
}

func newResolveKit(t *testing.T) *resolveKit {
	t.Helper()
	l := logrus.New()
	l.SetOutput(io.Discard)
	c, err := cache.Open(filepath.Join(t.TempDir(), "cache"), cache.Options{Log: l})
	if err != nil {
		t.Fatal(err)
	}
	return &resolveKit{cache: c, opts: &Options{LockPath: filepath.Join(t.TempDir(), "stamp.lock"), Log: l}}
}

// resolve plans one OCI input of kind for platform and resolves it against
// lk, as a build does.
func (k *resolveKit) resolve(t *testing.T, lk *lock.Lock, kind layers.InputKind, ref, digest, platform string) (plannedInput, error) {
	t.Helper()
	in := &layers.Input{Kind: kind, URI: ref, Digest: digest, Pinned: digest != ""}
	pi := plannedInput{field: "provision.layers[0]." + string(kind), in: in, platform: platform, oci: &ociPin{}}
	return pi, resolveInputs(context.Background(), k.cache, lk, []plannedInput{pi}, k.opts)
}

func loadTestLock(t *testing.T, p string) *lock.Lock {
	t.Helper()
	lk, err := lock.Load(p)
	if err != nil {
		t.Fatal(err)
	}
	return lk
}

// TestResolveTagPinsThePlatformManifest checks that a tag resolves to the
// manifest of the recipe's platform, that its blobs come into the cache,
// and that the lock records the pin with the index it was picked from; a
// second build against that lock changes nothing.
func TestResolveTagPinsThePlatformManifest(t *testing.T) {
	host, _ := memRegistry(t)
	ref := host + "/tools/ctr:v1"
	idx, _, arm := twoArch(t, ref, "v1")
	k := newResolveKit(t)

	pi, err := k.resolve(t, &lock.Lock{}, layers.InputOCI, ref, "", "linux/arm64")
	if err != nil {
		t.Fatal(err)
	}
	if pi.in.Digest != arm || pi.oci.manifest != arm || !pi.oci.fresh {
		t.Errorf("resolved %s (manifest %s, fresh %t), want the arm64 manifest %s", pi.in.Digest, pi.oci.manifest, pi.oci.fresh, arm)
	}
	m, err := ociremote.LoadManifest(k.cache, arm)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range m.Blobs() {
		if !k.cache.Has(b.Digest.String()) {
			t.Errorf("blob %s of the arm64 image is not in the cache", b.Digest)
		}
	}
	lk := loadTestLock(t, k.opts.LockPath)
	got, ok := lk.Get("oci", ref)
	if !ok || got.Digest != arm || got.Extra["index"] != idx || got.Extra["platform"] != "linux/arm64" {
		t.Fatalf("lock entry = %+v (found %t)", got, ok)
	}

	before, _ := os.ReadFile(k.opts.LockPath)
	pi, err = k.resolve(t, lk, layers.InputOCI, ref, "", "linux/arm64")
	if err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(k.opts.LockPath)
	if pi.in.Digest != arm || pi.oci.fresh || string(before) != string(after) {
		t.Errorf("second resolve: %s fresh %t; lock changed %t", pi.in.Digest, pi.oci.fresh, string(before) != string(after))
	}
}

// TestResolveRefusesAMovedTag checks that a tag now naming another image
// fails against the lock, naming the field, unless the lock may be updated.
func TestResolveRefusesAMovedTag(t *testing.T) {
	host, _ := memRegistry(t)
	ref := host + "/tools/ctr:v1"
	_, old, _ := twoArch(t, ref, "v1")
	k := newResolveKit(t)
	if _, err := k.resolve(t, &lock.Lock{}, layers.InputOCI, ref, "", "linux/amd64"); err != nil {
		t.Fatal(err)
	}
	_, moved, _ := twoArch(t, ref, "v1.1")

	_, err := k.resolve(t, loadTestLock(t, k.opts.LockPath), layers.InputOCI, ref, "", "linux/amd64")
	var me *ociremote.MovedError
	var ie *InputError
	if !errors.As(err, &me) || me.Locked != old || me.Now != moved || !errors.As(err, &ie) || ie.Field != "provision.layers[0].oci" {
		t.Fatalf("moved tag: err = %v", err)
	}

	k.opts.UpdateLock = true
	pi, err := k.resolve(t, loadTestLock(t, k.opts.LockPath), layers.InputOCI, ref, "", "linux/amd64")
	if err != nil || pi.in.Digest != moved || !pi.oci.fresh {
		t.Fatalf("--update-lock: %s fresh %t, %v", pi.in.Digest, pi.oci != nil && pi.oci.fresh, err)
	}
	if got, _ := loadTestLock(t, k.opts.LockPath).Get("oci", ref); got.Digest != moved {
		t.Errorf("lock after --update-lock pins %s, want %s", got.Digest, moved)
	}
}

// TestResolveOfflineUsesTheLock checks that offline, with the registry
// gone, a tag resolves to what the lock pins from the cache, and that a tag
// the lock does not pin fails with a hint to fetch while online.
func TestResolveOfflineUsesTheLock(t *testing.T) {
	host, stop := memRegistry(t)
	ref := host + "/tools/ctr:v1"
	idx, amd, arm := twoArch(t, ref, "v1")
	k := newResolveKit(t)
	// Pinned for arm64 first, then for amd64: the lock ends up pinned for
	// amd64, and the cache holds both platforms' images.
	if _, err := k.resolve(t, &lock.Lock{}, layers.InputOCI, ref, "", "linux/arm64"); err != nil {
		t.Fatal(err)
	}
	if _, err := k.resolve(t, &lock.Lock{}, layers.InputOCI, ref, "", "linux/amd64"); err != nil {
		t.Fatal(err)
	}
	stop()
	k.opts.Offline = true
	lk := loadTestLock(t, k.opts.LockPath)

	pi, err := k.resolve(t, lk, layers.InputOCI, ref, "", "linux/amd64")
	if err != nil || pi.in.Digest != amd || pi.oci.fresh || pi.oci.extra["index"] != idx {
		t.Errorf("offline, pinned platform: %s extra %v, %v", pi.in.Digest, pi.oci.extra, err)
	}
	// The recipe's arch changed: the pin says which index to pick from.
	pi, err = k.resolve(t, lk, layers.InputOCI, ref, "", "linux/arm64")
	if err != nil || pi.in.Digest != arm || pi.oci.extra["platform"] != "linux/arm64" {
		t.Errorf("offline, other platform: %s extra %v, %v", pi.in.Digest, pi.oci.extra, err)
	}

	_, err = k.resolve(t, &lock.Lock{}, layers.InputOCI, ref, "", "linux/amd64")
	var miss *cache.MissingError
	if !errors.As(err, &miss) || !strings.Contains(err.Error(), "stamp fetch") {
		t.Errorf("offline without a pin: err = %v", err)
	}
}

// TestResolveImageKeepsTheRecipesDigest checks that an images input keeps
// the digest the recipe names (an index), which the images layer stores
// whole, and records which manifest the platform picked.
func TestResolveImageKeepsTheRecipesDigest(t *testing.T) {
	host, _ := memRegistry(t)
	ref := host + "/pause:3.10"
	idx, amd, _ := twoArch(t, ref, "pause")
	k := newResolveKit(t)
	pi, err := k.resolve(t, &lock.Lock{}, layers.InputImage, ref+"@"+idx, idx, "linux/amd64")
	if err != nil {
		t.Fatal(err)
	}
	if pi.in.Digest != idx || pi.oci.manifest != amd || pi.oci.fresh ||
		pi.oci.extra["manifest"] != amd || pi.oci.extra["platform"] != "linux/amd64" {
		t.Errorf("image input: digest %s, pin %+v", pi.in.Digest, *pi.oci)
	}
	if _, err := os.Stat(k.opts.LockPath); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a pinned image wrote the lock: %v", err)
	}
}

// TestResolveLocalFileIsHashedAnew checks that a local input is hashed on
// every build, so an edit after locking is caught unless the lock may be
// updated, and that a digest the recipe pins is not overruled by
// --update-lock.
func TestResolveLocalFileIsHashedAnew(t *testing.T) {
	k := newResolveKit(t)
	p := filepath.Join(filepath.Dir(k.opts.LockPath), "base.tar")
	if err := os.WriteFile(p, []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	stale := "sha256:" + strings.Repeat("0", 64)
	lk := &lock.Lock{}
	lk.Set(lock.Input{Kind: "tarball", URI: "base.tar", Digest: stale})
	resolve := func(pinned string) (*layers.Input, error) {
		in := &layers.Input{Kind: layers.InputTarball, URI: p, Digest: pinned, Pinned: pinned != ""}
		return in, resolveAll(context.Background(), k.cache, lk, []plannedInput{{field: "base.tarball", in: in}}, k.opts)
	}
	var mm *cache.MismatchError
	if _, err := resolve(""); !errors.As(err, &mm) || !strings.Contains(err.Error(), "stamp.lock") {
		t.Errorf("edited file against the lock: %v", err)
	}
	k.opts.UpdateLock = true
	in, err := resolve("")
	if err != nil || in.Digest == stale || !k.cache.Has(in.Digest) {
		t.Errorf("--update-lock: %s, %v", in.Digest, err)
	}
	if _, err := resolve(stale); !errors.As(err, &mm) || !strings.Contains(err.Error(), "recipe") {
		t.Errorf("edited file against the recipe's digest: %v", err)
	}
}

func TestSamePlatform(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{"linux/amd64", "linux/amd64", true},
		{"linux/arm64/v8", "linux/arm64", true},
		{"linux/arm64/v8", "linux/arm64/v7", false},
		{"linux/amd64", "linux/arm64", false},
		{"linux", "linux", false},
	} {
		if got := samePlatform(c.a, c.b); got != c.want {
			t.Errorf("samePlatform(%q, %q) = %t", c.a, c.b, got)
		}
	}
}

func TestLockKey(t *testing.T) {
	for _, c := range []struct{ dir, uri, want string }{
		{"/r", "/r/base.tar", "base.tar"},
		{"/r", "/r/sub/x.tar", "sub/x.tar"},
		{"/r", "/elsewhere/x.tar", "/elsewhere/x.tar"},
		{"/r", "https://files.invalid/x.tar", "https://files.invalid/x.tar"},
	} {
		if got := lockKey(c.dir, c.uri); got != c.want {
			t.Errorf("lockKey(%q, %q) = %q, want %q", c.dir, c.uri, got, c.want)
		}
	}
}
