package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

func TestMkbaseCLI(t *testing.T) {
	harness.RequireTools(t, "apt-get", "dpkg-deb")
	harness.Base(t) // fills the deb cache, so -debs below needs no network
	dir := t.TempDir()
	bin := filepath.Join(dir, "mkbase")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out := filepath.Join(dir, "b.tar.gz")
	cmd := exec.Command(bin, "-o", out, "-debs", harness.DebCacheDir(), "-packages", "base-files,base-passwd")
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1500000000")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("mkbase: %v\n%s", err, msg)
	}
	entries := harness.ReadTar(t, out)
	idx := harness.TarIndex(entries)
	if _, ok := idx["/etc/passwd"]; !ok {
		t.Error("/etc/passwd missing")
	}
	for _, e := range entries {
		if e.ModTime.Unix() > 1500000000 {
			t.Fatalf("%s: SOURCE_DATE_EPOCH not honoured (mtime %d)", e.Name, e.ModTime.Unix())
		}
	}

	var exit *exec.ExitError
	if err := exec.Command(bin).Run(); !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Errorf("no -o: err = %v, want exit 2", err)
	}
	cmd = exec.Command(bin, "-o", out)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=soon")
	if err := cmd.Run(); !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Errorf("bad SOURCE_DATE_EPOCH: err = %v, want exit 1", err)
	}
}
