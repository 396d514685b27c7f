package dpkg

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/packages/deb"
)

const status = `Package: zlib1g
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Version: 1:1.2.13.dfsg-1
Description: compression library

Package: gone
Status: deinstall ok config-files
Architecture: amd64
Version: 1

Package: bash
Version: 5.2
Status: install ok installed
Essential: yes
Architecture: amd64
Homepage: https://example.org
Depends: base-files
Pre-Depends: libc6
`

func TestStatusRoundTrip(t *testing.T) {
	s, err := ReadStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	inst, err := s.Installed("amd64")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range inst {
		names = append(names, p.Name)
	}
	if strings.Join(names, " ") != "bash zlib1g" {
		t.Errorf("installed = %v", names)
	}
	ctrl := &deb.Paragraph{Fields: []deb.Field{
		{Name: "Package", Value: "socat"}, {Name: "Version", Value: "1.7"}, {Name: "Architecture", Value: "amd64"},
		{Name: "Maintainer", Value: "m"}, {Name: "Installed-Size", Value: "9"}, {Name: "Depends", Value: "libc6"},
		{Name: "Section", Value: "net"}, {Name: "Priority", Value: "optional"}, {Name: "Homepage", Value: "h"},
		{Name: "Description", Value: "relay\n long"},
	}}
	s.Put(StatusParagraph(ctrl, StateInstalled, []Conffile{{Path: "/etc/socat.conf", MD5: "0123"}}))
	want := `Package: bash
Essential: yes
Status: install ok installed
Architecture: amd64
Version: 5.2
Depends: base-files
Pre-Depends: libc6
Homepage: https://example.org

Package: gone
Status: deinstall ok config-files
Architecture: amd64
Version: 1

Package: socat
Status: install ok installed
Priority: optional
Section: net
Installed-Size: 9
Maintainer: m
Architecture: amd64
Version: 1.7
Depends: libc6
Conffiles:
 /etc/socat.conf 0123
Description: relay
 long
Homepage: h

Package: zlib1g
Status: install ok installed
Architecture: amd64
Multi-Arch: same
Version: 1:1.2.13.dfsg-1
Description: compression library

`
	if got := string(s.Bytes()); got != want {
		t.Errorf("status:\n%s\nwant:\n%s", got, want)
	}
	// dpkg itself must read what we write.
	if _, err := exec.LookPath("dpkg-query"); err == nil {
		dir := t.TempDir()
		os.MkdirAll(filepath.Join(dir, "info"), 0o755)
		os.WriteFile(filepath.Join(dir, "status"), s.Bytes(), 0o644)
		out, err := exec.Command("dpkg-query", "--admindir", dir, "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\n").CombinedOutput()
		if err != nil {
			t.Fatalf("dpkg-query: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "socat 1.7 ii") || !strings.Contains(string(out), "zlib1g 1:1.2.13.dfsg-1 ii") {
			t.Errorf("dpkg-query reads:\n%s", out)
		}
	}
}

func TestInfoFiles(t *testing.T) {
	if got := InfoFile("zlib1g", "amd64", "same", "list"); got != "/var/lib/dpkg/info/zlib1g:amd64.list" {
		t.Error(got)
	}
	if got := InfoFile("bash", "amd64", "foreign", "md5sums"); got != "/var/lib/dpkg/info/bash.md5sums" {
		t.Error(got)
	}
	if got := string(ListFile([]string{"/", "/usr", "/usr/bin/x"})); got != "/.\n/usr\n/usr/bin/x\n" {
		t.Errorf("%q", got)
	}
	sums := "0123456789abcdef0123456789abcdef  usr/bin/x\n0123456789abcdef0123456789abcdef  usr/share/doc/x/copyright\n"
	got, err := FilterMD5Sums([]byte(sums), func(p string) bool { return !strings.HasPrefix(p, "/usr/share/doc/") })
	if err != nil || string(got) != "0123456789abcdef0123456789abcdef  usr/bin/x\n" {
		t.Errorf("%q %v", got, err)
	}
	if _, err := FilterMD5Sums([]byte("bad line\n"), func(string) bool { return true }); err == nil {
		t.Error("bad md5sums accepted")
	}
	if got := ParseConffiles([]byte("/etc/a\nremove-on-upgrade /etc/b\n\n/etc/c\n")); strings.Join(got, " ") != "/etc/a /etc/c" {
		t.Errorf("%v", got)
	}
	for name, want := range map[string]bool{"postinst": true, "md5sums": true, "control": false, "foo.bar": false} {
		if CopiedControl(name) != want {
			t.Errorf("CopiedControl(%q) != %v", name, want)
		}
	}
}
