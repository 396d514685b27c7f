package ldcache

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

var epoch = time.Unix(1700000000, 0).UTC()

// requireOracle skips unless the real ldconfig can be run in a chroot.
// Only root may chroot; CI runs as root, so there the oracle always runs.
func requireOracle(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the oracle chroots into the tree to run its ldconfig")
	}
	harness.Tool(t, "chroot")
}

// baseDebs are the packages of the test tree: libc-bin for ldconfig and its
// configuration, libc6, and a fixed set of common libraries (zlib and zstd
// for TestMatchesLdconfigExtraDirs), named so the tree is the same whatever
// else the deb cache holds.
func baseDebs(t *testing.T) []string {
	t.Helper()
	return harness.Debs(t, "libc6", "libc-bin", "zlib1g", "libzstd1", "liblzma5",
		"libacl1", "libattr1", "libselinux1", "libpcre2-8-0", "libtinfo6", "libgmp10",
		"libgcc-s1", "libstdc++6", "libssl3", "libcap2", "libcrypt1", "libmount1",
		"libblkid1", "libuuid1", "libsystemd0", "libudev1", "libkrb5-3", "libgssapi-krb5-2")
}

func symlink(t *testing.T, tr *rootfs.Tree, p, target string) {
	t.Helper()
	rootfstest.Symlink(t, tr, p, target, epoch)
}

func mkdir(t *testing.T, tr *rootfs.Tree, p string) {
	t.Helper()
	rootfstest.Dir(t, tr, p, 0o755, epoch)
}

func file(t *testing.T, tr *rootfs.Tree, p string, content []byte) {
	t.Helper()
	mkdir(t, tr, filepath.Dir(p))
	rootfstest.File(t, tr, p, 0o644, epoch, string(content))
}

// baseTree unpacks the packages over the merged-/usr symlinks of a Debian
// bookworm system.
func baseTree(t *testing.T) *rootfs.Tree {
	t.Helper()
	tr := rootfstest.New(t, epoch)
	for _, d := range []string{"bin", "sbin", "lib", "lib64"} {
		mkdir(t, tr, "/usr/"+d)
		symlink(t, tr, "/"+d, "usr/"+d)
	}
	for _, d := range baseDebs(t) {
		f, err := os.Open(d)
		if err != nil {
			t.Fatal(err)
		}
		r, err := deb.NewReader(f)
		if err != nil {
			f.Close()
			t.Fatalf("%s: %v", d, err)
		}
		data, err := r.Data()
		if err != nil {
			f.Close()
			t.Fatalf("%s: %v", d, err)
		}
		_, err = rootfs.Extract(context.Background(), tr, data, rootfs.ExtractOptions{KeepDirSymlinks: true})
		data.Close()
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
	}
	return tr
}

// compareWithLdconfig builds the cache, then runs the tree's own ldconfig in
// a chroot and compares what it wrote byte for byte.
func compareWithLdconfig(t *testing.T, tr *rootfs.Tree) {
	t.Helper()
	before := tr.Len()
	got, err := Build(tr, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Len() != before {
		t.Fatalf("Build changed the tree: %d entries, was %d", tr.Len(), before)
	}
	dir := tr.Dir()
	cmd := exec.Command("chroot", dir, "/sbin/ldconfig")
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chroot %s /sbin/ldconfig: %v\n%s", dir, err, out)
	}
	want, err := os.ReadFile(filepath.Join(dir, "etc/ld.so.cache"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got, want) {
		t.Logf("%d bytes, identical to ldconfig's", len(got))
		return
	}
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	t.Errorf("cache differs from ldconfig's at byte %d (ours %d bytes, ldconfig's %d)", i, len(got), len(want))
	if err := os.WriteFile(filepath.Join(dir, "ours.cache"), got, 0o644); err != nil {
		t.Fatal(err)
	}
	list := func(name string) []string {
		out, err := exec.Command("chroot", dir, "/sbin/ldconfig", "-p", "-C", name).CombinedOutput()
		if err != nil {
			t.Logf("ldconfig -p -C %s: %v", name, err)
		}
		return strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	}
	ours, theirs := list("/ours.cache"), list("/etc/ld.so.cache")
	t.Logf("ldconfig -p of ours (-) and ldconfig's (+):\n%s", lineDiff(ours, theirs))
}

// lineDiff is a small LCS diff of two listings.
func lineDiff(a, b []string) string {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var sb strings.Builder
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && a[i] == b[j]:
			fmt.Fprintf(&sb, "  %s\n", a[i])
			i++
			j++
		case j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]):
			fmt.Fprintf(&sb, "+ %s\n", b[j])
			j++
		default:
			fmt.Fprintf(&sb, "- %s\n", a[i])
			i++
		}
	}
	return sb.String()
}

