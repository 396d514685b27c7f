package erofs

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
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

var (
	testEpoch = time.Unix(1700000000, 0).UTC()
	testUUID  = [16]byte{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef}
)

const testUUIDString = "01234567-89ab-cdef-0123-456789abcdef"

func testOptions() Options {
	return Options{UUID: testUUID, Epoch: testEpoch, Label: "root"}
}

// content is n bytes of text-like data (compressible as a file system's
// files are), seeded; zeroBlocks are 4 KiB blocks cleared to zeros.
func content(seed uint64, n int, zeroBlocks ...int) string {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	words := []string{"erofs", "kubelet", " ", "\n", "0x", "root", "image", "the", "node", "=", "/usr/lib/", "containerd"}
	var b bytes.Buffer
	for b.Len() < n {
		if r.IntN(8) == 0 {
			fmt.Fprintf(&b, "%x", r.Uint64())
		} else {
			b.WriteString(words[r.IntN(len(words))])
		}
	}
	out := b.Bytes()[:n]
	for _, z := range zeroBlocks {
		clear(out[min(z*blockSize, n):min((z+1)*blockSize, n)])
	}
	return string(out)
}

// noise is n random bytes: what compression cannot shrink.
func noise(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, seed+1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
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

// aclFor is an access ACL that agrees with the permission bits perm (its
// owner, mask and other entries are theirs), as a host keeps it.
func aclFor(perm uint32) string {
	return posixACL([3]uint32{0x01, perm >> 6 & 7, 0xFFFFFFFF}, [3]uint32{0x02, 6, 1000}, [3]uint32{0x04, 4, 0xFFFFFFFF},
		[3]uint32{0x08, 4, 2000}, [3]uint32{0x10, perm >> 3 & 7, 0xFFFFFFFF}, [3]uint32{0x20, perm & 7, 0xFFFFFFFF})
}

// mixedTree is a small tree with one of everything EROFS stores, and the
// sizes where its layouts change.
func mixedTree(t testing.TB) *rootfs.Tree {
	tr := rootfstest.New(t, testEpoch)
	m1 := testEpoch.Add(-24 * time.Hour)
	reg := func(p string, perm uint32, uid, gid uint32, mt time.Time, data string, xattrs map[string]string) {
		rootfstest.Add(t, tr, p, rootfs.Header{Type: rootfs.TypeRegular, Perm: perm, UID: uid, GID: gid, MTime: mt, Xattrs: xattrs}, data)
	}
	dir := func(p string, perm uint32, mt time.Time) {
		rootfstest.Add(t, tr, p, rootfs.Header{Type: rootfs.TypeDir, Perm: perm, MTime: mt}, "")
	}
	dir("/", 0o755, testEpoch)
	dir("/etc", 0o755, m1)
	reg("/etc/hostname", 0o644, 0, 0, testEpoch, "node\n", nil)
	reg("/etc/shadow", 0o640, 0, 42, m1, "root:*:19000:0:99999:7:::\n", nil)
	reg("/etc/empty", 0o600, 0, 0, testEpoch, "", nil)
	reg("/usr/bin/su", 0o4755, 0, 0, testEpoch, content(1, 70000), nil)
	reg("/usr/bin/wall", 0o2755, 0, 5, testEpoch, content(2, 20000), nil)
	reg("/usr/lib/big", 0o644, 70000, 70001, m1, content(3, 9<<20+123, 5, 6, 7, 100, 700), nil)
	reg("/usr/lib/noise", 0o644, 0, 0, testEpoch, noise(4, 50000), nil)
	reg("/usr/lib/noise-big", 0o644, 0, 0, testEpoch, noise(5, 5<<20+77), nil)
	reg("/usr/lib/zeros", 0o644, 0, 0, testEpoch, strings.Repeat("\x00", 6<<20), nil)
	for _, n := range []int{1, 4095, 4096, 4097, 8191, 8192, 8193, 12345} {
		reg(fmt.Sprintf("/usr/lib/sizes/text-%d", n), 0o644, 0, 0, testEpoch, content(uint64(n), n), nil)
		reg(fmt.Sprintf("/usr/lib/sizes/noise-%d", n), 0o644, 0, 0, testEpoch, noise(uint64(n), n), nil)
	}
	reg("/usr/lib/cap", 0o755, 0, 0, testEpoch, "caps", map[string]string{"security.capability": "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"})
	reg("/home/u/notes", 0o600, 1000, 1000, m1, "hello", map[string]string{"user.a": "1", "user.big": strings.Repeat("b", 300), "trusted.t": "x", "user.empty": ""})
	reg("/home/u/bigxattr", 0o600, 1000, 1000, testEpoch, content(9, 5000), map[string]string{"user.huge": strings.Repeat("h", 6000)})
	dir("/tmp", 0o1777, testEpoch)
	rootfstest.Add(t, tr, "/srv/shared", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o2770, GID: 100, MTime: m1,
		Xattrs: map[string]string{"system.posix_acl_access": aclFor(0o770), "system.posix_acl_default": aclFor(0o750)}}, "")
	reg("/srv/shared/doc", 0o664, 0, 100, testEpoch, "doc", map[string]string{"system.posix_acl_access": aclFor(0o664)})
	rootfstest.Add(t, tr, "/bin", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "usr/bin", MTime: testEpoch}, "")
	rootfstest.Add(t, tr, "/usr/lib/long", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: strings.Repeat("deep/", 816) + "x", MTime: testEpoch}, "")
	rootfstest.Add(t, tr, "/usr/lib/labelled", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "x", MTime: m1,
		Xattrs: map[string]string{"security.selinux": strings.Repeat("s", 150)}}, "")
	rootfstest.AddSpecials(t, tr, testEpoch)
	// Directories over one block; names with bytes over 0x7f, and names
	// that sort around "." and "..".
	for i := range 300 {
		reg(fmt.Sprintf("/usr/share/many/file-%04d-with-a-longer-name", i), 0o644, 0, 0, testEpoch, "", nil)
		reg(fmt.Sprintf("/usr/share/intl/fichier-é-%d-日本語-%s", i, strings.Repeat("ü", i%40)), 0o644, 0, 0, testEpoch, "x", nil)
	}
	for _, n := range []string{"-", "+x", ".a", "..b", "~", "\x7f", strings.Repeat("n", 255)} {
		reg("/usr/share/odd/"+n, 0o644, 0, 0, testEpoch, n, nil)
	}
	sealTree(t, tr)
	return tr
}

