package scripts

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// TestCoreutilsMatchHost runs the text and file handlers that have a
// counterpart on the host beside the real tool (/usr/bin's coreutils, grep,
// mawk), as TestSedMatchesSed does for sed: the same command line, in a
// directory holding the same files, must print the same on stdout and end
// with the same status. What they print on stderr is not compared (the
// tools name their own errors).
//
// Where the handlers differ from the tools today, left out below because
// this change keeps their behaviour: grep and head with several files
// print no file names or headers; grep -- PATTERN takes the pattern for a
// file; cmp's "differ" line lacks ": byte N, line M".
func TestCoreutilsMatchHost(t *testing.T) {
	files := map[string]string{
		"in":     "Alpha beta\nbeta\nalpha\ngamma 3\nbeta\n\nalpha\n",
		"nums":   "10\n9\n2\n2\n1\n",
		"a":      "abc\n",
		"b":      "abd\n",
		"c":      "abc\n",
		"colons": "/usr/lib:/lib:/opt\n",
		"words":  "6.1.0-13-amd64 x86_64\nen_US.UTF-8 UTF-8\n# de_DE ISO-8859-1\n",
	}
	for _, cmd := range []string{
		// grep, egrep, fgrep
		"grep alpha in", "grep -i ALPHA in", "grep -c beta in", "grep -v beta in", "grep -x beta in",
		"grep -q gamma in", "grep -q zzz in", "grep -e alpha -e gamma in", "grep -E '^(beta|gamma)' in",
		"grep -F a.b in", "grep -c '' in", "grep alpha missing", "grep -s alpha missing",
		"grep -vc beta in", "grep '^$' in", "grep -ix 'BETA' in",
		"egrep 'al+pha|gam' in", "fgrep '.' words", "grep 'a\\(l\\)' in",
		// tr
		"tr a-z A-Z < in", "tr -d : < colons", "tr : ' ' < colons", "tr -d '\\n' < a", "tr abc xyz < a",
		// sort, uniq
		"sort in", "sort -u in", "sort -r in", "sort -ru in", "sort nums", "sort in nums",
		"uniq < in", "sort in | uniq", "sort in | uniq -c", "uniq -c < nums",
		// head, wc, seq
		"head -n 2 in", "head -1 in", "head -n 20 in", "head in",
		"wc -l in", "wc -l < in", "wc -l missing",
		"seq 3", "seq 2 4", "seq 1 3 10", "seq 5 1", "seq 0",
		// cat, cmp
		"cat a b", "cat missing", "cat a - b < c", "cmp a c", "cmp -s a b", "cmp a missing",
		// basename, dirname, readlink, expr, date, stat, awk
		"basename /usr/lib/x.so", "basename /usr/lib/x.so .so", "basename /", "basename a/b/",
		"dirname /usr/lib/x.so", "dirname x", "dirname /", "dirname a/b/", "dirname /a/../b", "dirname a//b//", "dirname /a x/y",
		"ln -s a l; readlink l", "readlink a", "ln -s ../x/y l2; readlink l2",
		"expr 6.1.0 : '\\([0-9]*\\)'", "expr abc : 'a.'", "expr abc : 'x'", "expr 6.1.0-13 : '[0-9]*\\.\\([0-9]*\\)'",
		"date -u -d 'Mon Jan  2 15:04:05 UTC 2006'", "stat -c '%a %s %n' a in", "stat -c %n missing",
		"awk '{ print $1 }' in", "awk '/beta/ {print $2}' in", "awk '{print $3}' words",
		"awk '/^LANG=/ {gsub(\"\\\"\", \"\"); sub(\"LANG=\", \"\"); lang=$0;} END {print lang}' lang",
	} {
		t.Run(cmd, func(t *testing.T) {
			fs := with(files, "lang", "X=1\nLANG=\"C.UTF-8\"\n")
			script := "{ " + cmd + "\n} >out 2>/dev/null; echo \"status $?\" >>out\n"
			want := hostRun(t, fs, script)
			got := treeRun(t, fs, script)
			if got != want {
				t.Errorf("%s: stamp\n%s\nthe host's tools\n%s", cmd, got, want)
			}
		})
	}
}

// hostRun runs script with the host's sh and tools in a directory holding
// files, and returns what it wrote to out.
func hostRun(t *testing.T, files map[string]string, script string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range slices.Sorted(maps.Keys(files)) {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(files[name]), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C.UTF-8", "TZ=UTC"}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("host sh: %v %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// treeRun runs script as a maintainer script, in /w of a tree holding
// files (and an awk to find), and returns what it wrote to out.
func treeRun(t *testing.T, files map[string]string, script string) string {
	t.Helper()
	tr := newTree(t)
	file(t, tr, "/usr/bin/awk", "")
	for _, name := range slices.Sorted(maps.Keys(files)) {
		file(t, tr, "/w/"+name, files[name])
	}
	body := "#!/bin/sh\ncd /w\n" + script
	if err := Run(context.Background(), env(tr), Script{Package: "t", Name: "postinst", Body: []byte(body)}, "configure", ""); err != nil {
		t.Fatal(err)
	}
	b, err := readTree(tr, "/w/out")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPipelineStagesKeepTheirDirectories runs the stages of pipelines,
// which the interpreter runs at once, each in a directory of its own: a
// stage's relative operands are its own directory's, whatever the other
// stage's cd did meanwhile (a working directory kept for the whole
// script once made one stage read the other's file; go test -race named
// it).
func TestPipelineStagesKeepTheirDirectories(t *testing.T) {
	got := treeRun(t, map[string]string{"a/f": "in a\n", "b/f": "in b\n"}, `
: > out
i=0
while [ $i -lt 40 ]; do
	(cd a && cat f) | (cd b && cat f -) >> out
	i=$((i + 1))
done
`)
	want := ""
	for range 40 {
		want += "in b\nin a\n"
	}
	if got != want {
		t.Errorf("out = %q, want %q", got, want)
	}
}
