package layers

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
)

// In a build's tree a large host file is kept in the cache once and the
// tree's file points at it; a small one is written as before, and a host
// file that changed gives the new content.
func TestFilesHostFileByReference(t *testing.T) {
	env := ociEnv(t)
	newTree := func() *rootfs.Tree {
		tree, err := rootfs.New(filepath.Join(t.TempDir(), "tree"), rootfs.Options{DefaultMTime: ociEpoch, Archives: env.Cache.Archives()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tree.Close() })
		return tree
	}
	host := t.TempDir()
	big, small := randomBytes(8, keptMin+123), []byte("small\n")
	write := func(name string, b []byte, mode os.FileMode) string {
		p := filepath.Join(host, name)
		if err := os.WriteFile(p, b, mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	l := &Files{Items: []File{{Path: "/usr/bin/big", From: write("big", big, 0o755)}, {Path: "/etc/small", From: write("small", small, 0o644)}}}
	read := func(p string) []byte {
		_, b := readTree(t, env, p)
		return b
	}

	env.Tree = newTree()
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	e := env.Tree.Get("/usr/bin/big")
	if e == nil || e.Perm != 0o755 || e.Digest != sha(big) || e.Origin.Input != "sha256:"+sha(big) || !bytes.Equal(read("/usr/bin/big"), big) {
		t.Fatalf("/usr/bin/big: %+v", e)
	}
	if env.Tree.DiskPath("/usr/bin/big") != "" || !env.Cache.Has("sha256:"+sha(big)) {
		t.Fatal("the large host file was written into the tree, not kept in the cache")
	}
	if env.Tree.DiskPath("/etc/small") == "" || !bytes.Equal(read("/etc/small"), small) {
		t.Fatal("the small host file is not in the tree's directory")
	}

	changed := append(bytes.Clone(big), 'x')
	write("big", changed, 0o755)
	env.Tree = newTree()
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if got := read("/usr/bin/big"); !bytes.Equal(got, changed) || env.Tree.Get("/usr/bin/big").Digest != sha(changed) {
		t.Fatal("a changed host file kept its old content")
	}
	if err := env.Tree.Materialize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(env.Tree.DiskPath("/usr/bin/big")); err != nil || !bytes.Equal(b, changed) {
		t.Fatalf("materialized /usr/bin/big: %v", err)
	}
}
