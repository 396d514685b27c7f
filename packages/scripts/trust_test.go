package scripts

import (
	"context"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// hostListing lists what a host directory holds, one level, sorted.
func hostListing(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// treePaths lists every path of the tree's index.
func treePaths(tr *rootfs.Tree) map[string]bool {
	out := map[string]bool{}
	for _, p := range tr.Paths() {
		out[p] = true
	}
	return out
}

// pythonTree is a tree holding the image's python3.11 (the real .debs) and
// the mount points a sandbox needs, as base-files makes them.
func pythonTree(t *testing.T, debs []string) *rootfs.Tree {
	t.Helper()
	tr := newTree(t)
	for _, d := range debs {
		unpack(t, tr, d)
	}
	for _, d := range []string{"/proc", "/dev", "/tmp"} {
		if _, err := tr.MkdirAll(d, rootfs.Header{Perm: 0o755, MTime: epoch}); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

var pythonDebs = []string{"python3.11-minimal", "libpython3.11-minimal", "libexpat1", "zlib1g", "libc6", "libgcc-s1", "libssl3"}

// TestPyCompileInSandbox: python3.11's own postinst line (py_compile.py on
// modules) runs the image's python in the sandbox: the tree read-only, the
// .pyc read back and written through the index, nothing else in the tree
// changed, nothing left on the host (no scratch directory beside the tree,
// nothing in TMPDIR), and the same bytes as root and as uid 65534.
func TestPyCompileInSandbox(t *testing.T) {
	harness.RequireTools(t, "unshare", "chroot", "mount")
	var debs []string
	if os.Getenv(childEnv) == "" {
		debs = harness.Debs(t, pythonDebs...)
	}
	root, nobody := asBoth(t, debs, func(t *testing.T, debs []string) string {
		tr := pythonTree(t, debs)
		file(t, tr, "/usr/lib/python3.11/stamptest.py", "X = {'a', 'b', 'c'}\ndef f():\n    return 42\n")
		before := treePaths(tr)
		t.Setenv("TMPDIR", t.TempDir())
		tmp := hostListing(t, os.TempDir())
		beside := hostListing(t, filepath.Dir(tr.Dir()))
		script := Script{Package: "python3.11-minimal", Name: "postinst", Body: []byte(
			"#!/bin/sh\nset -e\npython3.11 -E -S /usr/lib/python3.11/py_compile.py /usr/lib/python3.11/stamptest.py\n")}
		if err := Run(context.Background(), env(tr), script, "configure", ""); err != nil {
			t.Fatal(err)
		}
		const pyc = "/usr/lib/python3.11/__pycache__/stamptest.cpython-311.pyc"
		for p := range treePaths(tr) {
			if !before[p] && p != pyc && p != "/usr/lib/python3.11/__pycache__" {
				t.Errorf("%s appeared in the tree", p)
			}
		}
		b, err := readTree(tr, pyc)
		if err != nil {
			t.Fatal(err)
		}
		// Python 3.11's magic, and the checked-hash flags SOURCE_DATE_EPOCH asks for.
		if len(b) < 16 || hex.EncodeToString(b[:8]) != "a70d0d0a03000000" {
			t.Errorf(".pyc header %x, want 3.11's magic and checked-hash flags", b[:min(16, len(b))])
		}
		if got := hostListing(t, os.TempDir()); strings.Join(got, " ") != strings.Join(tmp, " ") {
			t.Errorf("TMPDIR changed: %v, before %v", got, tmp)
		}
		if got := hostListing(t, filepath.Dir(tr.Dir())); strings.Join(got, " ") != strings.Join(beside, " ") {
			t.Errorf("beside the tree: %v, before %v", got, beside)
		}
		e := tr.Get(pyc)
		return hex.EncodeToString(b) + " " + strings.TrimSpace(rootfs.FileInfo("x", e).Mode().String())
	})
	if root != nobody {
		t.Errorf("root's .pyc differs from uid 65534's:\n%s\n%s", root, nobody)
	}
}

// With NoPrograms (offline-only) the same line is unhandled, naming the
// package and why, and the tree is left alone.
func TestPyCompileNoPrograms(t *testing.T) {
	tr := pythonTree(t, harness.Debs(t, pythonDebs...))
	file(t, tr, "/usr/lib/python3.11/stamptest.py", "pass\n")
	e := env(tr)
	e.NoPrograms = true
	err := Run(context.Background(), e, Script{Package: "python3.11-minimal", Name: "postinst", Body: []byte(
		"#!/bin/sh\nset -e\npython3.11 -E -S /usr/lib/python3.11/py_compile.py /usr/lib/python3.11/stamptest.py\n")}, "configure", "")
	var ue *UnhandledError
	if !errors.As(err, &ue) || ue.Package != "python3.11-minimal" || !strings.Contains(err.Error(), "offline-only") {
		t.Fatalf("err = %v, want python3.11-minimal's postinst unhandled for offline-only", err)
	}
	if tr.Get("/usr/lib/python3.11/__pycache__") != nil {
		t.Error("a .pyc was written with NoPrograms")
	}
}

func readTree(tr *rootfs.Tree, p string) ([]byte, error) {
	f, err := tr.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b strings.Builder
	buf := make([]byte, 32*1024)
	for {
		n, err := f.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return []byte(b.String()), nil
}
