package scripts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
