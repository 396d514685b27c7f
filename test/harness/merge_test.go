package harness

import (
	"archive/tar"
	"bytes"
	"strings"
	"testing"
	"time"
)

// tarOf writes headers (with string bodies for regular files) as a tar stream.
func tarOf(t *testing.T, members ...any) *bytes.Buffer {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for i := 0; i < len(members); i += 2 {
		h := members[i].(tar.Header)
		body := members[i+1].(string)
		h.Size = int64(len(body))
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return &b
}

func mergeEntries(t *testing.T, m *merge) map[string]TarEntry {
	t.Helper()
	var out bytes.Buffer
	if err := m.write(&out); err != nil {
		t.Fatal(err)
	}
	entries, err := ReadTarStream(&out)
	if err != nil {
		t.Fatal(err)
	}
	return TarIndex(entries)
}

var later = time.Unix(1800000000, 0)

func TestMergeReplacesAndFolds(t *testing.T) {
	m := newMerge(DefaultEpoch, true)
	dir := func(n string) tar.Header { return tar.Header{Name: n, Typeflag: tar.TypeDir, Mode: 0o755} }
	reg := func(n string, mode int64) tar.Header {
		return tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: mode, ModTime: later}
	}
	if err := m.addTar(tarOf(t,
		dir("./"), "", dir("./bin/"), "", reg("./bin/tool", 0o755), "one",
		dir("./opt/x/"), "", reg("./opt/x/inner", 0o644), "gone"),
	); err != nil {
		t.Fatal(err)
	}
	// The second package replaces /bin/tool and turns the directory /opt/x into a file.
	if err := m.addTar(tarOf(t, reg("./bin/tool", 0o700), "two", reg("./opt/x", 0o644), "file")); err != nil {
		t.Fatal(err)
	}
	m.finishUsrMerge()
	idx := mergeEntries(t, m)

	tool := idx["/usr/bin/tool"]
	if tool.Mode != 0o700 || tool.Size != 3 {
		t.Errorf("later package did not win: %s", tool)
	}
	if !tool.ModTime.Equal(DefaultEpoch) {
		t.Errorf("mtime %v not clamped to %v", tool.ModTime, DefaultEpoch)
	}
	if _, ok := idx["/opt/x/inner"]; ok {
		t.Error("/opt/x/inner survived /opt/x becoming a file")
	}
	if idx["/bin"].Type != tar.TypeSymlink || idx["/sbin"].Linkname != "usr/sbin" {
		t.Errorf("usr-merge symlinks: %s / %s", idx["/bin"], idx["/sbin"])
	}
}

// A package may make the link under the name that sorts first; the writer
// must still put the content on the first name in the stream.
func TestMergeHardLinkOrder(t *testing.T) {
	m := newMerge(DefaultEpoch, false)
	if err := m.addTar(tarOf(t,
		tar.Header{Name: "./z", Typeflag: tar.TypeReg, Mode: 0o644}, "data",
		tar.Header{Name: "./a", Typeflag: tar.TypeLink, Linkname: "./z"}, "",
		tar.Header{Name: "./m", Typeflag: tar.TypeLink, Linkname: "./a"}, "",
	)); err != nil {
		t.Fatal(err)
	}
	idx := mergeEntries(t, m)
	if a := idx["/a"]; a.Type != tar.TypeReg || a.Size != 4 {
		t.Errorf("/a should carry the content: %s", a)
	}
	for _, n := range []string{"/m", "/z"} {
		if e := idx[n]; e.Type != tar.TypeLink || e.Linkname != "/a" {
			t.Errorf("%s should link to /a: %s", n, e)
		}
	}
}

func TestMergeRejects(t *testing.T) {
	for name, members := range map[string][]any{
		"dotdot":        {tar.Header{Name: "./a/../../etc/x", Typeflag: tar.TypeReg}, "x"},
		"dangling link": {tar.Header{Name: "./a", Typeflag: tar.TypeLink, Linkname: "./nowhere"}, ""},
		"link to dir":   {tar.Header{Name: "./d/", Typeflag: tar.TypeDir}, "", tar.Header{Name: "./a", Typeflag: tar.TypeLink, Linkname: "./d"}, ""},
	} {
		m := newMerge(DefaultEpoch, true)
		err := m.addTar(tarOf(t, members...))
		if err == nil {
			var out bytes.Buffer
			err = m.write(&out)
		}
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "/") {
			t.Errorf("%s: error does not name the path: %v", name, err)
		}
	}
}
