package scripts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/rootfs"
)

// TestTmpfilesMatchesSystemdTmpfiles applies systemd.conf-style lines and
// compares with what the real tools leave: the ACL xattrs with setfacl's
// on a host directory of the same mode, and the other lines' effects as
// systemd-tmpfiles documents them.
func TestTmpfilesMatchesSystemdTmpfiles(t *testing.T) {
	tr := newTree(t)
	file(t, tr, "/etc/group", "root:x:0:\nadm:x:4:\nutmp:x:43:\nkvm:x:104:\nsystemd-journal:x:999:\n")
	file(t, tr, "/etc/passwd", "root:x:0:0:root:/root:/bin/bash\n")
	file(t, tr, "/etc/machine-id", "0123456789abcdef0123456789abcdef\n")
	file(t, tr, "/usr/lib/tmpfiles.d/t.conf", `# comment
d /run/user 0755 root root -
f+! /run/nologin 0644 - - - "boot only"
z /var/log/journal 2755 root systemd-journal - -
a+ /var/log/journal    - - - - d:group::r-x,d:group:adm:r-x,group::r-x,group:adm:r-x
a+ /var/log/journal/%m - - - - d:group:adm:r-x,group:adm:r-x
f /var/log/wtmp 0664 root utmp -
L /var/run - - - - ../run
L+ /etc/mtab - - - - ../proc/self/mounts
z /dev/kvm 0660 - kvm -
h /var/log/journal - - - - +C
f^ /etc/hosts - - - - network.hosts
`)
	if _, err := tr.MkdirAll("/var/log/journal", dirHeader()); err != nil {
		t.Fatal(err)
	}
	body := "#!/bin/sh\nset -e\nsystemd-tmpfiles --create t.conf >/dev/null\n"
	if err := Run(context.Background(), env(tr), Script{Package: "systemd", Name: "postinst", Body: []byte(body)}, "configure", ""); err != nil {
		t.Fatal(err)
	}
	got := snapshot(tr, "/run/", "/var/run", "/etc/mtab", "/var/log/wtmp", "/etc/hosts")
	want := []string{"/etc/mtab -> ../proc/self/mounts", "/run/user/", "/var/log/wtmp = ", "/var/run -> ../run"}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("tree:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if e := tr.Get("/var/log/wtmp"); e.Perm != 0o664 || e.GID != 43 {
		t.Errorf("/var/log/wtmp: %o %d:%d", e.Perm, e.UID, e.GID)
	}
	e := tr.Get("/var/log/journal")
	if e.Perm != 0o2755 || e.GID != 999 {
		t.Errorf("/var/log/journal: %o %d:%d", e.Perm, e.UID, e.GID)
	}

	if _, err := exec.LookPath("setfacl"); err != nil {
		t.Fatalf("setfacl (package acl, test/scripts/deps.sh): %v", err)
	}
	host := filepath.Join(t.TempDir(), "journal")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chmod(host, 0o2755)
	// The host's adm is gid 4 as in the tree; setfacl takes numbers.
	if out, err := exec.Command("setfacl", "-m", "d:group::r-x,d:group:4:r-x,group::r-x,group:4:r-x", host).CombinedOutput(); err != nil {
		t.Fatalf("setfacl: %v %s", err, out)
	}
	for _, name := range []string{xattrACLAccess, xattrACLDefault} {
		buf := make([]byte, 256)
		n, err := unix.Getxattr(host, name, buf)
		if err != nil {
			t.Fatal(err)
		}
		if e.Xattrs[name] != string(buf[:n]) {
			t.Errorf("%s: % x, setfacl writes % x", name, e.Xattrs[name], buf[:n])
		}
	}
	fi, _ := os.Stat(host)
	if uint32(fi.Mode().Perm()) != e.Perm&0o777 {
		t.Errorf("mode after the ACL %o, setfacl leaves %o", e.Perm, fi.Mode().Perm())
	}
}

func dirHeader() rootfs.Header { return rootfs.Header{Perm: 0o755, MTime: epoch} }
