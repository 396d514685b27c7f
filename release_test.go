package stamp

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/formats/attest"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

// The release file is os-release syntax: a shell sourcing it gets every
// value back as written, quotes and dollars included.
func TestReleaseTextSourcesInAShell(t *testing.T) {
	rec := &recipes.Recipe{Name: "k8s-node", Path: "/src/recipes/k8s-node.yaml", TreeDigest: "sha256:" + strings.Repeat("ab", 32)}
	text := releaseText(rec, attest.Builder{Version: map[string]string{"stamp": `v1.2.3 "odd" $x`, "build:vcs.revision": "0123abc"}})
	f := filepath.Join(t.TempDir(), "stamp-release")
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("sh", "-c", `. "$1" && printf '%s|%s|%s|%s' "$STAMP_RECIPE" "$STAMP_RECIPE_FILE" "$STAMP_RECIPE_DIGEST" "$STAMP_VERSION"`, "sh", f).CombinedOutput()
	if err != nil {
		t.Fatalf("sourcing %s: %v\n%s\n%s", f, err, out, text)
	}
	want := "k8s-node|k8s-node.yaml|" + rec.TreeDigest + `|v1.2.3 "odd" $x (0123abc)`
	if string(out) != want {
		t.Errorf("sourced %q, want %q\n%s", out, want, text)
	}
}

// The file lands where the recipe says, through the tree's own symlinks,
// owned by root, with the epoch as mtime; no release field writes nothing.
func TestWriteReleaseFollowsTheTree(t *testing.T) {
	tree, err := rootfs.New(filepath.Join(t.TempDir(), "tree"), rootfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tree.Close()
	ep := time.Unix(1700000000, 0).UTC()
	if _, err := tree.MkdirAll("/usr/lib", rootfs.Header{Perm: 0o755, MTime: ep}); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Create("/etc", rootfs.Header{Type: rootfs.TypeSymlink, Target: "usr/lib", MTime: ep}, nil); err != nil {
		t.Fatal(err)
	}
	rec := &recipes.Recipe{Name: "n", TreeDigest: "sha256:00"}
	if err := writeRelease(tree, rec, ep); err != nil || tree.Len() != 4 {
		t.Fatalf("no release field: %v, %d entries", err, tree.Len())
	}
	rec.Release = "/etc/stamp-release"
	if err := writeRelease(tree, rec, ep); err != nil {
		t.Fatal(err)
	}
	e := tree.Get("/usr/lib/stamp-release")
	if e == nil || e.Perm != 0o644 || e.UID != 0 || !e.MTime.Equal(ep) {
		t.Fatalf("release entry %+v", e)
	}
	r, err := tree.Open(e.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, _ := io.ReadAll(r)
	if !strings.Contains(string(b), `STAMP_RECIPE="n"`) {
		t.Errorf("content:\n%s", b)
	}
}
