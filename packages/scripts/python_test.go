package scripts

import (
	"context"
	"strings"
	"testing"
)

// TestPy3clean: py3clean -p removes the .pyc files of the package's
// modules (every interpreter's and optimisation level's), keeps other
// packages', and removes a __pycache__ it leaves empty, as py3clean run
// in a chroot of a node image does for python3-yaml and python3-six.
func TestPy3clean(t *testing.T) {
	tr := newTree(t)
	file(t, tr, "/var/lib/dpkg/info/foo.list", "/.\n/usr\n/usr/lib/python3/dist-packages/foo\n/usr/lib/python3/dist-packages/foo/__init__.py\n/usr/lib/python3/dist-packages/foo.py\n")
	for _, p := range []string{
		"/usr/lib/python3/dist-packages/foo/__init__.py",
		"/usr/lib/python3/dist-packages/foo/__pycache__/__init__.cpython-311.pyc",
		"/usr/lib/python3/dist-packages/foo/__pycache__/__init__.cpython-311.opt-1.pyc",
		"/usr/lib/python3/dist-packages/foo.py",
		"/usr/lib/python3/dist-packages/__pycache__/foo.cpython-311.pyc",
		"/usr/lib/python3/dist-packages/__pycache__/foo.cpython-312.pyc",
		"/usr/lib/python3/dist-packages/__pycache__/foobar.cpython-311.pyc",
		"/usr/lib/python3/dist-packages/__pycache__/bar.cpython-311.pyc",
	} {
		file(t, tr, p, "x")
	}
	if err := Run(context.Background(), env(tr), Script{Package: "foo", Name: "prerm", Body: []byte("#!/bin/sh\nset -e\npy3clean -p foo\n")}, "remove"); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(snapshot(tr, "/usr/lib/python3/"), "\n")
	want := strings.Join([]string{
		"/usr/lib/python3/dist-packages/",
		"/usr/lib/python3/dist-packages/__pycache__/",
		"/usr/lib/python3/dist-packages/__pycache__/bar.cpython-311.pyc = x",
		"/usr/lib/python3/dist-packages/__pycache__/foobar.cpython-311.pyc = x",
		"/usr/lib/python3/dist-packages/foo/",
		"/usr/lib/python3/dist-packages/foo.py = x",
		"/usr/lib/python3/dist-packages/foo/__init__.py = x",
	}, "\n")
	if got != want {
		t.Errorf("after py3clean:\n%s\nwant:\n%s", got, want)
	}
}
