package harness

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// CapNetRawEP is the security.capability value for cap_net_raw+ep
// (vfs_cap_data revision 2), as setcap writes it on /usr/bin/ping.
var CapNetRawEP = string([]byte{
	0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00, 0x00, 0x00,
	0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
})

// Paths of the synthetic entries, for tests that look for them.
const (
	FixtureHardLinkA = "/usr/bin/stamp-hl-a"
	FixtureHardLinkB = "/usr/bin/stamp-hl-b"
	FixtureSetuid    = "/usr/local/bin/stamp-setuid"
	FixtureHome      = "/home/fixture"
	FixtureHomeFile  = "/home/fixture/notes.txt"
)

// CleanupFixtures are the files Seal's default cleanup must remove or empty.
var CleanupFixtures = []string{
	"/etc/machine-id", // emptied, not removed
	"/etc/ssh/ssh_host_ed25519_key",
	"/etc/ssh/ssh_host_ed25519_key.pub",
	"/var/log/fixture.log",
	"/var/lib/systemd/random-seed",
	"/var/lib/apt/lists/fixture_dists_bookworm_main_binary-amd64_Packages",
	"/var/cache/apt/pkgcache.bin",
	"/tmp/fixture-junk",
}

// addFixtures adds what a real base has but an unprivileged extraction cannot
// make (devices, fifos, foreign owners, setuid bits, xattrs, hard links), the
// files debootstrap writes from maintainer scripts, and the host-specific
// junk that Seal must clean up.
func addFixtures(m *merge) error {
	dev := func(k string, typ byte, major, minor int64, mode int64, gid int) {
		m.add(k, tar.Header{Typeflag: typ, Mode: mode, Gid: gid, Devmajor: major, Devminor: minor}, nil)
	}
	file := func(k string, mode int64, uid, gid int, content string) {
		m.add(k, tar.Header{Typeflag: tar.TypeReg, Mode: mode, Uid: uid, Gid: gid}, []byte(content))
	}
	dir := func(k string, mode int64, uid, gid int) {
		m.add(k, tar.Header{Typeflag: tar.TypeDir, Mode: mode, Uid: uid, Gid: gid}, nil)
	}

	dev("dev/null", tar.TypeChar, 1, 3, 0o666, 0)
	dev("dev/console", tar.TypeChar, 5, 1, 0o600, 0)
	dev("dev/sda", tar.TypeBlock, 8, 0, 0o660, 6)
	m.add("run/initctl", tar.Header{Typeflag: tar.TypeFifo, Mode: 0o600}, nil)

	file("usr/bin/stamp-hl-a", 0o755, 0, 0, "#!/bin/sh\necho stamp hard link fixture\n")
	m.add("usr/bin/stamp-hl-b", tar.Header{Typeflag: tar.TypeLink, Linkname: "usr/bin/stamp-hl-a"}, nil)
	file("usr/local/bin/stamp-setuid", 0o4755, 0, 0, "#!/bin/sh\necho stamp setuid fixture\n")

	dir("home/fixture", 0o700, 1000, 1000)
	file("home/fixture/notes.txt", 0o600, 1000, 1000, "owned by 1000:1000\n")
	dir("var/mail", 0o2775, 0, 8)

	// base-passwd's postinst copies its masters to /etc; do the same, and give
	// shadow the owner and mode passwd's postinst gives it.
	if pw, ok := m.entries["usr/share/base-passwd/passwd.master"]; ok {
		if _, ok := m.entries["etc/passwd"]; !ok {
			file("etc/passwd", 0o644, 0, 0, string(pw.data))
		}
		if _, ok := m.entries["etc/shadow"]; !ok {
			file("etc/shadow", 0o640, 0, 42, shadowFor(pw.data, m.epoch.Unix()/86400))
		}
	}
	if gr, ok := m.entries["usr/share/base-passwd/group.master"]; ok {
		if _, ok := m.entries["etc/group"]; !ok {
			file("etc/group", 0o644, 0, 0, string(gr.data))
		}
	}

	if _, ok := m.entries["etc/hostname"]; !ok {
		file("etc/hostname", 0o644, 0, 0, "stamp-fixture\n")
	}
	setXattr(m.entries["etc/hostname"], "user.stamp.test", "hello")

	ping := "usr/bin/ping"
	if _, ok := m.entries[ping]; !ok {
		ping = "bin/ping"
	}
	if e, ok := m.entries[ping]; ok {
		if e.hdr.Typeflag != tar.TypeReg {
			return fmt.Errorf("/%s: not a regular file", ping)
		}
		setXattr(e, "security.capability", CapNetRawEP)
	}

	sum := sha256.Sum256([]byte("stamp-test machine-id"))
	file("etc/machine-id", 0o444, 0, 0, hex.EncodeToString(sum[:16])+"\n")
	file("etc/ssh/ssh_host_ed25519_key", 0o600, 0, 0,
		"-----BEGIN OPENSSH PRIVATE KEY-----\nc3RhbXAtdGVzdCBkdW1teSBrZXk=\n-----END OPENSSH PRIVATE KEY-----\n")
	file("etc/ssh/ssh_host_ed25519_key.pub", 0o644, 0, 0, "ssh-ed25519 c3RhbXAtdGVzdA== root@stamp-fixture\n")
	file("var/log/fixture.log", 0o640, 0, 4, "fixture log line\n")
	file("var/lib/systemd/random-seed", 0o600, 0, 0, string(sum[16:]))
	file("var/lib/apt/lists/fixture_dists_bookworm_main_binary-amd64_Packages", 0o644, 0, 0, "Package: fixture\n")
	file("var/cache/apt/pkgcache.bin", 0o644, 0, 0, "fixture cache\n")
	file("tmp/fixture-junk", 0o644, 0, 0, "left behind by a build\n")
	return nil
}

func setXattr(e *member, name, value string) {
	if e.hdr.PAXRecords == nil {
		e.hdr.PAXRecords = map[string]string{}
	}
	e.hdr.PAXRecords["SCHILY.xattr."+name] = value
}

// shadowFor writes a locked shadow line for every account in a passwd file.
func shadowFor(passwd []byte, day int64) string {
	var b bytes.Buffer
	for _, line := range strings.Split(string(passwd), "\n") {
		name, _, ok := strings.Cut(line, ":")
		if !ok || name == "" {
			continue
		}
		fmt.Fprintf(&b, "%s:*:%d:0:99999:7:::\n", name, day)
	}
	return b.String()
}
