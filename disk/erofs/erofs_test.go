package erofs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// readBack reads an image with this package's reader.
func readBack(t testing.TB, img string) (*Super, *rootfs.Sealed, []Region) {
	t.Helper()
	f, err := os.Open(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	sb, err := ReadSuper(f)
	if err != nil {
		t.Fatal(err)
	}
	tree, data, err := Read(context.Background(), f, fi.Size(), sb)
	if err != nil {
		t.Fatal(err)
	}
	return sb, tree, data
}

// manifest is the tree's manifest lines, keyed by path; skip drops fields
// (as "xattr.") a comparison leaves out.
func manifest(entries []*rootfs.Entry, skip ...string) map[string]string {
	rootfs.SetNlink(entries)
	first := rootfs.FirstLinks(entries)
	out := map[string]string{}
	for _, e := range entries {
		var kept []string
	field:
		for _, f := range strings.Fields(rootfs.ManifestLine(e, first, false)) {
			for _, s := range skip {
				if strings.HasPrefix(f, s) {
					continue field
				}
			}
			kept = append(kept, f)
		}
		out[e.Path] = strings.Join(kept, " ")
	}
	return out
}

// sameEntries fails the test where two trees' manifests differ.
func sameEntries(t testing.TB, what string, want, got map[string]string) {
	t.Helper()
	bad := 0
	for p, w := range want {
		if g, ok := got[p]; !ok {
			t.Errorf("%s: %s is missing", what, p)
			bad++
		} else if g != w {
			t.Errorf("%s: %s\n got  %s\n want %s", what, p, g, w)
			bad++
		}
		if bad > 10 {
			t.Fatalf("%s: more differences", what)
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("%s: %s is not in the tree", what, p)
		}
	}
}

// TestMixedTree writes a tree with one of everything and holds the image
// to mkfs.erofs's own tools: fsck.erofs decompresses and checks every file
// and extracts it as root, and the extraction (owners, modes, mtimes,
// contents, links, devices) and dump.erofs's view (hard links, inode
// forms, layouts) agree with the tree; this package's reader gives back
// the tree entry for entry, xattrs included.
func TestMixedTree(t *testing.T) {
	tr := mixedTree(t)
	img, sum := writeImage(t, tr, testOptions())
	t.Logf("%d bytes, %d compressed files, %d data + %d dir + %d metadata blocks", sum.Size, sum.Compressed, sum.DataBlocks, sum.DirBlocks, sum.MetaBlocks)
	if sum.Compressed < 5 {
		t.Errorf("%d files compressed", sum.Compressed)
	}
	dir := fsckErofs(t, img)
	checkExtraction(t, tr, dir)

	sb, back, _ := readBack(t, img)
	sameEntries(t, "read back", manifest(tr.Entries()), manifest(back.Entries()))
	if sb.UUID != testUUIDString || sb.Label != "root" {
		t.Errorf("uuid %s, label %q", sb.UUID, sb.Label)
	}

	dump := func(p string) map[string]string {
		out, err := exec.Command(harness.Tool(t, "dump.erofs"), "--path="+p, img).CombinedOutput()
		if err != nil {
			t.Fatalf("dump.erofs --path=%s: %v\n%s", p, err, out)
		}
		m := map[string]string{}
		for _, f := range regexp.MustCompile(`([A-Z][A-Za-z -]*?):\s+(\S+)`).FindAllStringSubmatch(string(out), -1) {
			m[f[1]] = f[2]
		}
		return m
	}
	su, link, sbin := dump("/usr/bin/su"), dump("/usr/bin/su-link"), dump("/usr/sbin/su")
	if su["NID"] != link["NID"] || su["NID"] != sbin["NID"] || su["Links"] != "3" {
		t.Errorf("hard links: nids %s %s %s, links %s", su["NID"], link["NID"], sbin["NID"], su["Links"])
	}
	if n, n2 := dump("/dev/null"), dump("/dev/null2"); n["NID"] != n2["NID"] || n["Links"] != "2" {
		t.Errorf("device hard link: nids %s %s, links %s", n["NID"], n2["NID"], n["Links"])
	}
	if r := dump("/"); r["NID"] != "1" {
		t.Errorf("root nid %s, want 1", r["NID"])
	}
	for p, want := range map[string]string{
		"/usr/bin/su":                 "Layout=3 Inode size=32",
		"/usr/lib/big":                "Layout=3 Inode size=64", // owner past 16 bits, older mtime
		"/usr/lib/noise":              "Layout=2 Inode size=32", // incompressible: plain, tail packed
		"/usr/lib/noise-big":          "Layout=0 Inode size=32", // plain, every block its own
		"/usr/lib/zeros":              "Layout=3 Inode size=32",
		"/usr/lib/sizes/text-4096":    "Layout=0 Inode size=32",
		"/usr/lib/sizes/text-12345":   "Layout=3 Inode size=32",
		"/etc/shadow":                 "Layout=2 Inode size=64",
		"/etc/empty":                  "Layout=0 Inode size=32",
		"/usr/share/many":             "Layout=2 Inode size=32",
		"/home/u/bigxattr":            "Layout=3 Inode size=32",
		"/usr/lib/long":               "Layout=0 Inode size=32", // its target fills most of a block
		"/usr/share/odd/" + odd255(t): "Layout=2 Inode size=32",
	} {
		d := dump(p)
		got := fmt.Sprintf("Layout=%s Inode size=%s", d["Layout"], d["Inode size"])
		if got != want {
			t.Errorf("%s: %s, want %s", p, got, want)
		}
	}
	if d := dump("/home/u/notes"); d["Xattr size"] == "0" {
		t.Errorf("/home/u/notes: no xattrs")
	}
}

func odd255(t testing.TB) string { return strings.Repeat("n", 255) }

// checkExtraction compares what fsck.erofs extracted, as root, with the
// tree: every entry's type, mode, owner, mtime, size and content, symlink
// target and device. fsck.erofs 1.5 extracts hard links as copies (the
// caller checks them with dump.erofs), keeps no xattrs, and chowns a file
// after setting its mode, which clears setuid and setgid.
func checkExtraction(t testing.TB, tr *rootfs.Tree, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("the extraction check needs root (fsck.erofs keeps owners only as root)")
	}
	seen := map[string]bool{}
	for _, e := range tr.Entries() {
		host := filepath.Join(dir, e.Path)
		var st unix.Stat_t
		if err := unix.Lstat(host, &st); err != nil {
			t.Errorf("%s: %v", e.Path, err)
			continue
		}
		seen[e.Path] = true
		fi, _ := os.Lstat(host)
		perm := e.Perm
		if e.Type == rootfs.TypeRegular {
			perm &^= 0o6000
		}
		if rootfs.TypeOf(fi.Mode()) != e.Type || st.Mode&0o7777 != perm || st.Uid != e.UID || st.Gid != e.GID {
			t.Errorf("%s: extracted as %s %04o %d:%d, the tree has %s %04o %d:%d", e.Path, rootfs.TypeOf(fi.Mode()), st.Mode&0o7777, st.Uid, st.Gid, e.Type, e.Perm, e.UID, e.GID)
		}
		if e.Type != rootfs.TypeSymlink && st.Mtim.Sec != e.MTime.Unix() {
			t.Errorf("%s: mtime %d, the tree has %d", e.Path, st.Mtim.Sec, e.MTime.Unix())
		}
		switch e.Type {
		case rootfs.TypeRegular:
			b, err := os.ReadFile(host)
			sum := sha256.Sum256(b)
			if err != nil || hex.EncodeToString(sum[:]) != e.Digest {
				t.Errorf("%s: extracted content differs (%v)", e.Path, err)
			}
		case rootfs.TypeSymlink:
			if target, err := os.Readlink(host); err != nil || target != e.Target {
				t.Errorf("%s: extracted target %q (%v)", e.Path, target, err)
			}
		case rootfs.TypeChar, rootfs.TypeBlock:
			if unix.Major(st.Rdev) != e.Major || unix.Minor(st.Rdev) != e.Minor {
				t.Errorf("%s: extracted device %d:%d, the tree has %d:%d", e.Path, unix.Major(st.Rdev), unix.Minor(st.Rdev), e.Major, e.Minor)
			}
		}
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, dir), "/")
		if err == nil && !seen[filepath.Clean(rel)] {
			t.Errorf("%s is extracted, the tree has no such entry", rel)
		}
		return nil
	})
}

