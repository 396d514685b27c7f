package rootfs_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

// A tree written out as its manifest and content and restored into a new
// tree is the same tree: digest, manifest with origins, and content.
func TestRestoreRoundTrip(t *testing.T) {
	ctx := context.Background()
	ep := time.Unix(1700000000, 0).UTC()
	a := rootfstest.New(t, ep)
	rootfstest.Dir(t, a, "/etc", 0o755, ep)
	rootfstest.Add(t, a, "/etc/shadow", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o640, GID: 42, MTime: ep,
		Origin: rootfs.Origin{Layer: "base.debs", Input: "sha256:ab", Member: "passwd"}}, "root:*:19000:0:99999:7:::\n")
	rootfstest.Add(t, a, "/usr/bin/ping", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o4755, MTime: ep,
		Xattrs: map[string]string{"security.capability": "\x01\x00\x00\x02"}}, strings.Repeat("ELF", 5000))
	if _, err := a.Link("/usr/bin/ping4", "/usr/bin/ping", rootfs.Origin{Layer: "base.debs"}); err != nil {
		t.Fatal(err)
	}
	rootfstest.Symlink(t, a, "/bin", "usr/bin", ep)
	// A second name for a symlink, as a tar can give one.
	if _, err := a.Link("/usr/lib/bin-too", "/bin", rootfs.Origin{Layer: "base.debs"}); err != nil {
		t.Fatal(err)
	}
	// Directories and symlinks deeper down, past the descriptors Restore
	// keeps open.
	for i := range 80 {
		d := fmt.Sprintf("/usr/lib/m%02d/sub", i)
		rootfstest.Dir(t, a, d, 0o750, ep)
		rootfstest.Symlink(t, a, d+"/link", "../../m00", ep)
	}
	rootfstest.Add(t, a, "/dev/null", rootfs.Header{Type: rootfs.TypeChar, Perm: 0o666, Major: 1, Minor: 3, MTime: ep}, "")
	rootfstest.Add(t, a, "/empty", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: ep}, "")

	var manifest, content bytes.Buffer
	if err := rootfs.WriteManifest(&manifest, a.Entries(), true); err != nil {
		t.Fatal(err)
	}
	if err := a.WriteContent(ctx, &content); err != nil {
		t.Fatal(err)
	}
	entries, err := rootfs.ParseManifest(bytes.NewReader(manifest.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	b := rootfstest.New(t, ep)
	if err := b.Restore(ctx, entries, bytes.NewReader(content.Bytes()), nil); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if err := rootfs.WriteManifest(&again, b.Entries(), true); err != nil {
		t.Fatal(err)
	}
	if again.String() != manifest.String() {
		t.Fatalf("restored manifest:\n%s\nwant\n%s", again.String(), manifest.String())
	}
	if got := string(rootfstest.Read(t, b, "/usr/bin/ping4")); got != strings.Repeat("ELF", 5000) {
		t.Fatalf("hard link content %q", got[:10])
	}
	// Directories and symlinks are made on disk only when something needs
	// them there: a file below them, or Materialize.
	if _, err := os.Lstat(b.DiskPath("/usr/lib/m42")); !os.IsNotExist(err) {
		t.Fatalf("a restored directory nothing needs is on disk: %v", err)
	}
	if _, err := os.Lstat(b.DiskPath("/bin")); !os.IsNotExist(err) {
		t.Fatalf("a restored symlink nothing needs is on disk: %v", err)
	}
	if fi, err := os.Stat(b.DiskPath("/usr/bin/ping")); err != nil || fi.Size() != 15000 {
		t.Fatalf("a restored file: %v", err)
	}
	if !b.Referenced() {
		t.Fatal("a tree with directories off disk says it is all there")
	}
	if _, err := b.Rescan(ctx, rootfs.Origin{Layer: "test"}); err == nil {
		t.Fatal("a rescan of a tree with directories off disk would read them as removed")
	}
	rootfstest.Add(t, b, "/usr/lib/m05/sub/new", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: ep}, "new\n")
	if fi, err := os.Lstat(b.DiskPath("/usr/lib/m05/sub")); err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o750 {
		t.Fatalf("the directory a new file needs: %v, %v", fi, err)
	}
	if _, err := os.Lstat(b.DiskPath("/usr/lib/m05/sub/link")); !os.IsNotExist(err) {
		t.Fatalf("a symlink beside a new file is on disk: %v", err)
	}
	// A directory off disk is removed and changed in the index alone.
	if err := b.Remove("/usr/lib/m07"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create("/usr/lib/m08/sub", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o700, MTime: ep}, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.Materialize(ctx); err != nil {
		t.Fatal(err)
	}
	if b.Referenced() {
		t.Fatal("a materialized tree says it is not all there")
	}
	// What is on disk now is what the index recorded of it.
	if ch, err := b.Rescan(ctx, rootfs.Origin{Layer: "test"}); err != nil || len(ch.Added)+len(ch.Modified)+len(ch.Removed) > 0 {
		t.Fatalf("the restored directory differs from its index: %+v, %v", ch, err)
	}
	if _, err := os.Lstat(b.DiskPath("/usr/lib/m07")); !os.IsNotExist(err) {
		t.Fatalf("a removed directory is on disk: %v", err)
	}
	if fi, err := os.Lstat(b.DiskPath("/usr/lib/m08/sub")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("a directory changed while off disk: %v, %v", fi, err)
	}
	one, err1 := os.Lstat(b.DiskPath("/bin"))
	two, err2 := os.Lstat(b.DiskPath("/usr/lib/bin-too"))
	if err1 != nil || err2 != nil || !os.SameFile(one, two) {
		t.Fatalf("a symlink's two names are not one inode on disk: %v, %v", err1, err2)
	}
	if target, err := os.Readlink(b.DiskPath("/usr/lib/m79/sub/link")); err != nil || target != "../../m00" {
		t.Fatalf("a restored symlink reads %q, %v", target, err)
	}
	if fi, err := os.Stat(b.DiskPath("/usr/lib/m42/sub")); err != nil || !fi.IsDir() {
		t.Fatalf("a restored directory: %v", err)
	}

	// Content that is not what the manifest says is refused, naming the path.
	bad := bytes.Replace(content.Bytes(), []byte("ELF"), []byte("elf"), 1)
	c := rootfstest.New(t, ep)
	if err := c.Restore(ctx, entries, bytes.NewReader(bad), nil); err == nil || !strings.Contains(err.Error(), "/usr/bin/ping") {
		t.Fatalf("damaged content: %v", err)
	}
}
