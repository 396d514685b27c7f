package rootfs

import (
	"errors"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

// readBack copies entries as a reader of an output would make them: fresh
// inodes, shared where the entries share one, with no link counts.
func readBack(entries []*Entry) []*Entry {
	inodes := map[*Inode]*Inode{}
	out := make([]*Entry, len(entries))
	for i, e := range entries {
		in := inodes[e.Inode]
		if in == nil {
			c := *e.Inode
			c.nlink, c.disk = 0, diskState{}
			in = &c
			inodes[e.Inode] = in
		}
		out[i] = &Entry{Path: e.Path, Inode: in}
	}
	return out
}

func TestSealedOfReadsAsTheBuiltView(t *testing.T) {
	ep := time.Unix(1700000000, 0).UTC()
	built := sealedTestTree(t, ep).View()
	entries := readBack(built.Entries())
	// A reader may hand entries over in any order.
	slices.Reverse(entries)
	s, err := SealedOf(entries)
	if err != nil {
		t.Fatal(err)
	}
	if s.HasContent() || !built.HasContent() {
		t.Errorf("HasContent: read back %v, built %v", s.HasContent(), built.HasContent())
	}
	if s.Digest() != built.Digest() || s.Len() != built.Len() {
		t.Errorf("digest %s over %d entries, the built view's %s over %d", s.Digest(), s.Len(), built.Digest(), built.Len())
	}
	if !slices.Equal(s.Paths(), built.Paths()) {
		t.Errorf("paths %v, want %v", s.Paths(), built.Paths())
	}
	if !slices.Equal(s.Children("/etc"), built.Children("/etc")) {
		t.Errorf("children of /etc %v, want %v", s.Children("/etc"), built.Children("/etc"))
	}
	if e := s.Get("/etc/hostname.hard"); e == nil || e.Nlink() != 2 || e.Inode != s.Get("/etc/hostname").Inode {
		t.Errorf("hard link %+v: want two paths on one inode", e)
	}
	if e, err := s.Lookup("/bin/tool", true); err != nil || e != s.Get("/usr/bin/tool") {
		t.Errorf("Lookup through a symlink: %v, %v", e, err)
	}
	var walked []string
	if err := s.Walk(func(e *Entry) error { walked = append(walked, e.Path); return nil }); err != nil || !slices.Equal(walked, built.Paths()) {
		t.Errorf("Walk: %v, %v", walked, err)
	}
	if s.DiskPath("/etc/hostname") != "" {
		t.Errorf("DiskPath %q of a view with no content", s.DiskPath("/etc/hostname"))
	}
	_, err = s.Open("/etc/hostname")
	if !errors.Is(err, ErrNoContent) || !strings.Contains(err.Error(), "/etc/hostname") {
		t.Errorf("Open: %v, want ErrNoContent naming the path", err)
	}
}

// TestSealedOfFS holds the fs.FS of a read-back view to what fstest.TestFS
// checks, except reading content, which the view does not have: the full
// check runs on the entries that have none to read, the rest is checked
// here by hand.
func TestSealedOfFS(t *testing.T) {
	ep := time.Unix(1700000000, 0).UTC()
	built := sealedTestTree(t, ep).View()
	s, err := SealedOf(readBack(built.Entries()))
	if err != nil {
		t.Fatal(err)
	}
	fsys := s.FS()
	var noFiles []*Entry
	for _, e := range readBack(built.Entries()) {
		if e.Type != TypeRegular && e.Path != "/bin" && e.Path != "/etc/name" {
			noFiles = append(noFiles, e)
		}
	}
	bare, err := SealedOf(noFiles)
	if err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(bare.FS(), "dev/null", "usr/lib", "etc"); err != nil {
		t.Fatal(err)
	}
	err = fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		p := "/" + name
		if name == "." {
			p = "/"
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if e, ok := fi.Sys().(*Entry); !ok || e != s.Get(p) {
			t.Errorf("%s: Sys is %v, want its entry", name, fi.Sys())
		}
		if fi.Mode() != FileInfo(d.Name(), built.Get(p)).Mode() {
			t.Errorf("%s: mode %v, the built view's %v", name, fi.Mode(), FileInfo(d.Name(), built.Get(p)).Mode())
		}
		if d.Type().IsRegular() {
			if _, err := fsys.Open(name); !errors.Is(err, ErrNoContent) {
				t.Errorf("%s: Open %v, want ErrNoContent", name, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if target, err := fs.ReadLink(fsys, "etc/name"); err != nil || target != "/etc/hostname" {
		t.Errorf("ReadLink: %q, %v", target, err)
	}
	if fi, err := fs.Stat(fsys, "etc/name"); err != nil || fi.Size() != int64(len("node\n")) {
		t.Errorf("Stat through a symlink: %v, %v", fi, err)
	}
}

func TestSealedOfRefusesWhatIsNoTree(t *testing.T) {
	in := &Inode{Type: TypeDir, Perm: 0o755}
	for _, c := range []struct {
		name    string
		entries []*Entry
	}{
		{"a path twice", []*Entry{{Path: "/", Inode: in}, {Path: "/etc", Inode: in}, {Path: "/etc", Inode: in}}},
		{"a relative path", []*Entry{{Path: "etc", Inode: in}}},
		{"an unclean path", []*Entry{{Path: "/etc/../usr", Inode: in}}},
		{"a format's own path", []*Entry{{Path: "esp:/EFI", Inode: in}}},
		{"no entry", []*Entry{nil}},
	} {
		if _, err := SealedOf(c.entries); err == nil {
			t.Errorf("%s: accepted", c.name)
		}
	}
}

// TestSealedOfFSWithoutARoot checks that a view of an archive that does
// not list "/" still walks from "." without making a root up in the index.
func TestSealedOfFSWithoutARoot(t *testing.T) {
	dir := func(p string) *Entry { return &Entry{Path: p, Inode: &Inode{Type: TypeDir, Perm: 0o700}} }
	s, err := SealedOf([]*Entry{dir("/etc"), dir("/etc/kubernetes"), dir("/var")})
	if err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(s.FS(), "etc/kubernetes", "var"); err != nil {
		t.Fatal(err)
	}
	if s.Get("/") != nil || s.Len() != 3 || !slices.Equal(s.Paths(), []string{"/etc", "/etc/kubernetes", "/var"}) {
		t.Errorf("the index gained a root: %v", s.Paths())
	}
}
