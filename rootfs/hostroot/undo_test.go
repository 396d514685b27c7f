package hostroot

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// hostnameBackup is where apply saves the old /etc/hostname of makeRoot.
func hostnameBackup(root string) string {
	return filepath.Join(root, backupPath(fmt.Sprintf("%x", sha256.Sum256([]byte("old\n"))))[1:])
}

// canary is a host file outside the root that no undo may read or change.
func canary(t *testing.T) (path, content string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "canary")
	content = "host secret\n"
	must(t, os.WriteFile(path, []byte(content), 0o600))
	return path, content
}

// refused runs Undo on a root an attacker has tampered with, with and
// without --force, and fails the test unless both refuse naming every one
// of want, change nothing in the root, and keep the record.
func refused(t *testing.T, root string, want ...string) {
	t.Helper()
	tampered := listing(t, root)
	for _, force := range []bool{false, true} {
		done := make(chan error, 1)
		go func() {
			_, err := Undo(context.Background(), root, UndoOptions{Force: force})
			done <- err
		}()
		var err error
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("undo (force %v) hangs", force)
		}
		if err == nil {
			t.Fatalf("undo (force %v) of a tampered root succeeded", force)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("undo (force %v): %v\nwant it to name %q", force, err, w)
			}
		}
		if got := listing(t, root); got != tampered {
			t.Fatalf("a refused undo (force %v) changed the root:\n--- before\n%s--- after\n%s", force, tampered, got)
		}
	}
	if _, err := os.Lstat(filepath.Join(root, appliedPath[1:])); err != nil {
		t.Errorf("the record is gone: %v", err)
	}
}

// A backup whose bytes, size or type are not what apply saved is never
// restored, even with --force: the root stays as it is, the record too,
// and the error names the path whose backup it is.
func TestUndoRefusesTamperedBackups(t *testing.T) {
	host, secret := canary(t)
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, backup string)
		want   string
	}{
		{"damaged", func(t *testing.T, b string) { must(t, os.WriteFile(b, []byte("bad\n"), 0o644)) }, "sha256 "},
		{"truncated", func(t *testing.T, b string) { must(t, os.Truncate(b, 1)) }, "size 1, recorded 4"},
		{"missing", func(t *testing.T, b string) { must(t, os.Remove(b)) }, "no such file"},
		{"symlink to a host file", func(t *testing.T, b string) {
			must(t, os.Remove(b))
			must(t, os.Symlink(host, b))
		}, "is a symlink, not a regular file"},
		{"relative symlink in the root", func(t *testing.T, b string) {
			must(t, os.Remove(b))
			must(t, os.Symlink("../../../../etc/motd", b))
		}, "is a symlink, not a regular file"},
		{"directory", func(t *testing.T, b string) {
			must(t, os.Remove(b))
			must(t, os.Mkdir(b, 0o755))
			must(t, os.WriteFile(filepath.Join(b, "x"), []byte("old\n"), 0o644))
		}, "is a dir, not a regular file"},
		{"fifo", func(t *testing.T, b string) {
			must(t, os.Remove(b))
			must(t, unix.Mkfifo(b, 0o644))
		}, "is a fifo, not a regular file"},
		{"socket", func(t *testing.T, b string) {
			must(t, os.Remove(b))
			must(t, unix.Mknod(b, unix.S_IFSOCK|0o644, 0))
		}, "is a socket, not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _, _ := apply(t)
			tc.tamper(t, hostnameBackup(root))
			refused(t, root, "/etc/hostname", "the record is kept", tc.want)
			if b, _ := os.ReadFile(host); string(b) != secret {
				t.Errorf("the host file changed: %q", b)
			}
		})
	}
}

// A device node put in place of a backup is refused without being opened
// (opening some devices acts: a watchdog arms, a tape rewinds).
func TestUndoRefusesDeviceBackup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a device node needs root (CI runs as root; the fifo case covers the unprivileged open)")
	}
	root, _, _ := apply(t)
	b := hostnameBackup(root)
	must(t, os.Remove(b))
	must(t, unix.Mknod(b, unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))))
	refused(t, root, "/etc/hostname", "is a char, not a regular file")
}