// TestDeterministic: two trees with the same entries, made apart, written
// twice each with one and with several workers, give the same bytes; so do
// as many workers as segments and GOMAXPROCS changes.
func TestDeterministic(t *testing.T) {
	a, b := mixedTree(t), mixedTree(t)
	var sums []string
	for i, tr := range []*rootfs.Tree{a, a, b, b} {
		o := testOptions()
		o.Workers = 1 + 3*(i%2)
		prev := runtime.GOMAXPROCS(1 + i%2)
		img, _ := writeImage(t, tr, o)
		runtime.GOMAXPROCS(prev)
		sums = append(sums, fileDigest(t, img))
	}
	for i := range sums {
		if sums[i] != sums[0] {
			t.Fatalf("image %d differs: %v", i, sums)
		}
	}
	o := testOptions()
	o.UUID[0] ^= 1
	if img, _ := writeImage(t, a, o); fileDigest(t, img) == sums[0] {
		t.Errorf("another UUID gives the same image")
	}
}

// TestCodecs: each codec's image is clean and reads back; lz4hc gives the
// smallest, none the largest; lz4 is the default.
func TestCodecs(t *testing.T) {
	tr := mixedTree(t)
	sizes := map[Compression]int64{}
	for _, c := range []Compression{LZ4HC, LZ4, None} {
		o := testOptions()
		o.Compression = c
		img, sum := writeImage(t, tr, o)
		fsckErofs(t, img)
		_, back, _ := readBack(t, img)
		sameEntries(t, string(c), manifest(tr.Entries()), manifest(back.Entries()))
		sizes[c] = sum.Size
		if c == None && sum.Compressed != 0 {
			t.Errorf("none: %d files compressed", sum.Compressed)
		}
		sb, _, _ := readBack(t, img)
		if incompat := sb.featureIncompat; (c == None) != (incompat == 0) {
			t.Errorf("%s: incompatible features %#x", c, incompat)
		}
	}
	if !(sizes[LZ4HC] <= sizes[LZ4] && sizes[LZ4] < sizes[None]) {
		t.Errorf("sizes %v", sizes)
	}
	// The default is lz4.
	o := testOptions()
	o.Compression = ""
	_, def := writeImage(t, tr, o)
	o.Compression = LZ4
	if _, fast := writeImage(t, tr, o); def.SHA256 != fast.SHA256 {
		t.Errorf("the default codec's image is not lz4's")
	}
	if _, err := Write(context.Background(), tr.View(), nil, Options{Epoch: testEpoch, Compression: "zstd"}); err == nil {
		t.Errorf("an unknown codec is taken")
	}
}

