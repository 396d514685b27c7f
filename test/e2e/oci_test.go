package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/ociremote"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

const pullEpoch = 1700000000

// pullBase is a tiny merged-/usr base: enough for owners, systemd links and
// the OCI layers, and quick to build.
func pullBase(t *testing.T) []byte { return pullBaseBytes(t) }

func pullBaseBytes(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(pullEpoch, 0)
	add := func(h *tar.Header, body string) {
		h.ModTime, h.Format = mt, tar.FormatPAX
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	for _, d := range []string{"etc/", "usr/", "usr/bin/", "usr/lib/", "usr/lib/systemd/", "usr/lib/systemd/system/", "var/", "var/lib/"} {
		add(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}, "")
	}
	add(&tar.Header{Name: "bin", Typeflag: tar.TypeSymlink, Linkname: "usr/bin", Mode: 0o777}, "")
	add(&tar.Header{Name: "lib", Typeflag: tar.TypeSymlink, Linkname: "usr/lib", Mode: 0o777}, "")
	add(&tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644}, "root:x:0:0:root:/root:/bin/sh\nbin:x:2:2:bin:/bin:/usr/sbin/nologin\n")
	add(&tar.Header{Name: "etc/group", Typeflag: tar.TypeReg, Mode: 0o644}, "root:x:0:\nbin:x:2:\n")
	tw.Close()
	return buf.Bytes()
}

// pullRecipeDir writes the recipe and the base into a directory uid 65534 can
// use.
func pullRecipeDir(t *testing.T, recipe string) string {
	t.Helper()
	dir := harness.TempDirFor65534(t)
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe, "base.tar": string(pullBase(t))})
	return dir
}

