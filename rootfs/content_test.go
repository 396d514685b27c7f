package rootfs

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
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

// dirStore is the smallest ArchiveStore: archives named by their sha256 in a
// directory, hashed again on every open.
type dirStore struct{ dir string }

func (s dirStore) CreateTemp() (*os.File, error) { return os.CreateTemp(s.dir, ".tmp-*") }

func (s dirStore) Keep(p, sum string) (string, error) {
	dst := filepath.Join(s.dir, sum)
	return dst, os.Rename(p, dst)
}

func (s dirStore) Open(sum string) (*os.File, error) {
	b, err := os.ReadFile(filepath.Join(s.dir, sum))
	if err != nil {
		return nil, err
	}
	if got := sha256.Sum256(b); hex.EncodeToString(got[:]) != sum {
		return nil, fmt.Errorf("archive %s is corrupt", sum)
	}
	return os.Open(filepath.Join(s.dir, sum))
}

// A tree extracted into an archive store is kept as its manifest, its
// references and the content of its other files, and restored from them
// into a tree whose files point into the same archive: the same manifest and
// bytes, without a file written to either directory until materializing,
// which leaves the store's archive in place.
func TestReferencesIntoAStoreRestore(t *testing.T) {
	ctx := context.Background()
	data := referenceArchive(t)
	store := dirStore{t.TempDir()}
	base := t.TempDir()
	a, err := New(filepath.Join(base, "a"), Options{DefaultMTime: epoch, Archives: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if _, err := Extract(ctx, a, bytes.NewReader(data), ExtractOptions{ByReference: true}); err != nil {
		t.Fatal(err)
	}
	// A file no archive holds is kept as content.
	if _, err := a.Create("/etc/hostname", Header{Type: TypeRegular, Perm: 0o644, MTime: epoch}, strings.NewReader("node\n")); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	archiveSum := hex.EncodeToString(sum[:])
	if left, _ := os.ReadDir(store.dir); len(left) != 1 || left[0].Name() != archiveSum {
		t.Fatalf("the store holds %v, want the archive under its sha256 %s", left, archiveSum)
	}
	refs := a.Refs()
	var paths []string
	for _, r := range refs {
		if r.Archive != archiveSum {
			t.Fatalf("%s points into %s", r.Path, r.Archive)
		}
		paths = append(paths, r.Path)
	}
	// One reference per inode: the hard links and the replaced
	// /etc/passwd's earlier bytes are not listed.
	if want := "/etc/empty /etc/passwd /etc/shadow /usr/bin/big /usr/bin/dash"; strings.Join(paths, " ") != want {
		t.Fatalf("references of %v, want %s", paths, want)
	}
	var content bytes.Buffer
	if err := a.WriteContent(ctx, &content); err != nil {
		t.Fatal(err)
	}
	if content.String() != "node\n" {
		t.Fatalf("content written besides the references: %q", content.String())
	}
	entries, err := ParseManifest(strings.NewReader(manifestOf(t, a)))
	if err != nil {
		t.Fatal(err)
	}

	b, err := New(filepath.Join(base, "b"), Options{DefaultMTime: epoch, Archives: store})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	if err := b.Restore(ctx, entries, bytes.NewReader(content.Bytes()), refs); err != nil {
		t.Fatal(err)
	}
	if got, want := manifestOf(t, b), manifestOf(t, a); got != want {
		t.Fatalf("restored manifest:\n%s\nwant\n%s", got, want)
	}
	if !b.Referenced() {
		t.Fatal("the restored tree holds no references")
	}
	if files := regularFiles(t, b.Dir()); len(files) != 2 {
		t.Fatalf("the restored tree's directory holds %v, want only /dev/null and /etc/hostname", files)
	}
	for _, p := range a.Paths() {
		if a.Get(p).Type == TypeRegular && !bytes.Equal(readAll(t, b, p), readAll(t, a, p)) {
			t.Fatalf("%s: restored content differs", p)
		}
	}
	for _, tr := range []*Tree{a, b} {
		if err := tr.Materialize(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The kernel copied the restored tree's files out of the archive.
	for _, p := range a.Paths() {
		if a.Get(p).Type != TypeRegular {
			continue
		}
		if got, err := os.ReadFile(b.DiskPath(p)); err != nil || !bytes.Equal(got, readAll(t, a, p)) {
			t.Fatalf("materialized %s: %q, %v", p, got, err)
		}
	}
	if got := manifestOf(t, b); got != manifestOf(t, a) {
		t.Fatalf("materializing changed the manifest:\n%s", got)
	}
	if _, err := store.Open(archiveSum); err != nil {
		t.Fatalf("the store's archive after materializing: %v", err)
	}

	// A reference outside its archive, or to a path that is not a file of
	// the manifest, is refused.
	for _, bad := range [][]Ref{
		{{Path: "/usr/bin/big", Archive: archiveSum, Offset: int64(len(data))}},
		{{Path: "/nowhere", Archive: archiveSum}},
	} {
		c, err := New(filepath.Join(t.TempDir(), "c"), Options{DefaultMTime: epoch, Archives: store})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Restore(ctx, entries, bytes.NewReader(content.Bytes()), append(refs[:len(refs):len(refs)], bad...))
		c.Close()
		if err == nil || !strings.Contains(err.Error(), bad[0].Path) {
			t.Fatalf("restoring with reference %+v: %v", bad[0], err)
		}
	}
}

// copyRange copies a range of one file to the end of another in the kernel,
// and through a buffer between file systems the kernel will not copy across
// (here tmpfs and the test's directory).
func TestCopyRange(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 300000)
	dirs := []string{t.TempDir()}
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		shm, err := os.MkdirTemp("/dev/shm", "stamp-test-*")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(shm) })
			dirs = append(dirs, shm)
		}
	}
	for _, dir := range dirs {
		src := filepath.Join(dir, "src")
		if err := os.WriteFile(src, data, 0o644); err != nil {
			t.Fatal(err)
		}
		in, err := os.Open(src)
		if err != nil {
			t.Fatal(err)
		}
		defer in.Close()
		out, err := os.Create(filepath.Join(t.TempDir(), "dst"))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		if _, err := out.WriteString("head"); err != nil {
			t.Fatal(err)
		}
		if err := copyRange(out, in, 17, int64(len(data)-20)); err != nil {
			t.Fatalf("from %s: %v", dir, err)
		}
		got, err := os.ReadFile(out.Name())
		if err != nil {
			t.Fatal(err)
		}
		if want := append([]byte("head"), data[17:len(data)-3]...); !bytes.Equal(got, want) {
			t.Fatalf("from %s: copied %d bytes, want %d", dir, len(got), len(want))
		}
		if err := copyRange(out, in, int64(len(data)-10), 20); err == nil || !strings.Contains(err.Error(), "short") {
			t.Fatalf("from %s: a range past the end: %v", dir, err)
		}
	}
}

