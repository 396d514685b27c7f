package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// SigningKey is an ed25519 key pair as OpenSSL writes it, for the signed
// shared cache: Private is a PKCS#8 PEM file, Public the PKIX PEM file of its
// public key. Both files are readable by uid 65534, as a CI secret mounted
// into a pod is by the runner.
type SigningKey struct {
	Private, Public string
}

// NewSigningKey makes a key pair with openssl under dir, the files named
// name.key and name.pub.
func NewSigningKey(t testing.TB, dir, name string) SigningKey {
	t.Helper()
	openssl := Tool(t, "openssl")
	k := SigningKey{Private: filepath.Join(dir, name+".key"), Public: filepath.Join(dir, name+".pub")}
	for _, args := range [][]string{
		{"genpkey", "-algorithm", "ed25519", "-out", k.Private},
		{"pkey", "-in", k.Private, "-pubout", "-out", k.Public},
	} {
		if out, err := exec.Command(openssl, args...).CombinedOutput(); err != nil {
			t.Fatalf("openssl %v: %v\n%s", args, err, out)
		}
	}
	for _, p := range []string{k.Private, k.Public} {
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return k
}
