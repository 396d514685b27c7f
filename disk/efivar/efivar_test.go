package efivar_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/authenticode"
	"github.com/stamp-dev/stamp/disk/efivar"
	"github.com/stamp-dev/stamp/test/harness"
)

// TestEnrollmentMatchesEfitools holds the signature list and each signed
// update to efitools' cert-to-efi-sig-list and sign-efi-sig-list given the
// same certificate, owner, key and timestamp: both sign without attributes
// with PKCS#1 v1.5, so the files must be byte for byte the same.
func TestEnrollmentMatchesEfitools(t *testing.T) {
	certToESL, signESL := harness.Tool(t, "cert-to-efi-sig-list"), harness.Tool(t, "sign-efi-sig-list")
	key := harness.NewSecureBootKey(t, "stamp enrolment test", 0)
	s, err := authenticode.LoadPEM(key.KeyPEM, key.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	owner := disk.SignatureOwner("efivar-test")
	when := time.Date(2023, 11, 14, 22, 13, 20, 0, time.UTC)
	e, err := efivar.Enroll(s, owner, when)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	esl := filepath.Join(dir, "cert.esl")
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(args[0], args[1:]...)
		// sign-efi-sig-list reads -t in the local time zone.
		cmd.Env = append(os.Environ(), "TZ=UTC")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	run(certToESL, "-g", disk.FormatUUID(owner), key.CertPath, esl)
	want, err := os.ReadFile(esl)
	if err != nil {
		t.Fatal(err)
	}
	if got := efivar.SignatureList(s.Cert, owner); !bytes.Equal(got, want) {
		t.Errorf("the signature list differs from cert-to-efi-sig-list's:\n got %x\nwant %x", got, want)
	}
	for name, got := range map[string][]byte{"PK": e.PK, "KEK": e.KEK, "db": e.DB} {
		out := filepath.Join(dir, name+".auth")
		run(signESL, "-t", when.Format("2006-01-02 15:04:05"), "-k", key.KeyPath, "-c", key.CertPath, name, esl, out)
		want, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s.auth differs from sign-efi-sig-list's (%d bytes, theirs %d):\n got %x\nwant %x", name, len(got), len(want), got[:96], want[:min(96, len(want))])
		}
	}
}
