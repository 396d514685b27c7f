package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/test/harness"
)

// stamp apply changes an existing root in place: the layers' files appear
// with the modes and owners the recipe says, and what was there keeps its
// own metadata.
func TestApplyToExistingRoot(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	writeFiles(t, root, map[string]string{
		"etc/passwd":      "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":       "root:x:0:\n",
		"usr/bin/tool.sh": "#!/bin/sh\n",
		"usr/share/doc/x": "doc\n",
	})
	os.Chmod(filepath.Join(root, "usr/bin/tool.sh"), os.ModeSetuid|0o755)
	os.Chmod(filepath.Join(root, "etc"), 0o751)
	recipe := `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: apply
epoch: 1700000000
base: {tarball: ./unused.tar}
customize:
  layers:
    - files: [{path: /etc/hostname, content: "applied\n", mode: "0640", owner: "0:42"}]
    - mkdir: [{path: /var/lib/kubelet, mode: "0700"}]
    - remove: ["/usr/share/doc/**"]
    - groups: [{name: docker, gid: 998}]
`
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe})
	stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", filepath.Join(dir, "cache")).mustSucceed(t)
	fi, err := os.Stat(filepath.Join(root, "etc/hostname"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 || fi.ModTime().Unix() != 1700000000 {
		t.Errorf("/etc/hostname: mode %v mtime %v", fi.Mode(), fi.ModTime())
	}
	if uid, gid := owner(t, filepath.Join(root, "etc/hostname")); os.Geteuid() == 0 && (uid != 0 || gid != 42) {
		t.Errorf("/etc/hostname owner %d:%d", uid, gid)
	}
	if fi, _ := os.Stat(filepath.Join(root, "var/lib/kubelet")); fi == nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("/var/lib/kubelet: %v", fi)
	}
	if fi, _ := os.Stat(filepath.Join(root, "usr/bin/tool.sh")); fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("existing setuid file lost its mode: %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(root, "etc")); fi.Mode().Perm() != 0o751 {
		t.Errorf("existing /etc mode changed: %v", fi.Mode())
	}
	if _, err := os.Stat(filepath.Join(root, "usr/share/doc/x")); err == nil {
		t.Error("remove layer not applied")
	}
	b, _ := os.ReadFile(filepath.Join(root, "etc/group"))
	if string(b) != "root:x:0:\ndocker:x:998:\n" {
		t.Errorf("/etc/group = %q", b)
	}
}

func owner(t *testing.T, p string) (uint32, uint32) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}

// applyRecipe touches every kind of change apply reports: a replaced file
// with new mode and owner, added files, directories and symlinks, removals,
// users and groups, enabled and masked units, a hard link broken apart, a
// removal inside a read-only directory, and a hook that appends to a file
// in place (which must never reach the root in a dry run).
const applyRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: apply
epoch: 1700000000
base: {tarball: ./unused.tar}
customize:
  layers:
    - files:
        - {path: /etc/hostname, content: "applied\n", mode: "0640", owner: "0:42"}
        - {path: /etc/motd.d/new, content: "new\n", mode: "0644"}
        - {path: /usr/bin/tool-link, content: "#!/bin/sh\necho replaced\n", mode: "0755"}
    - symlink: {path: /usr/local/bin/k, target: /usr/bin/tool}
    - mkdir: [{path: /var/lib/kubelet, mode: "0700"}]
    - remove: ["/usr/share/doc/**", "/opt/ro/f"]
    - groups: [{name: docker, gid: 998}]
    - users: [{name: capi, uid: 1000, groups: [sudo, docker], shell: /bin/sh}]
    - systemd: {enable: [foo.service], mask: [bar.service]}
    - hook: ./hooks/motd.sh