// TestReadsMkfsImage reads what mkfs.erofs makes of the tree laid out on
// the host as root (owners, modes, devices, hard links, xattrs, mtimes):
// its compacted indexes and its own layout, for each of its codecs; with
// SOURCE_DATE_EPOCH (extended inodes, exact mtimes) or with -T (compact
// inodes, every mtime the build's); with compacted indexes (mkfs.erofs's
// default and stamp's) and with legacy ones.
func TestReadsMkfsImage(t *testing.T) {
	tr := mixedTree(t)
	dir, lost := materialize(t, tr)
	want := manifest(withoutLongName(tr.Entries()))
	for p, names := range lost {
		for _, name := range names {
			want[p] = regexp.MustCompile(` xattr\.`+regexp.QuoteMeta(name)+`=\S*`).ReplaceAllString(want[p], "")
		}
	}
	for _, run := range []struct {
		c      string
		fixed  bool
		legacy bool
	}{{"lz4hc", false, false}, {"lz4", true, true}, {"", false, false}} {
		c, fixed := run.c, run.fixed
		{
			theirs := filepath.Join(t.TempDir(), "mkfs.erofs")
			args := []string{"--quiet"}
			env := append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(testEpoch.Unix(), 10))
			if fixed {
				args, env = append(args, "-T"+strconv.FormatInt(testEpoch.Unix(), 10)), os.Environ()
			}
			if c != "" {
				args = append(args, "-z"+c)
			}
			if run.legacy {
				args = append(args, "-Elegacy-compress")
			}
			var errb strings.Builder
			cmd := exec.Command(harness.Tool(t, "mkfs.erofs"), append(args, theirs, dir)...)
			cmd.Stderr, cmd.Env = &errb, env
			if err := cmd.Run(); err != nil {
				t.Fatalf("mkfs.erofs: %v\n%s", err, errb.String())
			}
			_, back, _ := readBack(t, theirs)
			got := manifest(back.Entries())
			if fixed {
				for p := range got {
					got[p] = regexp.MustCompile(` mtime=\d+`).ReplaceAllString(got[p], "")
				}
			}
			w := want
			if fixed {
				w = map[string]string{}
				for p, l := range want {
					w[p] = regexp.MustCompile(` mtime=\d+`).ReplaceAllString(l, "")
				}
			}
			sameEntries(t, fmt.Sprintf("mkfs.erofs %s (-T %t)", c, fixed), w, got)
		}
	}
}

// longName is the tree's 255-byte name, which mkfs.erofs 1.5 cuts to 254
// bytes and then cannot open.
var longName = "/usr/share/odd/" + strings.Repeat("n", 255)

func withoutLongName(entries []*rootfs.Entry) []*rootfs.Entry {
	var out []*rootfs.Entry
	for _, e := range entries {
		if e.Path != longName {
			out = append(out, e)
		}
	}
	return out
}

