package scripts

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// TestNameHashMatchesOpenSSL computes the subject hash of every
// certificate ca-certificates ships and compares it with openssl x509
// -subject_hash, the name openssl rehash links them by.
func TestNameHashMatchesOpenSSL(t *testing.T) {
	harness.RequireTools(t, "openssl")
	repo := harness.NodeRepoFor(t)
	tr := newTree(t)
	unpack(t, tr, filepath.Join(repo.Dir, repo.Debs["ca-certificates"]))
	n := 0
	for _, p := range tr.Paths() {
		if !strings.HasPrefix(p, "/usr/share/ca-certificates/") || !strings.HasSuffix(p, ".crt") {
			continue
		}
		b, err := os.ReadFile(tr.DiskPath(p))
		if err != nil {
			t.Fatal(err)
		}
		blk, _ := pem.Decode(b)
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		h, err := NameHash(c.RawSubject)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		out, err := exec.Command("openssl", "x509", "-subject_hash", "-noout", "-in", tr.DiskPath(p)).Output()
		if err != nil {
			t.Fatalf("openssl x509 %s: %v", p, err)
		}
		if got, want := fmt.Sprintf("%08x", h), strings.TrimSpace(string(out)); got != want {
			t.Errorf("%s: hash %s, openssl says %s", p, got, want)
		}
		n++
	}
	if n < 100 {
		t.Errorf("only %d certificates compared", n)
	}
}