// The backups and the record are reached through directories alone: a
// symlink anywhere in the chain, even to a copy of the right backups, or
// to a directory outside the root, is refused.
func TestUndoRefusesSymlinkInBackupChain(t *testing.T) {
	for _, link := range []string{"var/lib/stamp/backup", "var/lib/stamp", "var/lib", "var"} {
		t.Run(link, func(t *testing.T) {
			root, _, _ := apply(t)
			dir := filepath.Join(root, link)
			moved := filepath.Join(root, "moved")
			must(t, os.Rename(dir, moved))
			must(t, os.Symlink(strings.Repeat("../", strings.Count(link, "/"))+"moved", dir))
			refused(t, root, "/"+link+" is a symlink")
		})
	}
	t.Run("outside the root", func(t *testing.T) {
		root, _, _ := apply(t)
		outside := t.TempDir()
		must(t, os.Rename(filepath.Join(root, "var/lib/stamp/backup"), filepath.Join(outside, "backup")))
		must(t, os.Symlink(filepath.Join(outside, "backup"), filepath.Join(root, "var/lib/stamp/backup")))
		refused(t, root, "/var/lib/stamp/backup is a symlink")
	})
}

// The record itself is a regular file reached through directories alone.
func TestUndoRefusesRecordNotAFile(t *testing.T) {
	host, _ := canary(t)
	for name, tamper := range map[string]func(t *testing.T, rec string){
		"symlink to a host file": func(t *testing.T, rec string) {
			b, err := os.ReadFile(rec)
			must(t, err)
			must(t, os.WriteFile(host, b, 0o600))
			must(t, os.Remove(rec))
			must(t, os.Symlink(host, rec))
		},
		"fifo": func(t *testing.T, rec string) {
			must(t, os.Remove(rec))
			must(t, unix.Mkfifo(rec, 0o644))
		},
	} {
		t.Run(name, func(t *testing.T) {
			root, _, _ := apply(t)
			rec := filepath.Join(root, appliedPath[1:])
			tamper(t, rec)
			refused(t, root, appliedPath, "not a regular file")
		})
	}
}

// editRecord rewrites the record of root through edit, as an attacker with
// write access to the root could.
func editRecord(t *testing.T, root string, edit func(rec map[string]any)) {
	t.Helper()
	p := filepath.Join(root, appliedPath[1:])
	b, err := os.ReadFile(p)
	must(t, err)
	var rec map[string]any
	must(t, json.Unmarshal(b, &rec))
	edit(rec)
	// In byte order again, as apply writes it, so that what undo refuses is
	// the edit, not the order.
	changes := rec["changes"].([]any)
	sort.SliceStable(changes, func(i, j int) bool {
		return changes[i].(map[string]any)["path"].(string) < changes[j].(map[string]any)["path"].(string)
	})
	b, err = json.Marshal(rec)
	must(t, err)
	must(t, os.WriteFile(p, b, 0o644))
}

// change returns the recorded change of path p, as JSON, to edit.
func recordedChange(t *testing.T, rec map[string]any, p string) map[string]any {
	t.Helper()
	for _, c := range rec["changes"].([]any) {
		if ch := c.(map[string]any); ch["path"] == p {
			return ch
		}
	}
	t.Fatalf("the record has no change of %s", p)
	return nil
}

