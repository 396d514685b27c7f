package sandbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/rootfs/sandbox"
	"github.com/stamp-dev/stamp/test/harness"
)

var epoch = time.Unix(1700000000, 0).UTC()

// baseTree is the test base (a real Debian minbase) as a tree.
func baseTree(t *testing.T) *rootfs.Tree {
	t.Helper()
	harness.RequireTools(t, "unshare", "chroot", "mount")
	tr := rootfstest.NewIn(t, harness.TempDirFor65534(t), epoch)
	rootfstest.ExtractFile(t, tr, harness.Base(t), rootfs.ExtractOptions{})
	return tr
}

// A program runs with the tree as its root, in exactly the environment
// documented, without the host's network, with a /tmp of its own; what it
// writes and chowns is folded back with its owners.
func TestRunAndFoldBack(t *testing.T) {
	tr := baseTree(t)
	var logged []string
	s := &sandbox.Sandbox{Tree: tr, Epoch: epoch, Logf: func(f string, a ...any) { logged = append(logged, f) }}
	script := `set -e
mkdir -p /srv
env > /srv/env
cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' > /srv/ifaces
echo scratch > /tmp/scratch
umask > /srv/umask
pwd > /srv/pwd
echo made > /srv/made
chown 0:0 /srv/made
mkdir -p /srv/dir
`
	if err := s.Run(context.Background(), "test", []string{"EXTRA=1", "TZ=Europe/Paris"}, "/bin/sh", "-c", script); err != nil {
		t.Fatal(err)
	}
	ch, err := s.FoldBack(context.Background(), rootfs.Origin{Layer: "test"})
	if err != nil {
		t.Fatal(err)
	}
	read := func(p string) string {
		t.Helper()
		b, err := os.ReadFile(tr.DiskPath(p))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	wantEnv := "EXTRA=1\nLANG=C.UTF-8\nPATH=" + sandbox.Path + "\nPWD=/\nSOURCE_DATE_EPOCH=1700000000\nTZ=Europe/Paris\n"
	if got := sortedLines(read("/srv/env")); got != wantEnv {
		t.Errorf("environment:\n%s\nwant:\n%s", got, wantEnv)
	}
	if got := read("/srv/ifaces"); got != "lo\n" {
		t.Errorf("interfaces %q, want only lo", got)
	}
	if got := read("/srv/umask"); got != "0022\n" {
		t.Errorf("umask %q", got)
	}
	if got := read("/srv/pwd"); got != "/\n" {
		t.Errorf("cwd %q", got)
	}
	if tr.Get("/tmp/scratch") != nil || tr.Get("/tmp/fixture-junk") == nil {
		t.Error("/tmp/scratch reached the tree; /tmp should be a fresh tmpfs over the tree's")
	}
	for _, p := range []string{"/srv/made", "/srv/dir", "/srv/env"} {
		e := tr.Get(p)
		if e == nil {
			t.Fatalf("%s not folded back (changes %+v)", p, ch)
		}
		if e.UID != 0 || e.GID != 0 || e.Origin.Layer != "test" {
			t.Errorf("%s: owner %d:%d origin %q, want 0:0 from test", p, e.UID, e.GID, e.Origin.Layer)
		}
	}
	if e := tr.Get("/srv/dir"); e.Perm != 0o755 {
		t.Errorf("/srv/dir mode %o, want 755 (umask 022)", e.Perm)
	}
	if len(logged) != 0 {
		t.Errorf("a silent program logged %q", logged)
	}
	for _, p := range []string{"/proc/self", "/dev/pts", "/dev/fd", "/usr/sbin/policy-rc.d"} {
		if tr.Get(p) != nil {
			t.Errorf("%s reached the index", p)
		}
	}
}

func sortedLines(s string) string {
	l := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i := range l {
		for j := i + 1; j < len(l); j++ {
			if l[j] < l[i] {
				l[i], l[j] = l[j], l[i]
			}
		}
	}
	return strings.Join(l, "\n") + "\n"
}

// A failing program is an *ExitError with its status and output.
func TestRunExitError(t *testing.T) {
	tr := baseTree(t)
	s := &sandbox.Sandbox{Tree: tr, Epoch: epoch}
	err := s.Run(context.Background(), "failing", nil, "/bin/sh", "-c", "echo oops; exit 3")
	var ee *sandbox.ExitError
	if !errors.As(err, &ee) || ee.Status != 3 || ee.Output != "oops" || ee.Name != "failing" {
		t.Fatalf("err = %#v, want an ExitError with status 3 and output oops", err)
	}
}

// With DenyServices invoke-rc.d is told no while the program runs, and the
// policy leaves no trace; with Network the host's interfaces are there.
func TestDenyServicesAndNetwork(t *testing.T) {
	tr := baseTree(t)
	s := &sandbox.Sandbox{Tree: tr, Epoch: epoch, DenyServices: true, Network: true}
	err := s.Run(context.Background(), "policy", nil, "/bin/sh", "-c",
		`mkdir -p /srv; /usr/sbin/policy-rc.d; echo $? > /srv/policy; tail -n +3 /proc/net/dev | wc -l > /srv/ifaces`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.FoldBack(context.Background(), rootfs.Origin{Layer: "test"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(tr.DiskPath("/srv/policy"))
	if string(b) != "101\n" {
		t.Errorf("policy-rc.d said %q, want 101", b)
	}
	if tr.Get("/usr/sbin/policy-rc.d") != nil {
		t.Error("policy-rc.d stayed in the tree")
	}
	host, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		t.Fatal(err)
	}
	want := len(strings.Split(strings.TrimSpace(string(host)), "\n")) - 2
	b, _ = os.ReadFile(tr.DiskPath("/srv/ifaces"))
	if strings.TrimSpace(string(b)) != strconv.Itoa(want) {
		t.Errorf("with Network the program saw %s interfaces, the host has %d", strings.TrimSpace(string(b)), want)
	}
}

// A tree whose /proc leads elsewhere is refused before anything is mounted
// or written: the mount would follow the symlink.
func TestRefusesSymlinkedMountPoints(t *testing.T) {
	harness.RequireTools(t, "unshare", "chroot", "mount")
	dir := filepath.Join(t.TempDir(), "tree")
	tr, err := rootfs.New(dir, rootfs.Options{DefaultMTime: epoch})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	for _, d := range []string{"dev", "usr/sbin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "proc")); err != nil {
		t.Fatal(err)
	}
	s := &sandbox.Sandbox{Tree: tr, Epoch: epoch, DenyServices: true}
	err = s.Run(context.Background(), "p", nil, "/bin/true")
	if err == nil || !strings.Contains(err.Error(), "/proc is not a directory") {
		t.Fatalf("err = %v, want a refusal naming /proc", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "usr/sbin/policy-rc.d")); err == nil {
		t.Fatal("policy-rc.d was written for a run that was refused")
	}
}

// A ReadOnly run sees the tree read-only, in a user namespace even as
// root, and writes only to the output directory the caller hands it.
func TestReadOnlyWithOutput(t *testing.T) {
	tr := baseTree(t)
	out := t.TempDir()
	s := &sandbox.Sandbox{Tree: tr, Epoch: epoch, ReadOnly: true, OutputHost: out}
	script := `if echo x > /etc/stamp-written 2>/dev/null; then echo wrote; fi
cat /proc/self/uid_map > ` + sandbox.OutputDir + `/uid_map
echo made > ` + sandbox.OutputDir + `/made`
	if err := s.Run(context.Background(), "ro", nil, "/bin/sh", "-c", script); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(tr.DiskPath("/etc/stamp-written")); err == nil {
		t.Error("a read-only run wrote into the tree")
	}
	if b, _ := os.ReadFile(filepath.Join(out, "made")); string(b) != "made\n" {
		t.Errorf("output directory holds %q", b)
	}
	m, _ := os.ReadFile(filepath.Join(out, "uid_map"))
	if f := strings.Fields(string(m)); len(f) != 3 || f[2] != "1" {
		t.Errorf("uid_map %q: want one id mapped (a user namespace, even as root)", m)
	}
}

// OutputAt binds the output directory over a directory of the tree too,
// hiding what the tree holds there; a path through a symlink is refused
// before anything runs.
func TestOutputAt(t *testing.T) {
	tr := baseTree(t)
	for _, d := range []string{"/var/lib/x", "/var/lib/x/y"} {
		if _, err := tr.MkdirAll(d, rootfs.Header{Perm: 0o755, MTime: epoch}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.Create("/var/lib/x/hidden", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: epoch}, strings.NewReader("h")); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Create("/var/lib/link", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "x", MTime: epoch}, nil); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if err := os.WriteFile(filepath.Join(out, "in"), []byte("input\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &sandbox.Sandbox{Tree: tr, Epoch: epoch, ReadOnly: true, OutputHost: out, OutputAt: "/var/lib/x"}
	script := `ls /var/lib/x > /var/lib/x/listed; cat /var/lib/x/in >> /var/lib/x/listed`
	if err := s.Run(context.Background(), "at", nil, "/bin/sh", "-c", script); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "listed")); string(b) != "in\nlisted\ninput\n" { // the redirection made listed before ls ran; hidden is not seen
		t.Errorf("the program saw and wrote %q at /var/lib/x, want the output directory there", b)
	}
	if _, err := os.Lstat(tr.DiskPath("/var/lib/x/listed")); err == nil {
		t.Error("the program wrote into the tree")
	}
	for _, at := range []string{"/var/lib/link", "/var/lib/x/../x", "var/lib/x", "/var/lib/none", "/"} {
		s.OutputAt = at
		if err := s.Run(context.Background(), "at", nil, "/bin/true"); err == nil || !strings.Contains(err.Error(), "output directory") {
			t.Errorf("OutputAt %q: err = %v, want a refusal", at, err)
		}
	}
}
