package layers

import (
	"archive/tar"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeTar writes a tarball of regular files (name to content) and hard
// links (name to "=target") into dir.
func writeTar(t *testing.T, dir string, members [][2]string) string {
	t.Helper()
	p := filepath.Join(dir, "base.tar")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	tw := tar.NewWriter(f)
	for _, m := range members {
		h := &tar.Header{Name: m[0], Mode: 0o644, ModTime: time.Unix(1600000000, 0), Typeflag: tar.TypeReg, Size: int64(len(m[1]))}
		if len(m[1]) > 0 && m[1][0] == '=' {
			h.Typeflag, h.Linkname, h.Size = tar.TypeLink, m[1][1:], 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(m[1]))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

// A hook runs on a base whose files were extracted by reference: it sees
// every file in the directory, and what it changes is folded back.
func TestHookSeesAReferencedBase(t *testing.T) {
	tb := writeTar(t, t.TempDir(), [][2]string{
		{"etc/hostname", "base\n"}, {"etc/os-release", "ID=debian\n"}, {"etc/os-release.link", "=etc/os-release"}})
	env := baseEnv(t, "", "customize.layers[0].hook", tb)
	if !env.Tree.Referenced() {
		t.Fatal("the base was written file by file, not by reference")
	}
	script := filepath.Join(t.TempDir(), "hook.sh")
	os.WriteFile(script, []byte(`#!/bin/sh
set -e
cat "$STAMP_ROOT/etc/hostname" > "$STAMP_ROOT/etc/copied"
echo VERSION=12 >> "$STAMP_ROOT/etc/os-release"
`), 0o755)
	if err := (&Hook{Run: script}).Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if _, b := readTree(t, env, "/etc/copied"); string(b) != "base\n" {
		t.Fatalf("/etc/copied holds %q", b)
	}
	for _, p := range []string{"/etc/os-release", "/etc/os-release.link"} {
		if _, b := readTree(t, env, p); string(b) != "ID=debian\nVERSION=12\n" {
			t.Fatalf("%s holds %q", p, b)
		}
	}
	if env.Tree.Get("/etc/os-release").Inode != env.Tree.Get("/etc/os-release.link").Inode {
		t.Fatal("the hard link was broken")
	}
}
