package scripts

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// TestDpkgDivertMatchesDpkgDivert runs the same dpkg-divert commands
// through the handler and through dpkg-divert --root on a scratch root,
// and compares what each prints and the database each leaves, order
// included (dpkg-divert writes it in its hash table's order).
func TestDpkgDivertMatchesDpkgDivert(t *testing.T) {
	real := harness.Tool(t, "dpkg-divert")
	cmds := [][]string{
		{"--package", "dash", "--no-rename", "--divert", "/bin/sh.distrib", "--add", "/bin/sh"},
		{"--package", "dash", "--no-rename", "--divert", "/usr/share/man/man1/sh.distrib.1.gz", "--add", "/usr/share/man/man1/sh.1.gz"},
		{"--package", "p", "--add", "/usr/bin/aaa"},
		{"--local", "--add", "/etc/foo"},
		{"--package", "dash", "--no-rename", "--divert", "/bin/sh.distrib", "--add", "/bin/sh"},
		{"--listpackage", "/bin/sh"},
		{"--listpackage", "/etc/foo"},
		{"--listpackage", "/nothing"},
		{"--truename", "/usr/bin/aaa"},
		{"--truename", "/nothing"},
		{"--package", "p", "--no-rename", "--remove", "/usr/bin/aaa"},
		{"--package", "bash", "--no-rename", "--remove", "/nothing"},
		{"--list"},
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "var/lib/dpkg/info"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, c := range cmds {
		out, err := exec.Command(real, append([]string{"--root=" + root}, c...)...).Output()
		if err != nil {
			t.Fatalf("dpkg-divert %v: %v", c, err)
		}
		want.Write(out)
	}
	wantDB, err := os.ReadFile(filepath.Join(root, "var/lib/dpkg/diversions"))
	if err != nil {
		t.Fatal(err)
	}

	tr := newTree(t)
	var script strings.Builder
	script.WriteString("#!/bin/sh\nset -e\n")
	for _, c := range cmds {
		script.WriteString("dpkg-divert " + strings.Join(c, " ") + " >>/out\n")
	}
	if err := Run(context.Background(), env(tr), Script{Package: "dash", Name: "postinst", Body: []byte(script.String())}, "configure", ""); err != nil {
		t.Fatal(err)
	}
	got := snapshot(tr, "/out", "/var/lib/dpkg/diversions")
	if len(got) != 2 || got[0] != "/out = "+want.String() || got[1] != "/var/lib/dpkg/diversions = "+string(wantDB) {
		t.Errorf("handler:\n%s\ndpkg-divert:\n%s\n%s", strings.Join(got, "\n"), want.String(), wantDB)
	}

	// A clash is refused as dpkg-divert refuses it.
	err = Run(context.Background(), env(tr), Script{Package: "x", Name: "postinst", Body: []byte("#!/bin/sh\ndpkg-divert --package x --add /bin/sh\n")}, "configure", "")
	if err == nil || !strings.Contains(err.Error(), "exit") {
		t.Errorf("a clashing diversion: err = %v", err)
	}
}

// TestUpdateShellsMatchesUpdateShells builds /etc/shells twice, once with
// the handler and once with debianutils' own update-shells --root, from
// the same template, shells.d and a local addition, with /bin a link to
// /usr/bin as on a merged-/usr system.
func TestUpdateShellsMatchesUpdateShells(t *testing.T) {
	real := harness.Tool(t, "update-shells")
	files := map[string]string{
		"usr/share/debianutils/shells":        "# /etc/shells: valid login shells\n/bin/sh\n/usr/bin/sh\n",
		"usr/share/debianutils/shells.d/bash": "/bin/bash\n/bin/rbash\n",
		"usr/share/debianutils/shells.d/dash": "/bin/dash\n",
		"etc/shells":                          "# /etc/shells: valid login shells\n/bin/sh\n/usr/local/bin/fish\n",
	}
	root := t.TempDir()
	tr := newTree(t)
	for p, c := range files {
		hp := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(hp, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
		file(t, tr, "/"+p, c)
	}
	if err := os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "var/lib"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.MkdirAll("/usr/bin", dirHeader()); err != nil {
		t.Fatal(err)
	}
	if err := Run(context.Background(), env(tr), Script{Package: "debianutils", Name: "postinst", Body: []byte("#!/bin/sh\nset -e\nln -s usr/bin /bin\nupdate-shells\n")}, "configure", ""); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(real, "--root", root)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("update-shells: %v\n%s", err, out)
	}
	for _, p := range []string{"etc/shells", "var/lib/shells.state"} {
		want, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if got := snapshot(tr, "/"+p); len(got) != 1 || got[0] != "/"+p+" = "+string(want) {
			t.Errorf("%s: handler %q, update-shells %q", p, got, want)
		}
	}
}

// sysusersCase is a root's account databases and sysusers.d files, and
// the systemd-sysusers command line a postinst runs on them.
type sysusersCase struct {
	name  string
	etc   map[string]string // etc/passwd, ... (an absent one is not made)
	confs map[string]string // usr/lib/sysusers.d/NAME
	args  []string
}

var sysusersBase = map[string]string{
	"etc/passwd":     "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin\n_apt:x:42:65534::/nonexistent:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nmessagebus:x:100:101::/nonexistent:/usr/sbin/nologin\n",
	"etc/group":      "root:x:0:\ndaemon:x:1:\nadm:x:4:\nshadow:x:42:\nusers:x:100:\nmessagebus:x:101:\nnogroup:x:65534:\n",
	"etc/login.defs": "# defaults\nUID_MIN 1000\n",
}

var sysusersCases = []sysusersCase{
	{"systemd onto no shadow files", sysusersBase, map[string]string{
		"basic.conf":           "g adm 4 -\nu root 0 \"root\" /root /bin/bash\nu nobody 65534:65534 - /nonexistent\n",
		"systemd-journal.conf": "g systemd-journal - -\n",
		"systemd-network.conf": "u systemd-network - \"systemd Network Management\"\n",
	}, []string{"basic.conf", "systemd-journal.conf", "systemd-network.conf"}},
	{"users before groups, ids, names and members", merge(sysusersBase, map[string]string{
		"etc/shadow":  "root:*:19000:0:99999:7:::\nmessagebus:!:19000::::::\n",
		"etc/gshadow": "root:*::\nadm:*::\nusers:*::\n",
	}), map[string]string{
		"a.conf": "u zed - \"Zed\" /var/lib/zed /bin/sh\nu fixed 998:adm\nu pair 997:42\n",
		"b.conf": "g grp1 - -\ng taken 101 -\nu dup - -\nm zed users\nm zed newgrp\nm alice adm\n",
	}, []string{"a.conf", "b.conf"}},
	{"all files, with a range", merge(sysusersBase, map[string]string{"etc/shadow": "root:*:19000:0:99999:7:::\n"}), map[string]string{
		"10-range.conf": "r - 500-599\n",
		"20-svc.conf":   "u svc-a - \"A\"\nu svc-b -\ng svc-g -\n",
	}, nil},
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// TestSysusersMatchesSystemdSysusers runs the same sysusers.d files
// through the handler and through the host's systemd-sysusers --root (252,
// Debian 12's) on the same account databases, and compares the four
// databases byte for byte, with their modes: which ids are picked, which
// lines come first, what a missing shadow file is made as.
func TestSysusersMatchesSystemdSysusers(t *testing.T) {
	real := harness.Tool(t, "systemd-sysusers")
	dbs := []string{"etc/passwd", "etc/group", "etc/shadow", "etc/gshadow"}
	for _, c := range sysusersCases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			tr := newTree(t)
			put := func(p, content string) {
				hp := filepath.Join(root, p)
				if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
					t.Fatal(err)
				}
				mode := os.FileMode(0o644)
				if strings.Contains(p, "shadow") {
					mode = 0o640
				}
				if err := os.WriteFile(hp, []byte(content), mode); err != nil {
					t.Fatal(err)
				}
				file(t, tr, "/"+p, content)
				e := tr.Get("/" + p)
				e.Perm = uint32(mode)
			}
			for p, content := range c.etc {
				put(p, content)
			}
			for n, content := range c.confs {
				put("usr/lib/sysusers.d/"+n, content)
			}
			cmd := exec.Command(real, append([]string{"--root=" + root}, c.args...)...)
			cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "SOURCE_DATE_EPOCH=1700000000"}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("systemd-sysusers: %v\n%s", err, out)
			}
			e := env(tr)
			e.AddUser = func(context.Context, User) error { return errors.New("sysusers went through AddUser") }
			e.AddGroup = func(context.Context, Group) error { return errors.New("sysusers went through AddGroup") }
			body := "#!/bin/sh\nset -e\nsystemd-sysusers " + strings.Join(c.args, " ") + "\n"
			if err := Run(context.Background(), e, Script{Package: "systemd", Name: "postinst", Body: []byte(body)}, "configure", ""); err != nil {
				t.Fatal(err)
			}
			for _, p := range dbs {
				want, err := os.ReadFile(filepath.Join(root, p))
				fi, _ := os.Stat(filepath.Join(root, p))
				ge := tr.Get("/" + p)
				switch {
				case err != nil && ge == nil:
					continue
				case err != nil || ge == nil:
					t.Errorf("%s: systemd-sysusers %v, the handler %v", p, err, ge != nil)
					continue
				}
				got := snapshot(tr, "/"+p)
				if len(got) != 1 || got[0] != "/"+p+" = "+string(want) {
					t.Errorf("%s: the handler wrote\n%s\nsystemd-sysusers\n%s", p, got, want)
				}
				if uint32(fi.Mode().Perm()) != ge.Perm {
					t.Errorf("%s: mode %04o, systemd-sysusers %04o", p, ge.Perm, fi.Mode().Perm())
				}
			}
		})
	}
}

