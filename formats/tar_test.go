package formats

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

var tarEpoch = time.Unix(1700000000, 0).UTC()

var tarLongName = "/opt/" + strings.Repeat("long-directory-name/", 8) + strings.Repeat("x", 120)

// tarTestTree builds a tree with every kind of entry and every field tar has
// to carry.
func tarTestTree(t testing.TB) *rootfs.Tree {
	t.Helper()
	tree := rootfstest.New(t, tarEpoch)
	mk := func(p string, h rootfs.Header, content string) {
		t.Helper()
		if h.MTime.IsZero() {
			h.MTime = tarEpoch
		}
		rootfstest.Add(t, tree, p, h, content)
	}
	dir := func(perm, uid, gid uint32) rootfs.Header {
		return rootfs.Header{Type: rootfs.TypeDir, Perm: perm, UID: uid, GID: gid}
	}
	file := func(perm, uid, gid uint32) rootfs.Header {
		return rootfs.Header{Type: rootfs.TypeRegular, Perm: perm, UID: uid, GID: gid}
	}
	mk("/etc", dir(0o755, 0, 0), "")
	mk("/etc/passwd", file(0o644, 0, 0), "root:x:0:0:root:/root:/bin/bash\n")
	mk("/etc/shadow", file(0o640, 0, 42), "root:*:19000:0:99999:7:::\n")
	mk("/etc/empty", file(0o600, 0, 0), "")
	h := file(0o644, 0, 0)
	h.MTime = tarEpoch.Add(-time.Hour + 999*time.Millisecond) // must be truncated, not rounded
	mk("/etc/subsecond", h, "x")
	mk("/tmp", dir(0o1777, 0, 0), "")
	mk("/srv", dir(0o2775, 0, 50), "")
	mk("/home/capi", dir(0o700, 1000, 1000), "")
	mk("/home/capi/.profile", file(0o644, 1000, 1000), "export PATH\n")
	mk("/home/big", file(0o400, 3000000, 3000000), "owner beyond USTAR's octal fields\n")
	mk("/usr/bin/sudo", file(0o4755, 0, 0), "\x7fELF sudo")
	mk("/usr/bin/wall", file(0o2755, 0, 5), "\x7fELF wall")
	h = file(0o755, 0, 0)
	h.Xattrs = map[string]string{
		"security.capability": "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00",
		"user.comment":        "pings",
	}
	mk("/usr/bin/ping", h, "\x7fELF ping")
	// The link is made to the later path, so the group's first path in
	// byte order (/usr/bin/aaa) is not the one created first.
	mk("/usr/bin/zzz", file(0o755, 0, 0), "shared content\n")
	if _, err := tree.Link("/usr/bin/aaa", "/usr/bin/zzz", rootfs.Origin{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Link("/usr/bin/mmm", "/usr/bin/zzz", rootfs.Origin{}); err != nil {
		t.Fatal(err)
	}
	mk("/usr/lib/big.bin", file(0o644, 0, 0), string(tarSemiRandom(3<<20, 7)))
	mk("/bin", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "usr/bin"}, "")
	mk("/usr/bin/vi", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "/etc/alternatives/vi"}, "")
	mk("/dev/null", rootfs.Header{Type: rootfs.TypeChar, Perm: 0o666, Major: 1, Minor: 3}, "")
	mk("/dev/sda", rootfs.Header{Type: rootfs.TypeBlock, Perm: 0o660, GID: 6, Major: 8, Minor: 0}, "")
	mk("/dev/initctl", rootfs.Header{Type: rootfs.TypeFifo, Perm: 0o600}, "")
	mk("/run/sock", rootfs.Header{Type: rootfs.TypeSocket, Perm: 0o755}, "")
	mk(tarLongName, file(0o644, 0, 0), "a name longer than USTAR can split\n")
	return tree
}