// A record edited to name paths outside the root, or to undo into the
// record's own place, is refused before anything changes: every path it
// names must be clean and absolute in the root, and a backup's name a
// sha256.
func TestUndoRefusesEditedRecord(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(t *testing.T, rec map[string]any)
		want string
	}{
		{"dot-dot path", func(t *testing.T, rec map[string]any) {
			recordedChange(t, rec, "/opt/ro/f")["path"] = "/opt/../../../outside"
		}, `"/opt/../../../outside" is not a clean absolute path`},
		{"relative path", func(t *testing.T, rec map[string]any) {
			recordedChange(t, rec, "/opt/ro/f")["path"] = "opt/ro/f"
		}, "not a clean absolute path"},
		{"doubled slash", func(t *testing.T, rec map[string]any) {
			recordedChange(t, rec, "/opt/ro/f")["path"] = "//opt/ro/f"
		}, "not a clean absolute path"},
		{"digest naming a path", func(t *testing.T, rec map[string]any) {
			recordedChange(t, rec, "/etc/hostname")["before"].(map[string]any)["sha256"] = "../../../../etc/shadow"
		}, "is not a sha256"},
		{"link out of the root", func(t *testing.T, rec map[string]any) {
			recordedChange(t, rec, "/usr/bin/tool")["before"].(map[string]any)["links"] = []any{"/../../etc/shadow"}
		}, "not a clean absolute path"},
		{"dirs out of the root", func(t *testing.T, rec map[string]any) {
			rec["dirs"] = append(rec["dirs"].([]any), map[string]any{"path": "/..", "mtime": 0})
		}, `dirs: "/.." is not a clean absolute path`},
		{"created elsewhere", func(t *testing.T, rec map[string]any) {
			rec["created"] = []any{"/etc"}
		}, `"/etc" is not the record's place`},
		{"mode out of range", func(t *testing.T, rec map[string]any) {
			recordedChange(t, rec, "/etc/hostname")["before"].(map[string]any)["mode"] = "177777"
		}, "is not a mode"},
		{"unknown type", func(t *testing.T, rec map[string]any) {
			recordedChange(t, rec, "/etc/hostname")["before"].(map[string]any)["type"] = "door"
		}, "unknown entry type"},
		{"unknown kind", func(t *testing.T, rec map[string]any) {
			recordedChange(t, rec, "/etc/hostname")["kind"] = "moved"
		}, `kind "moved"`},
		{"restore into the backups", func(t *testing.T, rec map[string]any) {
			ch := maps.Clone(recordedChange(t, rec, "/opt/ro/f"))
			ch["path"] = backupDir + "/x"
			rec["changes"] = append(rec["changes"].([]any), ch)
		}, "the record's own place"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _, _ := apply(t)
			editRecord(t, root, func(rec map[string]any) { tc.edit(t, rec) })
			refused(t, root, tc.want)
		})
	}
}

// A record edited to reach outside the root through a symlink in the root
// is refused: no path of the record is resolved through a symlink, so the
// host directory the symlink names is never touched.
func TestUndoRefusesRecordThroughSymlink(t *testing.T) {
	for _, kind := range []string{"removed", "added", "dirs"} {
		t.Run(kind, func(t *testing.T) {
			root, _, _ := apply(t)
			outside := t.TempDir()
			must(t, os.WriteFile(filepath.Join(outside, "f"), []byte("host file\n"), 0o644))
			must(t, os.Symlink(outside, filepath.Join(root, "escape")))
			editRecord(t, root, func(rec map[string]any) {
				switch kind {
				case "removed":
					recordedChange(t, rec, "/opt/ro/f")["path"] = "/escape/f"
				case "added":
					recordedChange(t, rec, "/etc/motd.d/new")["path"] = "/escape/f"
				case "dirs":
					// A directory whose mtime undo puts back last.
					rec["dirs"] = append(rec["dirs"].([]any), map[string]any{"path": "/escape/f", "mtime": 0})
				}
			})
			refused(t, root, "/escape is a symlink")
			if b, err := os.ReadFile(filepath.Join(outside, "f")); err != nil || string(b) != "host file\n" {
				t.Errorf("the host file: %q, %v", b, err)
			}
			if names, _ := os.ReadDir(outside); len(names) != 1 {
				t.Errorf("the host directory holds %v", names)
			}
		})
	}
}

