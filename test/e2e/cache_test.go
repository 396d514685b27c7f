package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/test/harness"
)

// sameOutputDirs fails unless dirs a and b hold the same files with the same
// bytes, the manifest, SBOM, provenance and sums included.
func sameOutputDirs(t testing.TB, a, b string) {
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
	return strings.Contains(log, `msg="phase base"`) || strings.Contains(log, `msg="sealed `)
}

// TestBuildCache builds every format, then again with the same inputs: the
// second build runs no phase and writes the same bytes, every output taken
// from the cache. A changed host file misses and the log names it; a blob
// damaged in the cache is found, reported and made again; --no-cache builds
// everything; --dry-run says what would come from the cache and why not.
func TestBuildCache(t *testing.T) {
	dir := proofDir(t, map[string]string{"recipe.yaml": proofRecipe("e2e-cache", "", nil, everyFormat)})
	cache := filepath.Join(dir, "cache")
	build := cachedBuilder(t, dir, cache)

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

	// Outputs taken from the cache share its blocks or its inode. An output
	// edited in place (a disk booted read-write) is a changed blob: the next
	// build finds it when it reads the blob, removes it from the cache,
	// says so, and builds the disk again with the same bytes as before.
	sums, err := os.ReadFile(filepath.Join(dir, "cold", "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	raw := fileSHA256(t, filepath.Join(dir, "warm", "e2e-cache.raw"))
	f, err := os.OpenFile(filepath.Join(dir, "warm", "e2e-cache.raw"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("booted"), 1<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	healed := build("healed")
	if !strings.Contains(healed.stderr, "corrupt blob in cache") || !phaseWork(healed.stderr) {
		t.Fatalf("an output edited in place:\n%s", lastLines(healed.stderr, 30))
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "healed", "SHA256SUMS")); !bytes.Equal(got, sums) {
		t.Fatalf("healed build's sums differ:\n%s\nwant\n%s", got, sums)
	}
	if got := fileSHA256(t, filepath.Join(dir, "healed", "e2e-cache.raw")); got != raw {
		t.Fatalf("healed build's disk is %s, not %s", got, raw)
	}
	if got := fileSHA256(t, filepath.Join(cache, "blobs", "sha256", raw)); got != raw {
		t.Fatalf("the damaged blob was not replaced: %s", got)
	}
	// A second warm build takes the healed blob.
	again := build("again")
	if phaseWork(again.stderr) {
		t.Fatalf("build after healing ran phases:\n%s", lastLines(again.stderr, 20))
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

// TestSharedCache stands two CI runners with empty disks beside a local
// registry: the first builds and shares its cache there, the second builds
// the same recipe in a cache directory of its own, runs no phase and writes
// the same bytes. A blob damaged in the registry is found, reported and
// built again by a third runner, whose bytes are still the same.
func TestSharedCache(t *testing.T) {
	reg := harness.StartRegistry(t)
	ref := reg.Addr + "/stamp-cache"
	// An input pulled by digest: a runner that finds the build in the
	// shared cache needs none of it.
	kubelet := []byte("a kubelet, pulled only by a runner that builds\n")
	tool := harness.Push(t, reg.Addr+"/k8s/tool:v1", harness.Artifact(t, harness.TitledFile{Title: "kubelet", Data: kubelet}))
	pull := fmt.Sprintf("    - oci: {ref: \"%s/k8s/tool@%s\", dest: /usr/local/bin/, mode: \"0755\"}\n", reg.Addr, tool)
	dir := proofDir(t, map[string]string{"recipe.yaml": proofRecipe("e2e-shared", pull, nil, everyFormat)})
	layerBlob := func(runner string) string {
		sum := sha256.Sum256(kubelet)
		return filepath.Join(dir, runner+"-cache", "blobs", "sha256", hex.EncodeToString(sum[:]))
	}
	runner := func(name string, extra ...string) result {
		t.Helper()
		args := append([]string{"build", "recipe.yaml", "-o", filepath.Join(dir, name), "--cache-dir", filepath.Join(dir, name+"-cache"),
			"--work-dir", dir}, extra...)
		return stampCached(t, dir, nil, args...).mustSucceed(t)
	}

	first := runner("first", "--cache-to", ref)
	if !phaseWork(first.stderr) || !strings.Contains(first.stderr, "pushed shared cache entry") {
		t.Fatalf("first runner:\n%s", lastLines(first.stderr, 30))
	}
	// The base's phase is kept in the runner's cache as references into
	// the uncompressed base, which is not shared: a runner without it
	// unpacks the tarball faster than it pulls the archive.
	archive := uncompressedSHA256(t, filepath.Join(dir, "base.tar.zst"))
	if _, err := os.Stat(filepath.Join(dir, "first-cache", "blobs", "sha256", archive)); err != nil {
		t.Fatalf("the first runner's cache does not keep the base's archive: %v", err)
	}
	if _, err := os.Stat(reg.BlobPath(archive)); err == nil {
		t.Fatal("the base's archive was pushed to the shared cache")
	}
	second := runner("second", "--cache-from", ref, "--cache-to", ref)
	if phaseWork(second.stderr) || !strings.Contains(second.stderr, "no phase runs") || !strings.Contains(second.stderr, "from "+ref) {
		t.Fatalf("second runner did phase work or did not use the shared cache:\n%s", second.stderr)
	}
	sameOutputDirs(t, filepath.Join(dir, "first"), filepath.Join(dir, "second"))
	if _, err := os.Stat(layerBlob("first")); err != nil {
		t.Fatalf("the first runner did not pull the oci input: %v", err)
	}
	if _, err := os.Stat(layerBlob("second")); err == nil {
		t.Fatal("the second runner pulled an input although the shared cache held the whole build")
	}

	// Damage the raw disk's blob where the registry keeps it, keeping its
	// length: only its hash can tell.
	raw := fileSHA256(t, filepath.Join(dir, "first", "e2e-shared.raw"))
	blob := reg.BlobPath(raw)
	f, err := os.OpenFile(blob, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("the raw disk is not in the registry: %v", err)
	}
	if _, err := f.WriteAt([]byte("damaged"), 1<<20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	third := runner("third", "--cache-from", ref)
	if !phaseWork(third.stderr) || !strings.Contains(third.stderr, "ignoring the shared output record of e2e-shared/raw") ||
		!strings.Contains(third.stderr, ref) {
		t.Fatalf("third runner took a damaged shared entry or did not say so:\n%s", lastLines(third.stderr, 30))
	}
	sameOutputDirs(t, filepath.Join(dir, "first"), filepath.Join(dir, "third"))
	if c := filepath.Join(dir, "third-cache", "blobs", "sha256", raw); fileSHA256(t, c) != raw {
		t.Fatalf("the third runner's cache holds a damaged raw disk")
	}
}

// TestPhaseCache changes only the provision phase of a recipe whose
// customize phase installs packages: the rebuild restores the tree as it was
// after the packages from the cache, runs customize's last layer (files, not
// worth keeping) and provision, and writes what a build without the cache
// writes. A runner with an empty cache does the same from the registry the
// first build shared its cache through: the large host file the kept tree
// points at is shared with it. A change in that last customize layer, the
// usual one-line change, starts from the same tree and installs nothing.
func TestPhaseCache(t *testing.T) {
	harness.RequireTools(t, "dpkg", "tar")
	reg := harness.StartRegistry(t)
	ref := reg.Addr + "/stamp-phases"
	repo := harness.DebRepoFor(t)
	base := harness.DpkgBaseFor(t)
	recipe := func(issue, motd string, added ...string) string {
		return fmt.Sprintf(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: e2e-phases
epoch: 1700000000
base:
  tarball: ./base.tar.zst
customize:
  layers:
    - tarball: {path: ./dpkgdb.tar}
    - files:
        - {path: /usr/bin/kubelet, from: ./kubelet, mode: "0755"}
    - debs:
        repo: %q
        suite: stamp
        components: [main]
        keyring: ./keyring.gpg
        packages: [netcat-openbsd, logrotate]
    - files:
        - {path: /etc/issue.stamp, content: %q}
%sprovision:
  layers:
    - files:
        - {path: /etc/motd, content: %q}
    - hook: ./hooks/listing.sh
outputs:
  - {format: tar, name: rootfs}
  - format: raw
    partitions:
      - {name: root, type: root, size: auto, filesystem: ext4}
`, repo.FileURL(), issue, strings.Join(added, ""), motd)
	}
	dir := debsDir(t, repo, base, recipe("a\n", "one\n"))
	// The hook reads the tree's directory, which a restored tree holds
	// whole only once it is materialized: its directories and symlinks are
	// made on disk when something needs them. The listing, in the image,
	// must be a build without the cache's.
	writeFiles(t, dir, map[string]string{"hooks/listing.sh": "#!/bin/sh\nset -e\ncd \"$STAMP_ROOT\"\n" +
		"find . \\( -type d -o -type l \\) -printf '%p %y %m %l\\n' | LC_ALL=C sort >etc/stamp-listing\n"})
	if err := os.Chmod(filepath.Join(dir, "hooks", "listing.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	kubelet := bytes.Repeat([]byte("a stand-in for kubelet, larger than a MiB\n"), 60000)
	if err := os.WriteFile(filepath.Join(dir, "kubelet"), kubelet, 0o755); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "cache")
	build := cachedBuilder(t, dir, cache)
	first := build("first", "--cache-to", ref)
	if !strings.Contains(first.stderr, `msg="phase customize"`) || !strings.Contains(first.stderr, "customize.layers[2].debs: installing") {
		t.Fatalf("first build:\n%s", lastLines(first.stderr, 20))
	}
	const head = "the tree after customize.layers[2].debs"
	// started tells whether a build restored the tree after the packages
	// and ran only what comes after them.
	started := func(r result) bool {
		return strings.Contains(r.stderr, head+" is in the cache") &&
			strings.Contains(r.stderr, `msg="phase customize, from customize.layers[3].files"`) &&
			!strings.Contains(r.stderr, `msg="phase base"`) && !strings.Contains(r.stderr, "installing") &&
			strings.Contains(r.stderr, `msg="phase provision"`)
	}
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe("a\n", "two\n")})
	plan := stampCached(t, dir, nil, "build", "recipe.yaml", "--cache-dir", cache, "--dry-run").mustSucceed(t)
	if !strings.Contains(plan.stdout, head+": from the cache") {
		t.Fatalf("dry run after a change in provision:\n%s", plan.stdout)
	}
	second := build("second")
	if !started(second) {
		t.Fatalf("a change in provision did not start from the kept tree:\n%s", lastLines(second.stderr, 30))
	}
	build("full", "--no-cache")
	sameOutputDirs(t, filepath.Join(dir, "full"), filepath.Join(dir, "second"))
	elsewhere := cachedBuilder(t, dir, filepath.Join(dir, "elsewhere-cache"))("elsewhere", "--cache-from", ref)
	if !started(elsewhere) || !strings.Contains(elsewhere.stderr, "phase record of e2e-phases/customize.layers[2].debs from "+ref) {
		t.Fatalf("a runner with an empty cache did not start from the shared kept tree:\n%s", lastLines(elsewhere.stderr, 30))
	}
	sameOutputDirs(t, filepath.Join(dir, "full"), filepath.Join(dir, "elsewhere"))
	if bytes.Equal(mustReadFile(t, filepath.Join(dir, "first", "SHA256SUMS")), mustReadFile(t, filepath.Join(dir, "second", "SHA256SUMS"))) {
		t.Fatal("the change in provision changed nothing: the test proves nothing")
	}

	// The one-line change in customize, after its packages.
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe("b\n", "two\n")})
	third := build("third")
	if !started(third) {
		t.Fatalf("a change in customize after its packages did not start from the kept tree:\n%s", lastLines(third.stderr, 30))
	}
	// The kept tree's files point into its content in the cache: none is
	// written to the work directory or hashed again.
	if !strings.Contains(third.stderr, "their content read in place from the cache") {
		t.Fatalf("the kept tree was restored by copying its files:\n%s", lastLines(third.stderr, 30))
	}
	build("full-third", "--no-cache")
	sameOutputDirs(t, filepath.Join(dir, "full-third"), filepath.Join(dir, "third"))
	if listing := string(tarMemberBytes(t, filepath.Join(dir, "third", "e2e-phases-rootfs.tar"), "/etc/stamp-listing")); !strings.Contains(listing, "\n./etc d ") {
		t.Fatalf("the hook's listing of the restored tree:\n%s", listing)
	}
	if bytes.Equal(mustReadFile(t, filepath.Join(dir, "second", "SHA256SUMS")), mustReadFile(t, filepath.Join(dir, "third", "SHA256SUMS"))) {
		t.Fatal("the change in customize changed nothing: the test proves nothing")
	}

	// A package added in a debs layer of its own after the last layer, as
	// a fleet adds its agent: the recipe now keeps the tree after that
	// layer, which no build has made, so the build starts from the tree
	// after the packages installed before, and installs only the new one.
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe("b\n", "two\n", fmt.Sprintf(`    - debs:
        repo: %q
        suite: stamp
        components: [main]
        keyring: ./keyring.gpg
        packages: [socat]
`, repo.FileURL()))})
	plan = stampCached(t, dir, nil, "build", "recipe.yaml", "--cache-dir", cache, "--dry-run").mustSucceed(t)
	if !strings.Contains(plan.stdout, "the tree after phase customize: built") || !strings.Contains(plan.stdout, head+": from the cache") {
		t.Fatalf("dry run after a package was added:\n%s", plan.stdout)
	}
	fourth := build("fourth")
	if !strings.Contains(fourth.stderr, head+" is in the cache") ||
		!strings.Contains(fourth.stderr, `msg="phase customize, from customize.layers[3].files"`) ||
		strings.Contains(fourth.stderr, "customize.layers[2].debs: installing") ||
		!strings.Contains(fourth.stderr, "customize.layers[4].debs: installing") {
		t.Fatalf("a package added after the last layer did not start from the tree after the packages before it:\n%s", lastLines(fourth.stderr, 30))
	}
	build("full-fourth", "--no-cache")
	sameOutputDirs(t, filepath.Join(dir, "full-fourth"), filepath.Join(dir, "fourth"))
	// The added package is in the image (tarMemberBytes fails the test
	// otherwise).
	tarMemberBytes(t, filepath.Join(dir, "fourth", "e2e-phases-rootfs.tar"), "/usr/bin/socat")
}

// cachedBuilder builds recipe.yaml in dir into dir/OUT with the build cache
// in cache, and fails the test unless the build succeeds.
func cachedBuilder(t *testing.T, dir, cache string) func(out string, extra ...string) result {
	return func(out string, extra ...string) result {
		t.Helper()
		args := append([]string{"build", "recipe.yaml", "-o", filepath.Join(dir, out), "--cache-dir", cache, "--work-dir", dir}, extra...)
		return stampCached(t, dir, nil, args...).mustSucceed(t)
	}
}

// TestPhaseCacheByReference changes only the customize phase of a recipe of
// a tarball base and files: the first build keeps no copy of the base in its
// work directory, since the base's files point into its archive in the
// cache; the rebuild restores the tree after the base from the cache, as
// references into that archive, runs the other phases, and writes what a
// build without the cache writes. A host file of a few MiB, a stand-in for
// a Kubernetes binary, is kept in the cache and pointed at, never written
// to the work directory either.
func TestPhaseCacheByReference(t *testing.T) {
	recipe := func(motd string) string {
		return proofRecipe("e2e-refs", fmt.Sprintf("        - {path: /etc/motd, content: %q}\n", motd)+
			"        - {path: /usr/bin/kubelet, from: ./kubelet, mode: \"0755\"}\n", nil,
			"outputs:\n"+rawOutputs+"  - {format: tar, name: rootfs}\n")
	}
	dir := proofDir(t, map[string]string{"recipe.yaml": recipe("one\n")})
	kubelet := bytes.Repeat([]byte("a stand-in for kubelet, larger than a MiB\n"), 80000)
	if err := os.WriteFile(filepath.Join(dir, "kubelet"), kubelet, 0o755); err != nil {
		t.Fatal(err)
	}
	kubeletSum := sha256.Sum256(kubelet)
	cache := filepath.Join(dir, "cache")
	build := cachedBuilder(t, dir, cache)
	first := build("first", "--keep-work")
	_, work, ok := strings.Cut(first.stderr, "keeping work directory ")
	if !ok {
		t.Fatalf("first build:\n%s", lastLines(first.stderr, 20))
	}
	work, _, _ = strings.Cut(work, `"`)
	var files []string
	filepath.WalkDir(work, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			files = append(files, strings.TrimPrefix(p, work))
		}
		return err
	})
	entries := bytes.Count(mustReadFile(t, filepath.Join(dir, "first", "manifest.txt")), []byte("\n"))
	// The files layers', the seal's and the device placeholders are
	// written; the base's files are not.
	if len(files) > 16 || entries < 1000 || slices.Contains(files, "/tree/usr/bin/kubelet") {
		t.Fatalf("the work directory holds %d files (the tree has %d entries): %v", len(files), entries, files)
	}
	if _, err := os.Stat(filepath.Join(cache, "blobs", "sha256", hex.EncodeToString(kubeletSum[:]))); err != nil {
		t.Fatalf("the large host file is not kept in the cache: %v", err)
	}
	os.RemoveAll(work)

	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe("two\n")})
	plan := stampCached(t, dir, nil, "build", "recipe.yaml", "--cache-dir", cache, "--dry-run").mustSucceed(t)
	if !strings.Contains(plan.stdout, "the tree after phase base: from the cache") {
		t.Fatalf("dry run after a change in customize:\n%s", plan.stdout)
	}
	second := build("second")
	if !strings.Contains(second.stderr, "the tree after phase base is in the cache") ||
		strings.Contains(second.stderr, `msg="phase base"`) || !strings.Contains(second.stderr, `msg="phase customize"`) {
		t.Fatalf("a change in customize did not start from the cached base phase:\n%s", lastLines(second.stderr, 30))
	}
	build("full", "--no-cache")
	sameOutputDirs(t, filepath.Join(dir, "full"), filepath.Join(dir, "second"))
	if bytes.Equal(mustReadFile(t, filepath.Join(dir, "first", "SHA256SUMS")), mustReadFile(t, filepath.Join(dir, "second", "SHA256SUMS"))) {
		t.Fatal("the change in customize changed nothing: the test proves nothing")
	}

	// An archive damaged in the cache, its size kept and its mtime moved,
	// is found when the phase is restored, reported, and the base is
	// unpacked again.
	archive := filepath.Join(cache, "blobs", "sha256", uncompressedSHA256(t, filepath.Join(dir, "base.tar.zst")))
	f, err := os.OpenFile(archive, os.O_WRONLY, 0)
	if err != nil {
		t.Fatalf("the base's archive is not in the cache: %v", err)
	}
	if _, err := f.WriteAt([]byte("damaged"), 4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe("three\n")})
	third := build("third")
	if !strings.Contains(third.stderr, "corrupt") || !strings.Contains(third.stderr, "cannot restore phase base") ||
		!strings.Contains(third.stderr, `msg="phase base"`) {
		t.Fatalf("a damaged archive was not reported and the base unpacked again:\n%s", lastLines(third.stderr, 30))
	}
	build("third-full", "--no-cache")
	sameOutputDirs(t, filepath.Join(dir, "third-full"), filepath.Join(dir, "third"))
	if uncompressedSHA256(t, filepath.Join(dir, "base.tar.zst")) != fileSHA256(t, archive) {
		t.Fatal("the cache does not hold the archive again after the rebuild")
	}
}

// uncompressedSHA256 is the sha256 (hex) of a compressed file's content.
func uncompressedSHA256(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, _, err := compress.NewReaderAuto(f)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// TestCachePrune prunes a cache two recipes' builds filled: what the later
// build used stays, so its rebuild runs no phase and writes the same bytes;
// what only the earlier one used goes, and its rebuild writes its first
// bytes again. A dry run removes nothing. A prune started beside a running
// build waits for it, and the build finishes whole. uid 65534 cannot prune
// root's cache.
func TestCachePrune(t *testing.T) {
	recipe := func(motd string, post []string) string {
		return proofRecipe("e2e-prune", fmt.Sprintf("        - {path: /etc/motd, content: %q}\n", motd), post,
			"outputs:\n"+rawOutputs+"  - {format: tar, name: rootfs}\n")
	}
	dir := proofDir(t, map[string]string{"one.yaml": recipe("one\n", nil), "two.yaml": recipe("two\n", nil)})
	cache := filepath.Join(dir, "cache")
	build := func(rec, out string) result {
		t.Helper()
		return stampCached(t, dir, nil, "build", rec, "-o", filepath.Join(dir, out), "--cache-dir", cache, "--work-dir", dir).mustSucceed(t)
	}
	prune := func(args ...string) result {
		t.Helper()
		return stampCached(t, dir, nil, append([]string{"cache", "prune", "--cache-dir", cache}, args...)...).mustSucceed(t)
	}
	build("one.yaml", "one")
	time.Sleep(2 * time.Second)
	start := time.Now()
	build("two.yaml", "two")
	keepFor := (time.Since(start) + 500*time.Millisecond).Round(time.Millisecond).String()

	dry := prune("--keep-for", "0", "--dry-run")
	if !strings.Contains(dry.stdout, "0 kept (0.0 MiB)") {
		t.Fatalf("dry run of --keep-for 0:\n%s", dry.stdout)
	}
	pruned := prune("--keep-for", keepFor)
	if strings.Contains(pruned.stdout, "records: 0 removed") || strings.Contains(pruned.stdout, "blobs: 0 removed") {
		t.Fatalf("pruning what only one.yaml used:\n%s", pruned.stdout)
	}
	again := build("two.yaml", "two-again")
	if phaseWork(again.stderr) || !strings.Contains(again.stderr, "no phase runs") {
		t.Fatalf("two.yaml after the prune ran phases:\n%s", lastLines(again.stderr, 20))
	}
	sameOutputDirs(t, filepath.Join(dir, "two"), filepath.Join(dir, "two-again"))
	oneAgain := build("one.yaml", "one-again")
	if !phaseWork(oneAgain.stderr) {
		t.Fatalf("one.yaml after the prune ran no phase:\n%s", lastLines(oneAgain.stderr, 20))
	}
	sameOutputDirs(t, filepath.Join(dir, "one"), filepath.Join(dir, "one-again"))

	// A prune beside a running build waits until the build is done.
	started, proceed := filepath.Join(dir, "hook-started"), filepath.Join(dir, "hook-proceed")
	writeFiles(t, dir, map[string]string{
		"slow.yaml": recipe("slow\n", []string{"./hooks/wait.sh"}),
		"hooks/wait.sh": fmt.Sprintf("#!/bin/sh\ntouch %s\ni=0\nwhile [ ! -e %s ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n",
			started, proceed),
	})
	if err := os.Chmod(filepath.Join(dir, "hooks", "wait.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	bg := func(args ...string) (*exec.Cmd, *bytes.Buffer) {
		cmd := exec.Command(stampBin, args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd, &out
	}
	slow, slowOut := bg("build", "slow.yaml", "-o", filepath.Join(dir, "slow"), "--cache-dir", cache, "--work-dir", dir)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hook never started:\n%s", slowOut)
		}
	}
	waiting, waitOut := bg("cache", "prune", "--cache-dir", cache, "--keep-for", "0")
	time.Sleep(time.Second)
	if waiting.ProcessState != nil || !strings.Contains(waitOut.String(), "waiting for the builds using the cache to finish") {
		t.Fatalf("the prune did not wait for the build:\n%s", waitOut)
	}
	writeFiles(t, dir, map[string]string{"hook-proceed": ""})
	if err := slow.Wait(); err != nil {
		t.Fatalf("the build beside the prune: %v\n%s", err, slowOut)
	}
	if err := waiting.Wait(); err != nil || !strings.Contains(waitOut.String(), "0 kept (0.0 MiB)") {
		t.Fatalf("the prune after the build: %v\n%s", err, waitOut)
	}
	check := exec.Command("sha256sum", "-c", "SHA256SUMS")
	check.Dir = filepath.Join(dir, "slow")
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("the outputs of the build beside the prune: %v\n%s", err, out)
	}

	// Root's cache is read-only to uid 65534.
	if r := stampAs65534(t, dir, nil, "cache", "prune", "--cache-dir", cache); r.code != 1 || !strings.Contains(r.stderr, "not writable") {
		t.Fatalf("uid 65534 pruning root's cache: exit %d\n%s", r.code, r.stderr)
	}
}

// TestOutputPartsAfterChange changes one small file of a recipe whose pxe
// initramfs is several compressed parts: the rebuild takes every part from
// the last build's output but two, the changed file's and that of the
// tree's own record of its build (/usr/lib/stamp/manifest.json, which
// names the recipe's digest), and writes what a build without the cache
// writes. Its erofs image takes every segment of the files that did not
// change.
func TestOutputPartsAfterChange(t *testing.T) {
	recipe := func(motd string) string {
		return proofRecipe("e2e-parts", fmt.Sprintf("        - {path: /etc/motd, content: %q}\n", motd)+
			"        - {path: /opt/a.bin, from: ./a.bin}\n"+
			"        - {path: /opt/b.bin, from: ./b.bin}\n"+
			"        - {path: /opt/c.bin, from: ./c.bin}\n", nil, "outputs:\n  - {format: pxe}\n  - {format: erofs}\n")
	}
	dir := proofDir(t, map[string]string{"recipe.yaml": recipe("one\n")})
	// Three files of 20 MiB that do not compress, each past the size of
	// a part, so the initramfs is at least three parts.
	rng := rand.New(rand.NewPCG(1, 2))
	for _, name := range []string{"a.bin", "b.bin", "c.bin"} {
		data := make([]byte, 20<<20)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cache := filepath.Join(dir, "cache")
	build := cachedBuilder(t, dir, cache)
	build("one")
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe("two\n")})
	two := build("two")
	m := regexp.MustCompile(`cache: (\d+) of the (\d+) compressed parts of output pxe unchanged`).FindStringSubmatch(two.stderr)
	if m == nil {
		t.Fatalf("the rebuild took no part from the last build:\n%s", lastLines(two.stderr, 20))
	}
	taken, _ := strconv.Atoi(m[1])
	all, _ := strconv.Atoi(m[2])
	if all < 4 || taken != all-2 {
		t.Fatalf("the rebuild took %d of %d parts, want all but the two that changed", taken, all)
	}
	// The erofs image files a segment of each 4 MiB of every file (the
	// three files' 60 MiB are 15 of them), once for each content; of those
	// only /etc/motd's and the tree's record changed.
	m = regexp.MustCompile(`cache: (\d+) of the (\d+) compressed parts of output erofs unchanged`).FindStringSubmatch(two.stderr)
	if m == nil {
		t.Fatalf("the rebuild's erofs image took no segment from the last build:\n%s", lastLines(two.stderr, 20))
	}
	taken, _ = strconv.Atoi(m[1])
	all, _ = strconv.Atoi(m[2])
	if all < 17 || taken != all-2 {
		t.Fatalf("the rebuild's erofs image took %d of %d segments, want all but /etc/motd's and the record's", taken, all)
	}
	// /etc/motd kept its size, so the image kept its superblock and was
	// hashed as it was written; the cold build's sums below check that
	// hash.
	if !strings.Contains(two.stderr, "hashed_as_written=true") {
		t.Fatalf("the rebuild's erofs image was not hashed as it was written:\n%s", lastLines(two.stderr, 20))
	}
	build("two-cold", "--no-cache")
	sameOutputDirs(t, filepath.Join(dir, "two"), filepath.Join(dir, "two-cold"))
}
