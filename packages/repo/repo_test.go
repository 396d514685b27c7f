package repo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/test/harness"
)

func newCache(t *testing.T) *cache.Cache {
	t.Helper()
	l := logrus.New()
	l.SetOutput(ioDiscard{})
	c, err := cache.Open(t.TempDir(), cache.Options{Log: l})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

type ioDiscard struct{}

func (ioDiscard) Write(p []byte) (int, error) { return len(p), nil }

func keyring(t *testing.T, r *harness.DebRepo) []byte {
	t.Helper()
	b, err := os.ReadFile(r.Keyring)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func source(t *testing.T, r *harness.DebRepo, url string) Source {
	t.Helper()
	kr, err := ReadKeyring(keyring(t, r))
	if err != nil {
		t.Fatal(err)
	}
	s := Source{URL: url, Suite: r.Suite, Arch: r.Arch, Keyring: kr}
	if r.Component != "" {
		s.Components = []string{r.Component}
	}
	return s
}

// TestLoadRealRepository reads the signed test repository over file:// and
// HTTP and checks every package against the pool, and fetches a .deb.
func TestLoadRealRepository(t *testing.T) {
	r := harness.DebRepoFor(t)
	ctx := context.Background()
	for name, url := range map[string]string{"file": r.FileURL(), "http": harness.ServeDebRepo(t, r.Dir)} {
		t.Run(name, func(t *testing.T) {
			c := newCache(t)
			idx, err := Load(ctx, c, source(t, r, url), "")
			if err != nil {
				t.Fatal(err)
			}
			if idx.Release.Signer == "" {
				t.Error("no signer recorded")
			}
			if len(idx.Packages) != len(r.Debs) {
				t.Errorf("%d packages in the index, %d debs in the pool", len(idx.Packages), len(r.Debs))
			}
			var socat *Package
			for _, p := range idx.Packages {
				if p.Name == "socat" {
					socat = p
				}
			}
			if socat == nil || len(socat.Depends) == 0 {
				t.Fatalf("socat not found or without Depends: %+v", socat)
			}
			d, err := FetchDeb(ctx, c, socat)
			if err != nil {
				t.Fatal(err)
			}
			if d != "sha256:"+socat.SHA256 {
				t.Errorf("digest %s, index says %s", d, socat.SHA256)
			}
			// Trusted mode reads the unsigned Release.
			s := source(t, r, url)
			s.Trusted, s.Keyring = true, nil
			if _, err := Load(ctx, c, s, ""); err != nil {
				t.Errorf("trusted: %v", err)
			}
		})
	}
}

// TestLoadFlatRepository reads a flat repository ("deb URL /", as the
// Kubernetes project publishes one): Release and Packages at the URL
// itself, Filename relative to it, no components.
func TestLoadFlatRepository(t *testing.T) {
	// Upstream's flat repository lists every architecture in one index:
	// a package of another one must be left out.
	r := harness.FlatDebRepoFor(t, harness.DebRepoFor(t), foreignDeb(t, "arm64"))
	ctx := context.Background()
	for name, url := range map[string]string{"file": r.FileURL(), "http": harness.ServeDebRepo(t, r.Dir)} {
		t.Run(name, func(t *testing.T) {
			c := newCache(t)
			s := source(t, r, url)
			if !s.Flat() || len(s.Components) != 0 {
				t.Fatalf("the harness's flat repository reads as suite %q, components %v", s.Suite, s.Components)
			}
			if want := strings.TrimSuffix(url, "/") + "/InRelease"; s.ReleaseURL() != want {
				t.Errorf("ReleaseURL = %s, want %s", s.ReleaseURL(), want)
			}
			idx, err := Load(ctx, c, s, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(idx.Packages) != len(r.Debs)-1 {
				t.Errorf("%d packages in the index, want the %d debs of the repository less the arm64 one", len(idx.Packages), len(r.Debs))
			}
			for _, p := range idx.Packages {
				if p.Arch != "amd64" && p.Arch != "all" {
					t.Errorf("%s is in the amd64 index", p.ID())
				}
			}
			for u := range idx.Files {
				if strings.Contains(u, "/dists/") {
					t.Errorf("read %s: a flat repository has no dists/", u)
				}
			}
			for _, p := range idx.Packages {
				if p.Name != "socat" {
					continue
				}
				if want := strings.TrimSuffix(url, "/") + "/" + r.Debs["socat"]; p.URL() != want {
					t.Errorf("socat's URL = %s, want %s", p.URL(), want)
				}
				if _, err := FetchDeb(ctx, c, p); err != nil {
					t.Error(err)
				}
			}
			s.Components = []string{"main"}
			if _, err := Load(ctx, c, s, ""); err == nil || !strings.Contains(err.Error(), "no components") {
				t.Errorf("components on a flat repository: err = %v", err)
			}
		})
	}
}

// foreignDeb builds an empty package of another architecture with dpkg-deb.
func foreignDeb(t *testing.T, arch string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "pkg", "DEBIAN"), 0o755); err != nil {
		t.Fatal(err)
	}
	control := "Package: stamp-foreign\nVersion: 1.0\nArchitecture: " + arch + "\nMaintainer: stamp <stamp@stamp.invalid>\nDescription: a package of another architecture\n"
	if err := os.WriteFile(filepath.Join(dir, "pkg", "DEBIAN", "control"), []byte(control), 0o644); err != nil {
		t.Fatal(err)
	}
	deb := filepath.Join(dir, "stamp-foreign_1.0_"+arch+".deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", filepath.Join(dir, "pkg"), deb).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb --build: %v\n%s", err, out)
	}
	return deb
}

