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
