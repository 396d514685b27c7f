package harness

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// SigningKey is a Secure Boot signing key made for one test: an RSA key and
// its self-signed certificate, as PEM files in the test's temp dir.
type SigningKey struct {
	KeyPEM, CertPEM   []byte
	KeyPath, CertPath string
}

// NewSigningKey makes an RSA key of bits (2048 when 0) and a self-signed
// certificate for it named cn, valid from 2020 to 2099 so no verifier's
// clock refuses it, and writes both as PEM files.
func NewSigningKey(t testing.TB, cn string, bits int) *SigningKey {
	t.Helper()
	if bits == 0 {
		bits = 2048
	}
	key, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC),
		NotAfter:              time.Date(2099, 12, 31, 0, 0, 0, 0, time.UTC),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageCodeSigning},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	k := &SigningKey{
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
	}
	dir := t.TempDir()
	k.KeyPath, k.CertPath = filepath.Join(dir, "signing.key"), filepath.Join(dir, "signing.crt")
	if err := os.WriteFile(k.KeyPath, k.KeyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(k.CertPath, k.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return k
}