func TestLoadRefusesTampering(t *testing.T) {
	shared := harness.DebRepoFor(t)
	ctx := context.Background()

	t.Run("signature", func(t *testing.T) {
		r := harness.CopyDebRepo(t, shared)
		p := filepath.Join(r.Dir, "dists/stamp/InRelease")
		b, _ := os.ReadFile(p)
		b = bytes.Replace(b, []byte("Suite: stamp"), []byte("Suite: stamq"), 1)
		os.WriteFile(p, b, 0o644)
		_, err := Load(ctx, newCache(t), source(t, r, r.FileURL()), "")
		if !errors.Is(err, ErrSignature) {
			t.Fatalf("err = %v, want a signature error", err)
		}
	})
	t.Run("other key", func(t *testing.T) {
		r := harness.CopyDebRepo(t, shared)
		s := source(t, r, r.FileURL())
		kr, err := ReadKeyring(debianKeyring(t))
		if err != nil {
			t.Fatal(err)
		}
		s.Keyring = kr
		_, err = Load(ctx, newCache(t), s, "")
		if !errors.Is(err, ErrSignature) || !strings.Contains(err.Error(), "not signed by any key") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("no keyring", func(t *testing.T) {
		s := source(t, shared, shared.FileURL())
		s.Keyring = nil
		if _, err := Load(ctx, newCache(t), s, ""); err == nil || !strings.Contains(err.Error(), "no keyring") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("index", func(t *testing.T) {
		r := harness.CopyDebRepo(t, shared)
		p := filepath.Join(r.Dir, "dists/stamp/main/binary-amd64/Packages.gz")
		b, _ := os.ReadFile(p)
		b[len(b)/2] ^= 1
		os.WriteFile(p, b, 0o644)
		_, err := Load(ctx, newCache(t), source(t, r, r.FileURL()), "")
		var mm *cache.MismatchError
		if !errors.As(err, &mm) || !strings.Contains(err.Error(), "Packages.gz") {
			t.Fatalf("err = %v, want a mismatch naming Packages.gz", err)
		}
	})
	t.Run("deb", func(t *testing.T) {
		r := harness.CopyDebRepo(t, shared)
		c := newCache(t)
		idx, err := Load(ctx, c, source(t, r, r.FileURL()), "")
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(r.Dir, r.Debs["socat"])
		b, _ := os.ReadFile(p)
		b[len(b)-10] ^= 1
		os.WriteFile(p, b, 0o644)
		for _, pk := range idx.Packages {
			if pk.Name == "socat" {
				_, err := FetchDeb(ctx, c, pk)
				var mm *cache.MismatchError
				if !errors.As(err, &mm) || !strings.Contains(err.Error(), "socat") {
					t.Fatalf("err = %v, want a mismatch naming socat", err)
				}
				return
			}
		}
		t.Fatal("socat not in index")
	})
}

// debianKeyring reads Debian's archive keyring from its package, so the test
// needs neither the host's copy nor its version of it.
func debianKeyring(t *testing.T) []byte {
	t.Helper()
	deb := harness.Debs(t, "debian-archive-keyring")[0]
	x := t.TempDir()
	if out, err := exec.Command("dpkg-deb", "-x", deb, x).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -x %s: %v\n%s", deb, err, out)
	}
	b, err := os.ReadFile(filepath.Join(x, "usr/share/keyrings/debian-archive-keyring.gpg"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// debianInReleases has apt fetch the InRelease of every Debian source the
// host is configured with into a private lists directory, and nothing else,
// so the test never reads the host's apt lists (which may be missing or old).
func debianInReleases(t *testing.T) []string {
	t.Helper()
	harness.Tool(t, "apt-get")
	dir := t.TempDir()
	lists, cacheDir := filepath.Join(dir, "lists"), filepath.Join(dir, "cache")
	for _, d := range []string{filepath.Join(lists, "partial"), cacheDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"update", "-q", "-o", "Dir::State::Lists=" + lists, "-o", "Dir::Cache=" + cacheDir,
		"-o", "Acquire::Languages=none"}
	for _, target := range []string{"Packages", "Translations", "DEP-11", "DEP-11-icons", "DEP-11-icons-hidpi"} {
		args = append(args, "-o", "Acquire::IndexTargets::deb::"+target+"::DefaultEnabled=false")
	}
	if os.Geteuid() == 0 {
		// As root apt drops to _apt, which cannot write a directory root made.
		args = append(args, "-o", "APT::Sandbox::User=root")
	}
	if out, err := exec.Command("apt-get", args...).CombinedOutput(); err != nil {
		t.Fatalf("apt-get update into %s: %v\n%s", lists, err, out)
	}
	found, err := filepath.Glob(filepath.Join(lists, "*_InRelease"))
	if err != nil {
		t.Fatal(err)
	}
	if len(found) == 0 {
		t.Fatalf("apt-get update fetched no InRelease into %s", lists)
	}
	return found
}

// TestVerifyDebianInRelease checks the real Debian archive signatures, as
// apt fetches them now, against Debian's keyring.
func TestVerifyDebianInRelease(t *testing.T) {
	kr, err := ReadKeyring(debianKeyring(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range debianInReleases(t) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := VerifyInRelease(b, kr)
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
			continue
		}
		if len(rel.Files) == 0 {
			t.Errorf("%s: no files", filepath.Base(f))
		}
	}
}

// mirror serves a repository directory as nginx does: Range, and a strong
// ETag of the file's mtime and size.
func mirror(dir string) http.Handler {
	files := http.FileServer(http.Dir(dir))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(path.Clean("/"+r.URL.Path)))); err == nil && fi.Mode().IsRegular() {
			w.Header().Set("ETag", fmt.Sprintf(`"%x-%x"`, fi.ModTime().Unix(), fi.Size()))
		}
		files.ServeHTTP(w, r)
	})
}

// TestLoadThroughFaults reads the signed repository and fetches every
// .deb through a mirror that breaks: the InRelease answered 503, the
// Packages index cut short, every .deb reset half-way and one stalled. The
// index and every .deb arrive verified, the cut ones resumed, and nothing
// half-written stays in the cache.
func TestLoadThroughFaults(t *testing.T) {
	r := harness.DebRepoFor(t)
	srv := harness.NewFaultServer(t, mirror(r.Dir))
	srv.Add(
		harness.Fault{Kind: harness.Status, Status: 503, RetryAfter: "0", Match: harness.PathHas("/InRelease"), Times: 1},
		harness.Fault{Kind: harness.Truncate, After: 512, Match: harness.PathHas("/Packages"), Times: 1},
		harness.Fault{Kind: harness.Stall, After: 1024, Match: harness.PathHas(".deb"), Times: 1},
		harness.Fault{Kind: harness.ResetMidBody, After: 2048, Match: func(q *http.Request) bool {
			return strings.HasSuffix(q.URL.Path, ".deb") && q.Header.Get("Range") == ""
		}},
	)
	c, err := cache.Open(t.TempDir(), cache.Options{Retry: cache.Retry{Attempts: 3, Backoff: time.Millisecond, IdleTimeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	idx, err := Load(ctx, c, source(t, r, srv.URL), "")
	if err != nil {
		t.Fatal(err)
	}
	var debs []*Package
	for _, p := range idx.Packages {
		// The kernel and firmware add minutes of copying and prove nothing more.
		if p.Size < 4<<20 {
			debs = append(debs, p)
		}
	}
	if len(debs) < 20 {
		t.Fatalf("only %d small .debs in the test repository", len(debs))
	}
	for _, p := range debs {
		d, err := FetchDeb(ctx, c, p)
		if err != nil {
			t.Fatal(err)
		}
		if d != "sha256:"+p.SHA256 {
			t.Fatalf("%s: %s, the index says %s", p.Name, d, p.SHA256)
		}
	}
	resumed := map[string]bool{}
	for _, s := range srv.Seen() {
		if strings.HasSuffix(s.Path, ".deb") && strings.HasPrefix(s.Range, "bytes=") {
			resumed[s.Path] = true
		}
	}
	for _, p := range debs {
		// A .deb shorter than the reset point is sent whole before it.
		if u := "/" + p.Filename; p.Size > 4096 && !resumed[u] {
			t.Errorf("%s was not resumed after its reset", u)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(c.Dir(), "tmp")); len(ents) != 0 {
		t.Errorf("temp files left: %v", ents)
	}
}