`

// makeApplyRoot writes a small root with what a real one has that a naive
// copy would lose: setuid bits, hard links, symlinks, xattrs, read-only
// directories and files, nanosecond mtimes, and (as root) device nodes,
// fifos and foreign owners.
func makeApplyRoot(t *testing.T, root string) {
	t.Helper()
	writeFiles(t, root, map[string]string{
		"etc/passwd":                         "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":                          "root:x:0:\nsudo:x:27:\n",
		"etc/shadow":                         "root:*:19000:0:99999:7:::\n",
		"etc/gshadow":                        "root:*::\nsudo:*::\n",
		"etc/hostname":                       "old\n",
		"etc/motd":                           "welcome\n",
		"etc/skel/.profile":                  "# profile\n",
		"etc/systemd/system/foo.service":     "[Unit]\nDescription=foo\n[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n",
		"usr/lib/systemd/system/bar.service": "[Unit]\nDescription=bar\n[Service]\nExecStart=/bin/true\n",
		"usr/bin/tool":                       "#!/bin/sh\n",
		"usr/share/doc/x/copyright":          "doc\n",
		"opt/ro/f":                           "read-only dir\n",
		"opt/ro/keep":                        "kept\n",
		"usr/lib/os-release":                 "ID=test\n",
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(filepath.Join(root, "usr/bin/tool"), os.ModeSetuid|0o755))
	must(os.Link(filepath.Join(root, "usr/bin/tool"), filepath.Join(root, "usr/bin/tool-link")))
	must(os.Symlink("../usr/lib/os-release", filepath.Join(root, "etc/os-release")))
	must(os.Chmod(filepath.Join(root, "etc/shadow"), 0o640))
	must(os.Chmod(filepath.Join(root, "usr/lib/os-release"), 0o444))
	must(unix.Lsetxattr(filepath.Join(root, "etc/hostname"), "user.stamp.test", []byte{0, 1, 0xff}, 0))
	must(unix.Lsetxattr(filepath.Join(root, "usr/bin/tool"), "user.other", []byte("v"), 0))
	must(os.Chmod(filepath.Join(root, "opt/ro"), 0o555))
	must(os.Chmod(filepath.Join(root, "etc"), 0o751))
	if os.Geteuid() == 0 {
		must(unix.Mknod(filepath.Join(root, "null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		must(unix.Mkfifo(filepath.Join(root, "fifo"), 0o600))
		must(os.Lchown(filepath.Join(root, "etc/shadow"), 0, 42))
		must(os.Lchown(filepath.Join(root, "etc/motd"), 7, 8))
		must(unix.Lsetxattr(filepath.Join(root, "usr/bin/tool"), "trusted.stamp", []byte("t"), 0))
	}
	// Distinct nanosecond mtimes, so a restore that rounds or forgets shows.
	i := int64(0)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		must(err)
		i++
		ts := []unix.Timespec{unix.NsecToTimespec(1600000000e9 + i*1000003), unix.NsecToTimespec(1600000000e9 + i*1000003)}
		must(unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
		return nil
	})
	// The walk set the children; the directories' own mtimes come last.
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if d.IsDir() {
			ts := []unix.Timespec{unix.NsecToTimespec(1500000000e9 + int64(len(p))), unix.NsecToTimespec(1500000000e9 + int64(len(p)))}
			must(unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
		}
		return nil
	})
}

// applyFiles are the recipe most apply tests use and its hook.
var applyFiles = map[string]string{
	"recipe.yaml":   applyRecipe,
	"hooks/motd.sh": "#!/bin/sh\necho 'applied by stamp' >> \"$STAMP_ROOT/etc/motd\"\n",
}

// applyDir is a fresh directory holding files and, under root/, a root
// made by makeApplyRoot.
func applyDir(t *testing.T, files map[string]string) (dir, root string) {
	t.Helper()
	dir = t.TempDir()
	root = filepath.Join(dir, "root")
	makeApplyRoot(t, root)
	writeFiles(t, dir, files)
	return dir, root
}

// rootIs fails the test unless root lists as want did; what names the
// step that should have given it back.
func rootIs(t *testing.T, root, want, what string) {
	t.Helper()
	if got := listRoot(t, root); got != want {
		t.Fatalf("%s did not give back the root:\n%s", what, diffLines(want, got))
	}
}

// listRoot is one line per path of root with everything apply may change:
// type, mode, owner, mtime to the nanosecond, size, content digest, symlink
// target, device numbers, xattrs and hard-link group. Two roots with the
// same listing are the same for every purpose of these tests.
func listRoot(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	first := map[uint64]string{}
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		paths = append(paths, p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	for _, p := range paths {
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(p, root)
		fmt.Fprintf(&b, "%q mode=%07o owner=%d:%d mtime=%d.%09d", "/"+strings.TrimPrefix(rel, "/"), st.Mode, st.Uid, st.Gid, st.Mtim.Sec, st.Mtim.Nsec)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, " size=%d sha256=%x", st.Size, sha256.Sum256(data))
			if st.Nlink > 1 {
				if f, ok := first[st.Ino]; ok {
					fmt.Fprintf(&b, " link=%s", f)
				} else {
					first[st.Ino] = rel
				}
				fmt.Fprintf(&b, " nlink=%d", st.Nlink)
			}
		case unix.S_IFLNK:
			target, _ := os.Readlink(p)
			fmt.Fprintf(&b, " target=%q", target)
		case unix.S_IFCHR, unix.S_IFBLK:
			fmt.Fprintf(&b, " dev=%d,%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
		sz, _ := unix.Llistxattr(p, nil)
		if sz > 0 {
			buf := make([]byte, sz)
			sz, _ = unix.Llistxattr(p, buf)
			names := strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00")
			sort.Strings(names)
			for _, n := range names {
				v := make([]byte, 256)
				vs, err := unix.Lgetxattr(p, n, v)
				if err != nil {
					t.Fatalf("%s: xattr %s: %v", p, n, err)
				}
				fmt.Fprintf(&b, " xattr.%s=%x", n, v[:vs])
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}

// diffLines names the lines only one listing holds.
func diffLines(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !mb[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ma[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// changedPaths lists the paths whose line differs between two listings.
func changedPaths(a, b string) []string {
	set := map[string]bool{}
	for _, l := range strings.Split(diffLines(a, b), "\n") {
		if len(l) < 3 {
			continue
		}
		q := l[2 : strings.Index(l[2:], " ")+2]
		p, err := strconv.Unquote(q)
		if err == nil {
			set[p] = true
		}
	}
	var out []string
	for p := range set {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

type applyPlanJSON struct {
	Recipe  string `json:"recipe"`
	DryRun  bool   `json:"dryRun"`
	Changes []struct {
		Path   string `json:"path"`
		Kind   string `json:"kind"`
		Before *struct {
			SHA256 string `json:"sha256"`
		} `json:"before"`
		After *struct {
			SHA256 string `json:"sha256"`
		} `json:"after"`
	} `json:"changes"`
	Accounts []struct{ Kind, Name, Action string } `json:"accounts"`
	Units    []struct{ Unit, Action string }       `json:"units"`
}

// apply --dry-run prints every change, in text and in JSON, and leaves the
// root exactly as it was; the changes it names are the ones apply then
// makes.
func TestApplyDryRun(t *testing.T) {
	dir, root := applyDir(t, applyFiles)
	cache := filepath.Join(dir, "cache")
	orig := listRoot(t, root)

	start := time.Now()
	r := stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--dry-run", "--cache-dir", cache).mustSucceed(t)
	t.Logf("dry run: %s", time.Since(start).Round(time.Millisecond))
	if got := listRoot(t, root); got != orig {
		t.Fatalf("apply --dry-run changed the root:\n%s", diffLines(orig, got))
	}
	oldHostname := fmt.Sprintf("%x", sha256.Sum256([]byte("old\n")))
	newHostname := fmt.Sprintf("%x", sha256.Sum256([]byte("applied\n")))
	for _, want := range []string{
		"replaced /etc/hostname  sha256=" + oldHostname + "->" + newHostname,
		"mode=0644->0640",
		"owner=0:0->0:42",
		"xattrs=user.stamp.test->",
		"replaced /etc/motd  sha256=",
		"added    /etc/motd.d/new  file mode=0644 owner=0:0 size=4 sha256=",
		"added    /usr/local/bin/k  symlink mode=0777 owner=0:0 target=/usr/bin/tool",
		"added    /var/lib/kubelet  dir mode=0700",
		"removed  /usr/share/doc/x/copyright  file mode=0644",
		"removed  /opt/ro/f  file",
		"replaced /usr/bin/tool-link  sha256=",
		"links=/usr/bin/tool->none",
		"replaced /etc/passwd", "replaced /etc/group", "replaced /etc/shadow", "replaced /etc/gshadow",
		"user     added capi (uid 1000)",
		"group    added docker (gid 998)",
		"group    changed sudo (gid 27)",
		"unit     enabled foo.service  /etc/systemd/system/multi-user.target.wants/foo.service -> /etc/systemd/system/foo.service",
		"unit     masked bar.service  /etc/systemd/system/bar.service -> /dev/null",
		"apply would change: ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "/opt/ro/keep") || strings.Contains(r.stdout, "/etc/os-release") {
		t.Errorf("dry run lists untouched paths:\n%s", r.stdout)
	}

	j := stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--dry-run", "--json", "--cache-dir", cache).mustSucceed(t)
	var plan applyPlanJSON
	if err := json.Unmarshal([]byte(j.stdout), &plan); err != nil {
		t.Fatalf("--json output: %v\n%s", err, j.stdout)
	}
	if !plan.DryRun || plan.Recipe != "apply" {
		t.Errorf("plan header: %+v", plan)
	}
	var dryPaths []string
	for i, ch := range plan.Changes {
		dryPaths = append(dryPaths, ch.Path)
		if i > 0 && plan.Changes[i-1].Path >= ch.Path {
			t.Errorf("changes not in byte order: %s before %s", plan.Changes[i-1].Path, ch.Path)
		}
		if ch.Path == "/etc/hostname" && (ch.Kind != "replaced" || ch.Before.SHA256 != oldHostname || ch.After.SHA256 != newHostname) {
			t.Errorf("/etc/hostname in JSON: %+v", ch)
		}
	}
	// The same dry run twice prints the same bytes.
	j2 := stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--dry-run", "--json", "--cache-dir", cache).mustSucceed(t)
	if j2.stdout != j.stdout {
		t.Errorf("two dry runs differ:\n%s\n---\n%s", j.stdout, j2.stdout)
	}
	if got := listRoot(t, root); got != orig {
		t.Fatalf("apply --dry-run --json changed the root:\n%s", diffLines(orig, got))
	}

	stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", cache).mustSucceed(t)
	var real []string
	for _, p := range changedPaths(orig, listRoot(t, root)) {
		if p != "/var/lib/stamp" && !strings.HasPrefix(p, "/var/lib/stamp/") {
			real = append(real, p)
		}
	}
	// What apply changed is what the dry run said, plus the parents whose
	// mtime moved while the record was written... which apply puts back.
	if strings.Join(real, "\n") != strings.Join(dryPaths, "\n") {
		t.Errorf("dry run and apply disagree\ndry run:\n%s\napply:\n%s", strings.Join(dryPaths, "\n"), strings.Join(real, "\n"))
	}
}

// apply then apply --undo gives back the root exactly, and a second undo,
// or a second apply before the undo, is refused.
func TestApplyUndo(t *testing.T) {
	dir, root := applyDir(t, applyFiles)
	cache := filepath.Join(dir, "cache")
	orig := listRoot(t, root)

	start := time.Now()
	stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", cache).mustSucceed(t)
	t.Logf("apply: %s", time.Since(start).Round(time.Millisecond))
	applied := listRoot(t, root)
	if applied == orig {
		t.Fatal("apply changed nothing")
	}
	rec, err := os.ReadFile(filepath.Join(root, "var/lib/stamp/applied.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"recipe": "apply"`, `"epoch": 1700000000`, `"recipeDigest": "sha256:`, `"path": "/etc/hostname"`} {
		if !strings.Contains(string(rec), want) {
			t.Errorf("applied.json lacks %s", want)
		}
	}
	if b, err := os.ReadFile(filepath.Join(root, "var/lib/stamp/backup", fmt.Sprintf("%x", sha256.Sum256([]byte("old\n"))))); err != nil || string(b) != "old\n" {
		t.Errorf("backup of /etc/hostname: %q, %v", b, err)
	}
	stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", cache).mustFail(t, 2, "already holds /var/lib/stamp/applied.json")
	if got := listRoot(t, root); got != applied {
		t.Fatalf("a refused second apply changed the root:\n%s", diffLines(applied, got))
	}

	start = time.Now()
	stamp(t, dir, nil, "apply", "--undo", "--root", root).mustSucceed(t)
	t.Logf("undo: %s", time.Since(start).Round(time.Millisecond))
	rootIs(t, root, orig, "undo")
	stamp(t, dir, nil, "apply", "--undo", "--root", root).mustFail(t, 1, "nothing to undo")
}