// tarSemiRandom returns n bytes of text mixed with random runs.
func tarSemiRandom(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	var b bytes.Buffer
	for b.Len() < n {
		if rng.IntN(3) == 0 {
			for range 64 {
				b.WriteByte(byte(rng.Uint32()))
			}
		} else {
			fmt.Fprintf(&b, "line %d of a config file: value=%d\n", b.Len(), rng.IntN(100))
		}
	}
	return b.Bytes()[:n]
}

func writeTarBytes(t testing.TB, tree *rootfs.Tree, o TarOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteTar(context.Background(), tree.View(), &buf, o); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// tarWant is what ReadTar must give back for the tree: every entry but
// sockets, with mtimes truncated to seconds.
func tarWant(tree *rootfs.Tree) []*rootfs.Entry {
	var want []*rootfs.Entry
	tree.Walk(func(e *rootfs.Entry) error {
		if e.Type != rootfs.TypeSocket {
			want = append(want, e)
		}
		return nil
	})
	return want
}

func tarCompareEntries(t *testing.T, got, want []*rootfs.Entry) {
	t.Helper()
	if len(got) != len(want) {
		var gp, wp []string
		for _, e := range got {
			gp = append(gp, e.Path)
		}
		for _, e := range want {
			wp = append(wp, e.Path)
		}
		t.Fatalf("read %d entries, want %d\ngot:  %q\nwant: %q", len(got), len(want), gp, wp)
	}
	// Hard-link groups: two entries share an inode in got exactly when they
	// do in want.
	firstGot := map[*rootfs.Inode]string{}
	firstWant := map[*rootfs.Inode]string{}
	for i, g := range got {
		w := want[i]
		if g.Path != w.Path {
			t.Fatalf("entry %d is %s, want %s", i, g.Path, w.Path)
		}
		if _, ok := firstGot[g.Inode]; !ok {
			firstGot[g.Inode] = g.Path
		}
		if _, ok := firstWant[w.Inode]; !ok {
			firstWant[w.Inode] = w.Path
		}
		if firstGot[g.Inode] != firstWant[w.Inode] {
			t.Errorf("%s: shares its inode with %s, want %s", g.Path, firstGot[g.Inode], firstWant[w.Inode])
		}
		type fields struct {
			Type           rootfs.Type
			Perm, UID, GID uint32
			MTime          int64
			Size           int64
			Digest, Target string
			Major, Minor   uint32
			Xattrs         map[string]string
		}
		gf := fields{g.Type, g.Perm, g.UID, g.GID, g.MTime.UnixNano(), g.Size, g.Digest, g.Target, g.Major, g.Minor, g.Xattrs}
		wf := fields{w.Type, w.Perm, w.UID, w.GID, w.MTime.Truncate(time.Second).UnixNano(), w.Size, w.Digest, w.Target, w.Major, w.Minor, w.Xattrs}
		if !reflect.DeepEqual(gf, wf) {
			t.Errorf("%s:\n got  %+v\n want %+v", g.Path, gf, wf)
		}
		if g.MTime.Location() != time.UTC {
			t.Errorf("%s: mtime in %v, want UTC", g.Path, g.MTime.Location())
		}
	}
}

var tarAlgorithms = []compress.Algorithm{compress.None, compress.Gzip, compress.Zstd, compress.XZ}

func TestTarRoundTrip(t *testing.T) {
	tree := tarTestTree(t)
	for _, a := range tarAlgorithms {
		t.Run(string(a), func(t *testing.T) {
			var skipped []string
			data := writeTarBytes(t, tree, TarOptions{Compression: a, Skipped: &skipped})
			if !slices.Equal(skipped, []string{"/run/sock"}) {
				t.Errorf("skipped = %q, want [/run/sock]", skipped)
			}
			got, err := ReadTar(context.Background(), bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			tarCompareEntries(t, got.Entries(), tarWant(tree))
			again := writeTarBytes(t, tree, TarOptions{Compression: a})
			if !bytes.Equal(data, again) {
				t.Errorf("two writes of the same tree differ (%d and %d bytes)", len(data), len(again))
			}
		})
	}
}

// The archive's raw headers follow the canonical form.
func TestTarCanonicalHeaders(t *testing.T) {
	tree := tarTestTree(t)
	tr := tar.NewReader(bytes.NewReader(writeTarBytes(t, tree, TarOptions{})))
	var names []string
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		if hdr.Uname != "" || hdr.Gname != "" {
			t.Errorf("%s: owner names %q/%q, want none", hdr.Name, hdr.Uname, hdr.Gname)
		}
		if !hdr.AccessTime.IsZero() || !hdr.ChangeTime.IsZero() {
			t.Errorf("%s: has atime or ctime", hdr.Name)
		}
		if hdr.ModTime.Nanosecond() != 0 {
			t.Errorf("%s: sub-second mtime %v", hdr.Name, hdr.ModTime)
		}
		if hdr.Mode&^07777 != 0 {
			t.Errorf("%s: mode %o carries type bits", hdr.Name, hdr.Mode)
		}
		if hdr.Format != tar.FormatUSTAR && hdr.Format != tar.FormatPAX {
			t.Errorf("%s: format %v, want USTAR or PAX", hdr.Name, hdr.Format)
		}
		if (hdr.Typeflag == tar.TypeDir) != strings.HasSuffix(hdr.Name, "/") {
			t.Errorf("%s: type %q and trailing slash disagree", hdr.Name, hdr.Typeflag)
		}
		switch hdr.Name {
		case "./usr/bin/aaa":
			if hdr.Typeflag != tar.TypeReg || hdr.Size != int64(len("shared content\n")) {
				t.Errorf("first path of the link group is %q size %d, want the data", hdr.Typeflag, hdr.Size)
			}
		case "./usr/bin/mmm", "./usr/bin/zzz":
			if hdr.Typeflag != tar.TypeLink || hdr.Linkname != "./usr/bin/aaa" || hdr.Size != 0 {
				t.Errorf("%s: %q -> %q size %d, want a hard link to ./usr/bin/aaa", hdr.Name, hdr.Typeflag, hdr.Linkname, hdr.Size)
			}
		case "./etc/subsecond":
			if want := tarEpoch.Add(-time.Hour); !hdr.ModTime.Equal(want) {
				t.Errorf("mtime %v, want %v (truncated)", hdr.ModTime.UTC(), want)
			}
		}
	}
	if names[0] != "./" || !slices.IsSorted(names) {
		t.Errorf("names not in canonical order: %q", names)
	}
	if !slices.Contains(names, "."+tarLongName) {
		t.Errorf("long name missing from %q", names)
	}
}

func tarTool(t *testing.T, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("tar"); err != nil {
		t.Fatal("GNU tar not found; run test/scripts/deps.sh")
	}
	cmd := exec.Command("tar", args...)
	cmd.Env = append(os.Environ(), "TZ=UTC", "LC_ALL=C")
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("tar %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("tar %s: %v", strings.Join(args, " "), err)
	}
	return string(out)
}

// GNU tar lists what we wrote as we mean it and extracts the same contents.
func TestTarGNUTar(t *testing.T) {
	tree := tarTestTree(t)
	for _, a := range tarAlgorithms {
		t.Run(string(a), func(t *testing.T) {
			dir := t.TempDir()
			archive := filepath.Join(dir, "rootfs.tar"+a.Ext())
			if err := os.WriteFile(archive, writeTarBytes(t, tree, TarOptions{Compression: a}), 0o644); err != nil {
				t.Fatal(err)
			}
			list := tarTool(t, "--numeric-owner", "--full-time", "-tvf", archive)
			lines := map[string]string{}
			for _, l := range strings.Split(strings.TrimSpace(list), "\n") {
				f := strings.Fields(l)
				if len(f) < 6 {
					t.Fatalf("odd listing line %q", l)
				}
				// perms owner size date time name [-> target | link to target]
				lines[f[5]] = strings.Join(append(f[:2:2], f[2:]...), " ")
			}
			if want := len(tarWant(tree)); len(lines) != want {
				t.Errorf("tar lists %d entries, want %d:\n%s", len(lines), want, list)
			}
			for name, want := range map[string]string{
				"./":                   "drwxr-xr-x 0/0 0 2023-11-14 22:13:20 ./",
				"./etc/shadow":         "-rw-r----- 0/42 26 2023-11-14 22:13:20 ./etc/shadow",
				"./etc/subsecond":      "-rw-r--r-- 0/0 1 2023-11-14 21:13:20 ./etc/subsecond",
				"./tmp/":               "drwxrwxrwt 0/0 0 2023-11-14 22:13:20 ./tmp/",
				"./srv/":               "drwxrwsr-x 0/50 0 2023-11-14 22:13:20 ./srv/",
				"./home/capi/":         "drwx------ 1000/1000 0 2023-11-14 22:13:20 ./home/capi/",
				"./home/capi/.profile": "-rw-r--r-- 1000/1000 12 2023-11-14 22:13:20 ./home/capi/.profile",
				"./home/big":           "-r-------- 3000000/3000000 34 2023-11-14 22:13:20 ./home/big",
				"./usr/bin/sudo":       "-rwsr-xr-x 0/0 9 2023-11-14 22:13:20 ./usr/bin/sudo",
				"./usr/bin/wall":       "-rwxr-sr-x 0/5 9 2023-11-14 22:13:20 ./usr/bin/wall",
				"./usr/bin/aaa":        "-rwxr-xr-x 0/0 15 2023-11-14 22:13:20 ./usr/bin/aaa",
				"./usr/bin/zzz":        "hrwxr-xr-x 0/0 0 2023-11-14 22:13:20 ./usr/bin/zzz link to ./usr/bin/aaa",
				"./bin":                "lrwxrwxrwx 0/0 0 2023-11-14 22:13:20 ./bin -> usr/bin",
				"./dev/null":           "crw-rw-rw- 0/0 1,3 2023-11-14 22:13:20 ./dev/null",
				"./dev/sda":            "brw-rw---- 0/6 8,0 2023-11-14 22:13:20 ./dev/sda",
				"./dev/initctl":        "prw------- 0/0 0 2023-11-14 22:13:20 ./dev/initctl",
			} {
				if lines[name] != want {
					t.Errorf("tar -tv line for %s:\n got  %q\n want %q", name, lines[name], want)
				}
			}
			if _, ok := lines["."+tarLongName]; !ok {
				t.Errorf("tar does not list the long name")
			}

			xl := tarTool(t, "--xattrs", "--xattrs-include=*", "-tvvf", archive)
			if !strings.Contains(xl, "\n  x: 20 security.capability\n  x: 5 user.comment\n") {
				t.Errorf("tar --xattrs -tvv does not show the xattrs of ./usr/bin/ping:\n%s", xl)
			}

			out := filepath.Join(dir, "x")
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			// Device nodes need privilege to make; owners are never restored.
			tarTool(t, "-xf", archive, "-C", out, "--no-same-owner", "--exclude=./dev/null", "--exclude=./dev/sda")
			tarCheckExtracted(t, tree, out)
		})
	}
}

func tarCheckExtracted(t *testing.T, tree *rootfs.Tree, out string) {
	t.Helper()
	tree.Walk(func(e *rootfs.Entry) error {
		p := filepath.Join(out, e.Path)
		switch e.Type {
		case rootfs.TypeRegular:
			data, err := os.ReadFile(p)
			if err != nil {
				t.Error(err)
				return nil
			}
			sum := sha256.Sum256(data)
			if hex.EncodeToString(sum[:]) != e.Digest {
				t.Errorf("%s: extracted content differs", e.Path)
			}
		case rootfs.TypeSymlink:
			if target, err := os.Readlink(p); err != nil || target != e.Target {
				t.Errorf("%s: symlink -> %q (%v), want %q", e.Path, target, err, e.Target)
			}
		case rootfs.TypeFifo:
			if fi, err := os.Lstat(p); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
				t.Errorf("%s: not extracted as a fifo (%v)", e.Path, err)
			}
		}
		return nil
	})
	a, errA := os.Stat(filepath.Join(out, "usr/bin/aaa"))
	z, errZ := os.Stat(filepath.Join(out, "usr/bin/zzz"))
	if errA != nil || errZ != nil || !os.SameFile(a, z) {
		t.Errorf("usr/bin/aaa and usr/bin/zzz are not one file after extraction (%v, %v)", errA, errZ)
	}
	if _, err := os.Lstat(filepath.Join(out, "run/sock")); err == nil {
		t.Errorf("the socket was extracted")
	}
}