func sealTree(t testing.TB, tr *rootfs.Tree) {
	t.Helper()
	if _, _, err := rootfs.Seal(context.Background(), tr, rootfs.SealOptions{Epoch: testEpoch, NoDefaultCleanup: true}); err != nil {
		t.Fatal(err)
	}
}

// writeImage writes the tree into a new file and returns its path.
func writeImage(t testing.TB, tr *rootfs.Tree, o Options) (string, *Summary) {
	t.Helper()
	img := filepath.Join(t.TempDir(), "root.erofs")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sum, err := Write(context.Background(), tr.View(), f, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(img); err != nil || fi.Size() != sum.Size {
		t.Fatalf("image file: %v; size %d, summary says %d", err, fi.Size(), sum.Size)
	}
	return img, sum
}

// fsckErofs runs fsck.erofs --extract (which decompresses every file and
// checks every index) into a fresh directory, as root keeping owners and
// modes, and returns that directory. Any complaint fails the test.
func fsckErofs(t testing.TB, img string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "x")
	out, err := exec.Command(harness.Tool(t, "fsck.erofs"), "--extract="+dir, img).CombinedOutput()
	if err != nil {
		t.Fatalf("fsck.erofs --extract %s: %v\n%s", img, err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line != "" && !strings.HasPrefix(line, "fsck.erofs ") && !strings.Contains(line, "No errors found") &&
			!strings.Contains(line, "extract") && !strings.Contains(line, "compression ratio") {
			t.Fatalf("fsck.erofs says more than a clean check:\n%s", out)
		}
	}
	return dir
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