// The same as uid 65534 on a root it owns: what it cannot do (chown to
// another owner, trusted xattrs, device nodes) is not in that root to begin
// with, and everything else comes back exactly.
func TestApplyUndoAs65534(t *testing.T) {
	harness.RequireSetpriv(t)
	dir := harness.TempDirFor65534(t)
	root := filepath.Join(dir, "root")
	makeApplyRootAs65534(t, dir, root)
	writeFiles(t, dir, applyFiles)
	chownTree(t, dir, harness.NobodyUID)
	cache := filepath.Join(dir, "cache")
	orig := listRoot(t, root)

	dry := stampAs65534(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--dry-run", "--cache-dir", cache).mustSucceed(t)
	if got := listRoot(t, root); got != orig {
		t.Fatalf("apply --dry-run as 65534 changed the root:\n%s", diffLines(orig, got))
	}
	if !strings.Contains(dry.stdout, "user     added capi (uid 1000)") {
		t.Errorf("dry run as 65534:\n%s", dry.stdout)
	}
	stampAs65534(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", cache).mustSucceed(t)
	if got := listRoot(t, root); got == orig {
		t.Fatal("apply as 65534 changed nothing")
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/hostname")); string(b) != "applied\n" {
		t.Errorf("/etc/hostname after apply as 65534: %q", b)
	}
	undoRefusesTampering(t, dir, root, orig, func(args ...string) result { return stampAs65534(t, dir, nil, args...) })
}

// apply --undo trusts nothing it did not record: with a backup an attacker
// replaced by a symlink to a host file, or damaged, or a record edited to
// name a path outside the root, undo fails naming the path, with --force
// too, and the root, the record and the host file stay as they are; once
// the backup is what apply saved, undo gives the root back.
func TestApplyUndoRefusesTampering(t *testing.T) {
	dir, root := applyDir(t, applyFiles)
	orig := listRoot(t, root)
	stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", filepath.Join(dir, "cache")).mustSucceed(t)
	undoRefusesTampering(t, dir, root, orig, func(args ...string) result { return stamp(t, dir, nil, args...) })
}

// undoRefusesTampering tampers with the backups and the record of the
// applied root (once orig) as an attacker who can write to the root would,
// runs undo through run after each, and then undoes for real.
func undoRefusesTampering(t *testing.T, dir, root, orig string, run func(args ...string) result) {
	t.Helper()
	host := filepath.Join(dir, "canary")
	if err := os.WriteFile(host, []byte("host secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(root, "var/lib/stamp/backup", fmt.Sprintf("%x", sha256.Sum256([]byte("old\n"))))
	saved := filepath.Join(dir, "saved-backup")
	record := filepath.Join(root, "var/lib/stamp/applied.json")
	rec, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		tamper func() error
		wants  []string
	}{
		{"a symlink to a host file", func() error {
			if err := os.Rename(backup, saved); err != nil {
				return err
			}
			return os.Symlink(host, backup)
		}, []string{"the backup of /etc/hostname", "is a symlink, not a regular file"}},
		{"a damaged backup", func() error {
			os.Remove(backup)
			return os.WriteFile(backup, []byte("bad\n"), 0o644)
		}, []string{"the backup of /etc/hostname", "sha256 "}},
		{"a record naming a path outside the root", func() error {
			os.Remove(backup)
			if err := os.Rename(saved, backup); err != nil {
				return err
			}
			return os.WriteFile(record, bytes.Replace(rec, []byte(`"path": "/opt/ro/f"`), []byte(`"path": "/../canary"`), 1), 0o644)
		}, []string{`"/../canary" is not a clean absolute path`}},
	} {
		if err := tc.tamper(); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		tampered := listRoot(t, root)
		for _, force := range [][]string{nil, {"--force"}} {
			run(append([]string{"apply", "--undo", "--root", root}, force...)...).mustFail(t, 1, tc.wants...)
			if got := listRoot(t, root); got != tampered {
				t.Fatalf("undo %v with %s changed the root:\n%s", force, tc.name, diffLines(tampered, got))
			}
		}
		if b, err := os.ReadFile(host); err != nil || string(b) != "host secret\n" {
			t.Fatalf("the host file after undo with %s: %q, %v", tc.name, b, err)
		}
	}
	if err := os.WriteFile(record, rec, 0o644); err != nil {
		t.Fatal(err)
	}
	run("apply", "--undo", "--root", root).mustSucceed(t)
	rootIs(t, root, orig, "undo after the tampering was mended")
}

// makeApplyRootAs65534 builds the test root as 65534 would have it: made
// by root here, then handed over, without what only root can hold.
func makeApplyRootAs65534(t *testing.T, dir, root string) {
	t.Helper()
	makeApplyRoot(t, root)
	for _, p := range []string{"null", "fifo"} {
		os.Remove(filepath.Join(root, p))
	}
	unix.Lremovexattr(filepath.Join(root, "usr/bin/tool"), "trusted.stamp")
}

// chownTree hands every path under dir to uid (and gid) without touching
// mtimes or the setuid bits a chown clears.
func chownTree(t *testing.T, dir string, uid int) {
	t.Helper()
	type saved struct {
		mode os.FileMode
		ts   []unix.Timespec
	}
	var paths []string
	keep := map[string]saved{}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		var st unix.Stat_t
		if err == nil && unix.Lstat(p, &st) == nil {
			paths = append(paths, p)
			keep[p] = saved{os.FileMode(st.Mode & 07777), []unix.Timespec{st.Atim, st.Mtim}}
		}
		return nil
	})
	for i := len(paths) - 1; i >= 0; i-- {
		p := paths[i]
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Lstat(p); fi.Mode()&os.ModeSymlink == 0 {
			if err := unix.Chmod(p, uint32(keep[p].mode)); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, keep[p].ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			t.Fatal(err)
		}
	}
}

// Undo refuses to overwrite what was changed after apply, names it, and
// changes nothing; --force undoes anyway.
func TestApplyUndoRefusesChangedFile(t *testing.T) {
	dir, root := applyDir(t, applyFiles)
	cache := filepath.Join(dir, "cache")
	orig := listRoot(t, root)
	stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", cache).mustSucceed(t)
	if err := os.WriteFile(filepath.Join(root, "etc/motd.d/new"), []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, root, map[string]string{"usr/share/doc/x/copyright": "came back\n", "var/lib/kubelet/extra": "mine\n"})
	edited := listRoot(t, root)
	stamp(t, dir, nil, "apply", "--undo", "--root", root).mustFail(t, 1,
		"/etc/motd.d/new: content", "/usr/share/doc/x/copyright: exists again", "/var/lib/kubelet: holds extra, added since", "--force")
	if got := listRoot(t, root); got != edited {
		t.Fatalf("a refused undo changed the root:\n%s", diffLines(edited, got))
	}
	stamp(t, dir, nil, "apply", "--undo", "--force", "--root", root).mustSucceed(t)
	rootIs(t, root, orig, "undo --force")
}

// apply stays on the root's own file system, as cp -x does, so that
// --root / never walks /proc: a file system mounted below the root is left
// alone by the recipe, the plan and undo alike.
func TestApplyStaysOnRootFileSystem(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs (CI runs as root)")
	}
	dir, root := applyDir(t, applyFiles)
	mnt := filepath.Join(root, "srv/data")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatalf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
	writeFiles(t, mnt, map[string]string{"other-fs": "not the root's\n"})
	cache := filepath.Join(dir, "cache")
	orig := listRoot(t, root)

	r := stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--dry-run", "--cache-dir", cache).mustSucceed(t)
	if strings.Contains(r.stdout, "/srv") {
		t.Errorf("the plan reaches into a mounted file system:\n%s", r.stdout)
	}
	stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", cache).mustSucceed(t)
	if b, err := os.ReadFile(filepath.Join(mnt, "other-fs")); err != nil || string(b) != "not the root's\n" {
		t.Errorf("apply changed the mounted file system: %q, %v", b, err)
	}
	stamp(t, dir, nil, "apply", "--undo", "--root", root).mustSucceed(t)
	rootIs(t, root, orig, "undo")

	// A recipe that would remove the mount point fails before it changes
	// anything, naming it; the dry run warns.
	writeFiles(t, dir, map[string]string{"unmount.yaml": "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: unmount\nepoch: 1700000000\n" +
		"base: {tarball: ./unused.tar}\ncustomize:\n  layers:\n    - remove: [\"/srv/**\"]\n"})
	stamp(t, dir, nil, "apply", "unmount.yaml", "--root", root, "--dry-run", "--cache-dir", cache).mustSucceed(t)
	stamp(t, dir, nil, "apply", "unmount.yaml", "--root", root, "--cache-dir", cache).mustFail(t, 1, "mount points", "/srv/data")
	if got := listRoot(t, root); got != orig {
		t.Fatalf("a refused apply changed the root:\n%s", diffLines(orig, got))
	}
}

