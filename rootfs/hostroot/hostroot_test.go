package hostroot

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

var epoch = time.Unix(1700000000, 0)

// makeRoot writes a small root with what apply must keep: a hard-link
// pair, a symlink, a setuid file, an xattr, a read-only directory and
// distinct nanosecond mtimes.
func makeRoot(t *testing.T) string {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	// Its read-only directory would keep an unprivileged TempDir from
	// removing it.
	t.Cleanup(func() { removeScratch(root) })
	files := map[string]string{
		"etc/passwd":                "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":                 "root:x:0:\n",
		"etc/hostname":              "old\n",
		"etc/motd":                  "welcome\n",
		"usr/bin/tool":              "#!/bin/sh\n",
		"usr/share/doc/x/copyright": "doc\n",
		"opt/ro/f":                  "read-only dir\n",
		"usr/lib/os-release":        "ID=test\n",
	}
	for p, c := range files {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755))
		must(t, os.WriteFile(filepath.Join(root, p), []byte(c), 0o644))
	}
	must(t, os.Chmod(filepath.Join(root, "usr/bin/tool"), os.ModeSetuid|0o755))
	must(t, os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool-link")))
	must(t, os.Symlink("../usr/lib/os-release", filepath.Join(root, "etc/os-release")))
	must(t, unix.Lsetxattr(filepath.Join(root, "etc/hostname"), "user.stamp.test", []byte{0, 1, 0xff}, 0))
	must(t, os.Chmod(filepath.Join(root, "opt/ro"), 0o555))
	var paths []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	})
	// Deepest first, so a directory's mtime is set after its children.
	sort.Sort(sort.Reverse(sort.StringSlice(paths)))
	for i, p := range paths {
		ns := int64(1600000000e9) + int64(i)*1000003
		ts := []unix.Timespec{unix.NsecToTimespec(ns), unix.NsecToTimespec(ns)}
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
	}
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// change is a Run that does what a recipe's layers would: replaces a file
// with another mode, breaks a hard link, adds a directory, a file and a
// symlink, and removes a directory with its file and a file from a
// read-only directory.
func change(t *testing.T) func(context.Context, *rootfs.Tree) error {
	return func(_ context.Context, tree *rootfs.Tree) error {
		rootfstest.File(t, tree, "/etc/hostname", 0o640, epoch, "applied\n")
		rootfstest.File(t, tree, "/usr/bin/tool-link", 0o755, epoch, "#!/bin/sh\necho replaced\n")
		rootfstest.Dir(t, tree, "/var/lib/kubelet", 0o700, epoch)
		rootfstest.File(t, tree, "/etc/motd.d/new", 0o644, epoch, "new\n")
		rootfstest.Symlink(t, tree, "/usr/local/bin/k", "/usr/bin/tool", epoch)
		for _, p := range []string{"/usr/share/doc/x", "/opt/ro/f"} {
			if err := tree.Remove(p); err != nil {
				return err
			}
		}
		return nil
	}
}

func options(t *testing.T, dryRun bool) Options {
	return Options{Recipe: "test", RecipeDigest: "sha256:0", Epoch: epoch, DryRun: dryRun, WorkDir: t.TempDir(), Run: change(t)}
}

// listing is one line per path of root with everything apply may change:
// type, mode, owner, mtime to the nanosecond, content digest, symlink
// target, device numbers, xattrs and hard-link group.
func listing(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	first := map[uint64]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		rel := "/" + strings.TrimPrefix(strings.TrimPrefix(p, root), "/")
		fmt.Fprintf(&b, "%q mode=%07o owner=%d:%d mtime=%d.%09d", rel, st.Mode, st.Uid, st.Gid, st.Mtim.Sec, st.Mtim.Nsec)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			data, err := os.ReadFile(p)
			must(t, err)
			fmt.Fprintf(&b, " sha256=%x", sha256.Sum256(data))
			if st.Nlink > 1 {
				if f, ok := first[st.Ino]; ok {
					fmt.Fprintf(&b, " link=%s", f)
				}
				first[st.Ino] = rel
				fmt.Fprintf(&b, " nlink=%d", st.Nlink)
			}
		case unix.S_IFLNK:
			target, _ := os.Readlink(p)
			fmt.Fprintf(&b, " target=%q", target)
		case unix.S_IFCHR, unix.S_IFBLK:
			fmt.Fprintf(&b, " dev=%d,%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		x, err := readXattrs(p)
		must(t, err)
		for _, n := range slices.Sorted(maps.Keys(x)) {
			fmt.Fprintf(&b, " xattr.%s=%x", n, x[n])
		}
		b.WriteString("\n")
		return nil
	})
	must(t, err)
	return b.String()
}