// materialize lays the tree out on the host as root, as exactly as the
// host can hold it, for mkfs.erofs to read. It returns the xattrs, by path,
// that the host's file system has no room for.
func materialize(t testing.TB, tr *rootfs.Tree) (string, map[string][]string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("laying a tree out with its owners and devices needs root")
	}
	dir := filepath.Join(t.TempDir(), "tree")
	first := map[*rootfs.Inode]string{}
	lost := map[string][]string{}
	entries := withoutLongName(tr.Entries())
	for _, e := range entries {
		host := filepath.Join(dir, e.Path)
		var err error
		if f, ok := first[e.Inode]; ok && e.Type != rootfs.TypeDir {
			if err := os.Link(f, host); err != nil {
				t.Fatal(err)
			}
			continue
		}
		first[e.Inode] = host
		switch e.Type {
		case rootfs.TypeDir:
			err = os.MkdirAll(host, 0o700)
		case rootfs.TypeRegular:
			err = os.WriteFile(host, fileContent(t, tr, e.Path), 0o600)
		case rootfs.TypeSymlink:
			err = os.Symlink(e.Target, host)
		case rootfs.TypeChar:
			err = unix.Mknod(host, unix.S_IFCHR|0o600, int(unix.Mkdev(e.Major, e.Minor)))
		case rootfs.TypeBlock:
			err = unix.Mknod(host, unix.S_IFBLK|0o600, int(unix.Mkdev(e.Major, e.Minor)))
		case rootfs.TypeFifo:
			err = unix.Mkfifo(host, 0o600)
		case rootfs.TypeSocket:
			var l net.Listener
			if l, err = net.Listen("unix", host); err == nil {
				l.(*net.UnixListener).SetUnlinkOnClose(false)
				l.Close()
			}
		}
		if err != nil {
			t.Fatalf("%s: %v", e.Path, err)
		}
		if err := os.Lchown(host, int(e.UID), int(e.GID)); err != nil {
			t.Fatal(err)
		}
		if e.Type != rootfs.TypeSymlink {
			if err := unix.Chmod(host, e.Perm); err != nil {
				t.Fatal(err)
			}
		}
		for _, name := range e.XattrNames() {
			err := unix.Lsetxattr(host, name, []byte(e.Xattrs[name]), 0)
			if err == unix.ENOSPC || err == unix.E2BIG {
				lost[e.Path] = append(lost[e.Path], name)
				continue
			}
			if err != nil {
				t.Fatalf("%s: xattr %s: %v", e.Path, name, err)
			}
		}
	}
	// Times last, deepest first, since adding an entry changes its
	// directory's.
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		ts := []unix.Timespec{unix.NsecToTimespec(e.MTime.UnixNano()), unix.NsecToTimespec(e.MTime.UnixNano())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, e.Path), ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
	return dir, lost
}

// TestRefuses: what EROFS cannot hold is an error naming the path.
func TestRefuses(t *testing.T) {
	for name, h := range map[string]rootfs.Header{
		"unknown xattr namespace": {Type: rootfs.TypeRegular, Perm: 0o644, Xattrs: map[string]string{"system.nfs4_acl": "x"}},
		"xattr value too long":    {Type: rootfs.TypeRegular, Perm: 0o644, Xattrs: map[string]string{"user.v": strings.Repeat("v", 70000)}},
	} {
		tr := mixedTree(t)
		h.MTime = testEpoch
		if _, err := tr.Create("/etc/bad", h, strings.NewReader("bad")); err != nil {
			t.Fatal(err)
		}
		_, err := Write(context.Background(), tr.View(), nil, testOptions())
		if err == nil || !strings.Contains(err.Error(), "/etc/bad") {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestReadRefusesDamage: a flipped superblock byte fails its checksum; a
// flipped byte in a compressed cluster fails to decompress or to match.
func TestReadRefusesDamage(t *testing.T) {
	tr := mixedTree(t)
	img, _ := writeImage(t, tr, testOptions())
	b, err := os.ReadFile(img)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), b...)
	bad[superOffset+40] ^= 1
	if _, err := ReadSuper(readerAt(bad)); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("a damaged superblock: %v", err)
	}
	_, _, data := readBack(t, img)
	var cluster int64 = -1
	for _, r := range data {
		if r.Name == "erofs data of /usr/bin/su" {
			cluster = r.Offset
			break
		}
	}
	if cluster < 0 {
		t.Fatal("no data region for /usr/bin/su")
	}
	bad = append([]byte(nil), b...)
	bad[cluster+blockSize-2] ^= 0x55
	sb, err := ReadSuper(readerAt(bad))
	if err != nil {
		t.Fatal(err)
	}
	tree, _, err := Read(context.Background(), readerAt(bad), int64(len(bad)), sb)
	if err == nil && tree.Get("/usr/bin/su").Digest == tr.Get("/usr/bin/su").Digest {
		t.Errorf("a damaged cluster reads back as the original")
	}
}

type readerAt []byte

func (r readerAt) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(r)) {
		return 0, syscall.EINVAL
	}
	n := copy(p, r[off:])
	if n < len(p) {
		return n, fmt.Errorf("short read")
	}
	return n, nil
}

func fileContent(t testing.TB, tr *rootfs.Tree, p string) []byte {
	t.Helper()
	f, err := tr.View().Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
