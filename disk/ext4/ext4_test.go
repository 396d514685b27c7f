package ext4

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

// content returns deterministic pseudo-random bytes; zeroBlocks lists
// 4 KiB blocks to leave zero, so they become holes.
func content(seed uint64, n int, zeroBlocks ...int) string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	for _, z := range zeroBlocks {
		clear(b[min(z*blockSize, n):min((z+1)*blockSize, n)])
	}
	return string(b)
}

// posixACL builds an ACL in the form getxattr returns: version 2, then
// (tag, perm, id) entries of 8 bytes.
func posixACL(ents ...[3]uint32) string {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for _, e := range ents {
		b = binary.LittleEndian.AppendUint16(b, uint16(e[0]))
		b = binary.LittleEndian.AppendUint16(b, uint16(e[1]))
		b = binary.LittleEndian.AppendUint32(b, e[2])
	}
	return string(b)
}

const undefinedID = 0xFFFFFFFF

var testACL = posixACL(
	[3]uint32{aclUserObj, 7, undefinedID},
	[3]uint32{aclUser, 6, 1000},
	[3]uint32{aclGroupObj, 5, undefinedID},
	[3]uint32{aclGroup, 4, 2000},
	[3]uint32{aclMask, 7, undefinedID},
	[3]uint32{aclOther, 1, undefinedID},
)

// ext4ACL is testACL as ext4 stores it: version 1, short entries for the
// owner, group, mask and other.
var ext4ACL = "01 00 00 00 01 00 07 00 02 00 06 00 e8 03 00 00 04 00 05 00 08 00 04 00 d0 07 00 00 10 00 07 00 20 00 01 00"

// mixedTree is a small tree with one of everything.
func mixedTree(t testing.TB) *rootfs.Tree {
	tr := rootfstest.New(t, testEpoch)
	m1 := testEpoch.Add(-24 * time.Hour)
	m2 := time.Unix(1600000000, 0)
	reg := func(p string, perm uint32, uid, gid uint32, mt time.Time, data string, xattrs map[string]string) {
		rootfstest.Add(t, tr, p, rootfs.Header{Type: rootfs.TypeRegular, Perm: perm, UID: uid, GID: gid, MTime: mt, Xattrs: xattrs}, data)
	}
	rootfstest.Add(t, tr, "/", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o755, MTime: m1}, "")
	rootfstest.Add(t, tr, "/etc", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o755, MTime: m2}, "")
	reg("/etc/hostname", 0o644, 0, 0, m1, "node\n", nil)
	reg("/etc/shadow", 0o640, 0, 42, m2, "root:*:19000:0:99999:7:::\n", nil)
	reg("/etc/empty", 0o600, 0, 0, m1, "", nil)
	reg("/usr/bin/su", 0o4755, 0, 0, m2, content(1, 70000), nil)
	reg("/usr/bin/wall", 0o2755, 0, 5, m2, content(2, 20000), nil)
	reg("/usr/lib/big", 0o644, 70000, 70001, m1, content(3, 3<<20+123, 5, 6, 7, 100, 700), nil)
	reg("/usr/lib/cap", 0o755, 0, 0, m1, "caps", map[string]string{"security.capability": "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"})
	reg("/home/u/notes", 0o600, 1000, 1000, m1, "hello", map[string]string{"user.a": "1", "user.big": strings.Repeat("b", 300), "trusted.t": "x", "user.empty": ""})
	rootfstest.Add(t, tr, "/tmp", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o1777, MTime: m1}, "")
	rootfstest.Add(t, tr, "/srv/shared", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o2770, GID: 100, MTime: m1,
		Xattrs: map[string]string{"system.posix_acl_access": testACL, "system.posix_acl_default": testACL}}, "")
	reg("/srv/shared/doc", 0o664, 0, 100, m1, "doc", map[string]string{"system.posix_acl_access": testACL})
	rootfstest.Add(t, tr, "/bin", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "usr/bin", MTime: m1}, "")
	rootfstest.Add(t, tr, "/usr/lib/long", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: strings.Repeat("deep/", 30) + "x", MTime: m2}, "")
	rootfstest.Add(t, tr, "/usr/lib/edge59", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: strings.Repeat("e", 59), MTime: m2}, "")
	rootfstest.Add(t, tr, "/usr/lib/labelled", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "x", MTime: m2,
		Xattrs: map[string]string{"security.selinux": strings.Repeat("s", 150)}}, "")
	rootfstest.Add(t, tr, "/usr/lib/edge60", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: strings.Repeat("e", 60), MTime: m2}, "")
	rootfstest.AddSpecials(t, tr, m1)
	// Directories over one block, so they get an index; names with bytes
	// over 0x7f hash differently as signed chars, which the index uses.
	for i := range 300 {
		reg(fmt.Sprintf("/usr/share/many/file-%04d-with-a-longer-name", i), 0o644, 0, 0, m1, "", nil)
		reg(fmt.Sprintf("/usr/share/intl/fichier-é-%d-日本語-%s", i, strings.Repeat("ü", i%40)), 0o644, 0, 0, m1, "", nil)
	}
	sealTree(t, tr)
	return tr
}

