package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// DepsTools are the commands test/scripts/deps.sh provides; Deps requires them all.
var DepsTools = []string{
	"tar", "zstd", "xz", "gzip", "setpriv", "cpio", "e2fsck", "mke2fs", "sgdisk",
	"fsck.vfat", "mdir", "qemu-img", "skopeo", "docker-registry", "dpkg-deb",
	"dpkg-scanpackages", "apt-ftparchive", "apt-get", "busybox", "depmod",
}

// sbinDirs are searched after PATH: an ordinary user's PATH often lacks them,
// yet e2fsck and friends run fine from there.
var sbinDirs = []string{"/usr/sbin", "/sbin"}

// LookTool finds a command in PATH or the sbin directories.
func LookTool(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err == nil {
		return p, nil
	}
	for _, d := range sbinDirs {
		c := filepath.Join(d, name)
		if fi, serr := os.Stat(c); serr == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return c, nil
		}
	}
	return "", err
}

// RequireTools fails the test, naming every missing command at once, unless
// all of tools exist. It never skips: a missing tool is a broken set-up.
// It returns the path of each tool, in order.
func RequireTools(t testing.TB, tools ...string) []string {
	t.Helper()
	var paths, missing []string
	for _, name := range tools {
		p, err := LookTool(name)
		if err != nil {
			missing = append(missing, name)
		}
		paths = append(paths, p)
	}
	if len(missing) > 0 {
		t.Fatalf("missing tools: %s (run test/scripts/deps.sh as root)", strings.Join(missing, " "))
	}
	return paths
}

// Tool is RequireTools for one command.
func Tool(t testing.TB, name string) string {
	t.Helper()
	return RequireTools(t, name)[0]
}

// Deps requires every tool test/scripts/deps.sh installs.
func Deps(t testing.TB) {
	t.Helper()
	RequireTools(t, DepsTools...)
}