func pullRecipe(name, arch, layers string) string {
	return fmt.Sprintf(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: %s
arch: %s
epoch: %d
base:
  tarball: ./base.tar
provision:
  layers:
%s
outputs:
  - {format: tar}
`, name, arch, pullEpoch, layers)
}

// debFile returns the bytes of one file of a Debian package, downloading
// the package once into the shared deb cache.
func debFile(t *testing.T, pkg, path string) []byte {
	t.Helper()
	deb := harness.Debs(t, pkg)[0]
	x := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", deb, x).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(x, path))
	if err != nil {
		t.Fatalf("%s in %s: %v", path, pkg, err)
	}
	return b
}

// multiArch is an index of an amd64 and an arm64/v8 image.
func multiArch(amd, arm v1.Image) v1.ImageIndex {
	return harness.Index(
		harness.PlatformImage{Platform: v1.Platform{OS: "linux", Architecture: "amd64"}, Image: amd},
		harness.PlatformImage{Platform: v1.Platform{OS: "linux", Architecture: "arm64", Variant: "v8"}, Image: arm})
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func layerDigest(t testing.TB, img v1.Image, i int) v1.Hash {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := ls[i].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// tarMember returns the content of one member of a plain tar file.
func tarMemberBytes(t *testing.T, path, member string) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s has no member %s", path, member)
		}
		if err != nil {
			t.Fatal(err)
		}
		if harness.CleanTarName(h.Name) == member {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
}

// Real binaries from Debian packages, pushed as an oras-style artifact, land
// with their exact bytes, mode 0755 and owner 0:0 in a build run as uid
// 65534; a multi-arch index yields the recipe's arch; paths taken from a
// multi-layer image honour whiteouts; every file records where it came from.
func TestOCIProvision(t *testing.T) {
	harness.RequireSetpriv(t)
	reg := harness.StartRegistry(t)
	ctr := debFile(t, "containerd", "usr/bin/ctr")
	runc := debFile(t, "runc", "usr/sbin/runc")
	bins := harness.Artifact(t, harness.TitledFile{Title: "ctr", Data: ctr}, harness.TitledFile{Title: "runc", Data: runc})
	binsDigest := harness.Push(t, reg.Addr+"/k8s/bins:v1", bins)

	amdTool := []byte("#!/bin/sh\necho amd64\n")
	armTool := []byte("#!/bin/sh\necho arm64\n")
	harness.PushIndex(t, reg.Addr+"/k8s/multi:v1", multiArch(harness.Artifact(t, harness.TitledFile{Title: "tool", Data: amdTool}), harness.Artifact(t, harness.TitledFile{Title: "tool", Data: armTool})))

	layered := func(arch string) v1.Image {
		return harness.Image(t, arch,
			harness.TarLayer(t,
				harness.TarFile{Name: "etc/gone", Body: "gone"},
				harness.TarFile{Name: "etc/kept", Body: "kept"},
				harness.TarFile{Name: "opt/dir/old", Body: "old"},
				harness.TarFile{Name: "usr/local/bin/crictl", Body: "crictl v1", Mode: 0o755},
				harness.TarFile{Name: "var/lib/app/", Type: tar.TypeDir, Mode: 0o750, UID: 1000, GID: 1000},
			),
			harness.TarLayer(t,
				harness.TarFile{Name: "etc/.wh.gone"},
				harness.TarFile{Name: "opt/dir/.wh..wh..opq"},
				harness.TarFile{Name: "opt/dir/new", Body: "new"},
				harness.TarFile{Name: "var/lib/app/state", Body: "s", Mode: 0o600, UID: 1000, GID: 1000},
			),
			harness.TarLayer(t, harness.TarFile{Name: "usr/local/bin/crictl", Body: "crictl v2 " + arch, Mode: 0o755}),
		)
	}
	harness.PushIndex(t, reg.Addr+"/k8s/tools:v1", multiArch(layered("amd64"), layered("arm64")))

	layers := fmt.Sprintf(`    - oci: {ref: "%[1]s/k8s/bins:v1", dest: /usr/bin/, mode: "0755"}
    - oci: {ref: "%[1]s/k8s/multi:v1", dest: /usr/local/bin/, mode: "0755"}
    - oci: {ref: "%[1]s/k8s/tools:v1", paths: [/usr/local/bin/crictl, /opt/dir, /var/lib/app], dest: /opt/tools/}
    - oci: {ref: "%[1]s/k8s/tools:v1", dest: /srv/tools}`, reg.Addr)
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			dir := pullRecipeDir(t, pullRecipe("oci-"+arch, arch, layers))
			out := filepath.Join(dir, "out")
			r := stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out,
				"--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir)
			r.mustSucceed(t)
			// A build that writes the cache unpacks the image's layers as
			// references into their uncompressed archives, which the cache
			// keeps under their diff IDs: the same bytes.
			cached, refsCache := filepath.Join(dir, "out-cached"), filepath.Join(dir, "cache-refs")
			stampCached(t, dir, nil, "build", "recipe.yaml", "-o", cached, "--cache-dir", refsCache, "--work-dir", dir).mustSucceed(t)
			if a, b := mustReadFile(t, filepath.Join(out, "SHA256SUMS")), mustReadFile(t, filepath.Join(cached, "SHA256SUMS")); !bytes.Equal(a, b) {
				t.Fatalf("the build with the layers by reference differs:\n%s\nwant\n%s", b, a)
			}
			ls, err := layered(arch).Layers()
			if err != nil {
				t.Fatal(err)
			}
			for i, l := range ls {
				diff, err := l.DiffID()
				if err != nil {
					t.Fatal(err)
				}
				if _, err := os.Stat(filepath.Join(refsCache, "blobs", "sha256", diff.Hex)); err != nil {
					t.Errorf("layer %d's uncompressed archive is not in the cache: %v", i, err)
				}
			}
			tarPath := filepath.Join(out, "oci-"+arch+".tar")
			idx := harness.TarIndex(harness.ReadTar(t, tarPath))
			for _, f := range []struct {
				path string
				data []byte
			}{{"/usr/bin/ctr", ctr}, {"/usr/bin/runc", runc}} {
				e, ok := idx[f.path]
				if !ok {
					t.Fatalf("%s is not in the image", f.path)
				}
				if e.SHA256 != sha256Hex(f.data) || e.Size != int64(len(f.data)) || e.Mode != 0o755 || e.UID != 0 || e.GID != 0 {
					t.Errorf("%s: %s; want sha256 %s, mode 0755, owner 0:0", f.path, e, sha256Hex(f.data))
				}
			}
			wantTool := map[string][]byte{"amd64": amdTool, "arm64": armTool}[arch]
			if e := idx["/usr/local/bin/tool"]; e.SHA256 != sha256Hex(wantTool) || e.Mode != 0o755 {
				t.Errorf("multi-arch tool for %s: %s", arch, e)
			}
			if e := idx["/opt/tools/crictl"]; e.SHA256 != sha256Hex([]byte("crictl v2 "+arch)) || e.Mode != 0o755 {
				t.Errorf("crictl: %s", e)
			}
			if _, ok := idx["/opt/tools/dir/old"]; ok {
				t.Error("/opt/tools/dir/old survived the opaque whiteout")
			}
			if _, ok := idx["/opt/tools/dir/new"]; !ok {
				t.Error("/opt/tools/dir/new is missing")
			}
			if e := idx["/opt/tools/app/state"]; e.UID != 1000 || e.Mode != 0o600 {
				t.Errorf("owner and mode from the image are lost: %s", e)
			}
			if e := idx["/opt/tools/app"]; e.UID != 1000 || e.Mode != 0o750 || e.Type != tar.TypeDir {
				t.Errorf("directory from the image: %s", e)
			}
			if _, ok := idx["/srv/tools/etc/gone"]; ok {
				t.Error("/srv/tools/etc/gone survived its whiteout")
			}
			if _, ok := idx["/srv/tools/etc/kept"]; !ok {
				t.Error("/srv/tools/etc/kept is missing")
			}
			for p := range idx {
				if strings.Contains(p, ".wh.") {
					t.Errorf("whiteout marker %s reached the image", p)
				}
			}

			// Origins: the layer digest and ref@manifest#member of each file.
			var rec struct {
				Inputs  []struct{ Kind, URI, Digest string }
				Entries []struct {
					Path, Layer, Input, Member string
				}
			}
			if err := json.Unmarshal(tarMemberBytes(t, tarPath, "/usr/lib/stamp/manifest.json"), &rec); err != nil {
				t.Fatal(err)
			}
			origins := map[string]string{}
			for _, e := range rec.Entries {
				origins[e.Path] = e.Input + " " + e.Member
			}
			if want := layerDigest(t, bins, 0).String() + " " + reg.Addr + "/k8s/bins@" + binsDigest + "#ctr"; origins["/usr/bin/ctr"] != want {
				t.Errorf("origin of /usr/bin/ctr: %q, want %q", origins["/usr/bin/ctr"], want)
			}
			if o := origins["/opt/tools/crictl"]; !strings.HasPrefix(o, layerDigest(t, layered(arch), 2).String()+" ") || !strings.HasSuffix(o, "#/usr/local/bin/crictl") {
				t.Errorf("origin of /opt/tools/crictl: %q", o)
			}
			found := false
			for _, in := range rec.Inputs {
				found = found || in.Kind == "oci" && in.URI == reg.Addr+"/k8s/bins:v1" && in.Digest == binsDigest
			}
			if !found {
				t.Errorf("the record does not list the bins input: %+v", rec.Inputs)
			}
			// The tags were pinned by the build.
			lk, err := os.ReadFile(filepath.Join(dir, "stamp.lock"))
			if err != nil || !strings.Contains(string(lk), binsDigest) || !strings.Contains(string(lk), "platform: linux/"+arch) {
				t.Errorf("stamp.lock after the build: %v\n%s", err, lk)
			}
		})
	}
}

// A blob damaged in the registry's storage fails the build, naming the
// digest, and no output appears.
func TestOCICorruptRegistryBlob(t *testing.T) {
	reg := harness.StartRegistry(t)
	payload := noise(7, 256<<10)
	img := harness.Artifact(t, harness.TitledFile{Title: "kubelet", Data: payload})
	harness.Push(t, reg.Addr+"/k8s/kubelet:v1", img)
	ld := layerDigest(t, img, 0)
	p := reg.BlobPath(ld.Hex)
	bad := bytes.Clone(payload)
	bad[len(bad)/2] ^= 0x01
	if err := os.WriteFile(p, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	dir := pullRecipeDir(t, pullRecipe("corrupt", "amd64", fmt.Sprintf(`    - oci: {ref: "%s/k8s/kubelet:v1", dest: /usr/bin/, mode: "0755"}`, reg.Addr)))
	out := filepath.Join(dir, "out")
	r := stamp(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache")).
		mustFail(t, 1, ld.String(), "provision.layers[0].oci")
	t.Logf("stderr: %s", r.stderr)
	if got := finalFiles(t, out); len(got) != 0 {
		t.Errorf("a failed build left %v", got)
	}
	if _, err := os.Stat(filepath.Join(dir, "cache", "blobs", "sha256", ld.Hex)); err == nil {
		t.Error("the corrupt blob is in the cache")
	}
}

func noise(seed byte, n int) []byte {
	r := rand.New(rand.NewChaCha8([32]byte{seed}))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func mustReadFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The lock is stable, a moved tag is caught, and fetch + --offline with the
// registry gone gives the same bytes as the online build.
func TestOCILockFetchOffline(t *testing.T) {
	reg := harness.StartRegistry(t)
	v1Bins := harness.Artifact(t, harness.TitledFile{Title: "kubeadm", Data: noise(8, 200<<10)}, harness.TitledFile{Title: "kubectl", Data: noise(9, 150<<10)})
	v2Bins := harness.Artifact(t, harness.TitledFile{Title: "kubeadm", Data: noise(10, 200<<10)})
	ref := reg.Addr + "/k8s/bins:v1.31"
	v1Digest := harness.Push(t, ref, v1Bins)
	multiRef := reg.Addr + "/k8s/multi:v1"
	amd := harness.Artifact(t, harness.TitledFile{Title: "tool", Data: []byte("amd64 tool")})
	multiDigest := harness.PushIndex(t, multiRef, multiArch(amd, harness.Artifact(t, harness.TitledFile{Title: "tool", Data: []byte("arm64 tool")})))
	amdDigest, _ := amd.Digest()
	pinnedImg := harness.Artifact(t, harness.TitledFile{Title: "etcdctl", Data: noise(11, 50<<10)})
	pinnedDigest := harness.Push(t, reg.Addr+"/k8s/etcdctl:v3", pinnedImg)

	// The base comes by URL, so fetch has a tarball to bring as well.
	base := pullBaseBytes(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var baseHits atomic.Int64
	baseSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		baseHits.Add(1)
		w.Write(base)
	})}
	go baseSrv.Serve(ln)
	defer baseSrv.Close()
	recipe := strings.Replace(pullRecipe("offline", "amd64", fmt.Sprintf(`    - oci: {ref: "%s", dest: /usr/bin/, mode: "0755"}
    - oci: {ref: "%s", dest: /usr/local/bin/}
    - oci: {ref: "%s/k8s/etcdctl:v3@%s", dest: /usr/bin/, mode: "0755"}`, ref, multiRef, reg.Addr, pinnedDigest)),
		"  tarball: ./base.tar\n", fmt.Sprintf("  tarball: http://%s/base.tar\n  sha256: %q\n", ln.Addr(), sha256Hex(base)), 1)
	dir := pullRecipeDir(t, recipe)
	os.Remove(filepath.Join(dir, "base.tar"))
	lockPath := filepath.Join(dir, "stamp.lock")
	cacheA := filepath.Join(dir, "cache-a")
	stamp(t, dir, nil, "lock", "recipe.yaml", "--cache-dir", cacheA).mustSucceed(t)
	lock1 := mustReadFile(t, lockPath)
	t.Logf("stamp.lock:\n%s", lock1)
	stamp(t, dir, nil, "lock", "recipe.yaml", "--cache-dir", cacheA).mustSucceed(t)
	if lock2 := mustReadFile(t, lockPath); !bytes.Equal(lock1, lock2) {
		t.Fatalf("stamp lock twice gave different files:\n%s\n---\n%s", lock1, lock2)
	}
	for _, w := range []string{"kind: oci", "uri: " + ref, "digest: " + v1Digest, "uri: " + multiRef,
		"digest: " + amdDigest.String(), "index: " + multiDigest, "platform: linux/amd64", "digest: " + pinnedDigest} {
		if !strings.Contains(string(lock1), w) {
			t.Errorf("stamp.lock lacks %q:\n%s", w, lock1)
		}
	}

	online := filepath.Join(dir, "out-online")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", online, "--cache-dir", cacheA).mustSucceed(t)

	// The tag moves: build and lock refuse, naming the ref and both digests,
	// until --update-lock; moving it back and updating restores the lock.
	v2Digest := harness.Push(t, ref, v2Bins)
	r := stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out-moved"), "--cache-dir", cacheA).
		mustFail(t, 1, ref, v1Digest, v2Digest, "--update-lock")
	t.Logf("moved tag: %s", r.stderr)
	stamp(t, dir, nil, "lock", "recipe.yaml", "--cache-dir", cacheA).mustFail(t, 1, ref, v1Digest, v2Digest)
	if !bytes.Equal(mustReadFile(t, lockPath), lock1) {
		t.Error("a refused lock changed stamp.lock")
	}
	stamp(t, dir, nil, "lock", "recipe.yaml", "--cache-dir", cacheA, "--update-lock").mustSucceed(t)
	if !strings.Contains(string(mustReadFile(t, lockPath)), v2Digest) {
		t.Error("--update-lock did not pin the moved tag")
	}
	harness.Push(t, ref, v1Bins)
	stamp(t, dir, nil, "lock", "recipe.yaml", "--cache-dir", cacheA, "--update-lock").mustSucceed(t)
	if !bytes.Equal(mustReadFile(t, lockPath), lock1) {
		t.Fatal("moving the tag back did not restore the lock")
	}

	cacheB := filepath.Join(dir, "cache-b")
	hits := baseHits.Load()
	stamp(t, dir, nil, "fetch", "recipe.yaml", "--cache-dir", cacheB).mustSucceed(t)
	if !bytes.Equal(mustReadFile(t, lockPath), lock1) {
		t.Error("fetch changed a complete lock")
	}
	if baseHits.Load() != hits+1 {
		t.Errorf("fetch asked the base's server %d times, want once", baseHits.Load()-hits)
	}
	reg.Stop()
	baseSrv.Close()
	offline := filepath.Join(dir, "out-offline")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", offline, "--cache-dir", cacheB, "--offline").mustSucceed(t)
	a, b := finalFiles(t, online), finalFiles(t, offline)
	if strings.Join(a, " ") != strings.Join(b, " ") || len(a) == 0 {
		t.Fatalf("outputs differ: %v vs %v", a, b)
	}
	for _, f := range a {
		if !bytes.Equal(mustReadFile(t, filepath.Join(online, f)), mustReadFile(t, filepath.Join(offline, f))) {
			t.Errorf("%s differs between the online and the offline build", f)
		}
	}

	// Offline with a cache that lacks the inputs: the error names the input.
	// OCI references are pinned first, so the first one's manifest must be
	// there; the base, which the lock pins, is looked for only once the
	// build cache has missed, and its absence is named then.
	empty := filepath.Join(dir, "out-empty")
	cacheC := filepath.Join(dir, "cache-c")
	r = stamp(t, dir, nil, "build", "recipe.yaml", "-o", empty, "--cache-dir", cacheC, "--offline").
		mustFail(t, 1, "offline", ref, "provision.layers[0].oci")
	t.Logf("offline, empty cache: %s", r.stderr)
	cacheD := filepath.Join(dir, "cache-d")
	if out, err := exec.Command("cp", "-a", cacheB, cacheD).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	if err := os.Remove(filepath.Join(cacheD, "blobs", "sha256", sha256Hex(base))); err != nil {
		t.Fatal(err)
	}
	r = stamp(t, dir, nil, "build", "recipe.yaml", "-o", empty, "--cache-dir", cacheD, "--offline").
		mustFail(t, 1, "offline", "base.tarball", "base.tar")
	t.Logf("offline, no base: %s", r.stderr)
	if got := finalFiles(t, empty); len(got) != 0 {
		t.Errorf("a failed build left %v", got)
	}
}

// throttle is a reverse proxy in front of the registry that can slow blob
// downloads to a crawl and counts what passes.
type throttle struct {
	slow      atomic.Bool
	sent      atomic.Int64 // blob bytes sent
	requests  atomic.Int64
	blobGets  atomic.Int64
	manifests atomic.Int64
	srv       *http.Server
	addr      string
}

func startThrottle(t testing.TB, upstream string) *throttle {
	t.Helper()
	th := &throttle{}
	u, _ := url.Parse("http://" + upstream)
	proxy := httputil.NewSingleHostReverseProxy(u)
	proxy.FlushInterval = -1
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	th.addr = l.Addr().String()
	th.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		th.requests.Add(1)
		blob := r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/")
		if blob {
			th.blobGets.Add(1)
		}
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/manifests/") {
			th.manifests.Add(1)
		}
		if blob {
			w = &slowWriter{ResponseWriter: w, th: th}
		}
		proxy.ServeHTTP(w, r)
	})}
	go th.srv.Serve(l)
	t.Cleanup(func() { th.srv.Close() })
	return th
}

type slowWriter struct {
	http.ResponseWriter
	th *throttle
}

func (s *slowWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		chunk := p
		if s.th.slow.Load() && len(chunk) > 16<<10 {
			chunk = chunk[:16<<10]
		}
		m, err := s.ResponseWriter.Write(chunk)
		n += m
		s.th.sent.Add(int64(m))
		if err != nil {
			return n, err
		}
		if s.th.slow.Load() {
			if f, ok := s.ResponseWriter.(http.Flusher); ok {
				f.Flush()
			}
			time.Sleep(20 * time.Millisecond)
		}
		p = p[m:]
	}
	return n, nil
}

func (s *slowWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// SIGKILL during a download leaves no corrupt blob in the cache, and the next
// build succeeds.
func TestOCIKillDuringDownload(t *testing.T) {
	reg := harness.StartRegistry(t)
	payload := noise(12, 8<<20)
	img := harness.Artifact(t, harness.TitledFile{Title: "kubelet", Data: payload})
	harness.Push(t, reg.Addr+"/k8s/kubelet:v1", img)
	th := startThrottle(t, reg.Addr)
	th.slow.Store(true)
	dir := pullRecipeDir(t, pullRecipe("killed", "amd64", fmt.Sprintf(`    - oci: {ref: "%s/k8s/kubelet:v1", dest: /usr/bin/, mode: "0755"}`, th.addr)))
	cacheDir := filepath.Join(dir, "cache")
	out := filepath.Join(dir, "out")

	cmd := exec.Command(stampBin, "build", "recipe.yaml", "-o", out, "--cache-dir", cacheDir, "--no-cache")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	wait := func() { once.Do(func() { cmd.Wait() }) }
	defer wait()
	deadline := time.Now().Add(30 * time.Second)
	for th.sent.Load() < 1<<20 {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			wait()
			t.Fatalf("the download never got going (%d bytes sent)\n%s", th.sent.Load(), stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	wait()
	if th.sent.Load() >= int64(len(payload)) {
		t.Fatalf("the download finished (%d bytes) before the kill; the test proves nothing", th.sent.Load())
	}
	tmps, _ := os.ReadDir(filepath.Join(cacheDir, "tmp"))
	t.Logf("killed after %d bytes; %d temp file(s) left in the cache", th.sent.Load(), len(tmps))
	checkCacheBlobs(t, cacheDir)
	if got := finalFiles(t, out); len(got) != 0 {
		t.Errorf("the killed build left %v", got)
	}

	th.slow.Store(false)
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", cacheDir).mustSucceed(t)
	idx := harness.TarIndex(harness.ReadTar(t, filepath.Join(out, "killed.tar")))
	if e := idx["/usr/bin/kubelet"]; e.SHA256 != sha256Hex(payload) {
		t.Errorf("kubelet after the retry: %s", e)
	}
	checkCacheBlobs(t, cacheDir)
}

// checkCacheBlobs hashes every blob in the cache against its name.
func checkCacheBlobs(t *testing.T, cacheDir string) {
	t.Helper()
	dir := filepath.Join(cacheDir, "blobs", "sha256")
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, e := range ents {
		if got := sha256Hex(mustReadFile(t, filepath.Join(dir, e.Name()))); got != e.Name() {
			t.Errorf("cache blob %s hashes to %s", e.Name(), got)
		}
	}
}

// The images layer stores an oci-archive per image that skopeo reads under
// the image's name, and that a real containerd imports with the very command
// the first-boot unit runs. An image named by its tag alone is pinned in
// stamp.lock by the build, as oci references are.
func TestOCIImagesLayer(t *testing.T) {
	harness.RequireTools(t, "skopeo")
	reg := harness.StartRegistry(t)
	pause := func(arch string) v1.Image {
		return harness.Image(t, arch, harness.TarLayer(t, harness.TarFile{Name: "pause", Body: "pause for " + arch, Mode: 0o755}))
	}
	pauseRef := reg.Addr + "/pause:3.10"
	pauseDigest := harness.PushIndex(t, pauseRef, multiArch(pause("amd64"), pause("arm64")))
	coredns := harness.Image(t, "amd64", harness.TarLayer(t, harness.TarFile{Name: "coredns", Body: "coredns", Mode: 0o755}))
	corednsRef := reg.Addr + "/coredns/coredns:v1.11.1"
	corednsDigest := harness.Push(t, corednsRef, coredns)
	dir := pullRecipeDir(t, pullRecipe("images", "amd64", fmt.Sprintf(`    - images: ["%s@%s", "%s"]`, pauseRef, pauseDigest, corednsRef)))
	out := filepath.Join(dir, "out")
	stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir).mustSucceed(t)
	lockb, err := os.ReadFile(filepath.Join(dir, "stamp.lock"))
	if err != nil || !strings.Contains(string(lockb), corednsDigest) || strings.Contains(string(lockb), pauseDigest) {
		t.Errorf("stamp.lock should pin %s (tag only) as %s and not the pinned pause: %v\n%s", corednsRef, corednsDigest, err, lockb)
	}
	// A build that writes the cache keeps each archive there once and
	// points the tree at it: the outputs are the same bytes.
	cached, refsCache := filepath.Join(dir, "out-cached"), filepath.Join(dir, "cache-refs")
	stampCached(t, dir, nil, "build", "recipe.yaml", "-o", cached, "--cache-dir", refsCache, "--work-dir", dir).mustSucceed(t)
	if a, b := mustReadFile(t, filepath.Join(out, "SHA256SUMS")), mustReadFile(t, filepath.Join(cached, "SHA256SUMS")); !bytes.Equal(a, b) {
		t.Fatalf("the build with the archives kept in the cache differs:\n%s\nwant\n%s", b, a)
	}
	if kept, _ := os.ReadDir(filepath.Join(refsCache, "records", "image-archive")); len(kept) != 3 { // two records and last/
		t.Fatalf("the cache keeps %d image archive records, want 2", len(kept)-1)
	}
	tarPath := filepath.Join(out, "images.tar")
	idx := harness.TarIndex(harness.ReadTar(t, tarPath))
	sanitize := func(s string) string { return strings.NewReplacer(":", "_", "/", "_").Replace(s) }
	archives := map[string]string{
		pauseRef:   "/var/lib/stamp/images/" + sanitize(pauseRef) + ".tar",
		corednsRef: "/var/lib/stamp/images/" + sanitize(corednsRef) + ".tar",
	}
	unit := string(tarMemberBytes(t, tarPath, "/usr/lib/systemd/system/stamp-import-images.service"))
	for ref, p := range archives {
		e, ok := idx[p]
		if !ok || e.Mode != 0o644 || e.UID != 0 {
			t.Fatalf("archive of %s: %s (present %v)", ref, e, ok)
		}
		if !strings.Contains(unit, "ExecStart=/usr/bin/ctr -n k8s.io images import "+p+"\n") {
			t.Errorf("the unit does not import %s:\n%s", p, unit)
		}
	}
	if e := idx["/etc/systemd/system/multi-user.target.wants/stamp-import-images.service"]; e.Type != tar.TypeSymlink {
		t.Errorf("the import unit is not enabled: %s", e)
	}

	host := t.TempDir()
	files := map[string]string{}
	for ref, p := range archives {
		f := filepath.Join(host, filepath.Base(p))
		if err := os.WriteFile(f, tarMemberBytes(t, tarPath, p), 0o644); err != nil {
			t.Fatal(err)
		}
		files[ref] = f
		outb, err := exec.Command("skopeo", "inspect", "oci-archive:"+f+":"+ref).CombinedOutput()
		if err != nil {
			t.Fatalf("skopeo inspect %s under %s: %v\n%s", f, ref, err, outb)
		}
		var info struct{ Architecture, Digest string }
		json.Unmarshal(outb, &info)
		if info.Architecture != "amd64" {
			t.Errorf("skopeo sees %s as %s", ref, info.Architecture)
		}
		if outb, err := exec.Command("skopeo", "inspect", "oci-archive:"+f+":"+ref+"-wrong").CombinedOutput(); err == nil {
			t.Errorf("skopeo found a name the archive does not hold:\n%s", outb)
		}
	}
	importWithContainerd(t, files)
}

// importWithContainerd starts a throwaway containerd as root and runs the
// unit's import command against it. Where containerd cannot run, skopeo
// above is the judge, and the test says so.
func importWithContainerd(t *testing.T, files map[string]string) {
	if os.Geteuid() != 0 {
		t.Log("not root: cannot start containerd; skopeo was the judge")
		return
	}
	bins := harness.RequireTools(t, "containerd", "ctr")
	root := t.TempDir()
	sock := filepath.Join(root, "c.sock")
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
`, filepath.Join(root, "root"), filepath.Join(root, "state"), sock)
	cfgPath := filepath.Join(root, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logb bytes.Buffer
	cmd := exec.CommandContext(ctx, bins[0], "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = &logb, &logb
	if err := cmd.Start(); err != nil {
		t.Logf("cannot start containerd (%v); skopeo was the judge", err)
		return
	}
	defer func() {
		cancel()
		cmd.Wait()
		// Unpacked snapshots may hold mounts; containerd is gone, remove them.
		exec.Command("umount", "-R", filepath.Join(root, "root")).Run()
	}()
	ready := false
	for i := 0; i < 100 && !ready; i++ {
		ready = exec.Command(bins[1], "--address", sock, "version").Run() == nil
		if !ready {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if !ready {
		t.Logf("containerd did not come up; skopeo was the judge\n%s", logb.String())
		return
	}
	var refs []string
	for ref, f := range files {
		// The unit's command, pointed at the throwaway daemon.
		outb, err := exec.Command(bins[1], "--address", sock, "-n", "k8s.io", "images", "import", f).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr images import %s: %v\n%s", f, err, outb)
		}
		refs = append(refs, ref)
	}
	outb, err := exec.Command(bins[1], "--address", sock, "-n", "k8s.io", "images", "ls", "-q").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, outb)
	}
	for _, ref := range refs {
		if !strings.Contains("\n"+string(outb), "\n"+ref+"\n") {
			t.Errorf("containerd does not know %s after the import; it has:\n%s", ref, outb)
		}
	}
	t.Logf("containerd imported: %s", strings.Join(strings.Fields(string(outb)), " "))
}

// BenchmarkOCIPull pulls about 200 MB of artifacts (two references of two
// 50 MB files) from the local registry into a tree, as the conductor and the
// oci layer do, and reports MB/s beside `skopeo copy` of the same artifacts
// to a dir: destination. Then the stamp binary builds twice through a
// counting proxy: the second build, with a warm cache, must download nothing.
// STAMP_BENCH_MB changes the size of each file.
func BenchmarkOCIPull(b *testing.B) {
	harness.RequireTools(b, "skopeo")
	fileMB := 50
	if s := os.Getenv("STAMP_BENCH_MB"); s != "" {
		fmt.Sscan(s, &fileMB)
	}
	reg := harness.StartRegistry(b)
	var refs []string
	var total int64
	for i, n := range []string{"kubelet-bins", "tools-bins"} {
		a := noise(byte(20+i), fileMB<<20)
		c := noise(byte(30+i), fileMB<<20)
		ref := reg.Addr + "/bench/" + n + ":v1"
		harness.Push(b, ref, harness.Artifact(b, harness.TitledFile{Title: n + "-a", Data: a}, harness.TitledFile{Title: n + "-b", Data: c}))
		refs = append(refs, ref)
		total += int64(len(a) + len(c))
	}
	mb := float64(total) / 1e6
	work := b.TempDir()

	b.ResetTimer()
	var stampTime time.Duration
	for i := 0; i < b.N; i++ {
		dir := filepath.Join(work, fmt.Sprintf("run-%d", i))
		start := time.Now()
		if err := pullIntoTree(context.Background(), dir, refs); err != nil {
			b.Fatal(err)
		}
		stampTime += time.Since(start)
		b.StopTimer()
		os.RemoveAll(dir)
		b.StartTimer()
	}
	b.StopTimer()
	b.SetBytes(total)
	stampMBs := mb * float64(b.N) / stampTime.Seconds()

	var skopeoTime time.Duration
	for i := 0; i < b.N; i++ {
		dest := filepath.Join(work, fmt.Sprintf("skopeo-%d", i))
		if err := os.MkdirAll(dest, 0o755); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		var wg sync.WaitGroup
		errs := make([]error, len(refs))
		for j, ref := range refs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				out, err := exec.Command("skopeo", "copy", "-q", "--src-tls-verify=false", "docker://"+ref,
					"dir:"+filepath.Join(dest, fmt.Sprint(j))).CombinedOutput()
				if err != nil {
					errs[j] = fmt.Errorf("skopeo copy %s: %v\n%s", ref, err, out)
				}
			}()
		}
		wg.Wait()
		skopeoTime += time.Since(start)
		for _, err := range errs {
			if err != nil {
				b.Fatal(err)
			}
		}
		os.RemoveAll(dest)
	}
	skopeoMBs := mb * float64(b.N) / skopeoTime.Seconds()
	b.ReportMetric(stampMBs, "stamp-MB/s")
	b.ReportMetric(skopeoMBs, "skopeo-MB/s")
	b.ReportMetric(stampMBs/skopeoMBs, "x-skopeo")

	// The real binary, cold then warm, through a proxy that counts requests.
	th := startThrottle(b, reg.Addr)
	var layers []string
	for _, ref := range refs {
		layers = append(layers, fmt.Sprintf(`    - oci: {ref: "%s", dest: /usr/bin/, mode: "0755"}`, strings.Replace(ref, reg.Addr, th.addr, 1)))
	}
	dir := filepath.Join(work, "binary")
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, "recipe.yaml"), []byte(pullRecipe("bench", "amd64", strings.Join(layers, "\n"))), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "base.tar"), pullBaseBytes(b), 0o644); err != nil {
		b.Fatal(err)
	}
	build := func(out string) time.Duration {
		start := time.Now()
		cmd := exec.Command(stampBin, "build", "recipe.yaml", "-o", filepath.Join(dir, out), "--cache-dir", filepath.Join(dir, "cache"),
			"--work-dir", dir, "--no-cache")
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}
		if o, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("stamp build: %v\n%s", err, o)
		}
		return time.Since(start)
	}
	cold := build("out-cold")
	coldGets := th.blobGets.Load()
	th.requests.Store(0)
	th.blobGets.Store(0)
	th.manifests.Store(0)
	warm := build("out-warm")
	b.ReportMetric(cold.Seconds(), "cold-build-s")
	b.ReportMetric(warm.Seconds(), "warm-build-s")
	b.ReportMetric(float64(th.blobGets.Load()+th.manifests.Load()), "warm-GETs")
	b.ReportMetric(float64(th.requests.Load()), "warm-requests")
	if coldGets == 0 {
		b.Fatal("the cold build downloaded nothing through the proxy; the count proves nothing")
	}
	if n := th.blobGets.Load() + th.manifests.Load(); n != 0 {
		b.Errorf("the warm build downloaded %d manifests or blobs", n)
	}
}

