package serve

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

const testRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: t
epoch: 1700000000
params:
  motd: hi
  src: ./motd.txt
base:
  tarball: ./base.tar
customize:
  layers:
    - files:
        - {path: /etc/motd, content: "${motd}"}
        - {path: /etc/issue, from: "${src}"}
outputs:
  - {format: tar}
`

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func newServer(t *testing.T, dir string) *Server {
	t.Helper()
	s, err := New(Options{RecipeDir: filepath.Join(dir, "recipes"), CacheDir: filepath.Join(dir, "cache")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.lock.Close() })
	return s
}

// The build ID is the same for the same request, on another server of
// the same stamp too, and changes with anything that decides the outputs:
// a parameter's value, a host file the recipe reads, its lock, an output.
// Where the recipe is written and its comments do not count.
func TestBuildID(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"recipes/r.yaml": testRecipe, "recipes/base.tar": "not read here", "recipes/motd.txt": "one"})
	s := newServer(t, dir)
	id := func(params map[string]string) string {
		t.Helper()
		l, herr := s.load("r.yaml", params)
		if herr != nil {
			t.Fatal(herr)
		}
		return l.id
	}
	first := id(nil)
	seen := map[string]string{first: "the first request"}
	differs := func(what, got string) {
		t.Helper()
		if prev, ok := seen[got]; ok {
			t.Fatalf("%s: the ID of %s", what, prev)
		}
		seen[got] = what
	}
	if again := id(map[string]string{"motd": "hi"}); again != first {
		t.Fatal("a parameter given its default is another build")
	}
	differs("another motd", id(map[string]string{"motd": "ho"}))
	write(t, dir, map[string]string{"recipes/motd.txt": "two"})
	differs("a host file changed", id(nil))
	write(t, dir, map[string]string{"recipes/stamp.lock": "{}"})
	differs("a lock", id(nil))
	write(t, dir, map[string]string{"recipes/r.yaml": strings.Replace(testRecipe, "{format: tar}", "{format: tar, compression: zstd}", 1)})
	differs("an output changed", id(nil))
	write(t, dir, map[string]string{"recipes/r.yaml": "# a comment\n" + strings.Replace(testRecipe, "{format: tar}", "{format: tar, compression: zstd}", 1)})
	if got := id(nil); seen[got] != "an output changed" {
		t.Fatalf("a comment made another ID (that of %q)", seen[got])
	}
	// Another server of the same stamp names it the same.
	s.lock.Close()
	s2 := newServer(t, dir)
	l, herr := s2.load("r.yaml", nil)
	if herr != nil || seen[l.id] != "an output changed" {
		t.Fatalf("another server: %v %q", herr, seen[l.id])
	}
}

func TestLoadTokens(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ file, err string }{
		{"# none\n\n", "no tokens"},
		{"alice short\n", "shorter than 16"},
		{"alice\n", "want NAME TOKEN"},
		{"a 0123456789abcdef0\na 0123456789abcdef1\n", "named twice"},
	} {
		p := filepath.Join(dir, "tokens")
		os.WriteFile(p, []byte(c.file), 0o600)
		if _, err := LoadTokens(p); err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: %v, want %q", c.file, err, c.err)
		}
	}
	p := filepath.Join(dir, "tokens")
	os.WriteFile(p, []byte("alice 0123456789abcdef0\n  bob   fedcba98765432100  \n"), 0o600)
	tk, err := LoadTokens(p)
	if err != nil {
		t.Fatal(err)
	}
	for token, want := range map[string]string{"0123456789abcdef0": "alice", "fedcba98765432100": "bob", "0123456789abcdef": "", "": ""} {
		if got, ok := tk.name(token); got != want || ok != (want != "") {
			t.Errorf("token %q: %q %v", token, got, ok)
		}
	}
}

// Two servers on one cache directory would take each other's builds for
// interrupted ones: the second is refused.
func TestOneServerPerCache(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"recipes/r.yaml": testRecipe})
	newServer(t, dir)
	if _, err := New(Options{RecipeDir: filepath.Join(dir, "recipes"), CacheDir: filepath.Join(dir, "cache")}); err == nil ||
		!strings.Contains(err.Error(), "another stamp serve") {
		t.Fatalf("a second server on the cache: %v", err)
	}
	if _, err := New(Options{RecipeDir: dir, CacheDir: filepath.Join(dir, "cache2")}); err == nil {
		t.Fatal("a cache inside the recipe directory was taken")
	}
}

// The server stops on its context: it stops listening, and reports ready
// only while it serves.
func TestServeStops(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"recipes/r.yaml": testRecipe})
	s := newServer(t, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	url := "http://" + ln.Addr().String()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("never ready")
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp, err := http.Post(url+"/v1/builds", "application/json", strings.NewReader(`{"recipe":"r.yaml"}`))
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a build asked of a server without tokens: %v %v", err, resp.StatusCode)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Fatal("still answering after the context ended")
	}
}

// The shared cache's keys are loaded when the server starts: a key that
// cannot sign, or a flag without the registry it works on, is refused
// then, naming the flag, not at the first build a client asks for.
func TestSharedCacheKeysCheckedAtStart(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, map[string]string{"recipes/r.yaml": testRecipe})
	k := harness.NewSigningKey(t, t.TempDir(), "ci")
	const reg = "reg.invalid/stamp-cache"
	for i, tc := range []struct {
		o    Options
		says string
	}{
		{Options{CacheSign: k.Private}, "give --cache-to"},
		{Options{CacheTo: reg, CacheSign: k.Public}, "--cache-sign: signing key " + k.Public},
		{Options{CacheFrom: reg, CacheTrust: []string{k.Public + ".missing"}}, "--cache-trust: trusted key " + k.Public + ".missing"},
	} {
		tc.o.RecipeDir, tc.o.CacheDir = filepath.Join(dir, "recipes"), filepath.Join(dir, fmt.Sprintf("cache%d", i))
		if _, err := New(tc.o); err == nil || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%+v: %v; want an error saying %q", tc.o, err, tc.says)
		}
	}
	s, err := New(Options{RecipeDir: filepath.Join(dir, "recipes"), CacheDir: filepath.Join(dir, "cache"),
		CacheFrom: reg, CacheTo: reg, CacheSign: k.Private, CacheTrust: []string{k.Public}})
	if err != nil {
		t.Fatal(err)
	}
	s.lock.Close()
}
