package rootfs

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestGlobMatchesMatch checks that Glob, which matches only the run of
// paths under a pattern's literal segments, finds exactly the paths Match
// accepts among all of them, for patterns with and without such segments
// and paths that share a literal prefix without being under it.
func TestGlobMatchesMatch(t *testing.T) {
	tr, err := New(filepath.Join(t.TempDir(), "tree"), Options{DefaultMTime: epoch})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	dir := Header{Type: TypeDir, Perm: 0o755, MTime: epoch}
	file := Header{Type: TypeRegular, Perm: 0o644, MTime: epoch}
	for _, p := range []string{"/var", "/var/log", "/var/log/apt", "/var/log-old", "/var/logs", "/var/lib", "/etc", "/etc/ssh", "/usr", "/usr/lib", "/usr/share", "/usr/share/doc", "/tmp", "/tmp/x"} {
		if _, err := tr.Create(p, dir, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"/var/log/dpkg.log", "/var/log/apt/history.log", "/var/log-old/a", "/var/logs/b", "/etc/ssh/ssh_host_rsa_key", "/etc/ssh/sshd_config",
		"/etc/machine-id", "/etc/machine-idx", "/usr/lib/a.pyc", "/a.pyc", "/usr/share/doc/c", "/tmp/x/y", "/tmp/z", "/etc/a*b", "/etc/[x]"} {
		if _, err := tr.Create(p, file, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, pat := range []string{"/var/log/**", "/var/log", "/var/log*", "/var/log/*", "/etc/ssh/ssh_host_*", "/etc/machine-id", "/**/*.pyc", "/usr/*/doc/**",
		"/tmp/**", "/**", "/*", "/etc/a\\*b", "/etc/[[]x]", "/nothing/**", "/", "/var/./log/*", "/var/log/../log/*"} {
		var want []string
		for _, p := range tr.Paths() {
			if p != "/" && Match(pat, p) {
				want = append(want, p)
			}
		}
		if got := tr.Glob(pat); !slices.Equal(got, want) {
			t.Errorf("Glob(%q) = %q, Match accepts %q", pat, got, want)
		}
	}
	if got := tr.Glob("/var/log/**"); !slices.Equal(got, []string{"/var/log/apt", "/var/log/apt/history.log", "/var/log/dpkg.log"}) {
		t.Errorf("Glob(/var/log/**) = %q", got)
	}
}

// splitPath, on which every lookup in the tree rests, drops empty and "."
// components and keeps the rest in order, whatever the slashes.
func TestSplitPath(t *testing.T) {
	for p, want := range map[string][]string{
		"":            {},
		"/":           {},
		"//a//b/":     {"a", "b"},
		"./a/./b/.":   {"a", "b"},
		"a/b":         {"a", "b"},
		"/a/../b":     {"a", "..", "b"},
		"/.hidden/..": {".hidden", ".."},
		"/a b/c\\d":   {"a b", "c\\d"},
	} {
		if got := splitPath(p); !slices.Equal(got, want) {
			t.Errorf("splitPath(%q) = %q, want %q", p, got, want)
		}
	}
}