// stat is the part of `debugfs -R "stat PATH"` the tests compare.
type stat struct {
	ino, mode          string
	uid, gid, links    int64
	size               int64
	times              []string // ctime, atime, mtime, crtime as "0xSECS:EXTRA"
	dev                string
	fastLink           string
	extents            string
	flags              string
	blockcount, aclBlk int64
}

var (
	reInode   = regexp.MustCompile(`Inode: (\d+)\s+Type: .*Mode:\s+(\d+)\s+Flags: (0x[0-9a-f]+)`)
	reUser    = regexp.MustCompile(`User:\s+(\d+)\s+Group:\s+(\d+).*Size: (\d+)`)
	reLinks   = regexp.MustCompile(`Links: (\d+)\s+Blockcount: (\d+)`)
	reACL     = regexp.MustCompile(`File ACL: (\d+)`)
	reTime    = regexp.MustCompile(`(?m)^\s*(ctime|atime|mtime|crtime): (0x[0-9a-f]+:[0-9a-f]+)`)
	reDev     = regexp.MustCompile(`Device major/minor number: (\d+):(\d+)`)
	reFast    = regexp.MustCompile(`Fast link dest: "(.*)"`)
	reExtents = regexp.MustCompile(`(?s)EXTENTS:\n(.*)`)
)

func statOf(t testing.TB, img, p string) stat {
	t.Helper()
	return parseStat(t, p, debugfs(t, img, "stat "+p))
}

func parseStat(t testing.TB, p, out string) stat {
	t.Helper()
	m := reInode.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("debugfs stat %s:\n%s", p, out)
	}
	s := stat{ino: m[1], mode: m[2], flags: m[3]}
	if m := reUser.FindStringSubmatch(out); m != nil {
		s.uid, _ = strconv.ParseInt(m[1], 10, 64)
		s.gid, _ = strconv.ParseInt(m[2], 10, 64)
		s.size, _ = strconv.ParseInt(m[3], 10, 64)
	}
	if m := reLinks.FindStringSubmatch(out); m != nil {
		s.links, _ = strconv.ParseInt(m[1], 10, 64)
		s.blockcount, _ = strconv.ParseInt(m[2], 10, 64)
	}
	if m := reACL.FindStringSubmatch(out); m != nil {
		s.aclBlk, _ = strconv.ParseInt(m[1], 10, 64)
	}
	for _, m := range reTime.FindAllStringSubmatch(out, -1) {
		s.times = append(s.times, m[1]+"="+m[2])
	}
	if m := reDev.FindStringSubmatch(out); m != nil {
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		s.dev = fmt.Sprintf("%d,%d", major, minor)
	}
	if m := reFast.FindStringSubmatch(out); m != nil {
		s.fastLink = m[1]
	}
	if m := reExtents.FindStringSubmatch(out); m != nil {
		s.extents = strings.TrimSpace(m[1])
	}
	return s
}

