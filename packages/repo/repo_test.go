package repo

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	return Source{URL: url, Suite: r.Suite, Components: []string{r.Component}, Arch: r.Arch, Keyring: kr}
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

func debianKeyring(t *testing.T) []byte {
	b, err := os.ReadFile("/usr/share/keyrings/debian-archive-keyring.gpg")
	if err != nil {
		t.Skip("no Debian archive keyring on this machine")
	}
	return b
}

// TestVerifyDebianInRelease checks the real Debian archive signature that
// apt verified on this machine, when apt's lists hold an InRelease.
func TestVerifyDebianInRelease(t *testing.T) {
	found, _ := filepath.Glob("/var/lib/apt/lists/*_InRelease")
	if len(found) == 0 {
		t.Skip("no InRelease in /var/lib/apt/lists")
	}
	kr, err := ReadKeyring(debianKeyring(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range found {
		if !strings.Contains(f, "debian.org") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, err := VerifyInRelease(b, kr)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(rel.Files) == 0 {
			t.Errorf("%s: no files", f)
		}
	}
}
