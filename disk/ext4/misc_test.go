package ext4

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

// TestLostFoundFromTree keeps a lost+found the tree already has, with its
// owner, mode, time and contents, as inode 11.
func TestLostFoundFromTree(t *testing.T) {
	tr := rootfstest.New(t, testEpoch)
	m := testEpoch.Add(-time.Hour)
	rootfstest.Add(t, tr, "/lost+found", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o750, UID: 5, GID: 6, MTime: m}, "")
	for i := range 400 {
		rootfstest.Add(t, tr, fmt.Sprintf("/lost+found/#%d-recovered-entry", 1000+i), rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o600, MTime: m}, "x")
	}
	rootfstest.Add(t, tr, "/a", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: m}, "a")
	sealTree(t, tr)
	img, sum := writeImage(t, tr, testOptions())
	fsck(t, img)
	checkStat(t, img, tr)
	if len(sum.Added) != 0 {
		t.Errorf("summary: added %v to a tree with its own lost+found", sum.Added)
	}
	lf := statOf(t, img, "/lost+found")
	if lf.ino != "11" || lf.flags != "0x80000" || lf.size < 4*blockSize {
		t.Errorf("lost+found: %+v, want inode 11, linear, at least 16 KiB", lf)
	}
	if a := statOf(t, img, "/a"); a.ino != "12" {
		t.Errorf("/a is inode %s, want 12", a.ino)
	}

	// A lost+found that is not a directory cannot be kept.
	tr = rootfstest.New(t, testEpoch)
	rootfstest.Add(t, tr, "/lost+found", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, "")
	sealTree(t, tr)
	if _, err := Plan(tr.View(), testOptions()); err == nil || !strings.Contains(err.Error(), "/lost+found") {
		t.Errorf("Plan with a file at /lost+found: %v", err)
	}
}

// TestLabelAndTimes checks the label, and times past 2038 (the epoch bits
// of the extra time words) in an unsealed tree.
func TestLabelAndTimes(t *testing.T) {
	tr := rootfstest.New(t, testEpoch)
	late := time.Date(2100, 1, 2, 3, 4, 5, 0, time.UTC)
	rootfstest.Add(t, tr, "/late", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: late}, "x")
	o := testOptions()
	o.Label = "root-fs-label-16"
	o.Epoch = time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	img, _ := writeImage(t, tr, o)
	// e2fsck's clock set after the epoch, which is in the future.
	fsck(t, img, fmt.Sprintf("E2FSCK_TIME=%d", o.Epoch.Unix()+1))
	if got := dumpe2fs(t, img)["Filesystem volume name"]; got != o.Label {
		t.Errorf("label %q", got)
	}
	if got := dumpe2fs(t, img)["Filesystem created"]; got != "Sun Jan  1 00:00:00 2040" {
		t.Errorf("created %q", got)
	}
	out := debugfs(t, img, "stat /late")
	if n := strings.Count(out, "Sat Jan  2 03:04:05 2100"); n != 4 {
		t.Errorf("/late shows its time %d times, want 4:\n%s", n, out)
	}
	o.Label = "seventeen-bytes!!"
	if _, err := Plan(tr.View(), o); err == nil {
		t.Errorf("a 17-byte label is accepted")
	}
}

// TestChangedAfterSeal fails when a file's content no longer matches the
// index, rather than writing what the index does not describe.
func TestChangedAfterSeal(t *testing.T) {
	tr := rootfstest.New(t, testEpoch)
	rootfstest.Add(t, tr, "/f", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, "short")
	sealTree(t, tr)
	if err := os.WriteFile(tr.DiskPath("/f"), []byte("much longer now"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := Write(context.Background(), tr.View(), f, testOptions()); err == nil || !strings.Contains(err.Error(), "/f") {
		t.Errorf("Write after the file changed: %v", err)
	}
}

func TestCancel(t *testing.T) {
	tr := rootfstest.New(t, testEpoch)
	rootfstest.Add(t, tr, "/f", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, "x")
	sealTree(t, tr)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f, err := os.Create(filepath.Join(t.TempDir(), "img"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := Write(ctx, tr.View(), f, testOptions()); !errors.Is(err, context.Canceled) {
		t.Errorf("Write with a cancelled context: %v", err)
	}
}