// checkStat compares what debugfs says about every entry with the tree.
func checkStat(t *testing.T, img string, tr *rootfs.Tree) {
	t.Helper()
	entries := tr.Entries()
	var reqs []string
	for _, e := range entries {
		reqs = append(reqs, "stat "+e.Path)
	}
	outs := debugfsBatch(t, img, reqs)
	for i, e := range entries {
		s := parseStat(t, e.Path, outs[i])
		if want := "0" + fmt.Sprintf("%03o", e.Perm); s.mode != want {
			t.Errorf("%s: mode %s, want %s", e.Path, s.mode, want)
		}
		if s.uid != int64(e.UID) || s.gid != int64(e.GID) {
			t.Errorf("%s: owner %d:%d, want %d:%d", e.Path, s.uid, s.gid, e.UID, e.GID)
		}
		wantTime := fmt.Sprintf("0x%08x:00000000", e.MTime.Unix())
		if len(s.times) != 4 {
			t.Errorf("%s: times %v, want 4", e.Path, s.times)
		}
		for _, tm := range s.times {
			if !strings.HasSuffix(tm, "="+wantTime) {
				t.Errorf("%s: %s, want %s", e.Path, tm, wantTime)
			}
		}
		switch e.Type {
		case rootfs.TypeRegular:
			if s.size != e.Size {
				t.Errorf("%s: size %d, want %d", e.Path, s.size, e.Size)
			}
			if s.links != int64(e.Nlink()) {
				t.Errorf("%s: links %d, want %d", e.Path, s.links, e.Nlink())
			}
		case rootfs.TypeChar, rootfs.TypeBlock:
			if want := fmt.Sprintf("%d,%d", e.Major, e.Minor); s.dev != want {
				t.Errorf("%s: device %s, want %s", e.Path, s.dev, want)
			}
		case rootfs.TypeSymlink:
			if len(e.Target) < 60 && s.fastLink != e.Target {
				t.Errorf("%s: fast link %q, want %q", e.Path, s.fastLink, e.Target)
			}
			if got := debugfs(t, img, "cat "+e.Path); len(e.Target) >= 60 && got != e.Target {
				t.Errorf("%s: slow link %q, want %q", e.Path, got, e.Target)
			}
		}
	}
}