// TestAddRemoveShellMatchDebianutils runs add-shell and remove-shell
// through the handlers and through debianutils' own (DPKG_ROOT set) on a
// merged-/usr root, from an /etc/shells with and without its last
// newline, and compares the files: /bin entries and their /usr twins in
// the order the scripts write them, regular-expression matching, modes.
func TestAddRemoveShellMatchDebianutils(t *testing.T) {
	add, remove := harness.Tool(t, "add-shell"), harness.Tool(t, "remove-shell")
	steps := [][]string{
		{"add-shell", "/bin/zsh", "/usr/bin/fish"},
		{"add-shell", "/bin/zsh"},
		{"add-shell", "/bin/sh", "/usr/local/bin/x.y"},
		{"remove-shell", "/bin/bash"},
		{"remove-shell", "/usr/local/bin/x-y"},
		{"add-shell", "/bin/rbash"},
	}
	for _, start := range []string{"# /etc/shells: valid login shells\n/bin/sh\n/usr/bin/sh\n/bin/bash\n/usr/bin/bash\n", "/bin/dash"} {
		root := t.TempDir()
		tr := newTree(t)
		if err := os.MkdirAll(filepath.Join(root, "usr/bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("usr/bin", filepath.Join(root, "bin")); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(root, "etc"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "etc/shells"), []byte(start), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.MkdirAll("/usr/bin", dirHeader()); err != nil {
			t.Fatal(err)
		}
		if _, err := tr.Create("/bin", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "usr/bin", MTime: epoch}, nil); err != nil {
			t.Fatal(err)
		}
		file(t, tr, "/etc/shells", start)
		tr.Get("/etc/shells").Perm = 0o644
		var script strings.Builder
		script.WriteString("#!/bin/sh\nset -e\n")
		for _, s := range steps {
			tool := add
			if s[0] == "remove-shell" {
				tool = remove
			}
			cmd := exec.Command(tool, s[1:]...)
			cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DPKG_ROOT=" + root}
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(s, " "), err, out)
			}
			script.WriteString(strings.Join(s, " ") + "\n")
		}
		if err := Run(context.Background(), env(tr), Script{Package: "zsh", Name: "postinst", Body: []byte(script.String())}, "configure", ""); err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(root, "etc/shells"))
		if err != nil {
			t.Fatal(err)
		}
		if got := snapshot(tr, "/etc/shells"); len(got) != 1 || got[0] != "/etc/shells = "+string(want) {
			t.Errorf("from %q: the handlers wrote %q, debianutils %q", start, got, want)
		}
		if e := tr.Get("/etc/shells"); e.Perm != 0o644 {
			t.Errorf("mode %04o", e.Perm)
		}
	}
}
