package deb

import (
	"archive/tar"
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

func TestParseControl(t *testing.T) {
	in := "Package: foo\nVersion: 1.0\nDescription: short\n long line\n .\n more\n\n\n# comment\nPackage: bar\nConffiles:\n /etc/bar 0123\n"
	ps, err := ParseControl(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 {
		t.Fatalf("%d paragraphs", len(ps))
	}
	if got := ps[0].Get("description"); got != "short\n long line\n .\n more" {
		t.Errorf("Description = %q", got)
	}
	if got := ps[1].Get("Conffiles"); got != "\n /etc/bar 0123" {
		t.Errorf("Conffiles = %q", got)
	}
	want := "Package: foo\nVersion: 1.0\nDescription: short\n long line\n .\n more\n"
	if got := ps[0].String(); got != want {
		t.Errorf("round trip = %q, want %q", got, want)
	}
	if got := ps[1].String(); got != "Package: bar\nConffiles:\n /etc/bar 0123\n" {
		t.Errorf("round trip = %q", got)
	}
	// Values as dpkg reads them: blanks after the colon and at the very
	// end of a value dropped, those at the end of an earlier line kept
	// (libgdbm6's synopsis ends in a space).
	ps, err = ParseControl(strings.NewReader("Package: libgdbm6 \t\nDescription: GNU dbm database routines (runtime version) \n GNU dbm ('gdbm') is a library of database functions.  \nX-Empty:\t \n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || len(ps[0].Fields) != 3 {
		t.Fatalf("%d paragraphs: %+v", len(ps), ps)
	}
	for f, want := range map[string]string{"Package": "libgdbm6", "X-Empty": "",
		"Description": "GNU dbm database routines (runtime version) \n GNU dbm ('gdbm') is a library of database functions."} {
		if got := ps[0].Get(f); got != want {
			t.Errorf("%s = %q, want %q", f, got, want)
		}
	}
	for _, bad := range []string{" leading continuation\n", "Package foo\n", "Bad Name: x\n"} {
		if _, err := ParseControl(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseControl(%q) succeeded", bad)
		}
	}
}

func TestParseRelations(t *testing.T) {
	got, err := ParseRelations("libc6 (>= 2.34), foo | bar:any (<< 3~) , baz:amd64 [amd64] <!nocheck>, qux (> 1)")
	if err != nil {
		t.Fatal(err)
	}
	want := []Alternatives{
		{{Name: "libc6", Op: OpGE, Version: "2.34"}},
		{{Name: "foo"}, {Name: "bar", Arch: "any", Op: OpLT, Version: "3~"}},
		{{Name: "baz", Arch: "amd64"}},
		{{Name: "qux", Op: OpGE, Version: "1"}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	for i := range want {
		if got[i].String() != want[i].String() {
			t.Errorf("item %d = %s, want %s", i, got[i], want[i])
		}
	}
	if !want[1][1].Satisfied("3~~") || want[1][1].Satisfied("3") {
		t.Error("<< 3~ constraint wrong")
	}
	for _, bad := range []string{"foo (>= )", "foo (!= 1)", "foo (>= 1", "a b"} {
		if _, err := ParseRelations(bad); err == nil {
			t.Errorf("ParseRelations(%q) succeeded", bad)
		}
	}
}

// TestReaderMatchesDpkgDeb reads real .debs and compares the control data
// and the data.tar stream with what dpkg-deb extracts from the same files.
func TestReaderMatchesDpkgDeb(t *testing.T) {
	harness.RequireTools(t, "dpkg-deb")
	// Named, so the test reads the same packages whatever an earlier run
	// left in the deb cache.
	debs := harness.Debs(t, "base-files", "bash", "coreutils", "libc6", "passwd", "iputils-ping")
	for _, f := range debs {
		t.Run(filepath.Base(f), func(t *testing.T) {
			fh, err := os.Open(f)
			if err != nil {
				t.Fatal(err)
			}
			defer fh.Close()
			r, err := NewReader(fh)
			if err != nil {
				t.Fatal(err)
			}
			ctrl, err := exec.Command("dpkg-deb", "-f", f).Output()
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Control().Paragraph.String(); got != string(ctrl) {
				t.Errorf("control:\n%s\nwant:\n%s", got, ctrl)
			}
			dir := t.TempDir()
			if err := exec.Command("dpkg-deb", "-e", f, dir).Run(); err != nil {
				t.Fatal(err)
			}
			for _, n := range r.Control().Names() {
				want, err := os.ReadFile(filepath.Join(dir, n))
				if err != nil {
					t.Fatalf("%s: %v", n, err)
				}
				if !bytes.Equal(want, r.Control().Files[n]) {
					t.Errorf("control member %s differs", n)
				}
			}
			data, err := r.Data()
			if err != nil {
				t.Fatal(err)
			}
			got := tarSums(t, data)
			cmd := exec.Command("dpkg-deb", "--fsys-tarfile", f)
			out, _ := cmd.StdoutPipe()
			cmd.Start()
			want := tarSums(t, out)
			cmd.Wait()
			if got != want || got == "" {
				t.Errorf("data.tar differs from dpkg-deb --fsys-tarfile")
			}
		})
	}
}

func tarSums(t *testing.T, r io.Reader) string {
	t.Helper()
	tr := tar.NewReader(r)
	var b strings.Builder
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return b.String()
		}
		if err != nil {
			t.Fatal(err)
		}
		s := md5.New()
		io.Copy(s, tr)
		b.WriteString(h.Name + " " + h.Linkname + " " + hex.EncodeToString(s.Sum(nil)) + "\n")
	}
}

func TestReaderRejects(t *testing.T) {
	for name, in := range map[string]string{
		"empty":     "",
		"not ar":    "hello world",
		"no binary": arMagic + "control.tar.gz/ 0           0     0     100644  0         `\n",
	} {
		if _, err := NewReader(strings.NewReader(in)); err == nil {
			t.Errorf("%s: NewReader succeeded", name)
		}
	}
}
