package e2e

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

const nodeRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: e2e-node
arch: amd64
epoch: 1700000000
base:
  tarball: ./base.tar.zst
customize:
  layers:
    - files:
        - {path: /etc/hostname, content: "node-e2e\n"}
        - {path: /etc/kubernetes/, from: ./overlay/kubernetes/}
        - path: /etc/systemd/system/stamp-demo.service
          content: |
            [Unit]
            Description=stamp demo
            [Service]
            ExecStart=/bin/true
            [Install]
            WantedBy=multi-user.target
    - symlink: {path: /usr/local/bin/k, target: /usr/bin/kubectl}
    - mkdir: [{path: /var/lib/kubelet, mode: "0700"}]
    - remove: ["/usr/share/doc/**"]
    - groups: [{name: docker, gid: 998}]
    - users: [{name: capi, uid: 1001, groups: [docker], shell: /bin/bash}]
    - systemd: {enable: [stamp-demo.service]}
  post: [./hooks/post.sh]
outputs:
  - {format: tar, compression: zstd}
  - {format: tar, name: plain}
`

const postHook = `#!/bin/sh
set -eu
echo "hook ran" > "$STAMP_ROOT/etc/stamp-hook-was-here"
chmod 0600 "$STAMP_ROOT/etc/hostname"
`

// recipeDir lays out a recipe, its hook, its overlay and a copy of the base
// in a directory uid 65534 can read.
func recipeDir(t *testing.T, recipe string, extra map[string]string) string {
	t.Helper()
	dir := harness.TempDirFor65534(t)
	files := map[string]string{
		"recipe.yaml":                     recipe,
		"hooks/post.sh":                   postHook,
		"overlay/kubernetes/kubelet.conf": "apiVersion: v1\n",
		"overlay/kubernetes/bin/check.sh": "#!/bin/sh\nexit 0\n",
	}
	for k, v := range extra {
		files[k] = v
	}
	writeFiles(t, dir, files)
	copyBase(t, dir)
	return dir
}

func TestBuildAsRootAndNobodyIsIdentical(t *testing.T) {
	harness.RequireSetpriv(t)
	dir := recipeDir(t, nodeRecipe, nil)
	out1 := filepath.Join(dir, "out-root")
	stampUmask022(t, dir, []string{"TZ=UTC", "LANG=C.UTF-8"}, "build", "recipe.yaml", "-o", out1,
		"--cache-dir", filepath.Join(dir, "cache-root"), "--work-dir", dir).mustSucceed(t)

	// Another user, umask, time zone, locale and a longer work directory.
	work2 := filepath.Join(dir, "a-much-longer-work-directory-name", "nested")
	os.MkdirAll(work2, 0o777)
	os.Chmod(filepath.Dir(work2), 0o777)
	os.Chmod(work2, 0o777)
	out2 := filepath.Join(dir, "out-nobody")
	os.MkdirAll(out2, 0o777)
	os.Chmod(out2, 0o777)
	stampAs65534(t, dir, []string{"TZ=Asia/Kathmandu", "LANG=de_DE.UTF-8", "LC_ALL=de_DE.UTF-8"},
		"build", "recipe.yaml", "-o", out2, "--cache-dir", filepath.Join(work2, "cache"), "--work-dir", work2).mustSucceed(t)

	for _, name := range []string{"e2e-node.tar.zst", "e2e-node-plain.tar", "manifest.txt", "SHA256SUMS", "provenance.json", "sbom.spdx.json"} {
		a, err1 := os.ReadFile(filepath.Join(out1, name))
		b, err2 := os.ReadFile(filepath.Join(out2, name))
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: %v %v", name, err1, err2)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s differs between the root and the uid 65534 build", name)
		}
	}
	if got := finalFiles(t, out1); strings.Join(got, " ") != "SHA256SUMS e2e-node-plain.tar e2e-node.tar.zst manifest.txt provenance.json sbom.spdx.json" {
		t.Errorf("output dir holds %v", got)
	}

	base := harness.TarIndex(harness.ReadTar(t, filepath.Join(dir, "base.tar.zst")))
	out := harness.TarIndex(harness.ReadTar(t, filepath.Join(out1, "e2e-node-plain.tar")))
	zst := harness.TarIndex(harness.ReadTar(t, filepath.Join(out1, "e2e-node.tar.zst")))
	if len(zst) != len(out) {
		t.Fatalf("compressed and plain tars differ: %d vs %d entries", len(zst), len(out))
	}
	checkRoundTrip(t, base, out)
	checkRecipeEffects(t, out)
}

// Paths the recipe or sealing may change; everything else in the base must
// come out exactly as it went in.
var changedByRecipe = []string{
	"/etc/hostname", "/etc/passwd", "/etc/group", "/etc/shadow", "/etc/gshadow", "/etc/machine-id",
	"/etc/passwd-", "/etc/group-", "/etc/shadow-", "/etc/gshadow-",
}

func removedBySeal(p string) bool {
	for _, pre := range []string{"/usr/share/doc/", "/etc/ssh/ssh_host_", "/var/log/", "/tmp/", "/var/tmp/", "/var/lib/apt/lists/", "/var/cache/apt/"} {
		if strings.HasPrefix(p, pre) {
			return true
		}
	}
	// /run is a tmpfs at boot; Seal keeps only /run/lock.
	if strings.HasPrefix(p, "/run/") && p != "/run/lock" && !strings.HasPrefix(p, "/run/lock/") {
		return true
	}
	return p == "/var/lib/systemd/random-seed"
}

// addedByRecipe reports whether p is something the recipe (or stamp's own
// record) adds.
func addedByRecipe(p string) bool {
	for _, pre := range []string{"/etc/kubernetes", "/etc/systemd", "/usr/local/bin/k", "/var/lib/kubelet", "/home/capi",
		"/etc/stamp-hook-was-here", "/usr/lib/stamp", "/etc/gshadow", "/etc/subuid", "/etc/subgid"} {
		if p == pre || strings.HasPrefix(p, pre+"/") {
			return true
		}
	}
	return false
}

func checkRoundTrip(t *testing.T, base, out map[string]harness.TarEntry) {
	t.Helper()
	isChanged := map[string]bool{}
	for _, p := range changedByRecipe {
		isChanged[p] = true
	}
	for p, b := range base {
		o, ok := out[p]
		switch {
		case removedBySeal(p):
			if ok && o.Type != '5' {
				t.Errorf("%s should have been removed", p)
			}
		case isChanged[p]:
		case !ok:
			t.Errorf("%s is missing from the output", p)
		default:
			if b.Type != o.Type || b.Mode != o.Mode || b.UID != o.UID || b.GID != o.GID || b.Size != o.Size ||
				b.SHA256 != o.SHA256 || b.Linkname != o.Linkname || b.DevMajor != o.DevMajor || b.DevMinor != o.DevMinor ||
				!sameXattrs(b.Xattrs, o.Xattrs) {
				t.Errorf("%s changed:\n base %s\n out  %s", p, b, o)
			}
		}
	}
	for p := range out {
		if _, ok := base[p]; !ok && !addedByRecipe(p) {
			t.Errorf("%s appeared without the recipe asking for it", p)
		}
	}
}

func sameXattrs(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func checkRecipeEffects(t *testing.T, out map[string]harness.TarEntry) {
	t.Helper()
	want := func(p string, typ byte, mode int64, uid, gid int) harness.TarEntry {
		t.Helper()
		e, ok := out[p]
		if !ok {
			t.Fatalf("%s missing", p)
		}
		if e.Type != typ || e.Mode != mode || e.UID != uid || e.GID != gid {
			t.Errorf("%s: got %s", p, e)
		}
		return e
	}
	// The post hook's chmod and its new file are folded into the index.
	want("/etc/hostname", '0', 0o600, 0, 0)
	want("/etc/stamp-hook-was-here", '0', 0o644, 0, 0)
	want("/etc/kubernetes/kubelet.conf", '0', 0o644, 0, 0)
	want("/etc/kubernetes/bin/check.sh", '0', 0o755, 0, 0)
	want("/var/lib/kubelet", '5', 0o700, 0, 0)
	if e := want("/usr/local/bin/k", '2', 0o777, 0, 0); e.Linkname != "/usr/bin/kubectl" {
		t.Errorf("symlink target %q", e.Linkname)
	}
	if e := want("/etc/systemd/system/multi-user.target.wants/stamp-demo.service", '2', 0o777, 0, 0); e.Linkname != "/etc/systemd/system/stamp-demo.service" {
		t.Errorf("enable link target %q", e.Linkname)
	}
	want("/home/capi", '5', 0o700, 1001, 1001)
	if e := out["/etc/machine-id"]; e.Size != 0 {
		t.Errorf("machine-id not emptied: %s", e)
	}
	if e := out["/usr/share/doc"]; e.Type != '5' {
		t.Errorf("/usr/share/doc itself should stay")
	}
	for p := range out {
		if strings.HasPrefix(p, "/usr/share/doc/") {
			t.Errorf("%s survived remove", p)
		}
	}
}
