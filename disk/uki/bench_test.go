package uki

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/disk/authenticode"
	"github.com/stamp-dev/stamp/disk/pe"
	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkBuildAndSign assembles and signs a UKI of Debian's stub and
// kernel and a 32 MiB initrd, predicting its PCR 11 (the budget: 0.5
// s), beside the pipeline of systemd 252's own documentation, objcopy
// --add-section then sbsign, on the same parts.
func BenchmarkBuildAndSign(b *testing.B) {
	objcopy, sbsign := harness.Tool(b, "objcopy"), harness.Tool(b, "sbsign")
	kit := harness.BootParts(b)
	stubBytes, err := os.ReadFile(kit.LinuxStub)
	if err != nil {
		b.Fatal(err)
	}
	stub, err := ParseStub(stubBytes)
	if err != nil {
		b.Fatal(err)
	}
	kernel, err := os.ReadFile(kit.Vmlinuz)
	if err != nil {
		b.Fatal(err)
	}
	initrd := make([]byte, 32<<20)
	rand.Read(initrd)
	key := harness.NewSecureBootKey(b, "bench", 0)
	signer, err := authenticode.LoadPEM(key.KeyPEM, key.CertPEM)
	if err != nil {
		b.Fatal(err)
	}
	parts := Parts{OSRelease: []byte("ID=bench\n"), Cmdline: []byte("console=ttyS0"), Linux: pe.Bytes(kernel), Initrd: pe.Bytes(initrd)}
	dir := b.TempDir()
	out := filepath.Join(dir, "uki.efi")
	b.Run("stamp", func(b *testing.B) {
		for b.Loop() {
			im, secs, err := Build(stub, parts)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := im.Seal(signer.PE); err != nil {
				b.Fatal(err)
			}
			f, err := os.Create(out)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := im.WriteTo(f); err != nil {
				b.Fatal(err)
			}
			f.Close()
			if _, _, err := stub.PCR11(secs); err != nil {
				b.Fatal(err)
			}
		}
	})
	files := map[string][]byte{"osrel": parts.OSRelease, "cmdline": parts.Cmdline, "initrd": initrd, "linux": kernel}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(dir, n), c, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("objcopy+sbsign", func(b *testing.B) {
		args := []string{}
		vma := map[string]int{"osrel": 0x20000, "cmdline": 0x30000, "initrd": 0x3000000, "linux": 0x2000000}
		for _, n := range []string{"osrel", "cmdline", "linux", "initrd"} {
			args = append(args, "--add-section", "."+n+"="+filepath.Join(dir, n), "--change-section-vma", fmt.Sprintf(".%s=%#x", n, vma[n]))
		}
		unsigned := filepath.Join(dir, "unsigned.efi")
		args = append(args, kit.LinuxStub, unsigned)
		for b.Loop() {
			if o, err := exec.Command(objcopy, args...).CombinedOutput(); err != nil {
				b.Fatalf("objcopy: %v\n%s", err, o)
			}
			if o, err := exec.Command(sbsign, "--key", key.KeyPath, "--cert", key.CertPath, "--output", out, unsigned).CombinedOutput(); err != nil {
				b.Fatalf("sbsign: %v\n%s", err, o)
			}
		}
	})
}