// An archive a tree has just kept can be extracted again from the store
// (ExtractOptions.Kept), as an image layer at two places of one image's
// chain is: the second extraction points into the same archive.
func TestExtractKeptTwice(t *testing.T) {
	ctx := context.Background()
	data := referenceArchive(t)
	a, err := New(filepath.Join(t.TempDir(), "a"), Options{DefaultMTime: epoch, Archives: dirStore{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if _, err := Extract(ctx, a, bytes.NewReader(data), ExtractOptions{ByReference: true, Map: func(p string) (string, bool) { return "/one" + p, true }}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	if _, err := Extract(ctx, a, bytes.NewReader(data), ExtractOptions{ByReference: true, Kept: hex.EncodeToString(sum[:]),
		Map: func(p string) (string, bool) { return "/two" + p, true }}); err != nil {
		t.Fatalf("extracting the kept archive again: %v", err)
	}
	f, err := a.View().Open("/two/usr/bin/big")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, _ := io.ReadAll(f)
	want, _ := io.ReadAll(mustOpen(t, a, "/one/usr/bin/big"))
	if len(got) == 0 || !bytes.Equal(got, want) {
		t.Fatalf("the second extraction reads %d bytes, the first %d", len(got), len(want))
	}
}

func mustOpen(t *testing.T, tr *Tree, p string) io.Reader {
	t.Helper()
	f, err := tr.View().Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
