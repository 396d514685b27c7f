package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// inPodRecipe is what stamp builds inside its own image: a base tarball, a
// layer, and a disk with its qcow2, which need no host tool.
const inPodRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: inpod
epoch: 1700000000
base: {tarball: ./base.tar}
customize:
  layers:
    - files: [{path: /etc/hostname, content: "pod\n"}]
outputs:
  - {format: tar}
  - format: raw
    partitions:
      - {name: root, type: root, size: auto, filesystem: ext4}
  - {format: qcow2, from: raw}
`

// TestStampImage builds stamp's own image (recipes/stamp-image.yaml) from
// the local Debian repository as uid 65534, and runs it as a restricted pod
// would: under rootless runc started by uid 65534, with no capabilities, a
// read-only root, and only the work volume writable. Inside, stamp builds
// a recipe, and its outputs are the bytes the host's stamp builds from the
// same recipe.
func TestStampImage(t *testing.T) {
	harness.RequireTools(t, "runc", "tar", "go")
	repo := harness.StampImageRepoFor(t)
	dir := harness.TempDirFor65534(t)
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	recipe, err := os.ReadFile(filepath.Join(root, "recipes", "stamp-image.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"stamp-image.yaml": string(recipe)})

	// The image holds a static stamp: nothing of the host's libc.
	static := filepath.Join(dir, "stamp-static")
	build := exec.Command("go", "build", "-trimpath", "-o", static, "./cmd/stamp")
	build.Dir = root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	os.Chmod(static, 0o755)

	out := filepath.Join(dir, "image")
	stampAs65534(t, dir, nil, "build", "stamp-image.yaml", "-o", out,
		"--set", "mirror="+repo.FileURL(), "--set", "suite="+repo.Suite, "--set", "debian_keyring="+repo.Keyring,
		"--set", "stamp="+static).mustSucceed(t)
	cfg := skopeoJSON(t, "inspect", "--config", "oci-archive:"+filepath.Join(out, "stamp.oci.tar"))
	if ep, _ := json.Marshal(cfg["config"].(map[string]any)["Entrypoint"]); string(ep) != `["/usr/local/bin/stamp"]` {
		t.Errorf("the image's entrypoint is %s", ep)
	}

	// A runc bundle of the image's tree, laid out by uid 65534.
	bundle := filepath.Join(dir, "bundle")
	work := filepath.Join(dir, "work")
	for _, d := range []string{filepath.Join(bundle, "rootfs"), filepath.Join(work, "in"), filepath.Join(dir, "runc")} {
		harness.RunAs65534(t, dir, nil, "mkdir", "-p", d)
	}
	harness.RunAs65534(t, dir, nil, "tar", "-xf", filepath.Join(out, "stamp.tar"), "-C", filepath.Join(bundle, "rootfs"), "--no-same-owner")
	harness.RunAs65534(t, bundle, nil, "runc", "spec", "--rootless")

	// One run looks at what the process may do; the other builds.
	runPod := func(args ...string) string {
		t.Helper()
		restrictedPod(t, filepath.Join(bundle, "config.json"), work, args)
		return harness.RunAs65534(t, dir, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "XDG_RUNTIME_DIR=" + filepath.Join(dir, "runc")},
			"runc", "--root", filepath.Join(dir, "runc"), "run", "--bundle", bundle, "stamp-test")
	}
	got := runPod("/bin/sh", "-c", `grep ^CapEff /proc/self/status; if touch /usr/probe 2>/dev/null; then echo root writable; else echo root read-only; fi; touch /work/probe && echo work writable`)
	for _, want := range []string{"CapEff:\t0000000000000000\n", "root read-only\n", "work writable\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("in the container: %q, want %q", got, want)
		}
	}

	// One small base, the same file for both builds.
	harness.RunAs65534(t, dir, nil, "sh", "-c", `mkdir -p base/etc host && echo hello >base/etc/motd && tar -cf host/base.tar -C base . && cp host/base.tar work/in/`)
	for _, d := range []string{filepath.Join(work, "in"), filepath.Join(dir, "host")} {
		if err := os.WriteFile(filepath.Join(d, "recipe.yaml"), []byte(inPodRecipe), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	runPod("/usr/local/bin/stamp", "build", "/work/in/recipe.yaml", "-o", "/work/out", "--cache-dir", "/cache", "--work-dir", "/work", "--log-format", "json")
	stampAs65534(t, dir, nil, "build", filepath.Join(dir, "host", "recipe.yaml"), "-o", filepath.Join(dir, "host", "out")).mustSucceed(t)
	inPod, onHost := diskSums(t, filepath.Join(work, "out")), diskSums(t, filepath.Join(dir, "host", "out"))
	for _, name := range []string{"inpod.tar", "inpod.raw", "inpod.qcow2"} {
		if inPod[name] == "" || inPod[name] != onHost[name] {
			t.Errorf("%s: %q built in the image, %q on the host", name, inPod[name], onHost[name])
		}
	}
	a, errA := os.ReadFile(filepath.Join(work, "out", "manifest.txt"))
	b, errB := os.ReadFile(filepath.Join(dir, "host", "out", "manifest.txt"))
	if errA != nil || errB != nil || string(a) != string(b) {
		t.Errorf("manifest.txt differs between the image's build and the host's (%v, %v)", errA, errB)
	}
}

// restrictedPod rewrites runc's rootless spec at config into what a
// restricted pod gets: args as the process, no capabilities at all, no new
// privileges, a read-only root, the host's work directory at /work, and
// tmpfs at /cache and /tmp. The container's root is the host's uid 65534,
// the only identity an unprivileged runc can map.
func restrictedPod(t *testing.T, config, work string, args []string) {
	t.Helper()
	b, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	var spec map[string]any
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	none := []string{}
	spec["process"] = map[string]any{
		"terminal":        false,
		"user":            map[string]any{"uid": 0, "gid": 0},
		"args":            args,
		"env":             []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/work"},
		"cwd":             "/work",
		"capabilities":    map[string]any{"bounding": none, "effective": none, "permitted": none, "ambient": none},
		"noNewPrivileges": true,
	}
	spec["root"] = map[string]any{"path": "rootfs", "readonly": true}
	mounts := spec["mounts"].([]any)
	var kept []any
	for _, m := range mounts {
		if d := m.(map[string]any)["destination"]; d != "/work" && d != "/cache" && d != "/tmp" {
			kept = append(kept, m)
		}
	}
	kept = append(kept,
		map[string]any{"destination": "/work", "type": "bind", "source": work, "options": []string{"rbind", "rw"}},
		map[string]any{"destination": "/cache", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=1777"}},
		map[string]any{"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "nodev", "mode=1777"}})
	spec["mounts"] = kept
	if b, err = json.MarshalIndent(spec, "", "\t"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
