package scripts

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// childEnv marks a test binary run as uid 65534 by asBoth; childDebs
// hands it the .deb files the parent fetched (the child may not write the
// harness's cache).
const childEnv, childDebs = "STAMP_SCRIPTS_TEST_AS_65534", "STAMP_SCRIPTS_TEST_DEBS"

// asBoth runs body as the test's own user (root in CI) and, in a copy of
// the test binary run with setpriv, as uid 65534, each building its own
// trees; it returns what each body returned, root's first, so the test can
// hold the two to the same bytes. In the child only the body runs, and
// what it returns goes to the parent on stdout.
func asBoth(t *testing.T, debs []string, body func(t *testing.T, debs []string) string) (root, nobody string) {
	t.Helper()
	if os.Getenv(childEnv) != "" {
		out := body(t, strings.Split(os.Getenv(childDebs), "\n"))
		os.Stdout.WriteString("\n" + childMark + out + childEnd + "\n")
		// The parent compares; the child only reports.
		t.SkipNow()
	}
	root = body(t, debs)
	harness.RequireSetpriv(t)
	dir := harness.TempDirFor65534(t)
	bin := filepath.Join(dir, "scripts.test")
	copyFile(t, os.Args[0], bin, 0o755)
	cmd := exec.Command(bin, "-test.run=^"+t.Name()+"$", "-test.count=1")
	cmd.Dir = dir
	cmd.Env = append(harness.DefaultUnprivilegedEnv, childEnv+"=1", childDebs+"="+strings.Join(debs, "\n"), "TMPDIR="+dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := harness.Unprivileged(cmd).Run(); err != nil {
		t.Fatalf("as uid 65534: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	_, nobody, ok := strings.Cut(stdout.String(), childMark)
	if !ok {
		t.Fatalf("as uid 65534 the test said nothing:\n%s", stdout.String())
	}
	nobody, _, ok = strings.Cut(nobody, childEnd)
	if !ok {
		t.Fatalf("as uid 65534 the test's report was cut short:\n%s", stdout.String())
	}
	return root, nobody
}

const childMark, childEnd = "STAMP-CHILD-RESULT:", ":STAMP-CHILD-END"

func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
