package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// TestAugenrulesMatchesAugenrules installs auditd (whose postinst runs
// augenrules) with extra rule files that exercise the merge order, and
// runs the package's own augenrules with the host's sh and mawk on a copy
// of the same rules directory: audit.rules must come out the same.
func TestAugenrulesMatchesAugenrules(t *testing.T) {
	harness.RequireTools(t, "sh", "mawk", "cmp")
	repo := harness.NodeRepoFor(t)
	tr := newTree(t)
	c := unpack(t, tr, filepath.Join(repo.Dir, repo.Debs["auditd"]))
	extra := map[string]string{
		"/etc/audit/rules.d/10-watch.rules":  "-w /etc/passwd -p wa -k identity\n  # indented comment\n-e 2\n",
		"/etc/audit/rules.d/9-first.rules":   "-a always,exit -F arch=b64 -S adjtimex -k time\n-b 1024\n",
		"/etc/audit/rules.d/notarule.txt":    "-w /ignored\n",
		"/etc/audit/rules.d/100-last.rules":  "\n-D\n-f 2\n",
		"/etc/audit/rules.d/zz-spaces.rules": "ss# mawk reads \\s as s\n",
	}
	host := t.TempDir()
	if err := os.MkdirAll(filepath.Join(host, "etc/audit/rules.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(host, "tmp"), 0o755)
	for p, body := range extra {
		file(t, tr, p, body)
		os.WriteFile(filepath.Join(host, p), []byte(body), 0o644)
	}
	stock, _ := os.ReadFile(filepath.Join(tr.DiskPath("/etc/audit/rules.d"), "audit.rules"))
	os.WriteFile(filepath.Join(host, "etc/audit/rules.d/audit.rules"), stock, 0o644)
	if err := postinst(t, tr, "auditd", c); err != nil {
		t.Fatal(err)
	}
	script, err := os.ReadFile(tr.DiskPath("/sbin/augenrules"))
	if err != nil {
		if script, err = os.ReadFile(tr.DiskPath("/usr/sbin/augenrules")); err != nil {
			t.Fatal(err)
		}
	}
	s := strings.NewReplacer("/etc/audit", host+"/etc/audit", "/tmp/", host+"/tmp/").Replace(string(script))
	if out, err := exec.Command("sh", "-c", s, "augenrules").CombinedOutput(); err != nil {
		t.Fatalf("augenrules: %v\n%s", err, out)
	}
	want, err := os.ReadFile(filepath.Join(host, "etc/audit/audit.rules"))
	if err != nil {
		t.Fatal(err)
	}
	e, err := tr.Lookup("/etc/audit/audit.rules", true)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(tr.DiskPath(e.Path))
	// The header names the rules directory: the host copy's, there.
	want = []byte(strings.ReplaceAll(string(want), host, ""))
	if string(got) != string(want) {
		t.Errorf("audit.rules:\n%s\naugenrules writes:\n%s", got, want)
	}
	fi, _ := os.Stat(filepath.Join(host, "etc/audit/audit.rules"))
	if e.Perm != uint32(fi.Mode().Perm()) || e.UID != 0 {
		t.Errorf("audit.rules mode %o owner %d, augenrules makes %o", e.Perm, e.UID, fi.Mode().Perm())
	}
	if left := snapshot(tr, "/tmp/"); len(left) > 0 {
		t.Errorf("left in /tmp: %v", left)
	}
}
