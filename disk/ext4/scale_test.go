package ext4

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

// TestLargeDirectory puts more than 100,000 entries in one directory: an
// htree with two index levels.
func TestLargeDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: writing and checking 100,050 entries in one directory is slow")
	}
	tr := rootfstest.New(t, testEpoch)
	const n = 100_050
	start := time.Now()
	for i := range n {
		// Names of varying length, some sharing long prefixes.
		name := fmt.Sprintf("/big/entry-%d%s", i, strings.Repeat("x", i%23))
		rootfstest.Add(t, tr, name, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, "")
	}
	rootfstest.Add(t, tr, "/big/sub", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o755}, "")
	sealTree(t, tr)
	t.Logf("tree of %d entries made in %v", tr.Len(), time.Since(start))
	start = time.Now()
	img, sum := writeImage(t, tr, testOptions())
	t.Logf("written in %v: %+v", time.Since(start), sum)
	fsck(t, img)

	s := statOf(t, img, "/big")
	if s.flags != "0x81000" || s.links != 3 {
		t.Errorf("/big: flags %s links %d, want an indexed directory with 3 links", s.flags, s.links)
	}
	dump := debugfs(t, img, "htree_dump /big")
	if !strings.Contains(dump, "Indirect levels: 1") {
		t.Errorf("htree_dump /big shows no second index level:\n%.2000s", dump)
	}
	// Every name is found through the index (debugfs's lookup uses it).
	for _, i := range []int{0, 1, 99, 4242, 77777, n - 1} {
		p := fmt.Sprintf("/big/entry-%d%s", i, strings.Repeat("x", i%23))
		if got := statOf(t, img, p); got.size != 0 || got.mode != "0644" {
			t.Errorf("%s: %+v", p, got)
		}
	}
	ls := debugfs(t, img, "ls /big")
	if got := len(regexp.MustCompile(`entry-`).FindAllStringIndex(ls, -1)); got != n {
		t.Errorf("ls /big lists %d entries, want %d", got, n)
	}
}

// TestManySubdirectories puts more than 65,000 subdirectories in one
// directory: its link count no longer fits, and dir_nlink makes it 1.
func TestManySubdirectories(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: writing and checking 65,010 subdirectories is slow")
	}
	tr := rootfstest.New(t, testEpoch)
	const n = 65_010
	for i := range n {
		rootfstest.Add(t, tr, fmt.Sprintf("/d/%05d", i), rootfs.Header{Type: rootfs.TypeDir, Perm: 0o700, UID: uint32(i)}, "")
	}
	sealTree(t, tr)
	img, _ := writeImage(t, tr, testOptions())
	fsck(t, img)
	if s := statOf(t, img, "/d"); s.links != 1 || s.flags != "0x81000" {
		t.Errorf("/d: links %d flags %s, want 1 and indexed", s.links, s.flags)
	}
	if s := statOf(t, img, "/d/65009"); s.links != 2 || s.uid != 65009 {
		t.Errorf("/d/65009: %+v", s)
	}
}

// TestExtentTrees writes files whose extents do not fit in the inode: one
// and two levels of extent blocks.
func TestExtentTrees(t *testing.T) {
	tr := rootfstest.New(t, testEpoch)
	sizes := map[string]int{"/one-level": 20, "/two-levels": 1500}
	for _, p := range []string{"/one-level", "/two-levels"} {
		runs := sizes[p]
		var zero []int
		for i := range runs {
			zero = append(zero, 2*i+1) // every other block is a hole
		}
		rootfstest.Add(t, tr, p, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, content(uint64(runs), 2*runs*blockSize-100, zero...))
	}
	sealTree(t, tr)
	img, _ := writeImage(t, tr, testOptions())
	fsck(t, img)
	checkContents(t, img, tr)
	// debugfs ex prints "level/depth entry/entries" per node.
	for _, c := range []struct{ path, line string }{
		{"/one-level", "\n 0/ 1   1/  1 "},
		{"/one-level", "\n 1/ 1  20/ 20 "},
		{"/two-levels", "\n 0/ 2   1/  1 "},
		{"/two-levels", "\n 1/ 2   5/  5 "},
		{"/two-levels", "\n 2/ 2 140/140 "},
	} {
		out := debugfs(t, img, "ex "+c.path)
		if !strings.Contains(out, c.line) {
			t.Errorf("ex %s lacks %q:\n%.1500s", c.path, c.line, out)
		}
	}
	if s := statOf(t, img, "/two-levels"); s.blockcount != (1500+5+1)*8 {
		t.Errorf("/two-levels: %d sectors, want data, 5 leaves and an index block", s.blockcount)
	}
}