func TestMatchesLdconfig(t *testing.T) {
	requireOracle(t)
	t.Parallel()
	tr := baseTree(t)
	compareWithLdconfig(t, tr)
}

// withISALevel returns a copy of an x86-64 ELF whose
// GNU_PROPERTY_X86_ISA_1_NEEDED says the given ISA bit (4 is x86-64-v3).
func withISALevel(t *testing.T, lib []byte, needed uint32) []byte {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(lib))
	if err != nil {
		t.Fatal(err)
	}
	out := bytes.Clone(lib)
	for _, p := range f.Progs {
		if p.Type != elf.PT_GNU_PROPERTY {
			continue
		}
		note := out[p.Off : p.Off+p.Filesz]
		desc := note[16 : 16+binary.LittleEndian.Uint32(note[4:])]
		for len(desc) >= 8 {
			typ, size := binary.LittleEndian.Uint32(desc), binary.LittleEndian.Uint32(desc[4:])
			if typ == x86ISANeeded && size == 4 {
				binary.LittleEndian.PutUint32(desc[8:], needed)
				return out
			}
			desc = desc[8+(size+7)&^7:]
		}
	}
	t.Fatal("no GNU_PROPERTY_X86_ISA_1_NEEDED in the library")
	return nil
}

// TestMatchesLdconfigExtraDirs adds configuration and directories beyond a
// plain Debian system: an extra conf.d file with duplicates, a libc6 type,
// a relative include and a missing directory; a directory with versioned
// copies, links that are and are not soname links, a development link, a
// linker script, a dangling link, a library without a soname link and one
// without DT_SONAME; legacy hwcap subdirectories; and glibc-hwcaps
// subdirectories (one with a raised x86 ISA level, one unused).
func TestMatchesLdconfigExtraDirs(t *testing.T) {
	requireOracle(t)
	t.Parallel()
	tr := baseTree(t)
	const ml = "/usr/lib/x86_64-linux-gnu"
	libz := rootfstest.Read(t, tr, ml+"/libz.so.1")
	zstd := rootfstest.Read(t, tr, ml+"/libzstd.so.1")
	libc := rootfstest.Read(t, tr, ml+"/libc.so.6")
	noSoname := rootfstest.Read(t, tr, ml+"/gconv/UTF-16.so")
	ldconfig := rootfstest.Read(t, tr, "/sbin/ldconfig")

	file(t, tr, "/etc/ld.so.conf.d/zz-extra.conf", []byte(strings.Join([]string{
		"# extra libraries",
		"/opt/tlsalias",
		"/opt/extra/lib",
		"  /opt/extra/lib/   # the same again",
		"/opt/typed=libc6",
		"/opt/missing",
		"/etc/ld.so.conf",
		"/usr/lib/x86_64-linux-gnu/../x86_64-linux-gnu",
		"hwcap 0 nosegneg",
		"include sub/*.conf",
		"",
	}, "\n")))
	file(t, tr, "/etc/ld.so.conf.d/sub/a.conf", []byte("/opt/sub/lib\n"))
	file(t, tr, "/etc/ld.so.conf.d/sub/.hidden.conf", []byte("/opt/hidden\n"))

	const x = "/opt/extra/lib"
	file(t, tr, x+"/libz.so.1.2.13", libz)
	file(t, tr, x+"/libz.so.1.2.11", libz)
	symlink(t, tr, x+"/libz.so.1", "libz.so.1.2.13")
	symlink(t, tr, x+"/libz.so", "libz.so.1")
	symlink(t, tr, x+"/libzalias.so.9", "libz.so.1.2.13")
	file(t, tr, x+"/libzstd.so.1.5.4", zstd) // no soname link
	file(t, tr, x+"/libnosoname.so", noSoname)
	file(t, tr, x+"/libexe.so.1", ldconfig)
	file(t, tr, x+"/libscript.so", []byte("/* GNU ld script */\nGROUP ( libz.so.1 )\n"))
	file(t, tr, x+"/libtiny.so.1", []byte("tiny"))
	symlink(t, tr, x+"/libdangling.so.3", "libnothere.so.3")
	file(t, tr, x+"/tls/libz.so.1", libz)
	file(t, tr, x+"/haswell/x86_64/libz.so.1", libz)
	file(t, tr, x+"/glibc-hwcaps/x86-64-v3/libz.so.1.2.13", libz)
	symlink(t, tr, x+"/glibc-hwcaps/x86-64-v3/libz.so.1", "libz.so.1.2.13")
	file(t, tr, x+"/glibc-hwcaps/x86-64-v3/libz.so.1.2.9", libz)
	file(t, tr, x+"/glibc-hwcaps/x86-64-v3/libc.so.6", withISALevel(t, libc, 4))
	file(t, tr, x+"/glibc-hwcaps/x86-64-v3/libc-2.36.so", withISALevel(t, libc, 2))
	symlink(t, tr, "/opt/tlsalias", "extra/lib/tls")
	mkdir(t, tr, x+"/glibc-hwcaps/x86-64-v2")
	mkdir(t, tr, x+"/glibc-hwcaps/.hidden")
	file(t, tr, x+"/glibc-hwcaps/README", []byte("not a directory\n"))
	file(t, tr, "/opt/typed/libzstd.so.1", zstd)
	file(t, tr, "/opt/sub/lib/libz.so.1", libz)
	file(t, tr, "/opt/hidden/libz.so.1", libz)
	file(t, tr, ml+"/glibc-hwcaps/x86-64-v4/libzstd.so.1", zstd)

	compareWithLdconfig(t, tr)
}