// A path the restored file is to share its inode with again, but which
// changed since apply, is named like any other change; with --force the
// file is restored from its backup and not linked to it.
func TestUndoChecksHardLinkTargets(t *testing.T) {
	root, _, _ := apply(t)
	// The record names /etc/motd as a hard link of /usr/bin/tool-link,
	// which apply did not touch; its content is not the file's.
	editRecord(t, root, func(rec map[string]any) {
		recordedChange(t, rec, "/usr/bin/tool-link")["before"].(map[string]any)["links"] = []any{"/etc/motd"}
	})
	before := listing(t, root)
	if _, err := Undo(context.Background(), root, UndoOptions{}); err == nil || !strings.Contains(err.Error(), "/etc/motd: no longer the hard link of /usr/bin/tool-link") {
		t.Fatalf("undo: %v", err)
	}
	if got := listing(t, root); got != before {
		t.Fatal("a refused undo changed the root")
	}
	if _, err := Undo(context.Background(), root, UndoOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	var a, b unix.Stat_t
	must(t, unix.Lstat(filepath.Join(root, "etc/motd"), &a))
	must(t, unix.Lstat(filepath.Join(root, "usr/bin/tool-link"), &b))
	if a.Ino == b.Ino {
		t.Error("/usr/bin/tool-link was linked to the changed /etc/motd")
	}
	if data, _ := os.ReadFile(filepath.Join(root, "usr/bin/tool-link")); string(data) != "#!/bin/sh\n" {
		t.Errorf("/usr/bin/tool-link: %q", data)
	}
}

// A backup that also has another name in the root (an attacker's hard
// link, kept to write the restored file later) is copied, not taken: the
// restored file shares its inode with nothing it did not share before.
func TestUndoDoesNotTakeSharedBackup(t *testing.T) {
	root, orig, _ := apply(t)
	// Outside the root (on its file system), so the root's listing shows
	// only what undo did.
	handle := filepath.Join(filepath.Dir(root), "handle")
	must(t, os.Link(hostnameBackup(root), handle))
	if _, err := Undo(context.Background(), root, UndoOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := listing(t, root); got != orig {
		t.Fatalf("undo did not give the root back:\n%s---\n%s", orig, got)
	}
	var st unix.Stat_t
	must(t, unix.Lstat(filepath.Join(root, "etc/hostname"), &st))
	if st.Nlink != 1 {
		t.Errorf("/etc/hostname has %d links", st.Nlink)
	}
	must(t, os.WriteFile(handle, []byte("new\n"), 0o644))
	if b, _ := os.ReadFile(filepath.Join(root, "etc/hostname")); string(b) != "old\n" {
		t.Errorf("a write through the attacker's link reached /etc/hostname: %q", b)
	}
}

// Every byte undo puts in place is checked against the record before it
// takes the path's name: a backup changed between the checks and the
// restore (an attacker racing undo) fails the restore of that path, which
// keeps what it had, and the record stays.
func TestUndoChecksWhatItRestores(t *testing.T) {
	root, _, _ := apply(t)
	live, err := openDirTree(root)
	must(t, err)
	defer live.Close()
	rec, err := readRecord(live, root)
	must(t, err)
	u := newUndo(live, rec, UndoOptions{})
	must(t, u.check(context.Background()))
	must(t, os.WriteFile(hostnameBackup(root), []byte("bad\n"), 0o600))
	if _, err := u.run(); err == nil || !strings.Contains(err.Error(), "restoring /etc/hostname") || !strings.Contains(err.Error(), "not what apply recorded") {
		t.Fatalf("run: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "etc/hostname")); string(b) != "applied\n" {
		t.Errorf("/etc/hostname: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(root, "etc", tmpName)); err == nil {
		t.Error("the staged copy was left behind")
	}
	if _, err := os.Lstat(filepath.Join(root, appliedPath[1:])); err != nil {
		t.Errorf("the record: %v", err)
	}
}

// Apply does not write its record through a symlink either.
func TestApplyRefusesSymlinkedRecordPlace(t *testing.T) {
	root := makeRoot(t)
	must(t, os.MkdirAll(filepath.Join(root, "srv/state"), 0o755))
	must(t, os.Symlink("srv/state", filepath.Join(root, "var")))
	orig := listing(t, root)
	_, err := Apply(context.Background(), root, options(t, false))
	if err == nil || !strings.Contains(err.Error(), "/var is a symlink") {
		t.Fatalf("apply: %v", err)
	}
	if got := listing(t, root); got != orig {
		t.Fatal("a refused apply changed the root")
	}
}