// checkContents dumps every regular file and compares it with the tree's.
func checkContents(t *testing.T, img string, tr *rootfs.Tree) {
	t.Helper()
	dir := t.TempDir()
	var reqs []string
	var files []*rootfs.Entry
	for _, e := range tr.Entries() {
		if e.Type == rootfs.TypeRegular {
			reqs = append(reqs, fmt.Sprintf("dump %s %s", e.Path, filepath.Join(dir, strconv.Itoa(len(files)))))
			files = append(files, e)
		}
	}
	debugfsBatch(t, img, reqs)
	for i, e := range files {
		got, err := os.ReadFile(filepath.Join(dir, strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(tr.DiskPath(e.Path))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: content differs (%d bytes read back, %d in the tree)", e.Path, len(got), len(want))
		}
	}
}

func TestMixedTree(t *testing.T) {
	tr := mixedTree(t)
	img, sum := writeImage(t, tr, testOptions())
	fsck(t, img)
	checkStat(t, img, tr)
	checkContents(t, img, tr)

	if len(sum.Added) != 1 || sum.Added[0] != "/lost+found" {
		t.Errorf("summary: added %v, want /lost+found", sum.Added)
	}
	if sum.Inodes != int64(firstIno)+countInodes(tr)-1 {
		t.Errorf("summary: %d inodes in use, want %d", sum.Inodes, int64(firstIno)+countInodes(tr)-1)
	}
	// Hard links share one inode.
	su, link, sbin := statOf(t, img, "/usr/bin/su"), statOf(t, img, "/usr/bin/su-link"), statOf(t, img, "/usr/sbin/su")
	if su.ino != link.ino || su.ino != sbin.ino || su.links != 3 {
		t.Errorf("hard links: inodes %s %s %s, links %d", su.ino, link.ino, sbin.ino, su.links)
	}
	if n, n2 := statOf(t, img, "/dev/null"), statOf(t, img, "/dev/null2"); n.ino != n2.ino || n.links != 2 {
		t.Errorf("device hard link: inodes %s %s, links %d", n.ino, n2.ino, n.links)
	}
	// Inodes in byte order of path: root 2, lost+found 11, then /bin 12.
	for p, ino := range map[string]string{"/": "2", "/lost+found": "11", "/bin": "12", "/dev": "13", "/dev/null": "14"} {
		if s := statOf(t, img, p); s.ino != ino {
			t.Errorf("%s: inode %s, want %s", p, s.ino, ino)
		}
	}
	lf := statOf(t, img, "/lost+found")
	if lf.mode != "0700" || lf.uid != 0 || lf.size != 16384 || lf.links != 2 {
		t.Errorf("lost+found: %+v", lf)
	}
	if lf.times[0] != fmt.Sprintf("ctime=0x%08x:00000000", testEpoch.Unix()) {
		t.Errorf("lost+found times %v, want the epoch", lf.times)
	}
	root := statOf(t, img, "/")
	if root.links != int64(2+len(subdirs(tr, "/"))+1) {
		t.Errorf("root links %d, want %d", root.links, 2+len(subdirs(tr, "/"))+1)
	}
	// The big file has holes where its content has zero blocks.
	big := statOf(t, img, "/usr/lib/big")
	if want := "(0-4):"; !strings.HasPrefix(big.extents, want) || !strings.Contains(big.extents, "(8-99):") {
		t.Errorf("/usr/lib/big extents: %s", big.extents)
	}
	if blocks := (3<<20+123+blockSize-1)/blockSize - 5; big.blockcount != int64(blocks*8) {
		t.Errorf("/usr/lib/big: %d sectors, want %d", big.blockcount, blocks*8)
	}
	for _, d := range []string{"/usr/share/many", "/usr/share/intl"} {
		if s := statOf(t, img, d); s.flags != "0x81000" {
			t.Errorf("%s flags %s, want indexed and extents", d, s.flags)
		}
	}
	// xattrs, in the inode and in a block.
	notes := statOf(t, img, "/home/u/notes")
	if notes.aclBlk == 0 {
		t.Errorf("/home/u/notes: no xattr block")
	}
	list := debugfs(t, img, "ea_list /home/u/notes")
	for _, want := range []string{`user.a (1) = "1"`, `trusted.t (1) = "x"`, "user.big (300)", `user.empty (0)`} {
		if !strings.Contains(list, want) {
			t.Errorf("/home/u/notes xattrs lack %q:\n%s", want, list)
		}
	}
	if got := eaGet(t, img, "/home/u/notes", "user.big", false); got != strings.Repeat("b", 300) {
		t.Errorf("user.big = %q", got)
	}
	if s := statOf(t, img, "/usr/lib/labelled"); s.aclBlk == 0 || s.fastLink != "x" {
		t.Errorf("/usr/lib/labelled: %+v, want a fast link with an xattr block", s)
	}
	if got := eaGet(t, img, "/usr/lib/labelled", "security.selinux", false); got != strings.Repeat("s", 150) {
		t.Errorf("security.selinux = %q", got)
	}
	if got := eaGet(t, img, "/usr/lib/cap", "security.capability", false); got != tr.Get("/usr/lib/cap").Xattrs["security.capability"] {
		t.Errorf("security.capability = %x", got)
	}
}

func countInodes(tr *rootfs.Tree) int64 {
	seen := map[*rootfs.Inode]bool{}
	for _, e := range tr.Entries() {
		seen[e.Inode] = true
	}
	return int64(len(seen))
}

func subdirs(tr *rootfs.Tree, p string) []string {
	var out []string
	for _, c := range tr.Children(p) {
		if e := tr.Get(filepath.Join(p, c)); e.Type == rootfs.TypeDir {
			out = append(out, c)
		}
	}
	return out
}

// eaGet reads one xattr value with debugfs; raw skips debugfs's
// conversion of ACLs back to the POSIX form.
func eaGet(t *testing.T, img, p, name string, raw bool) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "ea")
	args := "ea_get -f " + out
	if raw {
		args += " -r"
	}
	debugfs(t, img, fmt.Sprintf("%s %s %s", args, p, name))
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestACL(t *testing.T) {
	tr := mixedTree(t)
	img, _ := writeImage(t, tr, testOptions())
	for _, c := range []struct{ path, name string }{
		{"/srv/shared", "system.posix_acl_access"},
		{"/srv/shared", "system.posix_acl_default"},
		{"/srv/shared/doc", "system.posix_acl_access"},
	} {
		// On disk: ext4's own ACL form.
		raw := eaGet(t, img, c.path, c.name, true)
		if got := fmt.Sprintf("% x", raw); got != ext4ACL {
			t.Errorf("%s %s on disk:\n got %s\nwant %s", c.path, c.name, got, ext4ACL)
		}
		// Read back as POSIX, it is the ACL the tree holds (debugfs
		// reports the ids of the owner, group, mask and other as 0
		// where the kernel says -1; neither is meaningful).
		back := []byte(eaGet(t, img, c.path, c.name, false))
		want := []byte(testACL)
		if len(back) != len(want) {
			t.Fatalf("%s %s reads back as %x, want %x", c.path, c.name, back, want)
		}
		for off := 4; off < len(want); off += 8 {
			tag := binary.LittleEndian.Uint16(want[off:])
			if tag != aclUser && tag != aclGroup {
				copy(want[off+4:off+8], back[off+4:off+8])
			}
		}
		if !bytes.Equal(back, want) {
			t.Errorf("%s %s reads back as %x, want %x", c.path, c.name, back, want)
		}
	}
	// The ACL's name index is 2 (access) or 3 (default) with an empty name.
	list := debugfs(t, img, "ea_list /srv/shared")
	if !strings.Contains(list, "system.posix_acl_access (36)") || !strings.Contains(list, "system.posix_acl_default (36)") {
		t.Errorf("ea_list /srv/shared:\n%s", list)
	}
}

