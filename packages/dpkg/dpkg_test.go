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

// TestDpkgValue holds control values to what dpkg 1.21 writes into its
// status after parsing them; TestStatusAsDpkgWritesIt has dpkg itself
// judge them.
func TestDpkgValue(t *testing.T) {
	for _, c := range []struct {
		field, in, want string
		kept            bool
	}{
		{"Version", "0:1.2-3", "1.2-3", true},
		{"Version", "01:1.2", "1:1.2", true},
		{"Version", "0:1:2-3", "0:1:2-3", true},
		{"Version", "2.36-9+deb12u4", "2.36-9+deb12u4", true},
		{"Depends", "libc6(>=2.34),  foo|bar:any (<< 0:3~) ,\n baz (>1)", "libc6 (>= 2.34), foo | bar:any (<< 3~), baz (>= 1)", true},
		{"Provides", "awk (= 1.3)", "awk (= 1.3)", true},
		{"Multi-Arch", "Same", "same", true},
		{"Multi-Arch", "no", "", false},
		{"Essential", "no", "", false},
		{"Essential", "yes", "yes", true},
		{"Description", "synopsis \n body", "synopsis \n body", true},
	} {
		got, ok := dpkgValue(c.field, c.in)
		if ok != c.kept || ok && got != c.want {
			t.Errorf("%s: %q gives %q, %v; want %q, %v", c.field, c.in, got, ok, c.want, c.kept)
		}
	}
}

// oddControl spells a control file every way dpkg rewrites or keeps: a
// zero epoch, relations without spaces, over two lines and with an
// obsolete operator, Multi-Arch capitalised, Essential: no, a field whose
// first line is empty, and a synopsis ending in a space.
const oddControl = `Package: spelltest
Version: 0:1.2-3
Architecture: amd64
Maintainer: x <x@y>
Multi-Arch: Same
Essential: no
Depends: libc6(>=2.34),  foo|bar:any (<< 0:3~) ,
 baz (>1)
Provides: awk (= 1.3)
X-Odd:
 line one
Description: synopsis 
 body
`

// TestStatusAsDpkgWritesIt installs a package of oddControl with dpkg into
// an empty database and holds the status stamp writes for it to dpkg's,
// byte for byte.
func TestStatusAsDpkgWritesIt(t *testing.T) {
	for _, tool := range []string{"dpkg", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	d := t.TempDir()
	for _, dir := range []string{"pkg/DEBIAN", "root", "admin/updates", "admin/info"} {
		if err := os.MkdirAll(filepath.Join(d, dir), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, body := range map[string]string{"pkg/DEBIAN/control": oddControl, "admin/status": "", "admin/available": ""} {
		if err := os.WriteFile(filepath.Join(d, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	pkg := filepath.Join(d, "x.deb")
	if out, err := exec.Command("dpkg-deb", "--root-owner-group", "-b", filepath.Join(d, "pkg"), pkg).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb: %v\n%s", err, out)
	}
	// The dependencies are missing: dpkg leaves the package configured
	// all the same under --force-all.
	cmd := exec.Command("dpkg", "--admindir="+filepath.Join(d, "admin"), "--instdir="+filepath.Join(d, "root"),
		"--force-all", "--force-not-root", "--log=/dev/null", "-i", pkg)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("dpkg -i: %v\n%s", err, out)
	}
	want, err := os.ReadFile(filepath.Join(d, "admin/status"))
	if err != nil {
		t.Fatal(err)
	}
	ps, err := deb.ParseControl(strings.NewReader(oddControl))
	if err != nil {
		t.Fatal(err)
	}
	st := NewStatus()
	st.Put(StatusParagraph(ps[0], StateInstalled, nil))
	if got := st.Bytes(); string(got) != string(want) {
		t.Errorf("stamp writes\n%q\ndpkg wrote\n%q", got, want)
	}
}
