package verify

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stamp-dev/stamp"
	"github.com/stamp-dev/stamp/recipes"
)

const verifyRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: verify
arch: amd64
epoch: 1700000000
params:
  host: {default: node}
base:
  tarball: ./base.tar
customize:
  layers:
    - files:
        - {path: /etc/hostname, content: "${host}\n"}
        - {path: /etc/overlay/, from: ./overlay/}
outputs:
  - {format: tar}
`

// verifyFixture writes the recipe, a base tarball and an overlay directory
// of several files, so that a reversed directory read has an order to
// reverse.
func verifyFixture(t *testing.T) *recipes.Recipe {
	t.Helper()
	dir := t.TempDir()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range []*tar.Header{
		{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "etc/os-release", Typeflag: tar.TypeReg, Mode: 0o644, Size: 10},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("ID=debian\n"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"base.tar":     b.String(),
		"recipe.yaml":  verifyRecipe,
		"overlay/a":    "a\n",
		"overlay/b/c":  "c\n",
		"overlay/d":    "d\n",
		"overlay/e/ff": "f\n",
	}
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := recipes.LoadWith(filepath.Join(dir, "recipe.yaml"), recipes.Options{Set: map[string]string{"host": "n1"}})
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestVerifyHandsEachBuildItsRun runs Recipe with a build function that
// builds in this process, and checks what each build was asked for: its own
// directories, the parameter values, and for the second build the cache
// alone and reversed directory reads; and that the two builds compare equal.
func TestVerifyHandsEachBuildItsRun(t *testing.T) {
	rec := verifyFixture(t)
	var reqs []BuildRequest
	build := func(ctx context.Context, req BuildRequest) error {
		reqs = append(reqs, req)
		_, err := stamp.Build(ctx, rec, stamp.Options{OutputDir: req.OutputDir, WorkDir: req.WorkDir, CacheDir: req.CacheDir,
			Offline: req.Offline, ReverseReaddir: req.ReverseReaddir, NoCache: req.NoCache, Log: req.Log})
		return err
	}
	out := filepath.Join(t.TempDir(), "verify")
	res, err := Recipe(t.Context(), rec, Options{OutputDir: out, CacheDir: t.TempDir(), Build: build, SameUser: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OK() || len(res.Outputs) != 4 {
		var w bytes.Buffer
		res.Write(&w)
		t.Fatalf("the builds differ or are missing:\n%s", w.String())
	}
	if len(reqs) != 2 {
		t.Fatalf("%d builds, want 2", len(reqs))
	}
	a, b := reqs[0], reqs[1]
	if a.Run.Name != "a" || b.Run.Name != "b" || a.ReverseReaddir || !b.ReverseReaddir || !b.Offline {
		t.Errorf("build a %+v reversed %v; build b %+v reversed %v offline %v",
			a.Run, a.ReverseReaddir, b.Run, b.ReverseReaddir, b.Offline)
	}
	for _, r := range reqs {
		if r.OutputDir != r.Run.Output || r.WorkDir != r.Run.Work || filepath.Dir(r.OutputDir) != out {
			t.Errorf("build %s: output %s, work %s; its run says %s, %s", r.Run.Name, r.OutputDir, r.WorkDir, r.Run.Output, r.Run.Work)
		}
		if !r.NoCache {
			t.Errorf("build %s may take outputs from the other's cache records", r.Run.Name)
		}
		if !filepath.IsAbs(r.Recipe) || !slices.Equal(r.Set, []string{"host=n1"}) {
			t.Errorf("build %s: recipe %s, set %q", r.Run.Name, r.Recipe, r.Set)
		}
	}
}

// TestVerifyFailsWithItsBuild checks that a build that fails fails Recipe,
// and that without a build function Recipe refuses to start.
func TestVerifyFailsWithItsBuild(t *testing.T) {
	rec := verifyFixture(t)
	boom := errors.New("boom")
	_, err := Recipe(t.Context(), rec, Options{Build: func(context.Context, BuildRequest) error { return boom }, SameUser: true})
	if !errors.Is(err, boom) {
		t.Errorf("Recipe with a failing build: %v", err)
	}
	if _, err := Recipe(t.Context(), rec, Options{}); !errors.As(err, new(*recipes.UsageError)) {
		t.Errorf("Recipe without a build function: %v, want a usage error", err)
	}
}
