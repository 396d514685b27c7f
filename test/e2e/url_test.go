package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// A base fetched over HTTP goes through the cache: pinned by sha256, fetched
// once, and served from the cache afterwards even with the server gone.
func TestBaseFromURL(t *testing.T) {
	dir := t.TempDir()
	body := hostileTar(t, tarMember{name: "etc/hostname", body: "from-url\n"})
	var hits atomic.Int32
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write(body)
	})}
	go srv.Serve(ln)
	sum := sha256.Sum256(body)
	recipe := strings.Replace(tinyRecipe, "  tarball: ./base.tar\n",
		"  tarball: http://"+ln.Addr().String()+"/base.tar\n  sha256: \""+hex.EncodeToString(sum[:])+"\"\n", 1)
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe})
	cache := filepath.Join(dir, "cache")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out1"), "--cache-dir", cache).mustSucceed(t)
	srv.Close()
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out2"), "--cache-dir", cache, "--offline").mustSucceed(t)
	if hits.Load() != 1 {
		t.Fatalf("server was asked %d times, want once", hits.Load())
	}
	// A wrong pin fails naming the field, the URL and both digests.
	bad := strings.Replace(recipe, hex.EncodeToString(sum[:]), strings.Repeat("0", 64), 1)
	writeFiles(t, dir, map[string]string{"recipe.yaml": bad})
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out3"), "--cache-dir", filepath.Join(dir, "cache2"), "--offline").
		mustFail(t, 1, "base.tarball", "base.tar")
}
