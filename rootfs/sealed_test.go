package rootfs

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// sealedTestTree is a small tree with a file, a hard link, a directory, an
// absolute and a relative symlink and a device node.
func sealedTestTree(t *testing.T, ep time.Time) *Tree {
	t.Helper()
	tr, err := New(filepath.Join(t.TempDir(), "tree"), Options{DefaultMTime: ep})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	add := func(p string, h Header, content string) {
		t.Helper()
		h.MTime = ep
		var r io.Reader
		if h.Type == TypeRegular {
			r = strings.NewReader(content)
		}
		if _, err := tr.Create(p, h, r); err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	add("/etc", Header{Type: TypeDir, Perm: 0o755}, "")
	add("/etc/hostname", Header{Type: TypeRegular, Perm: 0o644, UID: 0, GID: 0}, "node\n")
	add("/usr/lib", Header{Type: TypeDir, Perm: 0o755}, "")
	add("/usr/bin/tool", Header{Type: TypeRegular, Perm: 0o4755, UID: 0, GID: 0}, "#!/bin/sh\n")
	add("/bin", Header{Type: TypeSymlink, Perm: 0o777, Target: "usr/bin"}, "")
	add("/etc/name", Header{Type: TypeSymlink, Perm: 0o777, Target: "/etc/hostname"}, "")
	add("/dev/null", Header{Type: TypeChar, Perm: 0o666, Major: 1, Minor: 3}, "")
	if _, err := tr.Link("/etc/hostname.hard", "/etc/hostname", Origin{}); err != nil {
		t.Fatal(err)
	}
	return tr
}

func TestSealedFS(t *testing.T) {
	ep := time.Unix(1700000000, 0).UTC()
	tr := sealedTestTree(t, ep)
	s := tr.View()
	fsys := s.FS()
	if err := fstest.TestFS(fsys, "etc/hostname", "etc/hostname.hard", "etc/name", "usr/bin/tool", "bin", "dev/null"); err != nil {
		t.Fatal(err)
	}
	if b, err := fs.ReadFile(fsys, "etc/name"); err != nil || string(b) != "node\n" {
		t.Errorf("ReadFile through a symlink: %q, %v", b, err)
	}
	if b, err := fs.ReadFile(fsys, "bin/tool"); err != nil || string(b) != "#!/bin/sh\n" {
		t.Errorf("ReadFile through a directory symlink: %q, %v", b, err)
	}
	rl := fsys.(fs.ReadLinkFS)
	if target, err := rl.ReadLink("etc/name"); err != nil || target != "/etc/hostname" {
		t.Errorf("ReadLink: %q, %v", target, err)
	}
	if _, err := rl.ReadLink("etc/hostname"); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("ReadLink of a file: %v, want ErrInvalid", err)
	}
	fi, err := rl.Lstat("etc/name")
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		t.Fatalf("Lstat of a symlink: %v, %v", fi, err)
	}
	if e, ok := fi.Sys().(*Entry); !ok || e != s.Get("/etc/name") {
		t.Errorf("Lstat's Sys is %T, want the *Entry", fi.Sys())
	}
	fi, err = fs.Stat(fsys, "usr/bin/tool")
	if err != nil || fi.Mode() != fs.ModeSetuid|0o755 || fi.ModTime() != ep {
		t.Errorf("Stat: %v %v, %v", fi.Mode(), fi.ModTime(), err)
	}
	fi, err = rl.Lstat("dev/null")
	if err != nil || fi.Mode()&fs.ModeCharDevice == 0 || fi.Sys().(*Entry).Major != 1 {
		t.Errorf("Lstat of a device: %v, %v", fi, err)
	}
	if _, err := fsys.Open("../etc/hostname"); !errors.Is(err, fs.ErrInvalid) {
		t.Errorf("Open of an invalid name: %v", err)
	}
	if _, err := fsys.Open("etc/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open of a missing name: %v", err)
	}
}

func TestSealedOpenReadsAndRefusesAChangedFile(t *testing.T) {
	ep := time.Unix(1700000000, 0).UTC()
	tr := sealedTestTree(t, ep)
	s := tr.View()
	f, err := s.Open("/etc/hostname")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(f)
	f.Close()
	if err != nil || string(b) != "node\n" {
		t.Fatalf("read %q, %v", b, err)
	}
	if _, err := s.Open("/etc"); err == nil {
		t.Error("Open of a directory succeeded")
	}
	// A file changed behind the index is refused, not read.
	if err := os.WriteFile(s.DiskPath("/usr/bin/tool"), []byte("changed, and longer\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open("/usr/bin/tool"); err == nil || !strings.Contains(err.Error(), "changed after sealing") {
		t.Errorf("Open of a changed file: %v", err)
	}
}

func TestSealWritesTheRecordLastAndLeavesItOutOfTheDigest(t *testing.T) {
	ep := time.Unix(1700000000, 0).UTC()
	tr := sealedTestTree(t, ep)
	var seen int
	s, _, err := Seal(context.Background(), tr, SealOptions{Epoch: ep, NoDefaultCleanup: true,
		Record: func(digest string, entries []*Entry) ([]byte, error) {
			seen = len(entries)
			return json.Marshal(map[string]string{"tree": digest})
		}})
	if err != nil {
		t.Fatal(err)
	}
	if seen != s.Len()-2 {
		t.Errorf("the record saw %d entries; the sealed tree holds %d with the record and its directory", seen, s.Len())
	}
	e := s.Get(RecordPath)
	if e == nil || e.MTime != ep || e.Perm != 0o644 || e.Origin.Layer != "stamp" {
		t.Fatalf("record entry %+v", e)
	}
	b, err := fs.ReadFile(s.FS(), RecordPath[1:])
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]string
	if err := json.Unmarshal(b, &rec); err != nil || rec["tree"] != s.Digest() {
		t.Errorf("record %s names another digest than %s (%v)", b, s.Digest(), err)
	}
	if d := Digest(s.Entries()); d != s.Digest() {
		t.Errorf("digest with the record %s, without %s", d, s.Digest())
	}
}

func TestSealedOverlayLeavesTheViewAlone(t *testing.T) {
	ep := time.Unix(1700000000, 0).UTC()
	s := sealedTestTree(t, ep).View()
	before := s.Digest()
	ov, err := s.Overlay(filepath.Join(t.TempDir(), "upper"))
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	if _, err := ov.Create("/etc/added", Header{Type: TypeRegular, Perm: 0o644, MTime: ep}, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	view := ov.View()
	if view.Get("/etc/added") == nil || s.Get("/etc/added") != nil {
		t.Error("the addition is not in the output's view alone")
	}
	if added := view.Added(); len(added) != 1 || added[0].Path != "/etc/added" {
		t.Errorf("Added: %v", added)
	}
	if s.Digest() != before {
		t.Error("the sealed view's digest changed")
	}
	if b, err := fs.ReadFile(view.FS(), "etc/hostname"); err != nil || string(b) != "node\n" {
		t.Errorf("the view reads the lower content: %q, %v", b, err)
	}
}
