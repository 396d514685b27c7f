package rootfs

import (
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOverlayKeepsTheLowerTreeUnchanged(t *testing.T) {
	ep := time.Unix(1700000000, 0).UTC()
	base, err := New(filepath.Join(t.TempDir(), "tree"), Options{DefaultMTime: ep})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	file := func(tr *Tree, p, content string) {
		t.Helper()
		if _, err := tr.Create(p, Header{Type: TypeRegular, Perm: 0o644, MTime: ep}, strings.NewReader(content)); err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	file(base, "/usr/lib/os-release", "ID=test\n")
	file(base, "/etc/hostname", "node\n")
	if _, err := base.Link("/etc/hostname.hard", "/etc/hostname", Origin{}); err != nil {
		t.Fatal(err)
	}
	before := Digest(base.Entries())
	var manifest strings.Builder
	if err := WriteManifest(&manifest, base.Entries(), true); err != nil {
		t.Fatal(err)
	}

	ov, err := base.Overlay(filepath.Join(t.TempDir(), "upper"))
	if err != nil {
		t.Fatal(err)
	}
	defer ov.Close()
	if _, err := ov.MkdirAll("/usr/lib/repart.d", Header{Perm: 0o755, MTime: ep}); err != nil {
		t.Fatal(err)
	}
	file(ov, "/usr/lib/repart.d/50-root.conf", "[Partition]\n")
	file(ov, "/etc/hostname", "other\n") // replaces a hard-linked file of the lower tree
	if err := ov.Update("/usr/lib/os-release", func(in *Inode) { in.Perm = 0o600 }); err != nil {
		t.Fatal(err)
	}

	if got := Digest(base.Entries()); got != before {
		t.Fatalf("the lower tree's digest changed: %s, was %s", got, before)
	}
	var after strings.Builder
	if err := WriteManifest(&after, base.Entries(), true); err != nil {
		t.Fatal(err)
	}
	if after.String() != manifest.String() {
		t.Fatalf("the lower tree's manifest changed:\n%s\nwas\n%s", after.String(), manifest.String())
	}
	read := func(tr *Tree, p string) string {
		t.Helper()
		f, err := tr.Open(p)
		if err != nil {
			t.Fatalf("open %s: %v", p, err)
		}
		defer f.Close()
		b, err := io.ReadAll(f)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, c := range []struct {
		tree       *Tree
		path, want string
	}{
		{base, "/etc/hostname", "node\n"},
		{base, "/etc/hostname.hard", "node\n"},
		{ov, "/etc/hostname", "other\n"},
		{ov, "/etc/hostname.hard", "node\n"},
		{ov, "/usr/lib/os-release", "ID=test\n"},
		{ov, "/usr/lib/repart.d/50-root.conf", "[Partition]\n"},
	} {
		if got := read(c.tree, c.path); got != c.want {
			t.Errorf("%s: %q, want %q", c.path, got, c.want)
		}
	}
	if base.Get("/usr/lib/repart.d") != nil || base.Get("/usr/lib/os-release").Perm != 0o644 {
		t.Fatal("the overlay's changes reached the lower index")
	}
	if n := ov.Get("/etc/hostname.hard").Nlink(); n != 1 {
		t.Errorf("hard link count after replacing one name: %d, want 1", n)
	}
	var added []string
	for _, e := range ov.Added() {
		added = append(added, e.Path)
	}
	want := "/etc/hostname /usr/lib/os-release /usr/lib/repart.d /usr/lib/repart.d/50-root.conf"
	if got := strings.Join(added, " "); got != want {
		t.Fatalf("Added: %s, want %s", got, want)
	}
	if base.Added() != nil {
		t.Fatal("a tree that is no overlay has additions")
	}
}

// TestSplitAtUsr splits a tree as a disk with a /usr partition holds it:
// the root without what is below /usr, and /usr moved to the root of its
// own, each reading its content from the tree; a hard link across the two
// is refused.
func TestSplitAtUsr(t *testing.T) {
	ep := time.Unix(1700000000, 0).UTC()
	base, err := New(filepath.Join(t.TempDir(), "tree"), Options{DefaultMTime: ep})
	if err != nil {
		t.Fatal(err)
	}
	defer base.Close()
	file := func(p, content string) {
		t.Helper()
		if _, err := base.Create(p, Header{Type: TypeRegular, Perm: 0o644, MTime: ep}, strings.NewReader(content)); err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	file("/usr/bin/tool", "#!/bin/sh\n")
	file("/etc/hostname", "node\n")
	if _, err := base.Link("/usr/bin/tool2", "/usr/bin/tool", Origin{}); err != nil {
		t.Fatal(err)
	}
	if _, err := base.Create("/bin", Header{Type: TypeSymlink, Perm: 0o777, MTime: ep, Target: "usr/bin"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := base.Update("/usr", func(in *Inode) { in.Perm = 0o700 }); err != nil {
		t.Fatal(err)
	}
	before := Digest(base.Entries())
	out, in, err := base.Split("/usr", filepath.Join(t.TempDir(), "out"), filepath.Join(t.TempDir(), "in"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	defer in.Close()
	if got := strings.Join(out.Paths(), " "); got != "/ /bin /etc /etc/hostname /usr" {
		t.Errorf("outside: %s", got)
	}
	if got := strings.Join(in.Paths(), " "); got != "/ /bin /bin/tool /bin/tool2" {
		t.Errorf("inside: %s", got)
	}
	if in.Get("/").Perm != 0o700 || out.Get("/usr").Perm != 0o700 {
		t.Errorf("/usr's mode is not kept on both sides: %o, %o", in.Get("/").Perm, out.Get("/usr").Perm)
	}
	if n := in.Get("/bin/tool").Nlink(); n != 2 {
		t.Errorf("the hard link inside has %d links", n)
	}
	f, err := in.Open("/bin/tool2")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "#!/bin/sh\n" {
		t.Errorf("inside /bin/tool2 reads %q", b)
	}
	if Digest(base.Entries()) != before {
		t.Error("the tree changed")
	}
	if _, err := base.Link("/etc/tool", "/usr/bin/tool", Origin{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := base.Split("/usr", filepath.Join(t.TempDir(), "o2"), filepath.Join(t.TempDir(), "i2")); err == nil ||
		!strings.Contains(err.Error(), "/etc/tool and /usr/bin/tool are hard links") && !strings.Contains(err.Error(), "/usr/bin/tool and /etc/tool") {
		t.Errorf("a hard link across: %v", err)
	}
}
