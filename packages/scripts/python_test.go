package scripts

import (
	"context"
	"errors"
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

// TestShebangOptions: a script whose #! line says sh -e stops at the
// first failing command, as sh would run it.
func TestShebangOptions(t *testing.T) {
	tr := newTree(t)
	err := Run(context.Background(), env(tr), Script{Package: "foo", Name: "postinst", Body: []byte("#!/bin/sh -e\nfalse\necho after > /out\n")}, "configure", "")
	var se *ScriptError
	if !errors.As(err, &se) || se.Status != 1 {
		t.Errorf("err = %v, want exit status 1", err)
	}
	if len(snapshot(tr, "/out")) > 0 {
		t.Error("the script went on after a failing command")
	}
	if err := Run(context.Background(), env(tr), Script{Package: "foo", Name: "postinst", Body: []byte("#!/bin/sh\nfalse\necho after > /out\n")}, "configure", ""); err != nil {
		t.Errorf("without -e: %v", err)
	}
	// trap ... 0 is an EXIT trap; traps on signals never fire offline.
	body := "#!/bin/sh -e\ncleanup() { rm -f /tmp/x; }\ntrap cleanup 0\ntrap 'exit 1' 1 2 3 13 15\necho > /tmp/x\n"
	if err := Run(context.Background(), env(tr), Script{Package: "foo", Name: "postinst", Body: []byte(body)}, "configure", ""); err != nil {
		t.Fatal(err)
	}
	if left := snapshot(tr, "/tmp/x"); len(left) > 0 {
		t.Errorf("the EXIT trap did not run: %v", left)
	}
}