func TestBadACL(t *testing.T) {
	tr := rootfstest.New(t, testEpoch)
	rootfstest.Add(t, tr, "/f", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, Xattrs: map[string]string{"system.posix_acl_access": "\x01\x00\x00\x00"}}, "")
	sealTree(t, tr)
	if _, err := Plan(tr.View(), testOptions()); err == nil || !strings.Contains(err.Error(), "/f") {
		t.Fatalf("Plan with a malformed ACL: %v", err)
	}
}

// TestFeaturesMatchMke2fs compares dumpe2fs -h of an empty tree's image
// with mke2fs's at several sizes: the feature list with plain `mke2fs -t
// ext4`, and the geometry with 4 KiB blocks forced (mke2fs uses 1 KiB
// blocks below 512 MiB).
func TestFeaturesMatchMke2fs(t *testing.T) {
	mke2fs := harness.Tool(t, "mke2fs")
	tr := rootfstest.New(t, testEpoch)
	sealTree(t, tr)
	same := []string{"Filesystem features", "Filesystem flags", "Default mount options", "Filesystem state",
		"Errors behavior", "Filesystem OS type", "Inode count", "Block count", "Reserved block count",
		"Overhead clusters", "Free blocks", "Free inodes", "First block", "Block size", "Group descriptor size",
		"Reserved GDT blocks", "Blocks per group", "Inodes per group", "Inode blocks per group",
		"Flex block group size", "Filesystem created", "Last write time", "Last checked", "Maximum mount count",
		"Check interval", "First inode", "Inode size", "Required extra isize", "Desired extra isize",
		"Journal inode", "Default directory hash", "Directory Hash Seed", "Filesystem UUID",
		"Journal backup", "Checksum type", "Journal features", "Total journal size", "Total journal blocks",
		"Journal sequence", "Journal start", "Filesystem magic number", "Filesystem revision #", "Mount count"}
	for _, size := range []int64{8 << 20, 64 << 20, 130 << 20, 513 << 20, 5 << 30} {
		t.Run(human(size), func(t *testing.T) {
			o := testOptions()
			o.Size = size
			img, _ := writeImage(t, tr, o)
			fsck(t, img)
			ours := dumpe2fs(t, img)

			plain := filepath.Join(t.TempDir(), "plain.img")
			runMke2fs(t, mke2fs, plain, size)
			if got, want := ours["Filesystem features"], dumpe2fs(t, plain)["Filesystem features"]; got != want {
				t.Errorf("features:\n got %s\nwant %s", got, want)
			}

			oracle := filepath.Join(t.TempDir(), "oracle.img")
			runMke2fs(t, mke2fs, oracle, size, "-b", "4096")
			theirs := dumpe2fs(t, oracle)
			for _, k := range same {
				if ours[k] != theirs[k] {
					t.Errorf("%s: ours %q, mke2fs %q", k, ours[k], theirs[k])
				}
			}
		})
	}
}