func TestTarCancel(t *testing.T) {
	tree := tarTestTree(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := WriteTar(ctx, tree.View(), io.Discard, TarOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("WriteTar: err = %v, want context.Canceled", err)
	}
	data := writeTarBytes(t, tree, TarOptions{})
	if _, err := ReadTar(ctx, bytes.NewReader(data)); !errors.Is(err, context.Canceled) {
		t.Errorf("ReadTar: err = %v, want context.Canceled", err)
	}
}

// tarArchive builds a tar from raw headers and contents, for inputs the
// canonical writer would never produce.
func tarArchive(t testing.TB, members ...any) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := 0; i < len(members); i++ {
		hdr := members[i].(*tar.Header)
		var body string
		if i+1 < len(members) {
			if s, ok := members[i+1].(string); ok {
				body, i = s, i+1
				hdr.Size = int64(len(body))
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestReadTarNames(t *testing.T) {
	mt := tarEpoch
	data := tarArchive(t,
		&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mt},
		&tar.Header{Name: "./etc/a", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: mt}, "one",
		&tar.Header{Name: "/etc/b", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: mt}, "two",
		&tar.Header{Name: "etc//c/./", Typeflag: tar.TypeDir, Mode: 0o700, ModTime: mt},
		// A later member replaces an earlier one at the same path.
		&tar.Header{Name: "etc/a", Typeflag: tar.TypeReg, Mode: 0o600, ModTime: mt}, "three",
		&tar.Header{Name: "etc/l", Typeflag: tar.TypeLink, Linkname: "/etc/b", ModTime: mt},
		&tar.Header{Name: "pax_global_header", Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"comment": "x"}},
	)
	got, err := ReadTar(context.Background(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/etc", "/etc/a", "/etc/b", "/etc/c", "/etc/l"}; !slices.Equal(got.Paths(), want) {
		t.Fatalf("paths = %q, want %q", got.Paths(), want)
	}
	if a := got.Get("/etc/a"); a.Perm != 0o600 || a.Size != 5 || a.Origin.Member != "etc/a" {
		t.Errorf("/etc/a = perm %o size %d member %q; want the later member", a.Perm, a.Size, a.Origin.Member)
	}
	if got.Get("/etc/b").Inode != got.Get("/etc/l").Inode {
		t.Errorf("/etc/l does not share the inode of /etc/b")
	}

	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"dotdot", tarArchive(t, &tar.Header{Name: "a/../../etc/passwd", Typeflag: tar.TypeReg}, "x"), "has a .. component"},
		{"dangling link", tarArchive(t, &tar.Header{Name: "l", Typeflag: tar.TypeLink, Linkname: "missing"}), "not earlier in the archive"},
		{"link to dir", tarArchive(t, &tar.Header{Name: "d/", Typeflag: tar.TypeDir},
			&tar.Header{Name: "l", Typeflag: tar.TypeLink, Linkname: "d"}), "hard link to directory"},
		{"empty symlink", tarArchive(t, &tar.Header{Name: "s", Typeflag: tar.TypeSymlink}), "empty target"},
		{"bzip2", []byte("BZh91AY&SY"), "bzip2 is not supported"},
		{"truncated", tarArchive(t, &tar.Header{Name: "f", Typeflag: tar.TypeReg}, strings.Repeat("x", 2000))[:1024], "unexpected EOF"},
		{"sparse", tarSparseBomb(), "sparse members are not supported"},
	} {
		_, err := ReadTar(context.Background(), bytes.NewReader(c.data))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one saying %q", c.name, err, c.want)
		}
	}
}

