package sign

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

const recordType = "application/vnd.stamp.cache.record.v1+json"

func openssl(t *testing.T, args ...string) []byte {
	t.Helper()
	out, err := exec.Command(harness.Tool(t, "openssl"), args...).Output()
	if err != nil {
		t.Fatalf("openssl %v: %v", args, err)
	}
	return out
}

// TestPAE is the example of DSSE's protocol description.
func TestPAE(t *testing.T) {
	got := PAE("http://example.com/HelloWorld", []byte("hello world"))
	if want := "DSSEv1 29 http://example.com/HelloWorld 11 hello world"; string(got) != want {
		t.Errorf("PAE = %q, want %q", got, want)
	}
}

// TestAgainstOpenSSL: keys as openssl writes them load, the key ID is the
// sha256 of the DER public key openssl prints, and stamp's signature over
// the PAE is the very bytes openssl's ed25519 signature is, and verifies.
func TestAgainstOpenSSL(t *testing.T) {
	dir := t.TempDir()
	k := harness.NewSigningKey(t, dir, "ci")
	s, err := LoadSigner(k.Private)
	if err != nil {
		t.Fatal(err)
	}
	der := openssl(t, "pkey", "-pubin", "-in", k.Public, "-outform", "DER")
	sum := sha256.Sum256(der)
	if want := "sha256:" + hex.EncodeToString(sum[:]); s.KeyID() != want {
		t.Errorf("KeyID = %s, openssl's DER hashes to %s", s.KeyID(), want)
	}
	payload := []byte(`{"kind":"output","key":"sha256:00"}`)
	pae := filepath.Join(dir, "pae")
	if err := os.WriteFile(pae, PAE(recordType, payload), 0o644); err != nil {
		t.Fatal(err)
	}
	theirs := openssl(t, "pkeyutl", "-sign", "-inkey", k.Private, "-rawin", "-in", pae)
	ours := s.Sign(recordType, payload)
	if !bytes.Equal(ours.Sig, theirs) {
		t.Errorf("signature %x, openssl signs %x", ours.Sig, theirs)
	}
	trust, err := LoadTrust(k.Public)
	if err != nil {
		t.Fatal(err)
	}
	if id, err := trust.Verify(recordType, payload, []Signature{{KeyID: s.KeyID(), Sig: theirs}}); err != nil || id != s.KeyID() {
		t.Errorf("Verify(openssl's signature) = %s, %v", id, err)
	}
	if !trust.Trusts(s.KeyID()) || trust.Len() != 1 {
		t.Error("the trust set does not hold the key it loaded")
	}
}

func TestVerifyRefuses(t *testing.T) {
	dir := t.TempDir()
	load := func(name string) (*Signer, *Trust) {
		k := harness.NewSigningKey(t, dir, name)
		s, err := LoadSigner(k.Private)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := LoadTrust(k.Public)
		if err != nil {
			t.Fatal(err)
		}
		return s, tr
	}
	trusted, trust := load("trusted")
	other, _ := load("other")
	payload := []byte("the record")
	good := trusted.Sign(recordType, payload)
	flipped := good
	flipped.Sig = bytes.Clone(good.Sig)
	flipped.Sig[10] ^= 1
	// Another key's signature filed under the trusted key's ID.
	posing := other.Sign(recordType, payload)
	posing.KeyID = trusted.KeyID()
	many := make([]Signature, maxSignatures+1)
	for i := range many {
		many[i] = good
	}

	if _, err := trust.Verify(recordType, payload, []Signature{posing, good}); err != nil {
		t.Errorf("a good signature after a bad one: %v", err)
	}
	for _, tc := range []struct {
		name    string
		typ     string
		payload []byte
		sigs    []Signature
		says    string
	}{
		{"unsigned", recordType, payload, nil, "unsigned"},
		{"untrusted key", recordType, payload, []Signature{other.Sign(recordType, payload)}, other.KeyID()},
		{"other payload", recordType, []byte("the record, forged"), []Signature{good}, "does not verify"},
		{"other payload type", "application/vnd.other", payload, []Signature{good}, "does not verify"},
		{"flipped bit", recordType, payload, []Signature{flipped}, "does not verify"},
		{"another key posing", recordType, payload, []Signature{posing}, "does not verify"},
		{"short signature", recordType, payload, []Signature{{KeyID: trusted.KeyID(), Sig: good.Sig[:10]}}, "does not verify"},
		{"too many", recordType, payload, many, "more than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := trust.Verify(tc.typ, tc.payload, tc.sigs)
			if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), tc.says) {
				t.Errorf("Verify = %q, %v; want ErrUntrusted saying %q", id, err, tc.says)
			}
		})
	}
	var none *Trust
	if _, err := none.Verify(recordType, payload, []Signature{good}); !errors.Is(err, ErrUntrusted) {
		t.Errorf("an empty trust set verified: %v", err)
	}
}

// TestKeyFiles: the wrong kind of key in either place is refused, with an
// error that names the file and the fix but holds none of the key.
func TestKeyFiles(t *testing.T) {
	dir := t.TempDir()
	k := harness.NewSigningKey(t, dir, "ci")
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gen := func(name string, args ...string) string {
		p := filepath.Join(dir, name)
		openssl(t, append(append([]string{"genpkey"}, args...), "-out", p)...)
		return p
	}
	priv, err := os.ReadFile(k.Private)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := os.ReadFile(k.Public)
	if err != nil {
		t.Fatal(err)
	}
	ec := gen("ec.key", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256")
	ecPub := filepath.Join(dir, "ec.pub")
	openssl(t, "pkey", "-in", ec, "-pubout", "-out", ecPub)
	encrypted := gen("enc.key", "-algorithm", "ed25519", "-aes-256-cbc", "-pass", "pass:x")
	two := write("two.pem", append(bytes.Clone(pub), pub...))
	garbage := write("garbage", []byte("not a key\n"))

	for _, tc := range []struct{ path, says string }{
		{k.Public, "public key"},
		{ec, "not an ed25519 key"},
		{encrypted, "encrypted"},
		{garbage, "no PEM block"},
		{filepath.Join(dir, "missing"), "no such file"},
		{dir, "not a regular file"},
	} {
		_, err := LoadSigner(tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("LoadSigner(%s) = %v; want an error naming it and saying %q", tc.path, err, tc.says)
		}
		leaks(t, err, priv)
	}
	for _, tc := range []struct{ path, says string }{
		{k.Private, "private key"},
		{ecPub, "not an ed25519 key"},
		{two, "more than one PEM block"},
		{garbage, "no PEM block"},
	} {
		_, err := LoadTrust(k.Public, tc.path)
		if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("LoadTrust(%s) = %v; want an error naming it and saying %q", tc.path, err, tc.says)
		}
		leaks(t, err, priv)
	}
	// A signer's public key is what the trust set loads from the .pub.
	s, err := ParseSigner(priv)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ParsePublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Public().Equal(p) || KeyID(p) != s.KeyID() {
		t.Error("the private key's public half is not the .pub file's key")
	}
	if len(p) != ed25519.PublicKeySize {
		t.Errorf("public key of %d bytes", len(p))
	}
}

// leaks fails when err holds any line of the private key's PEM body.
func leaks(t *testing.T, err error, priv []byte) {
	t.Helper()
	if err == nil {
		return
	}
	for _, line := range strings.Split(string(priv), "\n") {
		if len(line) > 8 && !strings.HasPrefix(line, "-----") && strings.Contains(err.Error(), line) {
			t.Errorf("error %q holds the private key", err)
		}
	}
}