// apply applies change to a fresh root and returns it with its listing
// from before.
func apply(t *testing.T) (root, orig string, p *Plan) {
	t.Helper()
	root = makeRoot(t)
	orig = listing(t, root)
	p, err := Apply(context.Background(), root, options(t, false))
	if err != nil {
		t.Fatal(err)
	}
	return root, orig, p
}

func TestApplyThenUndo(t *testing.T) {
	root, orig, p := apply(t)
	kinds := map[string]string{}
	for _, ch := range p.Changes {
		kinds[ch.Path] = ch.Kind
	}
	for path, kind := range map[string]string{"/etc/hostname": "replaced", "/usr/bin/tool-link": "replaced", "/usr/bin/tool": "replaced",
		"/var/lib/kubelet": "added", "/usr/local/bin/k": "added", "/usr/share/doc/x/copyright": "removed", "/opt/ro/f": "removed"} {
		if kinds[path] != kind {
			t.Errorf("%s: %q in the plan, want %s", path, kinds[path], kind)
		}
	}
	if kinds["/etc/os-release"] != "" || kinds["/usr/lib/os-release"] != "" {
		t.Errorf("untouched paths in the plan: %v", kinds)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/hostname")); string(b) != "applied\n" {
		t.Errorf("/etc/hostname after apply: %q", b)
	}
	if _, err := Apply(context.Background(), root, options(t, false)); err == nil || !strings.Contains(err.Error(), "already holds") {
		t.Errorf("a second apply: %v", err)
	}
	res, err := Undo(context.Background(), root, UndoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Recipe != "test" || res.Restored != 6 {
		t.Errorf("undo result %+v", res)
	}
	if got := listing(t, root); got != orig {
		t.Fatalf("undo did not give the root back:\n--- before apply\n%s--- after undo\n%s", orig, got)
	}
	if _, err := Undo(context.Background(), root, UndoOptions{}); err == nil || !strings.Contains(err.Error(), "nothing to undo") {
		t.Errorf("a second undo: %v", err)
	}
}

// A dry run changes nothing and plans what apply then does.
func TestDryRunPlansWhatApplyDoes(t *testing.T) {
	root := makeRoot(t)
	orig := listing(t, root)
	dry, err := Apply(context.Background(), root, options(t, true))
	if err != nil {
		t.Fatal(err)
	}
	if got := listing(t, root); got != orig {
		t.Fatalf("a dry run changed the root")
	}
	real, err := Apply(context.Background(), root, options(t, false))
	if err != nil {
		t.Fatal(err)
	}
	dry.DryRun = false
	var a, b strings.Builder
	must(t, dry.WriteJSON(&a))
	must(t, real.WriteJSON(&b))
	if a.String() != b.String() {
		t.Errorf("the dry run's plan is not apply's:\n%s\n---\n%s", a.String(), b.String())
	}
}

// The plan and the record write an entry as version 1 of the record has it,
// and read it back the same.
func TestEntryJSON(t *testing.T) {
	in := &rootfs.Inode{Type: rootfs.TypeRegular, Perm: 0o4755, UID: 1, GID: 2, MTime: time.Unix(1600000000, 5),
		Size: 3, Digest: strings.Repeat("ab", 32), Xattrs: map[string]string{"user.a": "\x00\xff"}}
	ch := Change{Path: "/a", Kind: "removed", Before: &Entry{Entry: &rootfs.Entry{Path: "/a", Inode: in}, Links: []string{"/b"}}}
	b, err := json.Marshal(ch)
	must(t, err)
	want := `{"path":"/a","kind":"removed","before":{"type":"file","mode":"4755","uid":1,"gid":2,"mtime":1600000000,"mtimeNsec":5,` +
		`"size":3,"sha256":"` + strings.Repeat("ab", 32) + `","xattrs":{"user.a":"AP8="},"links":["/b"]}}`
	if string(b) != want {
		t.Errorf("JSON:\n%s\nwant\n%s", b, want)
	}
	var back Change
	must(t, json.Unmarshal(b, &back))
	b2, _ := json.Marshal(back)
	if string(b2) != want {
		t.Errorf("read back:\n%s", b2)
	}
}

// The scan reads what the disk holds and nothing else: hard-link groups,
// symlink targets, xattrs, modes, nanosecond mtimes, and (as root) device
// numbers and owners.
func TestScan(t *testing.T) {
	root := makeRoot(t)
	if os.Geteuid() == 0 {
		must(t, unix.Mknod(filepath.Join(root, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		must(t, os.Lchown(filepath.Join(root, "etc/motd"), 7, 8))
	}
	entries, err := Scan(context.Background(), root, nil, "")
	must(t, err)
	m := byPath(entries)
	if e := m["/usr/bin/tool"]; e == nil || e.Perm != 0o4755 || strings.Join(e.Links, ",") != "/usr/bin/tool-link" {
		t.Errorf("/usr/bin/tool: %+v", e)
	}
	if e := m["/etc/os-release"]; e == nil || e.Type != rootfs.TypeSymlink || e.Target != "../usr/lib/os-release" {
		t.Errorf("/etc/os-release: %+v", e)
	}
	if e := m["/etc/hostname"]; e == nil || e.Xattrs["user.stamp.test"] != "\x00\x01\xff" || e.Digest != fmt.Sprintf("%x", sha256.Sum256([]byte("old\n"))) {
		t.Errorf("/etc/hostname: %+v", e)
	}
	if os.Geteuid() == 0 {
		if e := m["/null"]; e == nil || e.Type != rootfs.TypeChar || e.Major != 1 || e.Minor != 3 {
			t.Errorf("/null: %+v", e)
		}
		if e := m["/etc/motd"]; e == nil || e.UID != 7 || e.GID != 8 {
			t.Errorf("/etc/motd: %+v", e)
		}
	}
	for i := 1; i < len(entries); i++ {
		if entries[i-1].Path >= entries[i].Path {
			t.Errorf("not in byte order: %s, %s", entries[i-1].Path, entries[i].Path)
		}
	}
}

// A directory the recipe replaces with a file or a symlink comes back with
// what it held: undo removes the file first, and the paths below it are
// not "through a file" to the checks, only not there yet.
func TestUndoDirReplacedByFile(t *testing.T) {
	for name, make := range map[string]func(*rootfs.Tree){
		"file":    func(tree *rootfs.Tree) { rootfstest.File(t, tree, "/usr/share/doc/x", 0o644, epoch, "a file now\n") },
		"symlink": func(tree *rootfs.Tree) { rootfstest.Symlink(t, tree, "/usr/share/doc/x", "/etc", epoch) },
	} {
		t.Run(name, func(t *testing.T) {
			root := makeRoot(t)
			orig := listing(t, root)
			o := options(t, false)
			o.Run = func(_ context.Context, tree *rootfs.Tree) error {
				if err := tree.Remove("/usr/share/doc/x"); err != nil {
					return err
				}
				make(tree)
				return nil
			}
			if _, err := Apply(context.Background(), root, o); err != nil {
				t.Fatal(err)
			}
			if _, err := Undo(context.Background(), root, UndoOptions{}); err != nil {
				t.Fatal(err)
			}
			if got := listing(t, root); got != orig {
				t.Fatalf("undo did not give the root back:\n%s---\n%s", orig, got)
			}
		})
	}
}
