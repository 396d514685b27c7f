// Package e2e runs the stamp binary end to end: real Debian base, real
// validators, builds as root and as uid 65534.
//
// The tests that boot under qemu call t.Parallel: a TCG guest keeps one
// core busy, so two boots at a time use the two cores CI has, after the
// builds (which use both) have run one by one. Their shared inputs are
// cached behind file locks (harness), and each works in its own temporary
// directories.
package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// stampBin is the binary under test, built once, in a directory uid 65534
// can read.
var stampBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "stamp-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(dir, 0o755)
	stampBin = filepath.Join(dir, "stamp")
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	cmd := exec.Command("go", "build", "-trimpath", "-o", stampBin, "./cmd/stamp")
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building stamp:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// result is one run of the binary.
type result struct {
	code           int
	stdout, stderr string
}

// stamp runs the binary as the current user with a clean environment.
func stamp(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(stampBin, noCache(args)...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}, env...)
	return runCmd(t, cmd)
}

// stampUmask022 runs the binary as the current user under umask 022,
// whatever the test process's own umask is.
func stampUmask022(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command("/bin/sh", append([]string{"-c", `umask 022; exec "$0" "$@"`, stampBin}, noCache(args)...)...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}, env...)
	return runCmd(t, cmd)
}

// stampAs65534 runs the binary as nobody with umask 077.
func stampAs65534(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	harness.RequireSetpriv(t)
	cmd := exec.Command(stampBin, noCache(args)...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}, env...)
	return runCmd(t, harness.Unprivileged(cmd))
}

// noCache adds --no-cache to a build. The tests build twice and compare
// the bytes (as root and as 65534, in two time zones, before and after a
// change), often in one cache directory: a second build taken from the
// first's cache records would make each comparison prove nothing. The
// cache's own tests run stampCached.
func noCache(args []string) []string {
	if len(args) == 0 || args[0] != "build" {
		return args
	}
	return append(append([]string{}, args...), "--no-cache")
}

// stampCached runs a build that may take what the cache holds.
func stampCached(t *testing.T, dir string, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(stampBin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}, env...)
	return runCmd(t, cmd)
}

func runCmd(t *testing.T, cmd *exec.Cmd) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("running %v: %v", cmd.Args, err)
	}
	return r
}

// lastLines is the end of a command's output, for a test's log.
func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(l[max(0, len(l)-n):], "\n")
}

func (r result) mustSucceed(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	return r
}

func (r result) mustFail(t *testing.T, code int, wants ...string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
	for _, w := range wants {
		if !strings.Contains(r.stderr, w) {
			t.Fatalf("stderr does not mention %q:\n%s", w, r.stderr)
		}
	}
	return r
}

// copyBase puts the test base into dir as base.tar.zst, the name the test
// recipes give their base tarball.
func copyBase(t *testing.T, dir string) {
	t.Helper()
	base, err := os.ReadFile(harness.Base(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "base.tar.zst"), base, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeFiles writes name -> content under dir; names ending in ".sh" are executable.
func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
	}
}

// finalFiles lists what is in an output directory under a final name
// (anything but the staging directory of a build still running).
func finalFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