// The case apply is for: Kubernetes node packages installed by the debs
// layer onto a real Debian root in place. The dry run names the
// binaries, the dpkg database and the enabled units and leaves the root
// alone; apply installs them; undo gives the root back exactly.
func TestApplyDebsUndo(t *testing.T) {
	harness.RequireTools(t, "tar", "zstd")
	repo := harness.DebRepoFor(t)
	base := harness.DpkgBaseFor(t)
	dir := debsDir(t, repo, base, fmt.Sprintf(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: apply-debs
epoch: 1700000000
base: {tarball: ./base.tar.zst}
provision:
  layers:
    - debs: {repo: %q, suite: stamp, components: [main], keyring: ./keyring.gpg, packages: [%s]}
`, repo.FileURL(), strings.Join(harness.NodePackages, ", ")))
	root := filepath.Join(dir, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tarball := range []string{base.Tarball, base.DB} {
		out, err := exec.Command("tar", "-x", "--auto-compress", "--numeric-owner", "--same-permissions", "--xattrs", "--xattrs-include=*",
			"-f", tarball, "-C", root).CombinedOutput()
		if err != nil {
			t.Fatalf("tar -x %s: %v\n%s", tarball, err, out)
		}
	}
	cache := filepath.Join(dir, "cache")
	orig := listRoot(t, root)

	start := time.Now()
	r := stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--dry-run", "--cache-dir", cache).mustSucceed(t)
	t.Logf("dry run: %s", time.Since(start).Round(time.Millisecond))
	if got := listRoot(t, root); got != orig {
		t.Fatalf("apply --dry-run changed the root:\n%s", diffLines(orig, got))
	}
	for _, want := range []string{"added    /usr/bin/socat  file", "replaced /var/lib/dpkg/status  sha256=",
		"unit     enabled containerd.service  /etc/systemd/system/multi-user.target.wants/containerd.service"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dry run output lacks %q", want)
		}
	}

	start = time.Now()
	a := stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", cache).mustSucceed(t)
	t.Logf("apply: %s", time.Since(start).Round(time.Millisecond))
	if a.stdout != strings.Replace(r.stdout, "apply-debs would change:", "apply-debs changed:", 1) {
		t.Errorf("apply's changes are not the dry run's:\n%s", diffLines(r.stdout, a.stdout))
	}
	st := readDpkgStatus(t, root)
	for _, p := range harness.NodePackages {
		if got := st[p].Get("Status"); got != "install ok installed" {
			t.Errorf("%s: Status %q after apply", p, got)
		}
	}

	start = time.Now()
	stamp(t, dir, nil, "apply", "--undo", "--root", root).mustSucceed(t)
	t.Logf("undo: %s", time.Since(start).Round(time.Millisecond))
	rootIs(t, root, orig, "undo")
}

// A recipe that would take the record's place fails before it changes
// anything, naming the path; its dry run warns.
func TestApplyRefusesRecordPlace(t *testing.T) {
	dir, root := applyDir(t, map[string]string{"recipe.yaml": `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: squat
epoch: 1700000000
base: {tarball: ./unused.tar}
customize:
  layers:
    - files: [{path: /var/lib/stamp, content: "a file where a directory must be\n"}]
`})
	cache := filepath.Join(dir, "cache")
	orig := listRoot(t, root)
	r := stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--dry-run", "--cache-dir", cache).mustSucceed(t)
	if !strings.Contains(r.stderr, "apply would fail") || !strings.Contains(r.stdout, "added    /var/lib/stamp  file") {
		t.Errorf("dry run:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", cache).mustFail(t, 1, "where the apply record must live", "/var/lib/stamp")
	if got := listRoot(t, root); got != orig {
		t.Fatalf("a refused apply changed the root:\n%s", diffLines(orig, got))
	}
}

// A root that changes under apply (here a hook writes to the live root
// behind its back) makes apply fail before it changes anything itself:
// the backup of the replaced file no longer matches what was scanned, and
// the backups already saved go again.
func TestApplyFailsWhenRootChangesMeanwhile(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	makeApplyRoot(t, root)
	writeFiles(t, dir, map[string]string{
		"recipe.yaml": `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: race
epoch: 1700000000
base: {tarball: ./unused.tar}
customize:
  layers:
    - remove: ["/etc/gshadow"]
    - files: [{path: /etc/hostname, content: "applied\n"}]
    - hook: {run: ./hooks/meddle.sh, env: {LIVE: "` + root + `"}}
`,
		"hooks/meddle.sh": "#!/bin/sh\necho meddled >> \"$LIVE/etc/hostname\"\n",
	})
	orig := listRoot(t, root)
	stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", filepath.Join(dir, "cache")).mustFail(t, 1,
		"backing up /etc/hostname", "changed while apply ran")
	if got := changedPaths(orig, listRoot(t, root)); strings.Join(got, " ") != "/etc/hostname" {
		t.Errorf("after a failed apply, these differ from before: %v (want only the hook's /etc/hostname)\n%s", got, diffLines(orig, listRoot(t, root)))
	}
}

// xattrs a layer brings (a tarball's SCHILY.xattr records) reach the plan
// and the root, and undo takes them away again.
func TestApplyTarballXattrs(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	makeApplyRoot(t, root)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	content := "#!/bin/sh\necho capped\n"
	pax := map[string]string{"SCHILY.xattr.user.stamp": "from the tarball"}
	want := "user.stamp"
	if os.Geteuid() == 0 {
		pax["SCHILY.xattr.trusted.stamp"] = "t"
		want = "trusted.stamp,user.stamp"
	}
	if err := tw.WriteHeader(&tar.Header{Name: "usr/bin/capped", Mode: 0o755, Size: int64(len(content)), ModTime: time.Unix(1700000000, 0),
		Typeflag: tar.TypeReg, PAXRecords: pax, Format: tar.FormatPAX}); err != nil {
		t.Fatal(err)
	}
	tw.Write([]byte(content))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"extra.tar": buf.String(), "recipe.yaml": `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: xattrs
epoch: 1700000000
base: {tarball: ./unused.tar}
customize:
  layers:
    - tarball: {path: ./extra.tar}
`})
	cache := filepath.Join(dir, "cache")
	orig := listRoot(t, root)
	r := stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--dry-run", "--cache-dir", cache).mustSucceed(t)
	if !strings.Contains(r.stdout, "added    /usr/bin/capped  file mode=0755 owner=0:0") || !strings.Contains(r.stdout, " xattrs="+want+"\n") {
		t.Errorf("dry run does not show the tarball's xattrs (%s):\n%s", want, r.stdout)
	}
	stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", cache).mustSucceed(t)
	v := make([]byte, 64)
	n, err := unix.Lgetxattr(filepath.Join(root, "usr/bin/capped"), "user.stamp", v)
	if err != nil || string(v[:n]) != "from the tarball" {
		t.Errorf("user.stamp on /usr/bin/capped: %q, %v", v[:max(n, 0)], err)
	}
	stamp(t, dir, nil, "apply", "--undo", "--root", root).mustSucceed(t)
	rootIs(t, root, orig, "undo")
}

// A recipe that changes nothing in the root leaves it exactly as it was,
// with no record, so there is nothing to undo.
func TestApplyNothingToChange(t *testing.T) {
	dir, root := applyDir(t, map[string]string{"recipe.yaml": `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: noop
epoch: 1700000000
base: {tarball: ./unused.tar}
customize:
  layers:
    - mkdir: [{path: /etc, mode: "0751"}]
`})
	orig := listRoot(t, root)
	r := stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", filepath.Join(dir, "cache")).mustSucceed(t)
	if r.stdout != "noop changed: 0 added, 0 replaced, 0 removed, 0 changed\n" {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	if got := listRoot(t, root); got != orig {
		t.Fatalf("a recipe that changes nothing changed the root:\n%s", diffLines(orig, got))
	}
	stamp(t, dir, nil, "apply", "--undo", "--root", root).mustFail(t, 1, "nothing to undo")
}