// pullIntoTree does what a build does for OCI inputs, in process: resolve
// each tag, pull every blob into a fresh cache, apply each artifact to a tree.
func pullIntoTree(ctx context.Context, dir string, refs []string) error {
	c, err := cache.Open(filepath.Join(dir, "cache"), cache.Options{})
	if err != nil {
		return err
	}
	tree, err := rootfs.New(filepath.Join(dir, "tree"), rootfs.Options{DefaultMTime: time.Unix(pullEpoch, 0)})
	if err != nil {
		return err
	}
	defer tree.Close()
	cl := ociremote.New(c, ociremote.Options{})
	manifests := make([]string, len(refs))
	for i, ref := range refs {
		top, err := cl.Head(ctx, ref)
		if err != nil {
			return err
		}
		res, err := cl.Resolve(ctx, ref, top, "linux/amd64")
		if err != nil {
			return err
		}
		manifests[i] = res.Manifest
	}
	var wg sync.WaitGroup
	errs := make([]error, len(refs))
	for i, ref := range refs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = cl.Pull(ctx, ref, manifests[i]) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	mode := uint32(0o755)
	for i, ref := range refs {
		env := &layers.Env{Tree: tree, Cache: c, Log: log, Epoch: time.Unix(pullEpoch, 0), Arch: "amd64", Label: "bench"}
		l := &layers.OCI{Input: layers.Input{Kind: "oci", URI: ref, Digest: manifests[i]}, Dest: "/usr/bin", Mode: &mode}
		if err := l.Apply(ctx, env); err != nil {
			return err
		}
	}
	return nil
}