func runMke2fs(t *testing.T, mke2fs, img string, size int64, args ...string) {
	t.Helper()
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	f.Truncate(size)
	f.Close()
	args = append(append([]string{"-q", "-t", "ext4", "-F", "-U", testUUIDString, "-E", "hash_seed=" + testSeedString}, args...), img)
	cmd := exec.Command(mke2fs, args...)
	cmd.Env = append(os.Environ(), fmt.Sprintf("E2FSPROGS_FAKE_TIME=%d", testEpoch.Unix()))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mke2fs: %v\n%s", err, out)
	}
}

func dumpe2fs(t testing.TB, img string) map[string]string {
	t.Helper()
	out, err := exec.Command(harness.Tool(t, "dumpe2fs"), "-h", img).Output()
	if err != nil {
		t.Fatalf("dumpe2fs -h %s: %v", img, err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

func TestDeterministic(t *testing.T) {
	// Two trees with the same entries, made apart (different host inodes
	// and ctimes), written twice each, with one and two threads.
	a, b := mixedTree(t), mixedTree(t)
	o := testOptions()
	var sums []string
	for i, tr := range []*rootfs.Tree{a, a, b, b} {
		prev := runtime.GOMAXPROCS(1 + i%2)
		img, _ := writeImage(t, tr, o)
		runtime.GOMAXPROCS(prev)
		sums = append(sums, fileDigest(t, img))
		if i == 0 {
			d := dumpe2fs(t, img)
			if d["Filesystem UUID"] != testUUIDString || d["Directory Hash Seed"] != testSeedString {
				t.Errorf("UUID %s, hash seed %s", d["Filesystem UUID"], d["Directory Hash Seed"])
			}
		}
	}
	for i := range sums {
		if sums[i] != sums[0] {
			t.Fatalf("image %d differs: %v", i, sums)
		}
	}
	// A different seed changes the image.
	o.HashSeed[0] ^= 1
	img, _ := writeImage(t, a, o)
	if fileDigest(t, img) == sums[0] {
		t.Errorf("a different hash seed gives the same image")
	}
}

func fileDigest(t testing.TB, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", h.Sum(nil))
}

func TestTooSmall(t *testing.T) {
	tr := rootfstest.New(t, testEpoch)
	rootfstest.Add(t, tr, "/data", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, content(7, 40<<20))
	sealTree(t, tr)
	o := testOptions()
	o.Size = 32 << 20
	_, err := Plan(tr.View(), o)
	if err == nil || !strings.Contains(err.Error(), "32 MiB") || !strings.Contains(err.Error(), "needs 40.") {
		t.Fatalf("Plan: %v", err)
	}
	img := filepath.Join(t.TempDir(), "img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := Write(context.Background(), tr.View(), f, o); err == nil || err.Error() != mustErr(Plan(tr.View(), o)).Error() {
		t.Fatalf("Write: %v", err)
	}
	if fi, _ := f.Stat(); fi.Size() != 0 {
		t.Errorf("Write wrote %d bytes before failing", fi.Size())
	}

	// Inodes run out before blocks.
	tr = rootfstest.New(t, testEpoch)
	for i := range 3000 {
		rootfstest.Add(t, tr, fmt.Sprintf("/f%d", i), rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, "")
	}
	sealTree(t, tr)
	o.Size = 8 << 20
	if _, err := Plan(tr.View(), o); err == nil || !strings.Contains(err.Error(), "3011 inodes") {
		t.Fatalf("Plan with too few inodes: %v", err)
	}
	o.Size = 4 << 20
	if _, err := Plan(tr.View(), o); err == nil || !strings.Contains(err.Error(), "too small") {
		t.Fatalf("Plan of 4 MiB: %v", err)
	}
}

func mustErr(_ int64, err error) error { return err }

func TestAutoSize(t *testing.T) {
	tr := rootfstest.New(t, testEpoch)
	rootfstest.Add(t, tr, "/data", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644}, content(8, 10<<20))
	sealTree(t, tr)
	o := testOptions()
	size, err := Plan(tr.View(), o)
	if err != nil {
		t.Fatal(err)
	}
	// 10 MiB of content, the 64 MiB floor of free space, then metadata.
	if size%mib != 0 || size < 74*mib || size > 90*mib {
		t.Errorf("auto size %s", human(size))
	}
	o.FreeSpace = 200 * mib
	if big, _ := Plan(tr.View(), o); big < size+130*mib {
		t.Errorf("auto size with 200 MiB free: %s", human(big))
	}
	o.FreeSpace = -1
	if small, _ := Plan(tr.View(), o); small >= size {
		t.Errorf("auto size without free space: %s, with: %s", human(small), human(size))
	}
	img, _ := writeImage(t, tr, o)
	fsck(t, img)
}

// TestSparse writes a 5 GiB file that is almost all holes, into an auto
// sized filesystem and into one far smaller than the file's size.
func TestSparse(t *testing.T) {
	tr := rootfstest.New(t, testEpoch)
	const size = 5 << 30
	data := map[int64]byte{0: 1, 1 << 30: 2, 1<<30 + blockSize: 3, size - 1: 4}
	if _, err := tr.Create("/var/lib/disk.img", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o600}, &sparseReader{size: size, data: data}); err != nil {
		t.Fatal(err)
	}
	sealTree(t, tr)
	reSparse := regexp.MustCompile(`^\(0\):(\d+), \(262144-262145\):(\d+)-\d+, \(1310719\):(\d+)$`)
	for _, fixed := range []int64{0, 64 << 20} {
		o := testOptions()
		o.Size = fixed
		img, _ := writeImage(t, tr, o)
		fsck(t, img)
		s := statOf(t, img, "/var/lib/disk.img")
		m := reSparse.FindStringSubmatch(s.extents)
		if s.size != size || m == nil {
			t.Fatalf("sparse file: size %d, extents %s", s.size, s.extents)
		}
		// Each data block holds its byte where the tree has it.
		f, err := os.Open(img)
		if err != nil {
			t.Fatal(err)
		}
		for i, c := range []struct {
			blk  string
			off  int64
			want byte
		}{{m[1], 0, 1}, {m[2], 0, 2}, {m[2], blockSize, 3}, {m[3], blockSize - 1, 4}} {
			blk, _ := strconv.ParseInt(c.blk, 10, 64)
			var b [1]byte
			if _, err := f.ReadAt(b[:], blk*blockSize+c.off); err != nil || b[0] != c.want {
				t.Errorf("data byte %d: %v %d, want %d", i, err, b[0], c.want)
			}
		}
		f.Close()
		var st syscall.Stat_t
		if err := syscall.Stat(img, &st); err != nil {
			t.Fatal(err)
		}
		if st.Blocks*512 > 32<<20 {
			t.Errorf("the image takes %d bytes on disk", st.Blocks*512)
		}
	}
}

// sparseReader yields size bytes of zeros except the bytes in data.
type sparseReader struct {
	size int64
	off  int64
	data map[int64]byte
}

func (r *sparseReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	n := int(min(int64(len(p)), r.size-r.off))
	clear(p[:n])
	for off, b := range r.data {
		if off >= r.off && off < r.off+int64(n) {
			p[off-r.off] = b
		}
	}
	r.off += int64(n)
	return n, nil
}
