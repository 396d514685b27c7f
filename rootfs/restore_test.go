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
	// What Restore made on disk is what the index recorded of it.
	if ch, err := b.Rescan(ctx, rootfs.Origin{Layer: "test"}); err != nil || len(ch.Added)+len(ch.Modified)+len(ch.Removed) > 0 {
		t.Fatalf("the restored directory differs from its index: %+v, %v", ch, err)
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