func TestBuildErrors(t *testing.T) {
	tr, err := rootfs.New(filepath.Join(t.TempDir(), "root"), rootfs.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if _, err := Build(tr, "amd64"); err == nil || !strings.Contains(err.Error(), "/sbin/ldconfig") {
		t.Errorf("Build without ldconfig: %v, want an error naming /sbin/ldconfig", err)
	}
	if _, err := Build(tr, "vax"); err == nil {
		t.Error("Build for an unknown architecture succeeded")
	}
}

func TestLibcmp(t *testing.T) {
	for _, c := range []struct {
		a, b string
		sign int
	}{
		{"libfoo.so.10", "libfoo.so.9", 1},
		{"libfoo.so.1.2", "libfoo.so.1.2", 0},
		{"libfoo.so.01", "libfoo.so.1", 0},
		{"libfoo.so", "libfoo.so.1", -1},
		{"liba.so.1", "libb.so.1", -1},
		{"lib1.so", "libx.so", 1}, // digits sort above other characters
	} {
		got := libcmp(c.a, c.b, true)
		if (got > 0) != (c.sign > 0) || (got < 0) != (c.sign < 0) {
			t.Errorf("libcmp(%q, %q) = %d, want sign %d", c.a, c.b, got, c.sign)
		}
	}
	if libcmp("lib\xe9", "liba", true) >= 0 || libcmp("lib\xe9", "liba", false) <= 0 {
		t.Error("libcmp ignores the signedness of char")
	}
}

func TestFinalizeStrings(t *testing.T) {
	buf, off := finalizeStrings(map[string]bool{"/lib/libz.so.1": true, "libz.so.1": true, "z.so.1": true, "libc.so.6": true})
	for s, o := range off {
		if got := string(buf[o : int(o)+len(s)]); got != s || buf[int(o)+len(s)] != 0 {
			t.Errorf("%q at %d reads %q", s, o, got)
		}
	}
	// The tails share the longest string's bytes.
	if want := len("libc.so.6") + 1 + len("/lib/libz.so.1") + 1; len(buf) != want {
		t.Errorf("table is %d bytes, want %d: %q", len(buf), want, buf)
	}
}

func TestPathHwcap(t *testing.T) {
	a := arches["amd64"]
	if got, want := a.pathHwcap("/usr/lib/x86_64-linux-gnu/tls/haswell"), uint64(1)<<63|uint64(1)<<50; got != want {
		t.Errorf("pathHwcap = %#x, want %#x", got, want)
	}
	if got := a.pathHwcap("/usr/lib/x86_64-linux-gnu"); got != 0 {
		t.Errorf("pathHwcap = %#x, want 0", got)
	}
	if !a.isHwcapPlatform("x86_64") || a.isHwcapPlatform("x86-64-v3") {
		t.Error("isHwcapPlatform")
	}
}

func TestGeneratorIn(t *testing.T) {
	data := []byte("\x00ldconfig %s%s\n\x00ldconfig (Debian GLIBC 2.36-9+deb12u13) stable release version 2.36\x00x")
	if g, ok := generatorIn(data); !ok || g != "ldconfig (Debian GLIBC 2.36-9+deb12u13) stable release version 2.36" {
		t.Errorf("generatorIn = %q, %v", g, ok)
	}
}
