package formats

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

// cpioSmallTree is a few entries, for tests that compress with xz, which
// takes seconds for the big file of tarTestTree.
func cpioSmallTree(t testing.TB) *rootfs.Tree {
	t.Helper()
	tree := rootfstest.New(t, tarEpoch)
	rootfstest.File(t, tree, "/etc/passwd", 0o644, tarEpoch, "root:x:0:0:root:/root:/bin/sh\n")
	rootfstest.File(t, tree, "/etc/hostname", 0o644, tarEpoch, "node\n")
	return tree
}

func writeCpioBytes(t testing.TB, tree *rootfs.Tree, o CpioOptions) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteCpio(context.Background(), tree.View(), &buf, o); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestCpioRoundTrip(t *testing.T) {
	tree := tarTestTree(t)
	for _, a := range tarAlgorithms {
		t.Run(string(a), func(t *testing.T) {
			var xfiles, adds []string
			data := writeCpioBytes(t, tree, CpioOptions{Compression: a, MTime: tarEpoch, XattrFiles: &xfiles, Adds: &adds})
			if !slices.Equal(xfiles, []string{"/usr/bin/ping"}) {
				t.Errorf("xattr files = %q, want [/usr/bin/ping]", xfiles)
			}
			if got, _, _ := compress.Detect(bytes.NewReader(data)); got != a {
				t.Errorf("stream is %s, want %s", got, a)
			}
			got, list, err := ReadCpio(context.Background(), bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			rest := got.Entries()
			// Unlike tar, cpio keeps sockets: the kernel makes them.
			tarCompareEntries(t, rest, tree.Entries())
			if list == nil {
				t.Fatalf("no %s in the archive", XattrListPath)
			}
			if want := rootfs.ManifestLine(list, nil, false); !slices.Equal(adds, []string{want}) {
				t.Errorf("adds = %q, want [%q]", adds, want)
			}
			if list.Perm != 0o644 || list.UID != 0 || !list.MTime.Equal(tarEpoch) {
				t.Errorf("xattr list: %s", rootfs.ManifestLine(list, nil, false))
			}
			again := writeCpioBytes(t, tree, CpioOptions{Compression: a, MTime: tarEpoch})
			if !bytes.Equal(data, again) {
				t.Errorf("two writes of the same tree differ (%d and %d bytes)", len(data), len(again))
			}
		})
	}
}

// xz streams must carry CRC32 checks: the kernel refuses CRC64.
func TestCpioXZCheck(t *testing.T) {
	tree := cpioSmallTree(t)
	data := writeCpioBytes(t, tree, CpioOptions{Compression: compress.XZ})
	// Stream flags follow the 6-byte magic: 0x00 then the check type,
	// 0x01 for CRC32.
	if len(data) < 8 || data[6] != 0 || data[7] != 1 {
		t.Fatalf("xz stream flags % x, want 00 01 (CRC32)", data[6:8])
	}
	p := filepath.Join(t.TempDir(), "a.cpio.xz")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("xz", "--robot", "--list", p).CombinedOutput()
	if err != nil {
		t.Fatalf("xz --list: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "\tCRC32\t") {
		t.Errorf("xz --list does not report CRC32:\n%s", out)
	}
}

func cpioTool(t *testing.T, dir string, stdin []byte, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Fatal("GNU cpio not found; run test/scripts/deps.sh")
	}
	cmd := exec.Command("cpio", args...)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = append(os.Environ(), "TZ=UTC", "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("cpio %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// GNU cpio lists exactly the tree plus the xattr list, with the owners,
// modes, device numbers and link counts of the index.
func TestCpioGNUList(t *testing.T) {
	tree := tarTestTree(t)
	for _, a := range []compress.Algorithm{compress.None, compress.Gzip} {
		t.Run(string(a), func(t *testing.T) {
			var adds []string
			data := writeCpioBytes(t, tree, CpioOptions{Compression: a, MTime: tarEpoch, Adds: &adds})
			if a == compress.Gzip {
				rc, err := compress.NewReader(a, bytes.NewReader(data))
				if err != nil {
					t.Fatal(err)
				}
				data, _ = io.ReadAll(rc)
			}
			list := cpioTool(t, "", data, "-itv", "--numeric-uid-gid", "--quiet")
			got, err := harness.ParseCpioListing(list)
			if err != nil {
				t.Fatal(err)
			}
			// The manifest as the build writes it, then the format's section.
			var manifest bytes.Buffer
			if err := rootfs.WriteManifest(&manifest, tree.Entries(), true); err != nil {
				t.Fatal(err)
			}
			for _, a := range adds {
				manifest.WriteString(a + "\n")
			}
			listed, err := rootfs.ParseManifest(&manifest)
			if err != nil {
				t.Fatal(err)
			}
			want := harness.CpioListing(listed)
			slices.SortFunc(want, func(a, b string) int { return strings.Compare(harness.CpioListingName(a), harness.CpioListingName(b)) })
			if !slices.Equal(got, want) {
				t.Errorf("cpio -itv lists\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

// As root, GNU cpio -idm rebuilds the tree: contents, owners, modes, device
// numbers, mtimes and hard links; setfattr --restore puts the xattrs back
// from the list.
func TestCpioGNUExtract(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making device nodes and giving files away needs root")
	}
	tree := tarTestTree(t)
	data := writeCpioBytes(t, tree, CpioOptions{MTime: tarEpoch})
	out := t.TempDir()
	cpioTool(t, out, data, "-idm", "--quiet", "--no-absolute-filenames")
	tree.Walk(func(e *rootfs.Entry) error {
		p := filepath.Join(out, e.Path)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Error(err)
			return nil
		}
		switch e.Type {
		case rootfs.TypeRegular:
			content, err := os.ReadFile(p)
			if sum := sha256.Sum256(content); err != nil || hex.EncodeToString(sum[:]) != e.Digest {
				t.Errorf("%s: extracted content differs (%v)", e.Path, err)
			}
		case rootfs.TypeSymlink:
			if target, err := os.Readlink(p); err != nil || target != e.Target {
				t.Errorf("%s: symlink -> %q (%v), want %q", e.Path, target, err, e.Target)
			}
		case rootfs.TypeFifo:
			if fi.Mode()&os.ModeNamedPipe == 0 {
				t.Errorf("%s: not a fifo", e.Path)
			}
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != e.UID || st.Gid != e.GID {
			t.Errorf("%s: owner %d:%d, want %d:%d", e.Path, st.Uid, st.Gid, e.UID, e.GID)
		}
		if e.Type != rootfs.TypeSymlink {
			if got := st.Mode & 07777; got != e.Perm {
				t.Errorf("%s: mode %04o, want %04o", e.Path, got, e.Perm)
			}
			if e.Type != rootfs.TypeDir && st.Mtim.Sec != e.MTime.Unix() {
				t.Errorf("%s: mtime %d, want %d", e.Path, st.Mtim.Sec, e.MTime.Unix())
			}
		}
		if e.Type.IsDevice() {
			if ma, mi := uint32(st.Rdev>>8&0xfff), uint32(st.Rdev&0xff|st.Rdev>>12&0xfff00); ma != e.Major || mi != e.Minor {
				t.Errorf("%s: device %d,%d, want %d,%d", e.Path, ma, mi, e.Major, e.Minor)
			}
		}
		if e.Type == rootfs.TypeSocket && fi.Mode()&os.ModeSocket == 0 {
			t.Errorf("%s: not a socket", e.Path)
		}
		return nil
	})
	for _, p := range []string{"usr/bin/aaa", "usr/bin/mmm"} {
		a, _ := os.Stat(filepath.Join(out, p))
		z, _ := os.Stat(filepath.Join(out, "usr/bin/zzz"))
		if a == nil || z == nil || !os.SameFile(a, z) || a.Sys().(*syscall.Stat_t).Nlink != 3 {
			t.Errorf("%s and usr/bin/zzz are not one inode with 3 links", p)
		}
	}

	cmd := exec.Command("setfattr", "-h", "--restore="+strings.TrimPrefix(XattrListPath, "/"))
	cmd.Dir = out
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("setfattr --restore: %v\n%s (run test/scripts/deps.sh for attr)", err, msg)
	}
	ping := tree.Get("/usr/bin/ping")
	for _, name := range ping.XattrNames() {
		got := make([]byte, 64)
		n, err := syscall.Getxattr(filepath.Join(out, "usr/bin/ping"), name, got)
		if err != nil || string(got[:n]) != ping.Xattrs[name] {
			t.Errorf("usr/bin/ping: xattr %s = %q (%v), want %q", name, got[:max(n, 0)], err, ping.Xattrs[name])
		}
	}
}

// The size check comes before any byte is written: newc cannot hold 4 GiB.
func TestCpioTooLarge(t *testing.T) {
	tree := tarTestTree(t)
	// Writing 4 GiB through the tree would take a minute; the index's size
	// is what the writer checks, before it reads anything.
	big := tree.Get("/usr/lib/big.bin")
	big.Size = 4 << 30
	var buf bytes.Buffer
	err := WriteCpio(context.Background(), tree.View(), &buf, CpioOptions{})
	if err == nil || !strings.Contains(err.Error(), "/usr/lib/big.bin") || !strings.Contains(err.Error(), "4 GiB") {
		t.Fatalf("err = %v, want one naming /usr/lib/big.bin and the 4 GiB limit", err)
	}
	if buf.Len() != 0 {
		t.Errorf("%d bytes written before the error", buf.Len())
	}
	// One byte less fits the field (the content check then fails, since the
	// file is not that long).
	big.Size = 4<<30 - 1
	err = WriteCpio(context.Background(), tree.View(), io.Discard, CpioOptions{})
	if err == nil || strings.Contains(err.Error(), "4 GiB") {
		t.Fatalf("err = %v, want a short-content error", err)
	}
}

func TestCpioMTimeRange(t *testing.T) {
	tree := tarTestTree(t)
	tree.Update("/etc/passwd", func(in *rootfs.Inode) { in.MTime = tarEpoch.AddDate(-60, 0, 0) })
	err := WriteCpio(context.Background(), tree.View(), io.Discard, CpioOptions{})
	if err == nil || !strings.Contains(err.Error(), "/etc/passwd") {
		t.Fatalf("err = %v, want one naming /etc/passwd", err)
	}
}

// Extra files are merged in path order, and may not shadow the tree.
func TestCpioExtra(t *testing.T) {
	tree := tarTestTree(t)
	var adds []string
	data := writeCpioBytes(t, tree, CpioOptions{Compression: compress.Zstd, MTime: tarEpoch, Adds: &adds,
		Extra: []CpioFile{{Path: "/init", Perm: 0o755, Content: []byte("#!/bin/sh\n")}}})
	got, _, err := ReadCpio(context.Background(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if init := got.Get("/init"); init == nil || init.Perm != 0o755 || init.Size != 10 {
		t.Fatalf("/init not in the archive as written: %v", init)
	}
	if len(adds) != 2 || !strings.HasPrefix(adds[0], XattrListPath+" ") || !strings.HasPrefix(adds[1], "/init type=file mode=0755 uid=0 gid=0 mtime=1700000000 size=10 sha256=") {
		t.Errorf("adds = %q", adds)
	}
	for p, want := range map[string]string{"/etc/passwd": "already holds", "/nowhere/init": "no directory /nowhere", "/etc/passwd/x": "no directory /etc/passwd"} {
		err = WriteCpio(context.Background(), tree.View(), io.Discard, CpioOptions{Extra: []CpioFile{{Path: p}}})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want one saying %q", p, err, want)
		}
	}
}

// Archives one after another, each compressed its own way, read as the
// kernel unpacks them: a later entry replaces an earlier one.
func TestCpioConcatenated(t *testing.T) {
	tree := cpioSmallTree(t)
	for _, c := range []struct {
		alg compress.Algorithm
		pad int
	}{{compress.None, 0}, {compress.None, 3}, {compress.None, 512}, {compress.Zstd, 0}, {compress.Gzip, 0}, {compress.XZ, 0}} {
		pad := c.pad
		first := writeCpioBytes(t, tree, CpioOptions{Compression: c.alg, MTime: tarEpoch})
		var second bytes.Buffer
		items := []cpioItem{cpioGenerated(CpioFile{Path: "/etc/passwd", Perm: 0o600, Content: []byte("new\n")}, tarEpoch)}
		if err := writeCpioItems(context.Background(), &second, c.alg, items); err != nil {
			t.Fatal(err)
		}
		data := append(append(slices.Clone(first), make([]byte, pad)...), second.Bytes()...)
		got, _, err := ReadCpio(context.Background(), bytes.NewReader(data))
		if err != nil {
			t.Fatalf("%s pad %d: %v", c.alg, pad, err)
		}
		rest := got.Entries()
		if len(rest) != tree.Len() {
			t.Fatalf("pad %d: %d entries, want %d", pad, len(rest), tree.Len())
		}
		for _, e := range rest {
			if e.Path == "/etc/passwd" && (e.Size != 4 || e.Perm != 0o600) {
				t.Errorf("pad %d: /etc/passwd is not the later one: %s", pad, rootfs.ManifestLine(e, nil, false))
			}
		}
	}
}

func TestCpioReadErrors(t *testing.T) {
	tree := tarTestTree(t)
	data := writeCpioBytes(t, tree, CpioOptions{})
	for name, in := range map[string][]byte{
		"empty":     {},
		"truncated": data[:len(data)/2],
		"no trailer": func() []byte {
			i := bytes.LastIndex(data, []byte("070701"))
			return data[:i]
		}(),
		"garbage": append(slices.Clone(data), "junk after the trailer"...),
	} {
		if _, _, err := ReadCpio(context.Background(), bytes.NewReader(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	var bad bytes.Buffer
	items := []cpioItem{cpioGenerated(CpioFile{Path: "/../etc/passwd"}, tarEpoch)}
	items[0].path = "../etc/passwd"
	if err := writeCpioItems(context.Background(), &bad, compress.None, items); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ReadCpio(context.Background(), &bad); err == nil || !strings.Contains(err.Error(), "..") {
		t.Errorf("err = %v, want one about ..", err)
	}
}

func TestCpioFormat(t *testing.T) {
	tree := tarTestTree(t)
	dir := t.TempDir()
	f, err := Lookup("cpio")
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Write(context.Background(), &Source{Tree: tree.View(), Epoch: tarEpoch}, &Spec{Format: "cpio"}, dir, "node")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Files, []string{"node.cpio.zst"}) {
		t.Errorf("files = %q, want the zstd default", res.Files)
	}
	if len(res.Warnings) != 1 || !strings.Contains(res.Warnings[0], "/usr/bin/ping") {
		t.Errorf("warnings = %q, want one naming /usr/bin/ping", res.Warnings)
	}
	if len(res.Adds) != 1 || !strings.HasPrefix(res.Adds[0], XattrListPath) {
		t.Errorf("adds = %q", res.Adds)
	}
	data, err := os.ReadFile(filepath.Join(dir, "node.cpio.zst"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, writeCpioBytes(t, tree, CpioOptions{Compression: compress.Zstd, MTime: tarEpoch})) {
		t.Errorf("the format's file differs from WriteCpio's bytes")
	}
	if _, err := f.Write(context.Background(), &Source{Tree: tree.View(), Epoch: tarEpoch}, &Spec{Format: "cpio", Options: &CpioSpec{Compression: "lz4"}}, dir, "bad"); err == nil {
		t.Errorf("lz4: no error")
	}
	var ctxErr error
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, ctxErr = f.Write(ctx, &Source{Tree: tree.View(), Epoch: tarEpoch}, &Spec{Format: "cpio"}, dir, "cancelled")
	if !errors.Is(ctxErr, context.Canceled) {
		t.Errorf("cancelled: err = %v", ctxErr)
	}
	if _, err := os.Stat(filepath.Join(dir, "cancelled.cpio.zst")); err == nil {
		t.Errorf("a cancelled write left its file")
	}
}

// A hostile header must not make the reader allocate what it claims.
func TestCpioReadHugeName(t *testing.T) {
	data := writeCpioBytes(t, cpioSmallTree(t), CpioOptions{})
	// The second record's name size, in the header after the root's.
	second := bytes.Index(data[6:], []byte("070701")) + 6
	copy(data[second+cpioNameSizeAt:], "FFFFFFF0")
	_, _, err := ReadCpio(context.Background(), bytes.NewReader(data))
	if err == nil || !strings.Contains(err.Error(), "PATH_MAX") {
		t.Fatalf("err = %v, want one about the name size", err)
	}
}

func FuzzReadCpio(f *testing.F) {
	tree := cpioSmallTree(f)
	for _, a := range []compress.Algorithm{compress.None, compress.Gzip} {
		var buf bytes.Buffer
		if err := WriteCpio(context.Background(), tree.View(), &buf, CpioOptions{Compression: a,
			Extra: []CpioFile{{Path: "/init", Perm: 0o755, Content: []byte("#!/bin/sh\n")}}}); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Add([]byte("070701"))
	f.Fuzz(func(t *testing.T, data []byte) {
		tree, _, err := ReadCpio(context.Background(), bytes.NewReader(data))
		if err != nil {
			return
		}
		entries := tree.Entries()
		for i, e := range entries {
			if !strings.HasPrefix(e.Path, "/") || strings.Contains(e.Path, "/../") || (i > 0 && entries[i-1].Path >= e.Path) {
				t.Fatalf("bad path order or form: %q", e.Path)
			}
		}
	})
}