func tarErr(_ *rootfs.Entry, err error) error { return err }

// tarSparseBomb is an old-GNU sparse member of 2 KiB that declares an 8 GiB
// file of holes.
func tarSparseBomb() []byte {
	blk := make([]byte, 512)
	for off, field := range map[int]string{
		0: "f", 100: "0000644", 108: "0000000", 116: "0000000", 124: "00000001000",
		136: "00000000000", 257: "ustar  ", 386: "00000000000", 398: "00000001000",
		483: "77777777777", 148: "        ",
	} {
		copy(blk[off:], field)
	}
	blk[156] = tar.TypeGNUSparse
	sum := 0
	for _, b := range blk {
		sum += int(b)
	}
	copy(blk[148:], fmt.Sprintf("%06o\x00 ", sum))
	return append(blk, make([]byte, 512+1024)...)
}

func FuzzReadTar(f *testing.F) {
	tree := rootfstest.New(f, tarEpoch)
	for _, err := range []error{
		tarErr(tree.Create("/etc/hostname", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: tarEpoch}, strings.NewReader("node\n"))),
		tarErr(tree.Link("/etc/hn", "/etc/hostname", rootfs.Origin{})),
		tarErr(tree.Create("/bin", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "usr/bin"}, nil)),
		tarErr(tree.Create("/dev/null", rootfs.Header{Type: rootfs.TypeChar, Perm: 0o666, Major: 1, Minor: 3, Xattrs: map[string]string{"user.a": "b"}}, nil)),
	} {
		if err != nil {
			f.Fatal(err)
		}
	}
	for _, a := range []compress.Algorithm{compress.None, compress.Gzip} {
		f.Add(writeTarBytes(f, tree, TarOptions{Compression: a}))
	}
	f.Add([]byte{})
	f.Add([]byte("BZh9"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tree, err := ReadTar(context.Background(), bytes.NewReader(data))
		if err != nil {
			return
		}
		entries := tree.Entries()
		for i, e := range entries {
			if !strings.HasPrefix(e.Path, "/") || filepath.Clean(e.Path) != e.Path {
				t.Fatalf("path %q is not clean and absolute", e.Path)
			}
			if i > 0 && entries[i-1].Path >= e.Path {
				t.Fatalf("paths out of order: %q then %q", entries[i-1].Path, e.Path)
			}
			if e.Type == rootfs.TypeRegular && len(e.Digest) != 64 {
				t.Fatalf("%s: digest %q", e.Path, e.Digest)
			}
			if e.Type == 0 {
				t.Fatalf("%s: no type", e.Path)
			}
		}
	})
}

// tarBenchTree is about 64 MiB in 2048 files under 64 directories.
func tarBenchTree(b *testing.B) (*rootfs.Tree, int64) {
	tree := rootfstest.New(b, tarEpoch)
	blob := tarSemiRandom(64<<20, 3)
	var total int64
	for i := range 2048 {
		content := blob[i*32<<10 : (i+1)*32<<10]
		p := fmt.Sprintf("/usr/share/d%02d/f%04d", i%64, i)
		if _, err := tree.Create(p, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: tarEpoch}, bytes.NewReader(content)); err != nil {
			b.Fatal(err)
		}
		total += int64(len(content))
	}
	return tree, total
}

func BenchmarkWriteTar(b *testing.B) {
	tree, total := tarBenchTree(b)
	for _, a := range tarAlgorithms {
		b.Run(string(a), func(b *testing.B) {
			b.SetBytes(total)
			for b.Loop() {
				if err := WriteTar(context.Background(), tree.View(), io.Discard, TarOptions{Compression: a}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
