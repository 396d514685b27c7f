package readback

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

func diffEntry(p string, typ rootfs.Type, perm uint32, digest string) *rootfs.Entry {
	return &rootfs.Entry{Path: p, Inode: &rootfs.Inode{Type: typ, Perm: perm, MTime: time.Unix(1700000000, 0), Digest: digest, Size: 4}}
}

// diffPair is a tar image and a raw image that differ in every way an
// entry can, plus their records.
func diffPair(t *testing.T) (*formats.Image, *formats.Image) {
	a := []*rootfs.Entry{
		diffEntry("/", rootfs.TypeDir, 0o755, ""),
		diffEntry("/etc/a", rootfs.TypeRegular, 0o644, "aa"),
		diffEntry("/etc/gone", rootfs.TypeRegular, 0o644, "bb"),
		diffEntry("/etc/same", rootfs.TypeRegular, 0o644, "cc"),
		diffEntry("/etc/type", rootfs.TypeRegular, 0o644, "dd"),
		diffEntry(rootfs.RecordPath, rootfs.TypeRegular, 0o644, "r1"),
	}
	b := []*rootfs.Entry{
		diffEntry("/", rootfs.TypeDir, 0o755, ""),
		diffEntry("/etc/a", rootfs.TypeRegular, 0o600, "ab"),
		diffEntry("/etc/new", rootfs.TypeRegular, 0o644, "ee"),
		diffEntry("/etc/same", rootfs.TypeRegular, 0o644, "cc"),
		diffEntry("/etc/type", rootfs.TypeDir, 0o755, ""),
		diffEntry(rootfs.RecordPath, rootfs.TypeRegular, 0o644, "r2"),
	}
	b[1].UID, b[1].MTime = 7, time.Unix(1700000001, 0)
	b[1].Xattrs = map[string]string{"user.x": "1"}
	return &formats.Image{Format: "tar", Tree: sealedOf(t, a)}, &formats.Image{Format: "raw", Tree: sealedOf(t, b)}
}

// sealedOf is the view a reader would return of entries.
func sealedOf(t *testing.T, entries []*rootfs.Entry) *rootfs.Sealed {
	t.Helper()
	s, err := rootfs.SealedOf(entries)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDiffImagesNamesEveryChangedField checks that a changed entry lists
// each field that differs, and that added, removed and retyped entries are
// reported in path order, the record left out.
func TestDiffImagesNamesEveryChangedField(t *testing.T) {
	ia, ib := diffPair(t)
	var got []string
	for _, c := range DiffImages(ia, ib, DiffOptions{}) {
		got = append(got, string(c.Kind)+" "+c.Path+" "+strings.Join(c.FieldNames(), ","))
	}
	want := []string{
		"changed /etc/a content,mode,owner,mtime,xattr",
		"removed /etc/gone ",
		"added /etc/new ",
		"changed /etc/type type",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestDiffImagesComparesTheRecordOnlyWhenAsked checks IncludeRecord.
func TestDiffImagesComparesTheRecordOnlyWhenAsked(t *testing.T) {
	ia, ib := diffPair(t)
	for _, c := range DiffImages(ia, ib, DiffOptions{}) {
		if c.Path == rootfs.RecordPath {
			t.Errorf("the record is compared by default: %v", c)
		}
	}
	with := DiffImages(ia, ib, DiffOptions{IncludeRecord: true})
	if last := with[len(with)-1]; last.Path != rootfs.RecordPath || last.FieldNames()[0] != FieldContent {
		t.Errorf("the record is not compared when asked for: %v", last)
	}
}

// TestDiffImagesComparesFactsOnlyWithinOneFormat checks that facts (a
// disk's geometry, say) count between two images of one format only.
func TestDiffImagesComparesFactsOnlyWithinOneFormat(t *testing.T) {
	ia, ib := diffPair(t)
	want := len(DiffImages(ia, ib, DiffOptions{}))
	ia.Facts, ib.Facts = []formats.Fact{{Key: "k", Value: "1"}}, []formats.Fact{{Key: "k", Value: "2"}}
	if n := len(DiffImages(ia, ib, DiffOptions{})); n != want {
		t.Errorf("facts of different formats compared: %d changes", n)
	}
	ib.Format = "tar"
	if c := DiffImages(ia, ib, DiffOptions{}); c[len(c)-1].Kind != Structure || c[len(c)-1].Path != "k" {
		t.Errorf("a differing fact is not reported: %v", c)
	}
}

// TestDiffTreesComparesABuiltTreeWithItsOutput checks that a tree as built
// and the same tree read back from a tar are one type to DiffTrees: equal
// when nothing changed, and naming the path and field when the built one
// did.
func TestDiffTreesComparesABuiltTreeWithItsOutput(t *testing.T) {
	ep := time.Unix(1700000000, 0).UTC()
	tree := rootfstest.New(t, ep)
	rootfstest.Dir(t, tree, "/etc", 0o755, ep)
	rootfstest.File(t, tree, "/etc/hostname", 0o644, ep, "node\n")
	rootfstest.Symlink(t, tree, "/etc/name", "hostname", ep)
	if _, err := tree.Link("/etc/hostname.hard", "/etc/hostname", rootfs.Origin{}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "tree.tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := formats.WriteTar(t.Context(), tree.View(), f, formats.TarOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	im, err := formats.ReadImage(t.Context(), out)
	if err != nil {
		t.Fatal(err)
	}
	if c := DiffTrees(tree.View(), im.Tree, DiffOptions{}); len(c) != 0 {
		t.Errorf("a tree and its tar differ: %v", c)
	}
	if err := tree.Update("/etc/hostname", func(in *rootfs.Inode) { in.Perm = 0o600 }); err != nil {
		t.Fatal(err)
	}
	c := DiffTrees(tree.View(), im.Tree, DiffOptions{})
	if len(c) != 2 || c[0].Path != "/etc/hostname" || c[1].Path != "/etc/hostname.hard" ||
		!reflect.DeepEqual(c[0].FieldNames(), []string{FieldMode}) {
		t.Errorf("a changed mode diffs as %v, want the mode of both links", c)
	}
}
