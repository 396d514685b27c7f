package journalcatalog

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// buildFromDir is Build over the catalog files of a host directory laid
// out as an image.
func buildFromDir(t *testing.T, root string) []byte {
	t.Helper()
	paths := Choose(func(dir string) []string {
		ents, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			return nil
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	})
	var files []File
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, File{Path: p, Data: b})
	}
	db, err := Build(files)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// journalctl runs the host's journalctl --update-catalog on root and
// returns the database it wrote, or nil when it wrote none.
func journalctl(t *testing.T, root string) []byte {
	t.Helper()
	harness.RequireTools(t, "journalctl")
	cmd := exec.Command("journalctl", "--root="+root, "--update-catalog")
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("journalctl --update-catalog: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(root, Database))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeTree(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		hp := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(hp, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMatchesJournalctlOnSystemd: the catalog files systemd's own package
// ships (every language) give the database journalctl writes from them,
// byte for byte.
func TestMatchesJournalctlOnSystemd(t *testing.T) {
	harness.RequireTools(t, "dpkg-deb")
	root := t.TempDir()
	for _, deb := range harness.Debs(t, "systemd") {
		if !strings.HasPrefix(filepath.Base(deb), "systemd_") {
			continue
		}
		if out, err := exec.Command("dpkg-deb", "-x", deb, root).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb -x %s: %v\n%s", deb, err, out)
		}
	}
	ents, _ := os.ReadDir(filepath.Join(root, Dirs[1]))
	if len(ents) < 10 {
		t.Fatalf("systemd's package has %d catalog files; expected its translations too", len(ents))
	}
	got := buildFromDir(t, root)
	want := journalctl(t, root)
	if want == nil || !bytes.Equal(got, want) {
		t.Fatalf("database differs from journalctl's: %d bytes, journalctl's %d (first difference at %d)", len(got), len(want), firstDiff(got, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestMatchesJournalctlOnEdges: the rules of the files around the entries
// (a name in /usr/local hiding /usr/lib's, hidden files, languages from the
// file name and from the entry, an entry given twice and combined, texts
// that share tails, comments, CR LF line ends), each held to journalctl.
func TestMatchesJournalctlOnEdges(t *testing.T) {
	const a, b, c = "00112233445566778899aabbccddeeff", "0123456789ABCDEF0123456789abcdef", "fedcba98765432100123456789abcdef"
	cases := map[string]map[string]string{
		"empty": {Dirs[1] + "/x.catalog": "# nothing\n"},
		"override and hidden": {
			Dirs[0] + "/one.catalog":  "-- " + a + "\nSubject: local\n\nlocal body\n",
			Dirs[1] + "/one.catalog":  "-- " + a + "\nSubject: vendor\n",
			Dirs[1] + "/.two.catalog": "-- " + b + "\nSubject: hidden\n",
			Dirs[1] + "/two.catalog~": "-- " + b + "\nSubject: backup\n",
			Dirs[1] + "/three.catalog": "-- " + c + "\nSubject: three\nDefined-By: test\n\nbody\n\n\nmore\n" +
				"-- " + b + " de\nSubject: drei\n",
		},
		"languages and combining": {
			Dirs[1] + "/a.catalog":       "-- " + a + "\nSubject: first\n\nbody one\n",
			Dirs[1] + "/b.catalog":       "-- " + a + "\nSubject: second\nX-Extra: 1\n",
			Dirs[1] + "/c.catalog":       "-- " + a + "\nSubject: third\n\nbody three\n",
			Dirs[1] + "/d.pt_BR.catalog": "-- " + a + "\nSubject: portuguese\n\n-- " + b + " pt_BR\nSubject: again\n\n-- " + c + " fr\nSubject: french\n",
			Dirs[1] + "/e.catalog":       "; comment\n-- " + c + "\r\nSubject: crlf\r\n\r\nbody\r\n-- " + b + "\nnot a new entry\n",
		},
		"shared tails": {
			Dirs[1] + "/t.catalog": "-- " + a + "\nbody\n\n-- " + b + "\nsame body\n\n-- " + c + "\nbody\n\n-- " + a + " de\nme body\n",
		},
	}
	for name, files := range cases {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, files)
			got := buildFromDir(t, root)
			want := journalctl(t, root)
			if !bytes.Equal(got, want) {
				t.Errorf("database differs from journalctl's: %d bytes, journalctl's %d (first difference at %d)\n%q\n%q", len(got), len(want), firstDiff(got, want), got, want)
			}
		})
	}
}

// A malformed file fails the build with its path, where journalctl
// refuses to write a database.
func TestRefusesMalformed(t *testing.T) {
	for _, body := range []string{
		"text before an ID\n",
		"-- 00112233445566778899aabbccddeeff x\nSubject: too short a language\n",
		"-- 00112233445566778899aabbccddeeff\n",
	} {
		_, err := Build([]File{{Path: "/usr/lib/systemd/catalog/bad.catalog", Data: []byte(body)}})
		if err == nil || !strings.Contains(err.Error(), "bad.catalog") {
			t.Errorf("%q: err = %v, want an error naming the file", body, err)
		}
		root := t.TempDir()
		writeTree(t, root, map[string]string{"/usr/lib/systemd/catalog/bad.catalog": body})
		cmd := exec.Command("journalctl", "--root="+root, "--update-catalog")
		if err := cmd.Run(); err == nil {
			t.Errorf("%q: journalctl accepted it", body)
		}
	}
}
