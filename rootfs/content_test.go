package rootfs

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// referenceArchive holds every kind of member, a replaced file, hard links
// to files that are later replaced, and files below and above the size the
// write pool takes.
func referenceArchive(t *testing.T) []byte {
	big := make([]byte, 3<<20)
	rand.New(rand.NewSource(1)).Read(big[:1<<20])
	return mktar(t,
		member{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		member{name: "etc/passwd", body: "root:x:0:0::/root:/bin/sh\n"},
		member{name: "etc/empty", body: ""},
		member{name: "etc/shadow", body: "secret", mode: 0o640, gid: 42},
		member{name: "usr/bin/big", body: string(big), mode: 0o755},
		member{name: "usr/bin/big-link", typ: tar.TypeLink, link: "usr/bin/big"},
		member{name: "usr/bin/sh", typ: tar.TypeSymlink, link: "dash"},
		member{name: "usr/bin/dash", body: "#!dash", mode: 0o755, pax: map[string]string{"SCHILY.xattr.user.x": "1"}},
		member{name: "usr/bin/dash2", typ: tar.TypeLink, link: "usr/bin/dash"},
		member{name: "etc/passwd", body: "root:x:0:0::/root:/bin/bash\n"},
		member{name: "dev/null", typ: tar.TypeChar, major: 1, minor: 3},
	)
}

func manifestOf(t *testing.T, tr *Tree) string {
	t.Helper()
	var b strings.Builder
	if err := WriteManifest(&b, tr.Entries(), true); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func readAll(t *testing.T, tr *Tree, p string) []byte {
	t.Helper()
	f, err := tr.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	return b
}

// regularFiles lists the regular files in dir.
func regularFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// An extraction by reference indexes exactly what a written one does, reads
// the same bytes, writes no file into the tree's directory until it is
// materialized, and then holds on disk what the written one holds.
func TestExtractByReference(t *testing.T) {
	data := referenceArchive(t)
	written, _ := sandbox(t)
	if _, err := Extract(context.Background(), written, bytes.NewReader(data), ExtractOptions{ByReference: true}); err != nil {
		t.Fatal(err)
	}
	if written.Referenced() {
		t.Fatal("a tree without a content directory holds references")
	}

	base := t.TempDir()
	content := filepath.Join(base, "content")
	byRef, err := New(filepath.Join(base, "tree"), Options{DefaultMTime: epoch, ContentDir: content})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { byRef.Close() })
	if _, err := Extract(context.Background(), byRef, bytes.NewReader(data), ExtractOptions{ByReference: true}); err != nil {
		t.Fatal(err)
	}
	if !byRef.Referenced() {
		t.Fatal("no references after an extraction by reference")
	}
	if got, want := manifestOf(t, byRef), manifestOf(t, written); got != want {
		t.Fatalf("manifests differ:\n%s\nwant\n%s", got, want)
	}
	if files := regularFiles(t, byRef.Dir()); len(files) != 1 || !strings.HasSuffix(files[0], "/dev/null") {
		t.Fatalf("the tree's directory holds files before materializing: %v", files)
	}
	for _, p := range written.Paths() {
		if e := written.Get(p); e.Type == TypeRegular {
			if !bytes.Equal(readAll(t, byRef, p), readAll(t, written, p)) {
				t.Fatalf("%s: content differs", p)
			}
			if byRef.DiskPath(p) != "" {
				t.Fatalf("%s: a referenced file has a disk path", p)
			}
		}
	}

	// A writer skipping holes sees one run of data, as lseek(2) shows it.
	f, err := byRef.View().Open("/usr/bin/big")
	if err != nil {
		t.Fatal(err)
	}
	if d, err := f.Seek(5, seekData); d != 5 || err != nil {
		t.Fatalf("SEEK_DATA at 5: %d, %v", d, err)
	}
	if h, err := f.Seek(0, seekHole); h != 3<<20 || err != nil {
		t.Fatalf("SEEK_HOLE: %d, %v", h, err)
	}
	if _, err := f.Seek(3<<20, seekData); !errors.Is(err, syscall.ENXIO) {
		t.Fatalf("SEEK_DATA at the end: %v, want ENXIO", err)
	}
	buf := make([]byte, 4)
	if n, err := f.ReadAt(buf, 3<<20-2); n != 2 || err != io.EOF {
		t.Fatalf("ReadAt across the end: %d, %v", n, err)
	}
	f.Close()

	// A host process must not run on the incomplete directory.
	if _, err := byRef.Rescan(context.Background(), Origin{}); err == nil {
		t.Fatal("a rescan before materializing succeeded")
	}

	// Changes to the index of referenced files carry into the directory.
	if err := byRef.Update("/etc/shadow", func(in *Inode) { in.Perm = 0o600 }); err != nil {
		t.Fatal(err)
	}
	if err := written.Update("/etc/shadow", func(in *Inode) { in.Perm = 0o600 }); err != nil {
		t.Fatal(err)
	}
	if _, err := byRef.Link("/etc/passwd-", "/etc/passwd", Origin{}); err != nil {
		t.Fatal(err)
	}
	if _, err := written.Link("/etc/passwd-", "/etc/passwd", Origin{}); err != nil {
		t.Fatal(err)
	}
	if err := byRef.Remove("/usr/bin/dash"); err != nil {
		t.Fatal(err)
	}
	if err := written.Remove("/usr/bin/dash"); err != nil {
		t.Fatal(err)
	}

	if err := byRef.Materialize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if byRef.Referenced() {
		t.Fatal("references left after materializing")
	}
	if left, _ := os.ReadDir(content); len(left) != 0 {
		t.Fatalf("archives left after materializing: %v", left)
	}
	for _, p := range written.Paths() {
		e := written.Get(p)
		if e.Type != TypeRegular {
			continue
		}
		got, err := os.ReadFile(byRef.DiskPath(p))
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(written.DiskPath(p))
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: materialized content differs", p)
		}
		gi, _ := os.Stat(byRef.DiskPath(p))
		wi, _ := os.Stat(written.DiskPath(p))
		if gi.Mode() != wi.Mode() {
			t.Fatalf("%s: disk mode %v, want %v", p, gi.Mode(), wi.Mode())
		}
	}
	for _, pair := range [][2]string{{"/usr/bin/big", "/usr/bin/big-link"}, {"/etc/passwd", "/etc/passwd-"}} {
		a, _ := os.Stat(byRef.DiskPath(pair[0]))
		b, _ := os.Stat(byRef.DiskPath(pair[1]))
		if a == nil || b == nil || !os.SameFile(a, b) {
			t.Fatalf("%s and %s are not one inode on disk", pair[0], pair[1])
		}
	}
	ch, err := byRef.Rescan(context.Background(), Origin{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Added)+len(ch.Modified)+len(ch.Removed) != 0 {
		t.Fatalf("the rescan after materializing found changes: %+v", ch)
	}
	if got, want := manifestOf(t, byRef), manifestOf(t, written); got != want {
		t.Fatalf("manifests differ after materializing:\n%s\nwant\n%s", got, want)
	}
}

// A sparse member's data is a map of runs, not its content: it is written.
func TestSparseMembersAreNotReferenced(t *testing.T) {
	for _, k := range []string{"GNU.sparse.major", "GNU.sparse.map", "GNU.sparse.size"} {
		if contiguous(&tar.Header{Typeflag: tar.TypeReg, PAXRecords: map[string]string{k: "1"}}) {
			t.Fatalf("a member with %s is taken as contiguous", k)
		}
	}
	if !contiguous(&tar.Header{Typeflag: tar.TypeReg, PAXRecords: map[string]string{"SCHILY.xattr.user.a": "1"}}) {
		t.Fatal("a member with an xattr is not taken as contiguous")
	}
}
