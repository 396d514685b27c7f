package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// sameOutputDirs fails unless dirs a and b hold the same files with the same
// bytes, the manifest, SBOM, provenance and sums included.
func sameOutputDirs(t *testing.T, a, b string) {
	t.Helper()
	list := func(root string) map[string][]byte {
		out := map[string][]byte{}
		err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			data, err := os.ReadFile(p)
			rel, _ := filepath.Rel(root, p)
			out[rel] = data
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	fa, fb := list(a), list(b)
	var names []string
	for n := range fa {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(fa) != len(fb) || len(fa) == 0 {
		t.Fatalf("%s has %d files, %s has %d", a, len(fa), b, len(fb))
	}
	for _, n := range names {
		if !bytes.Equal(fa[n], fb[n]) {
			t.Errorf("%s differs between %s and %s", n, a, b)
		}
	}
}

// phaseWork tells whether a build's log shows a phase running.
func phaseWork(log string) bool {
	return strings.Contains(log, "phase base") || strings.Contains(log, "sealed ")
}

// TestBuildCache builds every format, then again with the same inputs: the
// second build runs no phase and writes the same bytes, every output taken
// from the cache. A changed host file misses and the log names it; a blob
// damaged in the cache is found, reported and made again; --no-cache builds
// everything; --dry-run says what would come from the cache and why not.
func TestBuildCache(t *testing.T) {
	dir := proofDir(t, map[string]string{"recipe.yaml": proofRecipe("e2e-cache", "", nil, everyFormat)})
	cache := filepath.Join(dir, "cache")
	build := func(out string, extra ...string) result {
		t.Helper()
		args := append([]string{"build", "recipe.yaml", "-o", filepath.Join(dir, out), "--cache-dir", cache, "--work-dir", dir}, extra...)
		return stampCached(t, dir, nil, args...).mustSucceed(t)
	}

	cold := build("cold")
	if !phaseWork(cold.stderr) || !strings.Contains(cold.stderr, "no earlier build of e2e-cache in the cache") {
		t.Fatalf("cold build:\n%s", lastLines(cold.stderr, 20))
	}
	plan := stampCached(t, dir, nil, "build", "recipe.yaml", "--cache-dir", cache, "--dry-run").mustSucceed(t)
	if !strings.Contains(plan.stdout, "nothing to build") || !strings.Contains(plan.stdout, "base.tarball") {
		t.Fatalf("dry run after a build:\n%s", plan.stdout)
	}
	warm := build("warm")
	if phaseWork(warm.stderr) || !strings.Contains(warm.stderr, "no phase runs") {
		t.Fatalf("warm build ran phases:\n%s", warm.stderr)
	}
	sameOutputDirs(t, filepath.Join(dir, "cold"), filepath.Join(dir, "warm"))

	// --no-cache builds everything, and the bytes are the same again.
	forced := build("forced", "--no-cache")
	if !phaseWork(forced.stderr) {
		t.Fatalf("--no-cache ran no phase:\n%s", lastLines(forced.stderr, 20))
	}
	sameOutputDirs(t, filepath.Join(dir, "cold"), filepath.Join(dir, "forced"))

	// A cached output damaged on disk is found when it is read, removed
	// and written again; the build's bytes do not change.
	raw := fileSHA256(t, filepath.Join(dir, "cold", "e2e-cache.raw"))
	blob := filepath.Join(cache, "blobs", "sha256", raw)
	f, err := os.OpenFile(blob, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("the raw disk is not in the cache as a blob: %v", err)
	}
	if _, err := f.WriteAt([]byte("damaged"), 1<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	healed := build("healed")
	if !strings.Contains(healed.stderr, "corrupt blob in cache") || !phaseWork(healed.stderr) {
		t.Fatalf("damaged cache blob:\n%s", lastLines(healed.stderr, 30))
	}
	sameOutputDirs(t, filepath.Join(dir, "cold"), filepath.Join(dir, "healed"))
	if got := fileSHA256(t, blob); got != raw {
		t.Fatalf("the damaged blob was not replaced: %s", got)
	}

	// A changed host file misses, and the miss says which file.
	writeFiles(t, dir, map[string]string{"dpkg/status": dpkgStatus + "\n"})
	plan = stampCached(t, dir, nil, "build", "recipe.yaml", "--cache-dir", cache, "--dry-run").mustSucceed(t)
	if !strings.Contains(plan.stdout, "built: since the last build of e2e-cache: files customize.layers[0].files dpkg/status changed") {
		t.Fatalf("dry run after an edit:\n%s", plan.stdout)
	}
	edited := build("edited")
	if !phaseWork(edited.stderr) || !strings.Contains(edited.stderr, "dpkg/status changed") {
		t.Fatalf("build after an edit:\n%s", lastLines(edited.stderr, 20))
	}
	if fileSHA256(t, filepath.Join(dir, "edited", "e2e-cache.raw")) == raw {
		t.Fatal("an edited input gave the cached disk")
	}
}
