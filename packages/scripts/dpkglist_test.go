package scripts

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
)

const listStatus = `Package: libc6
Status: install ok installed
Priority: optional
Section: libs
Installed-Size: 12988
Maintainer: GNU Libc Maintainers <debian-glibc@lists.debian.org>
Architecture: amd64
Multi-Arch: same
Source: glibc
Version: 2.36-9+deb12u14
Description: GNU C Library: Shared libraries
 Contains the standard libraries that are used by nearly all programs on
 the system.

Package: a-package-with-a-rather-long-name
Status: deinstall ok config-files
Architecture: all
Version: 1:2.3.4-5~really.a.long.version+deb12u1
Description: short

Package: gone
Status: purge ok not-installed
Architecture: amd64

Package: half
Status: install reinstreq half-configured
Architecture: arm64
Version: 1.0
Description: a description well beyond the thirty-three columns dpkg gives it at least
`

// TestDpkgListMatchesDpkgQuery: dpkg-query -l, as the host's dpkg-query
// writes it to a pipe from the same database, patterns, misses and all;
// and libc6's postinst's reading of it.
func TestDpkgListMatchesDpkgQuery(t *testing.T) {
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Fatal("dpkg-query is needed (test/scripts/deps.sh installs dpkg)")
	}
	admin := t.TempDir()
	if err := os.WriteFile(filepath.Join(admin, "status"), []byte(listStatus), 0o644); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(admin, "info"), 0o755)
	os.MkdirAll(filepath.Join(admin, "updates"), 0o755)
	tr := newTree(t)
	file(t, tr, "/var/lib/dpkg/status", listStatus)
	for _, args := range [][]string{
		{"libc6"},
		{"libc6", "half"},
		{"libc6.1-alphaev67"},
		{"libc6", "nothing-here"},
		{"a-*"},
		{},
	} {
		cmd := exec.Command("dpkg-query", append([]string{"--admindir=" + admin, "-l"}, args...)...)
		cmd.Env = append(os.Environ(), "COLUMNS=", "LC_ALL=C")
		var want bytes.Buffer
		cmd.Stdout = &want
		wantCode := 0
		if err := cmd.Run(); err != nil {
			ee, ok := err.(*exec.ExitError)
			if !ok {
				t.Fatal(err)
			}
			wantCode = ee.ExitCode()
		}
		body := "#!/bin/sh\nset +e\ndpkg-query -l \"$@\" > /out 2>/dev/null\necho $? > /code\n"
		if err := Run(context.Background(), env(tr), Script{Package: "t", Name: "postinst", Body: []byte(body)}, args...); err != nil {
			t.Fatal(err)
		}
		got := readTreeFile(t, tr, "/out")
		if got != want.String() {
			t.Errorf("dpkg-query -l %q:\n%s\ndpkg-query says:\n%s", args, got, want.String())
		}
		if code := readTreeFile(t, tr, "/code"); code != string(rune('0'+wantCode))+"\n" {
			t.Errorf("dpkg-query -l %q exits %q, dpkg-query %d", args, code, wantCode)
		}
	}
	// libc6 2.36-9+deb12u14's postinst, the line that reads the version.
	body := `#!/bin/sh
pkg=libc6
ver=$(dpkg-query -l $pkg 2>/dev/null | sed -e '/^[a-z][a-z]\s/!d;/^.[nc]/d;' -e "s/^..\s\+$pkg[0-9a-z:]*\s\+//;s/\s.*//g")
echo "$ver" > /ver
`
	if err := Run(context.Background(), env(tr), Script{Package: "libc6", Name: "postinst", Body: []byte(body)}, "configure"); err != nil {
		t.Fatal(err)
	}
	if got := readTreeFile(t, tr, "/ver"); got != "2.36-9+deb12u14\n" {
		t.Errorf("libc6's postinst reads version %q", got)
	}
}

// TestDpkgRealpath: dash's postinst asks dpkg-realpath for /bin/sh, which
// on a merged /usr resolves through the image's /bin link.
func TestDpkgRealpath(t *testing.T) {
	tr := newTree(t)
	file(t, tr, "/usr/bin/dash", "dash")
	for _, l := range [][2]string{{"/bin", "usr/bin"}, {"/usr/bin/sh", "dash"}} {
		if _, err := tr.Create(l[0], rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: l[1], MTime: epoch}, nil); err != nil {
			t.Fatal(err)
		}
	}
	body := "#!/bin/sh\ndpkg-realpath /bin/sh > /out\n"
	if err := Run(context.Background(), env(tr), Script{Package: "dash", Name: "postinst", Body: []byte(body)}); err != nil {
		t.Fatal(err)
	}
	if got := readTreeFile(t, tr, "/out"); got != "/usr/bin/dash\n" {
		t.Errorf("dpkg-realpath /bin/sh = %q", got)
	}
}

func readTreeFile(t *testing.T, tr *rootfs.Tree, p string) string {
	t.Helper()
	f, err := tr.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b bytes.Buffer
	b.ReadFrom(f)
	return b.String()
}
