// Package rootfstest builds the rootfs.Trees that tests write, read and
// compare: an empty tree that cleans up after the test, entries made from
// headers, and trees unpacked from tarballs. Every helper fails the test
// instead of returning an error. It imports "testing" and so is for tests
// only.
package rootfstest

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// Epoch is the time most fixtures stamp on their entries.
var Epoch = time.Unix(1700000000, 0).UTC()

// New returns an empty tree in a fresh temporary directory, closed when the
// test ends. Directories the tree makes on its own get epoch as their mtime.
func New(t testing.TB, epoch time.Time) *rootfs.Tree {
	t.Helper()
	return NewIn(t, t.TempDir(), epoch)
}

// NewIn is New with the tree's directory under parent, for tests that need
// it somewhere particular (one another user can enter, say). As in a build,
// an extraction by reference keeps its archive beside the tree, so the
// layers' tests run their host processes on materialized trees.
func NewIn(t testing.TB, parent string, epoch time.Time) *rootfs.Tree {
	t.Helper()
	tr, err := rootfs.New(filepath.Join(parent, "tree"), rootfs.Options{DefaultMTime: epoch, ContentDir: filepath.Join(parent, "content")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// Add creates p with exactly h; content is the data of a regular file and
// ignored for every other type.
func Add(t testing.TB, tr *rootfs.Tree, p string, h rootfs.Header, content string) *rootfs.Entry {
	t.Helper()
	var r io.Reader
	if h.Type == rootfs.TypeRegular {
		r = strings.NewReader(content)
	}
	e, err := tr.Create(p, h, r)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// File adds a regular file owned by root.
func File(t testing.TB, tr *rootfs.Tree, p string, perm uint32, mtime time.Time, content string) *rootfs.Entry {
	t.Helper()
	return Add(t, tr, p, rootfs.Header{Type: rootfs.TypeRegular, Perm: perm, MTime: mtime}, content)
}

// Dir makes the directory p and its missing parents, owned by root.
func Dir(t testing.TB, tr *rootfs.Tree, p string, perm uint32, mtime time.Time) *rootfs.Entry {
	t.Helper()
	e, err := tr.MkdirAll(p, rootfs.Header{Perm: perm, MTime: mtime})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// Symlink adds a symbolic link owned by root.
func Symlink(t testing.TB, tr *rootfs.Tree, p, target string, mtime time.Time) *rootfs.Entry {
	t.Helper()
	return Add(t, tr, p, rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: target, MTime: mtime}, "")
}

// AddSpecials adds what a file system writer must keep beside files and
// directories, for its tests: character and block devices (numbers beyond
// 8 bits, a minor beyond 16), a fifo, a socket, two more hard links to
// /usr/bin/su (which the caller adds) and a hard link to a device.
func AddSpecials(t testing.TB, tr *rootfs.Tree, mtime time.Time) {
	t.Helper()
	Add(t, tr, "/dev/null", rootfs.Header{Type: rootfs.TypeChar, Perm: 0o666, Major: 1, Minor: 3, MTime: mtime}, "")
	Add(t, tr, "/dev/sda", rootfs.Header{Type: rootfs.TypeBlock, Perm: 0o660, GID: 6, Major: 8, Minor: 0, MTime: mtime}, "")
	Add(t, tr, "/dev/nvme0n1p300", rootfs.Header{Type: rootfs.TypeBlock, Perm: 0o660, GID: 6, Major: 259, Minor: 70000, MTime: mtime}, "")
	Add(t, tr, "/dev/ttyX", rootfs.Header{Type: rootfs.TypeChar, Perm: 0o620, Major: 4095, Minor: 1048575, MTime: mtime}, "")
	Add(t, tr, "/run/initctl", rootfs.Header{Type: rootfs.TypeFifo, Perm: 0o600, MTime: mtime}, "")
	Add(t, tr, "/run/sock", rootfs.Header{Type: rootfs.TypeSocket, Perm: 0o755, MTime: mtime}, "")
	for _, l := range []string{"/usr/bin/su-link", "/usr/sbin/su"} {
		if _, err := tr.Link(l, "/usr/bin/su", rootfs.Origin{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.Link("/dev/null2", "/dev/null", rootfs.Origin{}); err != nil {
		t.Fatal(err)
	}
}

// Read returns the content of the file at p, following symlinks.
func Read(t testing.TB, tr *rootfs.Tree, p string) []byte {
	t.Helper()
	rp, err := tr.Resolve(p, true)
	if err != nil {
		t.Fatal(err)
	}
	f, err := tr.Open(rp)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(f); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return buf.Bytes()
}

// Extract unpacks the tar stream r into tr.
func Extract(t testing.TB, tr *rootfs.Tree, r io.Reader, o rootfs.ExtractOptions) {
	t.Helper()
	if _, err := rootfs.Extract(context.Background(), tr, r, o); err != nil {
		t.Fatal(err)
	}
}

// ExtractFile unpacks the tarball at name, compressed or not, into tr.
func ExtractFile(t testing.TB, tr *rootfs.Tree, name string, o rootfs.ExtractOptions) {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, _, err := compress.NewReaderAuto(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	defer r.Close()
	if _, err := rootfs.Extract(context.Background(), tr, r, o); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}
