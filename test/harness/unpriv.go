package harness

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// NobodyUID is the uid (and gid) unprivileged runs use.
const NobodyUID = 65534

// DefaultUnprivilegedEnv is the whole environment of an unprivileged run
// whose command has no Env of its own.
var DefaultUnprivilegedEnv = []string{
	"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
	"HOME=/nonexistent",
	"LANG=C.UTF-8",
}

// CanSetpriv reports whether this process may switch to another uid, which
// Unprivileged needs. CI runs as root, so there it is always true.
func CanSetpriv() bool { return os.Geteuid() == 0 }

// RequireSetpriv skips the test when it cannot run anything as uid 65534.
// Only a developer running the tests as an ordinary user ever sees the skip:
// CI runs as root, where these tests always run.
func RequireSetpriv(t testing.TB) {
	t.Helper()
	if !CanSetpriv() {
		t.Skip("needs root to switch to uid 65534 with setpriv (CI runs as root)")
	}
	RequireTools(t, "setpriv", "env", "sh")
}

// Unprivileged rewrites cmd, in place, to run as uid and gid 65534 with no
// supplementary groups, with exactly cmd.Env as its environment
// (DefaultUnprivilegedEnv when nil) and with umask 077, so a build that
// relies on the caller's umask, environment or privileges shows it. Dir,
// stdio and any context of cmd are kept. It returns cmd for chaining.
func Unprivileged(cmd *exec.Cmd) *exec.Cmd {
	env := cmd.Env
	if env == nil {
		env = DefaultUnprivilegedEnv
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		cmd.Err = err
		return cmd
	}
	prog := cmd.Path
	args := []string{setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--", "env", "-i"}
	args = append(args, env...)
	args = append(args, "/bin/sh", "-c", `umask 077; exec "$@"`, "sh", prog)
	args = append(args, cmd.Args[1:]...)
	cmd.Path = setpriv
	cmd.Args = args
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	return cmd
}

// RunAs65534 runs name with args as uid 65534 in dir with exactly env
// (DefaultUnprivilegedEnv when nil) and returns its stdout. It fails the test
// when the command fails, showing its stderr.
func RunAs65534(t testing.TB, dir string, env []string, name string, args ...string) string {
	t.Helper()
	RequireSetpriv(t)
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := Unprivileged(cmd).Run(); err != nil {
		t.Fatalf("as 65534: %s %s: %v\nstderr:\n%s", name, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}

// TempDirFor65534 returns a fresh directory that uid 65534 can write, removed
// when the test ends. t.TempDir() will not do: it sits under a 0700 directory.
func TempDirFor65534(t testing.TB) string {
	t.Helper()
	base := "/tmp"
	if _, err := os.Stat(base); err != nil {
		base = os.TempDir()
	}
	dir, err := os.MkdirTemp(base, "stamp-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing %s: %v", dir, err)
		}
	})
	// MkdirTemp honours the umask; make every ancestor searchable as well.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	for p := filepath.Dir(dir); p != "/"; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm()&0o001 == 0 {
			if err := os.Chmod(p, fi.Mode().Perm()|0o011); err != nil {
				t.Fatalf("%s: not searchable by 65534: %v", p, err)
			}
		}
	}
	return dir
}
