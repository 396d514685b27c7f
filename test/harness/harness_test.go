package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBase builds the default base from real Debian packages (downloading
// them the first time) and checks every synthetic entry the other packages'
// tests rely on.
func TestBase(t *testing.T) {
	path := Base(t)
	entries := ReadTar(t, path)
	idx := TarIndex(entries)

	for i := 1; i < len(entries); i++ {
		if entries[i-1].Name >= entries[i].Name {
			t.Fatalf("not sorted or duplicated: %s before %s", entries[i-1].Name, entries[i].Name)
		}
	}
	if len(entries) < 1000 {
		t.Fatalf("only %d entries: the packages were not merged", len(entries))
	}
	for _, e := range entries {
		if e.ModTime.After(DefaultEpoch) {
			t.Errorf("%s: mtime %v after the epoch", e.Name, e.ModTime)
		}
		if e.Type == tar.TypeLink {
			if target, ok := idx[e.Linkname]; !ok || target.Type != tar.TypeReg || target.Name >= e.Name {
				t.Errorf("%s: hard link to %q, which must be an earlier regular file", e.Name, e.Linkname)
			}
		}
	}

	want := []struct {
		name       string
		typ        byte
		mode       int64
		uid, gid   int
		major, min int64
	}{
		{"/", tar.TypeDir, 0o755, 0, 0, 0, 0},
		{"/dev/null", tar.TypeChar, 0o666, 0, 0, 1, 3},
		{"/dev/console", tar.TypeChar, 0o600, 0, 0, 5, 1},
		{"/dev/sda", tar.TypeBlock, 0o660, 0, 6, 8, 0},
		{"/run/initctl", tar.TypeFifo, 0o600, 0, 0, 0, 0},
		{"/tmp", tar.TypeDir, 0o1777, 0, 0, 0, 0},
		{"/usr/bin/passwd", tar.TypeReg, 0o4755, 0, 0, 0, 0},
		{FixtureSetuid, tar.TypeReg, 0o4755, 0, 0, 0, 0},
		{FixtureHome, tar.TypeDir, 0o700, 1000, 1000, 0, 0},
		{FixtureHomeFile, tar.TypeReg, 0o600, 1000, 1000, 0, 0},
		{"/var/mail", tar.TypeDir, 0o2775, 0, 8, 0, 0},
		{"/etc/shadow", tar.TypeReg, 0o640, 0, 42, 0, 0},
		{"/etc/passwd", tar.TypeReg, 0o644, 0, 0, 0, 0},
		{"/bin", tar.TypeSymlink, 0o777, 0, 0, 0, 0},
		{"/usr/bin/bash", tar.TypeReg, 0o755, 0, 0, 0, 0},
		{"/usr/bin/ping", tar.TypeReg, 0o755, 0, 0, 0, 0},
	}
	for _, w := range want {
		e, ok := idx[w.name]
		if !ok {
			t.Errorf("%s: missing", w.name)
			continue
		}
		if e.Type != w.typ || e.Mode != w.mode || e.UID != w.uid || e.GID != w.gid || e.DevMajor != w.major || e.DevMinor != w.min {
			t.Errorf("got  %s\nwant type=%c mode=%04o owner=%d:%d dev=%d,%d", e, w.typ, w.mode, w.uid, w.gid, w.major, w.min)
		}
	}
	if e := idx["/bin"]; e.Linkname != "usr/bin" {
		t.Errorf("/bin -> %q, want usr/bin", e.Linkname)
	}
	if _, ok := idx["/bin/bash"]; ok {
		t.Error("/bin/bash is in the tar: the package paths were not folded into /usr")
	}

	a, b := idx[FixtureHardLinkA], idx[FixtureHardLinkB]
	if a.Type != tar.TypeReg || a.Size == 0 || b.Type != tar.TypeLink || b.Linkname != FixtureHardLinkA {
		t.Errorf("hard-link pair:\n%s\n%s", a, b)
	}

	// cap_net_raw+ep as setcap writes it: revision 2, effective, permitted bit 13.
	const capNetRaw = "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
	if got := idx["/usr/bin/ping"].Xattrs["security.capability"]; got != capNetRaw || CapNetRawEP != capNetRaw {
		t.Errorf("ping security.capability = %x, want %x", got, capNetRaw)
	}
	if got := idx["/etc/hostname"].Xattrs["user.stamp.test"]; got != "hello" {
		t.Errorf("/etc/hostname user.stamp.test = %q, want hello", got)
	}
	for _, p := range CleanupFixtures {
		if e, ok := idx[p]; !ok || e.Type != tar.TypeReg || e.Size == 0 {
			t.Errorf("cleanup fixture %s: missing or empty", p)
		}
	}

	// GNU tar must agree with our reader on the things it can show.
	out, err := exec.Command(Tool(t, "tar"), "-tvf", path, "--zstd", "./dev/sda", "./usr/bin/stamp-hl-b").CombinedOutput()
	if err != nil {
		t.Fatalf("tar -tv: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "brw-rw---- 0/6") || !strings.Contains(string(out), "link to ./usr/bin/stamp-hl-a") {
		t.Errorf("GNU tar sees:\n%s", out)
	}
}

// TestBuildBaseDeterministic builds the default base twice into fresh files
// and compares the bytes with each other and with the cached Base.
func TestBuildBaseDeterministic(t *testing.T) {
	cached := Base(t)
	dir := t.TempDir()
	var outs [][]byte
	for _, name := range []string{"a.tar.zst", "b.tar.zst"} {
		p := filepath.Join(dir, name)
		if err := BuildBase(context.Background(), BaseOptions{Output: p}); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		outs = append(outs, data)
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("two builds from the same debs differ")
	}
	want, err := os.ReadFile(cached)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(outs[0], want) {
		t.Fatalf("a fresh build differs from the cached %s: bump baseFormat when the fixture changes", cached)
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(leftovers) > 0 {
		t.Errorf("temp files left behind: %v", leftovers)
	}
}

// TestBuildBaseCompressions writes a small base in every supported
// compression and checks each reads back to the same entries, and that an
// unknown extension fails without leaving a file.
func TestBuildBaseCompressions(t *testing.T) {
	RequireTools(t, "apt-get", "dpkg-deb")
	dir := t.TempDir()
	small := []string{"base-files", "base-passwd"}
	var first []TarEntry
	for _, name := range []string{"b.tar", "b.tar.gz", "b.tar.zst", "b.tar.xz"} {
		p := filepath.Join(dir, name)
		if err := BuildBase(context.Background(), BaseOptions{Output: p, Packages: small}); err != nil {
			t.Fatal(err)
		}
		got := ReadTar(t, p)
		if len(got) < 50 {
			t.Fatalf("%s: only %d entries", name, len(got))
		}
		if first == nil {
			first = got
			continue
		}
		if !slices.EqualFunc(first, got, func(a, b TarEntry) bool { return a.String() == b.String() }) {
			t.Errorf("%s reads back differently from b.tar", name)
		}
	}
	if err := BuildBase(context.Background(), BaseOptions{Output: filepath.Join(dir, "b.zip"), Packages: small}); err == nil {
		t.Error("b.zip: no error for an unknown extension")
	}
	if _, err := os.Stat(filepath.Join(dir, "b.zip")); err == nil {
		t.Error("b.zip exists after a failed build")
	}
}

// TestBuildBaseFromDebDir uses pre-downloaded .deb files with no download,
// honouring the package order, and fails on a package that is not there.
func TestBuildBaseFromDebDir(t *testing.T) {
	RequireTools(t, "apt-get", "dpkg-deb")
	Base(t) // fills the deb cache
	out := filepath.Join(t.TempDir(), "b.tar")
	err := BuildBase(context.Background(), BaseOptions{
		Output: out, DebDir: DebCacheDir(), Packages: []string{"base-files", "dash"}, SplitUsr: true,
		Epoch: time.Unix(1600000000, 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	idx := TarIndex(ReadTar(t, out))
	if e, ok := idx["/bin/dash"]; !ok || e.Type != tar.TypeReg {
		t.Errorf("split /usr: /bin/dash = %v", e)
	}
	if _, ok := idx["/usr/bin/bash"]; ok {
		t.Error("bash is in the tar though only base-files and dash were asked for")
	}
	for name, e := range idx {
		if e.ModTime.Unix() > 1600000000 {
			t.Fatalf("%s: mtime %d not clamped to 1600000000", name, e.ModTime.Unix())
		}
	}
	err = BuildBase(context.Background(), BaseOptions{Output: out, DebDir: DebCacheDir(), Packages: []string{"no-such-package"}})
	if err == nil || !strings.Contains(err.Error(), "no-such-package") {
		t.Errorf("missing package: err = %v", err)
	}
}

// TestUnprivileged runs commands as 65534 and checks identity, groups,
// umask and environment are exactly what Unprivileged promises.
func TestUnprivileged(t *testing.T) {
	RequireSetpriv(t)
	if got := strings.TrimSpace(RunAs65534(t, "/", nil, "id", "-u")); got != "65534" {
		t.Errorf("id -u = %q, want 65534", got)
	}
	if got := strings.TrimSpace(RunAs65534(t, "/", nil, "id", "-G")); got != "65534" {
		t.Errorf("id -G = %q, want only 65534", got)
	}
	if got := strings.TrimSpace(RunAs65534(t, "/", nil, "sh", "-c", "umask")); got != "0077" {
		t.Errorf("umask = %q, want 0077", got)
	}
	env := []string{"PATH=/usr/bin:/bin", "STAMP_X=1"}
	got := strings.Fields(RunAs65534(t, "/", env, "env"))
	slices.Sort(got)
	if !slices.Equal(got, []string{"PATH=/usr/bin:/bin", "PWD=/", "STAMP_X=1"}) {
		t.Errorf("environment = %q, want only PATH, PWD and STAMP_X", got)
	}

	// Context, Dir and stdio of the original command are kept.
	dir := TempDirFor65534(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", "echo made > f; pwd")
	cmd.Dir = dir
	out, err := Unprivileged(cmd).Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(out)) != dir {
		t.Errorf("pwd = %q, want %q", out, dir)
	}
	fi, err := os.Stat(filepath.Join(dir, "f"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file made under umask 077 has mode %v", fi.Mode())
	}

	// A directory 65534 cannot write stays unwritable: the switch is real.
	cmd = exec.Command("sh", "-c", "echo x > /root/stamp-should-fail")
	if err := Unprivileged(cmd).Run(); err == nil {
		os.Remove("/root/stamp-should-fail")
		t.Error("uid 65534 could write /root")
	}
}

func TestRequireToolsFails(t *testing.T) {
	ft := &fakeTB{TB: t}
	func() {
		defer func() { _ = recover() }()
		RequireTools(ft, "sh", "stamp-no-such-tool")
	}()
	if !strings.Contains(ft.msg, "stamp-no-such-tool") || !strings.Contains(ft.msg, "deps.sh") || strings.Contains(ft.msg, " sh ") {
		t.Errorf("RequireTools message = %q", ft.msg)
	}
	if p := RequireTools(t, "e2fsck"); !strings.HasSuffix(p[0], "/e2fsck") {
		t.Errorf("e2fsck found at %q", p[0])
	}
}

// fakeTB records a Fatalf instead of ending the real test.
type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}

// TestDeps keeps DepsTools and test/scripts/deps.sh in step: after deps.sh
// every tool Deps asks for is there.
func TestDeps(t *testing.T) {
	Deps(t)
}
