package stamp

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestOutputDirectories(t *testing.T) {
	staging := t.TempDir()
	for name, content := range map[string]string{
		"n.oci/b":          "1",
		"n.oci/b.c":        "2",
		"n.oci/b/x":        "3",
		"n.oci.digest":     "4",
		"n.tar":            "5",
		"n.oci/blobs/s/ab": "6",
	} {
		p := filepath.Join(staging, name)
		if name == "n.oci/b" {
			p = filepath.Join(staging, "n.oci", "b-file")
		}
		os.MkdirAll(filepath.Dir(p), 0o700)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got, err := sumNames(staging, []string{"n.oci", "n.oci.digest", "n.tar"})
	if err != nil {
		t.Fatal(err)
	}
	// Byte order of the whole path: "." sorts before "/".
	want := []string{"n.oci.digest", "n.oci/b-file", "n.oci/b.c", "n.oci/b/x", "n.oci/blobs/s/ab", "n.tar"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sumNames\n got  %q\n want %q", got, want)
	}

	if err := chmodOutput(filepath.Join(staging, "n.oci")); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{"n.oci": 0o755, "n.oci/b": 0o755, "n.oci/b/x": 0o644, "n.oci/b.c": 0o644} {
		fi, err := os.Stat(filepath.Join(staging, p))
		if err != nil || fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v (err %v), want %v", p, fi.Mode().Perm(), err, mode)
		}
	}

	// A directory output replaces an earlier build's directory, and a
	// file; a file replaces a directory.
	out := t.TempDir()
	os.MkdirAll(filepath.Join(out, "n.oci", "old"), 0o755)
	os.WriteFile(filepath.Join(out, "n.tar"), []byte("old"), 0o644)
	for _, name := range []string{"n.oci", "n.tar"} {
		if err := renameOutput(staging, name, filepath.Join(out, name)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "n.oci", "old")); !os.IsNotExist(err) {
		t.Errorf("the old layout's files survive: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "n.oci", "b", "x")); string(b) != "3" {
		t.Errorf("new layout not in place: %q", b)
	}
	os.MkdirAll(filepath.Join(staging, "n.oci.digest-dir"), 0o755)
	os.WriteFile(filepath.Join(out, "n.oci.digest-dir"), []byte("a file"), 0o644)
	if err := renameOutput(staging, "n.oci.digest-dir", filepath.Join(out, "n.oci.digest-dir")); err != nil {
		t.Errorf("directory over a file: %v", err)
	}
	os.Mkdir(filepath.Join(out, "n.oci.digest"), 0o755)
	if err := renameOutput(staging, "n.oci.digest", filepath.Join(out, "n.oci.digest")); err != nil {
		t.Errorf("file over a directory: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(out, "n.oci.digest")); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("n.oci.digest: %v %v", fi, err)
	}
}
