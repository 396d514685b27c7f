package authenticode_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/disk/authenticode"
	"github.com/stamp-dev/stamp/disk/pe"
	"github.com/stamp-dev/stamp/test/harness"
)

// signed opens b, adds sections, and seals it signed by s.
func signed(t *testing.T, b []byte, s *authenticode.Signer, add map[string][]byte) []byte {
	t.Helper()
	im, err := pe.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	if err := im.StripSymbolTable(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{".osrel", ".cmdline", ".linux"} {
		if data, ok := add[name]; ok {
			if err := im.AddSection(name, pe.Bytes(data), name == ".linux"); err != nil {
				t.Fatal(err)
			}
		}
	}
	b, err = im.SealBytes(s.PE)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSignedImagesVerify signs a unified kernel image made on Debian's
// systemd-stub and Debian's systemd-boot itself, and holds the signatures
// to the reference tools: sbverify (sbsigntool) and osslsigncode accept
// them with the signer's certificate, refuse them with another, and refuse
// an image with one byte changed. Two signings give the same bytes, and the
// signature reads back with its digest and signer.
func TestSignedImagesVerify(t *testing.T) {
	sbverify, osslsigncode := harness.Tool(t, "sbverify"), harness.Tool(t, "osslsigncode")
	kit := harness.BootParts(t)
	key := harness.NewSecureBootKey(t, "stamp test signer", 0)
	other := harness.NewSecureBootKey(t, "stamp test other signer", 3072)
	s, err := authenticode.LoadPEM(key.KeyPEM, key.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	stub, err := os.ReadFile(kit.LinuxStub)
	if err != nil {
		t.Fatal(err)
	}
	kernel, err := os.ReadFile(kit.Vmlinuz)
	if err != nil {
		t.Fatal(err)
	}
	sdboot, err := os.ReadFile(kit.SystemdBoot)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	images := map[string][]byte{
		"uki.efi":             signed(t, stub, s, map[string][]byte{".osrel": []byte("ID=test\n"), ".cmdline": []byte("console=ttyS0"), ".linux": kernel}),
		"systemd-bootx64.efi": signed(t, sdboot, s, nil),
	}
	for name, b := range images {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		run := func(args ...string) (string, error) {
			out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
			return string(out), err
		}
		if out, err := run(sbverify, "--cert", key.CertPath, p); err != nil || !strings.Contains(out, "Signature verification OK") || strings.Contains(out, "warning") {
			t.Errorf("sbverify --cert %s: %v\n%s", name, err, out)
		} else {
			t.Logf("sbverify --cert %s: %s", name, strings.TrimSpace(out))
		}
		if out, err := run(sbverify, "--list", p); err != nil || !strings.Contains(out, "stamp test signer") {
			t.Errorf("sbverify --list %s: %v\n%s", name, err, out)
		}
		if out, err := run(osslsigncode, "verify", "-CAfile", key.CertPath, "-in", p); err != nil ||
			!strings.Contains(out, "Signature verification: ok") || strings.Contains(out, "MISMATCH") {
			t.Errorf("osslsigncode verify %s: %v\n%s", name, err, out)
		} else {
			for _, l := range strings.Split(out, "\n") {
				if strings.Contains(l, "checksum") || strings.Contains(l, "message digest") || strings.Contains(l, "Signature verification") {
					t.Logf("osslsigncode %s: %s", name, strings.TrimSpace(l))
				}
			}
		}
		if out, err := run(sbverify, "--cert", other.CertPath, p); err == nil {
			t.Errorf("sbverify accepts %s with another signer's certificate:\n%s", name, out)
		}
		changed := append([]byte(nil), b...)
		changed[len(changed)/3] ^= 1
		cp := filepath.Join(dir, "changed-"+name)
		if err := os.WriteFile(cp, changed, 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := run(sbverify, "--cert", key.CertPath, cp); err == nil {
			t.Errorf("sbverify accepts %s with one byte changed:\n%s", name, out)
		}

		// Read back: the digest is the image's, the signer ours.
		digest, table, err := pe.Digest(bytes.NewReader(b), int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		sig, err := authenticode.ParsePE(table)
		if err != nil {
			t.Fatal(err)
		}
		if err := sig.Verify(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if !bytes.Equal(sig.Digest, digest) || sig.Signer.Subject.CommonName != "stamp test signer" {
			t.Errorf("%s: signature over %x by %s; the image's digest is %x", name, sig.Digest, sig.Signer.Subject, digest)
		}
		if ck, _ := pe.Checksum(bytes.NewReader(b), int64(len(b))); true {
			f, _ := pe.Parse(bytes.NewReader(b), int64(len(b)))
			if ck != f.CheckSum {
				t.Errorf("%s: checksum field %#x, the file's checksum %#x", name, f.CheckSum, ck)
			}
		}
	}
	again := signed(t, stub, s, map[string][]byte{".osrel": []byte("ID=test\n"), ".cmdline": []byte("console=ttyS0"), ".linux": kernel})
	if !bytes.Equal(again, images["uki.efi"]) {
		t.Error("two signings of the same image differ")
	}
}

// TestLoadPEMRefusals: a key that is not its certificate's, a non-RSA key
// and files that hold no PEM are refused, naming which file is wrong.
func TestLoadPEMRefusals(t *testing.T) {
	a := harness.NewSecureBootKey(t, "a", 0)
	b := harness.NewSecureBootKey(t, "b", 0)
	for _, c := range []struct {
		name      string
		key, cert []byte
		want      string
	}{
		{"mismatch", a.KeyPEM, b.CertPEM, "key: the key does not match the certificate (CN=b)"},
		{"no cert", a.KeyPEM, []byte("hello"), "cert: no PEM CERTIFICATE block"},
		{"no key", []byte("hello"), a.CertPEM, "key: no PEM private key block"},
		{"cert as key", a.CertPEM, a.CertPEM, "key: no PEM private key block"},
		{"two certs", a.KeyPEM, append(append([]byte{}, a.CertPEM...), b.CertPEM...), "cert: more than one certificate"},
		{"ec key", []byte("-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"), a.CertPEM, "key: the key is an EC key; Secure Boot takes RSA"},
	} {
		_, err := authenticode.LoadPEM(c.key, c.cert)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	s, err := authenticode.LoadPEM(a.KeyPEM, a.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Fingerprint()) != 64 {
		t.Errorf("fingerprint %q", s.Fingerprint())
	}
}