// Credentials come from the docker config.json chain: a registry behind
// basic auth refuses a build without them and serves one whose
// $HOME/.docker/config.json has them.
func TestOCICredentials(t *testing.T) {
	reg := harness.StartRegistry(t)
	payload := noise(13, 64<<10)
	harness.Push(t, reg.Addr+"/private/tool:v1", harness.Artifact(t, harness.TitledFile{Title: "tool", Data: payload}))
	u, _ := url.Parse("http://" + reg.Addr)
	proxy := httputil.NewSingleHostReverseProxy(u)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var refused atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "stamp" || pass != "s3cret" {
			refused.Add(1)
			w.Header().Set("WWW-Authenticate", `Basic realm="stamp-test"`)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`)
			return
		}
		proxy.ServeHTTP(w, r)
	})}
	go srv.Serve(l)
	defer srv.Close()
	addr := l.Addr().String()
	dir := pullRecipeDir(t, pullRecipe("creds", "amd64", fmt.Sprintf(`    - oci: {ref: "%s/private/tool:v1", dest: /usr/bin/, mode: "0755"}`, addr)))
	out := filepath.Join(dir, "out")
	r := stamp(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache")).
		mustFail(t, 1, addr+"/private/tool:v1", "401", "credentials for "+addr, "config.json")
	t.Logf("without credentials: %s", r.stderr)
	if refused.Load() == 0 {
		t.Fatal("the proxy refused nothing; the test proves nothing")
	}
	// stamp runs with HOME=dir.
	cfg := fmt.Sprintf(`{"auths": {%q: {"auth": "c3RhbXA6czNjcmV0"}}}`, addr) // stamp:s3cret
	writeFiles(t, dir, map[string]string{".docker/config.json": cfg})
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache")).mustSucceed(t)
	if e := harness.TarIndex(harness.ReadTar(t, filepath.Join(out, "creds.tar")))["/usr/bin/tool"]; e.SHA256 != sha256Hex(payload) {
		t.Errorf("tool: %s", e)
	}
}

// A recipe whose arch changes re-pins its tags for the new platform instead
// of reporting them as moved.
func TestOCIArchChangeRepins(t *testing.T) {
	reg := harness.StartRegistry(t)
	amd := harness.Artifact(t, harness.TitledFile{Title: "tool", Data: []byte("amd64")})
	arm := harness.Artifact(t, harness.TitledFile{Title: "tool", Data: []byte("arm64")})
	ref := reg.Addr + "/k8s/multi:v1"
	harness.PushIndex(t, ref, multiArch(amd, arm))
	layer := fmt.Sprintf(`    - oci: {ref: "%s", dest: /usr/bin/}`, ref)
	dir := pullRecipeDir(t, pullRecipe("arch", "amd64", layer))
	cacheDir := filepath.Join(dir, "cache")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out-amd"), "--cache-dir", cacheDir).mustSucceed(t)
	writeFiles(t, dir, map[string]string{"recipe.yaml": pullRecipe("arch", "arm64", layer)})
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out-arm"), "--cache-dir", cacheDir).mustSucceed(t)
	armDigest, _ := arm.Digest()
	if lk := string(mustReadFile(t, filepath.Join(dir, "stamp.lock"))); !strings.Contains(lk, armDigest.String()) || !strings.Contains(lk, "linux/arm64") {
		t.Errorf("stamp.lock after the arch change:\n%s", lk)
	}
	if e := harness.TarIndex(harness.ReadTar(t, filepath.Join(dir, "out-arm", "arch.tar")))["/usr/bin/tool"]; e.SHA256 != sha256Hex([]byte("arm64")) {
		t.Errorf("tool after the arch change: %s", e)
	}

	// An index without the recipe's platform fails naming the ref and what
	// the index has.
	amdOnly := reg.Addr + "/k8s/amd-only:v1"
	harness.PushIndex(t, amdOnly, mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex),
		mutate.IndexAddendum{Add: amd, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "amd64"}}}))
	writeFiles(t, dir, map[string]string{"recipe.yaml": pullRecipe("arch", "arm64", fmt.Sprintf(`    - oci: {ref: "%s", dest: /usr/bin/}`, amdOnly))})
	r := stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out-none"), "--cache-dir", cacheDir).
		mustFail(t, 1, amdOnly, "no manifest for linux/arm64", "available platforms: linux/amd64")
	t.Logf("missing platform: %s", r.stderr)
}
