package rootfs

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

var epoch = time.Unix(1700000000, 0).UTC()

type member struct {
	name, link, body string
	typ              byte
	mode             int64
	uid, gid         int
	major, minor     int64
	pax              map[string]string
}

func mktar(t testing.TB, ms ...member) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		h := &tar.Header{Name: m.name, Linkname: m.link, Typeflag: m.typ, Mode: m.mode, Uid: m.uid, Gid: m.gid,
			Size: int64(len(m.body)), ModTime: epoch, Devmajor: m.major, Devminor: m.minor, PAXRecords: m.pax, Format: tar.FormatPAX}
		if m.typ == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(m.body))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// sandbox makes a tree inside a directory next to a sentinel "outside"
// directory, so a test can prove nothing was written outside.
func sandbox(t *testing.T) (*Tree, string) {
	t.Helper()
	base := t.TempDir()
	outside := filepath.Join(base, "outside")
	os.MkdirAll(outside, 0o755)
	os.WriteFile(filepath.Join(outside, "keep"), []byte("original"), 0o644)
	tr, err := New(filepath.Join(base, "tree"), Options{DefaultMTime: epoch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr, outside
}

func extract(t *testing.T, tr *Tree, o ExtractOptions, ms ...member) error {
	t.Helper()
	_, err := Extract(context.Background(), tr, bytes.NewReader(mktar(t, ms...)), o)
	return err
}

func assertOutsideUntouched(t *testing.T, outside string) {
	t.Helper()
	ents, _ := os.ReadDir(outside)
	if len(ents) != 1 {
		t.Fatalf("outside dir has %d entries, want only 'keep'", len(ents))
	}
	b, _ := os.ReadFile(filepath.Join(outside, "keep"))
	if string(b) != "original" {
		t.Fatalf("outside file changed: %q", b)
	}
	base := filepath.Dir(outside)
	ents, _ = os.ReadDir(base)
	for _, e := range ents {
		if e.Name() != "outside" && e.Name() != "tree" {
			t.Fatalf("something appeared next to the tree: %s", e.Name())
		}
	}
}

func TestExtractKinds(t *testing.T) {
	tr, _ := sandbox(t)
	err := extract(t, tr, ExtractOptions{Origin: Origin{Layer: "base", Input: "sha256:x"}},
		member{name: "./", typ: tar.TypeDir, mode: 0o755},
		member{name: "./etc/", typ: tar.TypeDir, mode: 0o755},
		member{name: "./etc/passwd", body: "root:x:0:0::/root:/bin/sh\n"},
		member{name: "./etc/shadow", body: "secret", mode: 0o640, gid: 42},
		member{name: "./usr/bin/su", body: "ELF", mode: 0o4755},
		member{name: "./usr/bin/su2", typ: tar.TypeLink, link: "./usr/bin/su"},
		member{name: "./dev/null", typ: tar.TypeChar, mode: 0o666, major: 1, minor: 3},
		member{name: "./dev/sda", typ: tar.TypeBlock, mode: 0o660, major: 8, gid: 6},
		member{name: "./run/initctl", typ: tar.TypeFifo, mode: 0o600},
		member{name: "./bin", typ: tar.TypeSymlink, link: "usr/bin"},
		member{name: "./usr/bin/ping", body: "ping", mode: 0o755, pax: map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"}},
		member{name: "./home/u/", typ: tar.TypeDir, mode: 0o700, uid: 1000, gid: 1000},
	)
	if err != nil {
		t.Fatal(err)
	}
	check := func(p string, typ Type, perm uint32, uid, gid uint32) *Entry {
		t.Helper()
		e := tr.Get(p)
		if e == nil {
			t.Fatalf("%s missing", p)
		}
		if e.Type != typ || e.Perm != perm || e.UID != uid || e.GID != gid {
			t.Fatalf("%s: got %v %o %d:%d", p, e.Type, e.Perm, e.UID, e.GID)
		}
		return e
	}
	check("/etc/shadow", TypeRegular, 0o640, 0, 42)
	su := check("/usr/bin/su", TypeRegular, 0o4755, 0, 0)
	su2 := check("/usr/bin/su2", TypeRegular, 0o4755, 0, 0)
	if su.Inode != su2.Inode || su.Nlink() != 2 {
		t.Fatalf("hard link not shared: nlink %d", su.Nlink())
	}
	d := check("/dev/null", TypeChar, 0o666, 0, 0)
	if d.Major != 1 || d.Minor != 3 {
		t.Fatalf("dev numbers %d,%d", d.Major, d.Minor)
	}
	check("/dev/sda", TypeBlock, 0o660, 0, 6)
	check("/run/initctl", TypeFifo, 0o600, 0, 0)
	check("/home/u", TypeDir, 0o700, 1000, 1000)
	if e := tr.Get("/usr/bin/ping"); e.Xattrs["security.capability"] != "\x01\x00\x00\x02" {
		t.Fatalf("xattr lost: %q", e.Xattrs)
	}
	if e := tr.Get("/etc/passwd"); e.Origin.Member != "etc/passwd" || e.Origin.Layer != "base" || e.Size != 26 {
		t.Fatalf("origin/size: %+v %d", e.Origin, e.Size)
	}
	// On disk, the owner can always read and write whatever the index says.
	fi, _ := os.Stat(tr.DiskPath("/home/u"))
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("disk mode of dir %o", fi.Mode().Perm())
	}
	fi, _ = os.Stat(tr.DiskPath("/etc/shadow"))
	if fi.Mode().Perm() != 0o640 {
		t.Fatalf("disk mode of file %o", fi.Mode().Perm())
	}
	// A write through the /bin symlink lands in /usr/bin.
	if err := extract(t, tr, ExtractOptions{}, member{name: "bin/sh", body: "sh", mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	if tr.Get("/usr/bin/sh") == nil || tr.Get("/bin").Type != TypeSymlink {
		t.Fatal("write through symlinked parent did not resolve in the tree")
	}
}

func TestExtractReplaceSemantics(t *testing.T) {
	tr, _ := sandbox(t)
	err := extract(t, tr, ExtractOptions{},
		member{name: "a", body: "one"},
		member{name: "a", body: "two"},
		member{name: "lib", typ: tar.TypeSymlink, link: "usr/lib"},
		member{name: "usr/lib/", typ: tar.TypeDir, mode: 0o755},
	)
	if err != nil {
		t.Fatal(err)
	}
	if e := tr.Get("/a"); e.Size != 3 {
		t.Fatal("later entry did not replace earlier")
	}
	b, _ := os.ReadFile(tr.DiskPath("/a"))
	if string(b) != "two" {
		t.Fatalf("content %q", b)
	}
	// Default: a directory entry replaces a symlink.
	if err := extract(t, tr, ExtractOptions{}, member{name: "lib/", typ: tar.TypeDir, mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	if tr.Get("/lib").Type != TypeDir {
		t.Fatal("directory did not replace symlink")
	}
	// dpkg mode: the symlink stays and contents go through it.
	tr.Remove("/lib")
	extract(t, tr, ExtractOptions{}, member{name: "lib", typ: tar.TypeSymlink, link: "usr/lib"})
	if err := extract(t, tr, ExtractOptions{KeepDirSymlinks: true},
		member{name: "lib/", typ: tar.TypeDir, mode: 0o755},
		member{name: "lib/libc.so", body: "libc"}); err != nil {
		t.Fatal(err)
	}
	if tr.Get("/lib").Type != TypeSymlink || tr.Get("/usr/lib/libc.so") == nil {
		t.Fatal("keep-dir-symlinks did not keep the symlink")
	}
}

func TestExtractWhiteouts(t *testing.T) {
	tr, _ := sandbox(t)
	extract(t, tr, ExtractOptions{Whiteouts: true},
		member{name: "etc/a", body: "a"}, member{name: "etc/b", body: "b"},
		member{name: "opt/x/1", body: "1"}, member{name: "opt/x/2", body: "2"})
	err := extract(t, tr, ExtractOptions{Whiteouts: true},
		member{name: "etc/.wh.a", body: ""},
		member{name: "opt/x/3", body: "3"},
		member{name: "opt/x/.wh..wh..opq", body: ""})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Get("/etc/a") != nil || tr.Get("/etc/b") == nil {
		t.Fatal("whiteout of etc/a not applied")
	}
	if tr.Get("/opt/x/1") != nil || tr.Get("/opt/x/2") != nil || tr.Get("/opt/x/3") == nil {
		t.Fatalf("opaque whiteout wrong: %v", tr.Children("/opt/x"))
	}
	if tr.Get("/etc/.wh.a") != nil {
		t.Fatal("whiteout marker extracted as a file")
	}
}

func TestExtractHostile(t *testing.T) {
	cases := []struct {
		name    string
		members []member
		wantErr string // "" means: confined, no error
		check   func(*testing.T, *Tree)
	}{
		{name: "dotdot entry", members: []member{{name: "../../outside/evil", body: "x"}}, wantErr: "outside the root"},
		{name: "dotdot in middle", members: []member{{name: "a/../../outside/evil", body: "x"}}, wantErr: "outside the root"},
		{name: "absolute path is confined", members: []member{{name: "/etc/evil", body: "x"}},
			check: func(t *testing.T, tr *Tree) {
				if tr.Get("/etc/evil") == nil {
					t.Fatal("absolute entry not placed inside the tree")
				}
			}},
		{name: "absolute symlink to outside dir then write through it", members: []member{
			{name: "evil", typ: tar.TypeSymlink, link: "OUTSIDE"},
			{name: "evil/keep", body: "pwned"}},
			check: func(t *testing.T, tr *Tree) {
				if tr.Get(tr.mustResolve(t, "OUTSIDE")+"/keep") == nil {
					t.Fatal("write through absolute symlink not confined to the tree")
				}
			}},
		{name: "relative symlink climbing out", members: []member{
			{name: "d/", typ: tar.TypeDir},
			{name: "d/evil", typ: tar.TypeSymlink, link: "../../../../../../outside"},
			{name: "d/evil/keep", body: "pwned"}},
			check: func(t *testing.T, tr *Tree) {
				if tr.Get("/outside/keep") == nil {
					t.Fatal("relative escape not confined at the tree root")
				}
			}},
		{name: "chain of symlinks", members: []member{
			{name: "a", typ: tar.TypeSymlink, link: "b"},
			{name: "b", typ: tar.TypeSymlink, link: "/c"},
			{name: "c", typ: tar.TypeSymlink, link: "../../outside"},
			{name: "a/keep", body: "pwned"}},
			check: func(t *testing.T, tr *Tree) {
				if tr.Get("/outside/keep") == nil {
					t.Fatal("chain not confined")
				}
			}},
		{name: "file replaced by symlink to outside then written again", members: []member{
			{name: "f", body: "one"},
			{name: "f", typ: tar.TypeSymlink, link: "OUTSIDE/keep"},
			{name: "f", body: "two"}},
			check: func(t *testing.T, tr *Tree) {
				if e := tr.Get("/f"); e == nil || e.Type != TypeRegular {
					t.Fatal("file did not replace the symlink")
				}
			}},
		{name: "hard link to outside", members: []member{{name: "h", typ: tar.TypeLink, link: "../outside/keep"}}, wantErr: "outside the root"},
		{name: "hard link through symlink to outside", members: []member{
			{name: "s", typ: tar.TypeSymlink, link: "OUTSIDE"},
			{name: "h", typ: tar.TypeLink, link: "s/keep"}}, wantErr: "does not exist"},
		{name: "symlink loop", members: []member{
			{name: "l1", typ: tar.TypeSymlink, link: "l2"},
			{name: "l2", typ: tar.TypeSymlink, link: "l1"},
			{name: "l1/x", body: "x"}}, wantErr: "too many levels"},
		{name: "path longer than PATH_MAX", members: []member{{name: strings.Repeat("d/", 2100) + "f", body: "x"}}, wantErr: "PATH_MAX"},
		{name: "name longer than NAME_MAX", members: []member{{name: strings.Repeat("n", 300), body: "x"}}, wantErr: "NAME_MAX"},
		{name: "file under a file", members: []member{{name: "f", body: "x"}, {name: "f/g", body: "y"}}, wantErr: "not a directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tr, outside := sandbox(t)
			for i := range c.members {
				c.members[i].link = strings.ReplaceAll(c.members[i].link, "OUTSIDE", outside)
			}
			err := extract(t, tr, ExtractOptions{}, c.members...)
			if c.wantErr != "" {
				var ee *EntryError
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.As(err, &ee) {
					t.Fatalf("err = %v, want an entry error containing %q", err, c.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if c.check != nil {
				c.check(t, tr)
			}
			assertOutsideUntouched(t, outside)
		})
	}
}

func (tr *Tree) mustResolve(t *testing.T, p string) string {
	// OUTSIDE was replaced by the host path, which inside the tree is just a path.
	for _, e := range tr.Entries() {
		if e.Type == TypeSymlink && strings.HasPrefix(e.Target, "/") {
			return e.Target
		}
	}
	t.Fatal("no absolute symlink")
	return ""
}

func TestSealAndManifest(t *testing.T) {
	tr, _ := sandbox(t)
	future := epoch.Add(time.Hour)
	old := epoch.Add(-time.Hour)
	mk := func(p, body string, m time.Time) {
		if _, err := tr.Create(p, Header{Type: TypeRegular, Perm: 0o644, MTime: m}, strings.NewReader(body)); err != nil {
			t.Fatal(err)
		}
	}
	mk("/etc/machine-id", "0123456789abcdef\n", future)
	mk("/etc/ssh/ssh_host_ed25519_key", "k", old)
	mk("/var/log/syslog", "log", old)
	mk("/tmp/junk", "j", old)
	mk("/usr/share/doc/x/README", "doc", old)
	mk("/etc/hostname", "node\n", old)
	_, rep, err := Seal(context.Background(), tr, SealOptions{Epoch: epoch, Cleanup: []string{"/usr/share/doc/**"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"/etc/ssh/ssh_host_ed25519_key", "/var/log/syslog", "/tmp/junk", "/usr/share/doc/x"} {
		if tr.Get(gone) != nil {
			t.Errorf("%s survived sealing", gone)
		}
	}
	for _, kept := range []string{"/tmp", "/var/log", "/usr/share/doc", "/etc/hostname"} {
		if tr.Get(kept) == nil {
			t.Errorf("%s removed by sealing", kept)
		}
	}
	if e := tr.Get("/etc/machine-id"); e == nil || e.Size != 0 {
		t.Fatal("machine-id not emptied")
	}
	if !tr.Get("/etc/hostname").MTime.Equal(old) || !tr.Get("/etc/machine-id").MTime.Equal(epoch) {
		t.Fatal("mtimes not clamped correctly")
	}
	if len(rep.Removed) == 0 {
		t.Fatal("report lists nothing")
	}
	var buf bytes.Buffer
	WriteManifest(&buf, tr.Entries(), true)
	back, err := ParseManifest(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatal(err)
	}
	if Digest(back) != Digest(tr.Entries()) {
		t.Fatalf("manifest round trip changes the digest:\n%s", buf.String())
	}
}

func TestRescanFoldsHookChanges(t *testing.T) {
	tr, _ := sandbox(t)
	tr.Create("/etc/conf", Header{Type: TypeRegular, Perm: 0o644, UID: 5, GID: 6, MTime: epoch}, strings.NewReader("a"))
	tr.Create("/usr/bin/tool", Header{Type: TypeRegular, Perm: 0o4755, MTime: epoch}, strings.NewReader("t"))
	tr.Create("/dev/null", Header{Type: TypeChar, Perm: 0o666, Major: 1, Minor: 3, MTime: epoch}, nil)
	tr.Create("/gone", Header{Type: TypeRegular, Perm: 0o644, MTime: epoch}, strings.NewReader("g"))
	// What a hook would do.
	os.WriteFile(tr.DiskPath("/etc/conf"), []byte("changed"), 0)
	os.WriteFile(tr.DiskPath("/etc/new"), []byte("new"), 0o640)
	os.Chmod(tr.DiskPath("/etc/new"), 0o640)
	os.Chmod(tr.DiskPath("/usr/bin/tool"), 0o700)
	os.Remove(tr.DiskPath("/gone"))
	os.Link(tr.DiskPath("/etc/conf"), tr.DiskPath("/etc/conf.link"))
	ch, err := tr.Rescan(context.Background(), Origin{Layer: "hook"})
	if err != nil {
		t.Fatal(err)
	}
	if e := tr.Get("/etc/conf"); e.Size != 7 || e.UID != 5 || e.GID != 6 || e.Nlink() != 2 {
		t.Fatalf("modified file: %+v nlink %d", e.Inode, e.Nlink())
	}
	if e := tr.Get("/etc/new"); e == nil || e.Perm != 0o640 || e.UID != 0 {
		t.Fatal("new file not indexed with its disk mode and owner 0")
	}
	if e := tr.Get("/usr/bin/tool"); e.Perm != 0o700 {
		t.Fatalf("chmod not folded: %o", e.Perm)
	}
	if e := tr.Get("/dev/null"); e.Type != TypeChar {
		t.Fatal("placeholder lost its device type")
	}
	if tr.Get("/gone") != nil {
		t.Fatal("removed file still indexed")
	}
	if len(ch.Added) != 2 || len(ch.Removed) != 1 {
		t.Fatalf("changes: %+v", ch)
	}
	// Nothing changed: a second rescan finds nothing.
	ch, _ = tr.Rescan(context.Background(), Origin{})
	if len(ch.Added)+len(ch.Modified)+len(ch.Removed) != 0 {
		t.Fatalf("idempotent rescan found %+v", ch)
	}
}

func TestMatch(t *testing.T) {
	cases := []struct {
		pat, p string
		want   bool
	}{
		{"/usr/share/doc/**", "/usr/share/doc", false},
		{"/usr/share/doc/**", "/usr/share/doc/a/b", true},
		{"/etc/ssh/ssh_host_*", "/etc/ssh/ssh_host_rsa_key", true},
		{"/etc/ssh/ssh_host_*", "/etc/ssh/sshd_config", false},
		{"/**/*.pyc", "/usr/lib/a.pyc", true},
		{"/**/*.pyc", "/a.pyc", true},
		{"/usr/*/locale", "/usr/share/locale", true},
	}
	for _, c := range cases {
		if got := Match(c.pat, c.p); got != c.want {
			t.Errorf("Match(%q, %q) = %v", c.pat, c.p, got)
		}
	}
}

// FuzzExtract feeds arbitrary bytes to the extractor: it must never panic and
// never write outside the tree.
func FuzzExtract(f *testing.F) {
	f.Add(mktar(f, member{name: "a/b", body: "x"}, member{name: "l", typ: tar.TypeSymlink, link: "/a"}, member{name: "l/c", body: "y"}))
	f.Add(mktar(f, member{name: "../x", body: "x"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		base, err := os.MkdirTemp("", "fuzz-extract-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(base)
		tr, err := New(filepath.Join(base, "tree"), Options{DefaultMTime: epoch})
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		opts := ExtractOptions{Whiteouts: len(data)%2 == 0, MaxSize: 1 << 20}
		if len(data)%3 == 0 {
			// Into a snapshot's directory, as containerd unpacks a layer:
			// nothing may land outside it.
			if _, err := tr.Create("/snap", Header{Type: TypeDir, Perm: 0o755, MTime: epoch}, nil); err != nil {
				t.Fatal(err)
			}
			opts = ExtractOptions{Snapshot: &Snapshot{Dir: "/snap", Overlay: len(data)%2 == 0}, MaxSize: 1 << 20}
		}
		_, err = Extract(context.Background(), tr, bytes.NewReader(data), opts)
		if opts.Snapshot != nil {
			for _, p := range tr.Paths() {
				if p != "/" && p != "/snap" && !strings.HasPrefix(p, "/snap/") {
					t.Fatalf("%s is outside the snapshot's directory", p)
				}
			}
		}
		ents, _ := os.ReadDir(base)
		if len(ents) != 1 {
			t.Fatalf("extractor wrote next to the tree: %v", ents)
		}
		fuzzByReference(t, data, opts, tr, err)
	})
}

// fuzzByReference extracts data again by reference and holds the result to
// the written tree's: the same outcome, index and contents, and after
// materializing, a directory a rescan finds nothing to change in.
func fuzzByReference(t *testing.T, data []byte, opts ExtractOptions, written *Tree, werr error) {
	base, err := os.MkdirTemp("", "fuzz-extract-ref-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	tr, err := New(filepath.Join(base, "tree"), Options{DefaultMTime: epoch, ContentDir: filepath.Join(base, "content")})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if opts.Snapshot != nil {
		if _, err := tr.Create(opts.Snapshot.Dir, Header{Type: TypeDir, Perm: 0o755, MTime: epoch}, nil); err != nil {
			t.Fatal(err)
		}
	}
	opts.ByReference = true
	_, err = Extract(context.Background(), tr, bytes.NewReader(data), opts)
	if (err == nil) != (werr == nil) {
		t.Fatalf("written: %v; by reference: %v", werr, err)
	}
	if err != nil {
		return
	}
	if got, want := manifestOf(t, tr), manifestOf(t, written); got != want {
		t.Fatalf("manifests differ:\n%s\nwant\n%s", got, want)
	}
	for _, p := range written.Paths() {
		if written.Get(p).Type == TypeRegular && !bytes.Equal(readAll(t, tr, p), readAll(t, written, p)) {
			t.Fatalf("%s: content differs", p)
		}
	}
	if err := tr.Materialize(context.Background()); err != nil {
		t.Fatal(err)
	}
	ch, err := tr.Rescan(context.Background(), Origin{})
	if err != nil {
		t.Fatal(err)
	}
	if len(ch.Added)+len(ch.Modified)+len(ch.Removed) != 0 {
		t.Fatalf("the rescan after materializing found changes: %+v", ch)
	}
}

func TestSparseContentStaysSparse(t *testing.T) {
	tr, _ := sandbox(t)
	data := make([]byte, 3<<20)
	copy(data[0:], "head")
	copy(data[1<<20+5:], "middle")
	e, err := tr.Create("/sparse", Header{Type: TypeRegular, Perm: 0o644, MTime: epoch}, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(tr.DiskPath("/sparse"))
	if !bytes.Equal(got, data) || e.Size != int64(len(data)) {
		t.Fatal("sparse file content differs")
	}
	var st syscall.Stat_t
	syscall.Stat(tr.DiskPath("/sparse"), &st)
	if st.Blocks*512 >= int64(len(data))/2 {
		t.Fatalf("file takes %d bytes on disk; holes were written", st.Blocks*512)
	}
}

// Small files are written by the pool's workers while the extractor goes on;
// every later entry that touches one of them must see it finished.
func TestExtractQueuedWritesAgreeWithLaterEntries(t *testing.T) {
	tr, _ := sandbox(t)
	var ms []member
	for i := range 200 {
		ms = append(ms, member{name: "d" + string(rune('a'+i%7)) + "/f" + strings.Repeat("x", i%13) + string(rune('0'+i%10)), body: strings.Repeat("y", i*37)})
	}
	ms = append(ms,
		member{name: "q/a", body: "first"},
		member{name: "q/b", typ: tar.TypeLink, link: "q/a"},
		member{name: "q/c", body: "replaced"},
		member{name: "q/c", body: "final"},
		member{name: "q/d", body: "becomes a dir"},
		member{name: "q/d/", typ: tar.TypeDir, mode: 0o755},
		member{name: "q/d/e", body: "inside"},
	)
	if err := extract(t, tr, ExtractOptions{}, ms...); err != nil {
		t.Fatal(err)
	}
	for _, p := range tr.Paths() {
		e := tr.Get(p)
		if e.Type != TypeRegular {
			continue
		}
		b, err := os.ReadFile(tr.DiskPath(p))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(b); e.Digest != hex.EncodeToString(sum[:]) || e.Size != int64(len(b)) {
			t.Fatalf("%s: index says %d bytes %s, disk holds %d bytes %x", p, e.Size, e.Digest, len(b), sum)
		}
	}
	if a, b := tr.Get("/q/a"), tr.Get("/q/b"); a.Inode != b.Inode || a.Nlink() != 2 {
		t.Fatal("hard link to a queued file lost")
	}
	if e := tr.Get("/q/c"); e.Size != int64(len("final")) {
		t.Fatal("later entry did not replace a queued one")
	}
	if tr.Get("/q/d").Type != TypeDir || tr.Get("/q/d/e") == nil {
		t.Fatal("directory did not replace a queued file")
	}
}

// A queued write that fails is reported with its own entry's name, even when
// the extractor has moved past it, and leaves no index entry behind.
func TestExtractQueuedWriteFailureNamesItsEntry(t *testing.T) {
	tr, _ := sandbox(t)
	if err := extract(t, tr, ExtractOptions{}, member{name: "dir/", typ: tar.TypeDir, mode: 0o755}); err != nil {
		t.Fatal(err)
	}
	// Something the index does not know is in the way of the create.
	if err := os.WriteFile(filepath.Join(tr.Dir(), "dir", "stray"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	err := extract(t, tr, ExtractOptions{},
		member{name: "dir/stray", body: "content"},
		member{name: "dir/after", body: "more"},
	)
	var ee *EntryError
	if !errors.As(err, &ee) || ee.Name != "dir/stray" {
		t.Fatalf("error %v, want one naming dir/stray", err)
	}
	if tr.Get("/dir/stray") != nil {
		t.Fatal("the failed file is still in the index")
	}
}

// A layer unpacked into a snapshot's directory stays inside it and is
// converted as containerd's overlayfs applier converts it.
func TestExtractSnapshot(t *testing.T) {
	tr, err := New(t.TempDir(), Options{DefaultMTime: epoch})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, d := range []string{"/etc", "/snap", "/snap/1", "/snap/2"} {
		if _, err := tr.Create(d, Header{Type: TypeDir, Perm: 0o755, MTime: epoch}, nil); err != nil {
			t.Fatal(err)
		}
	}
	lower := mktar(t,
		member{name: "./", typ: tar.TypeDir, mode: 0o700},
		member{name: "usr/", typ: tar.TypeDir, mode: 0o750, uid: 4, gid: 4, pax: map[string]string{"SCHILY.xattr.user.a": "1", "SCHILY.xattr.trusted.b": "2"}},
		member{name: "abs", typ: tar.TypeSymlink, link: "/etc"},
		member{name: "up", typ: tar.TypeSymlink, link: "../../.."},
		member{name: "abs/inside", body: "stays in the snapshot"},
		member{name: "up/inside2", body: "stays too"},
		member{name: "gone", body: "x"},
		member{name: ".wh.gone"},
	)
	if _, err := Extract(context.Background(), tr, bytes.NewReader(lower), ExtractOptions{Snapshot: &Snapshot{Dir: "/snap/1"}}); err != nil {
		t.Fatal(err)
	}
	parent := func(dir string) (Header, bool) {
		e := tr.Get("/snap/1" + dir)
		if e == nil {
			return Header{}, false
		}
		return Header{Perm: e.Perm, UID: e.UID, GID: e.GID, MTime: e.MTime, Xattrs: map[string]string{"user.a": e.Xattrs["user.a"]}}, true
	}
	upper := mktar(t,
		member{name: "usr/lib/x", body: "x"},
		member{name: "usr/.wh.gone", uid: 7, gid: 7},
		member{name: "opq/", typ: tar.TypeDir, mode: 0o755},
		member{name: "opq/.wh..wh..opq"},
		member{name: "f", body: "f", mode: 0o600},
		member{name: "g", typ: tar.TypeLink, link: "f", mode: 0o640, uid: 3, gid: 3},
	)
	if _, err := Extract(context.Background(), tr, bytes.NewReader(upper), ExtractOptions{Snapshot: &Snapshot{Dir: "/snap/2", Overlay: true, Parent: parent}}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{
		"/snap/1":                  "dir 755 0:0",
		"/snap/1/usr":              "dir 750 4:4 user.a=1",
		"/snap/1/etc/inside":       "file 644 0:0",
		"/snap/1/inside2":          "file 644 0:0",
		"/snap/1/gone":             "",
		"/etc/inside":              "",
		"/snap/2/usr":              "dir 750 4:4 user.a=1",
		"/snap/2/usr/lib":          "dir 755 0:0",
		"/snap/2/usr/gone":         "char 0 7:7 0,0",
		"/snap/2/opq":              "dir 755 0:0 trusted.overlay.opaque=y",
		"/snap/2/opq/.wh..wh..opq": "",
		"/snap/2/f":                "file 640 3:3",
		"/snap/2/g":                "file 640 3:3",
	} {
		got := ""
		if e := tr.Get(p); e != nil {
			got = fmt.Sprintf("%s %o %d:%d", e.Type, e.Perm, e.UID, e.GID)
			if e.Type == TypeChar {
				got += fmt.Sprintf(" %d,%d", e.Major, e.Minor)
			}
			for _, n := range e.XattrNames() {
				got += " " + n + "=" + e.Xattrs[n]
			}
		}
		if got != want {
			t.Errorf("%s: %q, want %q", p, got, want)
		}
	}
	// A whiteout of what the layer itself made fails, as containerd's
	// mknod does.
	bad := mktar(t, member{name: "w", body: "w"}, member{name: ".wh.w"})
	if _, err := Extract(context.Background(), tr, bytes.NewReader(bad), ExtractOptions{Snapshot: &Snapshot{Dir: "/snap/2", Overlay: true}}); err == nil {
		t.Error("a whiteout of the layer's own file was accepted")
	}
}

// An image layer unpacked by reference into a snapshot leaves its
// directories and symlinks in the index until something needs them on
// disk, and indexes what an unpack that writes everything does.
func TestExtractSnapshotByReferenceDefersDirs(t *testing.T) {
	layer := mktar(t,
		member{name: "./", typ: tar.TypeDir, mode: 0o755},
		member{name: "usr/", typ: tar.TypeDir, mode: 0o755},
		member{name: "usr/lib/", typ: tar.TypeDir, mode: 0o750},
		member{name: "usr/lib/libx.so.1", body: "elf"},
		member{name: "usr/lib/libx.so", typ: tar.TypeSymlink, link: "libx.so.1"},
		member{name: "usr/share/", typ: tar.TypeDir, mode: 0o755},
		member{name: "usr/share/doc/", typ: tar.TypeDir, mode: 0o755},
		member{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
		member{name: "gone/", typ: tar.TypeDir, mode: 0o755},
		member{name: "gone/sub/", typ: tar.TypeDir, mode: 0o755},
		member{name: ".wh.gone"},
	)
	unpack := func(tr *Tree) {
		t.Helper()
		for _, d := range []string{"/snap", "/snap/1"} {
			if _, err := tr.Create(d, Header{Type: TypeDir, Perm: 0o755, MTime: epoch}, nil); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := Extract(context.Background(), tr, bytes.NewReader(layer), ExtractOptions{ByReference: true, Snapshot: &Snapshot{Dir: "/snap/1"}}); err != nil {
			t.Fatal(err)
		}
	}
	written, err := New(t.TempDir(), Options{DefaultMTime: epoch})
	if err != nil {
		t.Fatal(err)
	}
	defer written.Close()
	unpack(written)
	base := t.TempDir()
	byRef, err := New(filepath.Join(base, "tree"), Options{DefaultMTime: epoch, ContentDir: filepath.Join(base, "content")})
	if err != nil {
		t.Fatal(err)
	}
	defer byRef.Close()
	unpack(byRef)
	if got, want := manifestOf(t, byRef), manifestOf(t, written); got != want {
		t.Fatalf("manifests differ:\n%s\nwant\n%s", got, want)
	}
	for _, p := range []string{"/snap/1/usr", "/snap/1/bin", "/snap/1/gone"} {
		if _, err := os.Lstat(filepath.Join(byRef.Dir(), p)); !os.IsNotExist(err) {
			t.Errorf("%s is on disk before anything needs it: %v", p, err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(byRef.Dir(), "/snap/1")); err != nil || !fi.IsDir() {
		t.Fatalf("the snapshot's own directory: %v", err)
	}
	// A file made later below a directory of the layer makes it.
	if _, err := byRef.Create("/snap/1/usr/share/doc/x", Header{Type: TypeRegular, Perm: 0o644, MTime: epoch}, strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(byRef.Dir(), "/snap/1/usr/share/doc")); err != nil || !fi.IsDir() {
		t.Fatalf("the directory of a new file: %v", err)
	}
	if err := byRef.Materialize(context.Background()); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(filepath.Join(byRef.Dir(), "/snap/1/usr/lib/libx.so")); err != nil || target != "libx.so.1" {
		t.Fatalf("the layer's symlink once materialized: %q, %v", target, err)
	}
	if ch, err := byRef.Rescan(context.Background(), Origin{Layer: "test"}); err != nil || len(ch.Added)+len(ch.Modified)+len(ch.Removed) > 0 {
		t.Fatalf("the materialized directory differs from its index: %+v, %v", ch, err)
	}
}
