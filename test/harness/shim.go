package harness

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
)

// The firmware of Debian's ovmf that enforces Secure Boot: OVMF built
// with SMM, and variables with Microsoft's keys enrolled (and Secure Boot
// on), which trust Debian's shim.
const (
	OVMFSecureCode = "/usr/share/OVMF/OVMF_CODE_4M.ms.fd"
	OVMFSecureVars = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
)

// SignedBootKit is Debian's signed boot chain, from its packages
// (downloaded into the deb cache and unpacked, never installed): shim
// (shim-signed), MokManager (shim-helpers-amd64-signed) and GRUB
// (grub-efi-amd64-signed). The kernel of BootParts is Debian-signed too.
type SignedBootKit struct {
	Shim, MokManager, Grub string
	// Debs are the packages' files.
	Debs []string
}

// SignedBootPackages hold the parts of SignedBootKit.
var SignedBootPackages = []string{"shim-signed", "shim-helpers-amd64-signed", "grub-efi-amd64-signed"}

// SignedBootParts downloads (once per machine) and unpacks the signed boot
// chain into a temp dir of the test.
func SignedBootParts(t testing.TB) *SignedBootKit {
	t.Helper()
	dir := t.TempDir()
	k := &SignedBootKit{Debs: Debs(t, SignedBootPackages...)}
	for _, d := range k.Debs {
		if out, err := exec.Command("dpkg-deb", "-x", d, dir).CombinedOutput(); err != nil {
			t.Fatalf("signed boot parts: dpkg-deb -x %s: %v\n%s", d, err, out)
		}
	}
	k.Shim = filepath.Join(dir, "usr/lib/shim/shimx64.efi.signed")
	k.MokManager = filepath.Join(dir, "usr/lib/shim/mmx64.efi.signed")
	k.Grub = filepath.Join(dir, "usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed")
	for _, p := range []string{k.Shim, k.MokManager, k.Grub} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("signed boot parts: %v", err)
		}
	}
	return k
}

// AddTo puts the signed parts into tree where their packages install them.
func (k *SignedBootKit) AddTo(t testing.TB, tree *rootfs.Tree) {
	t.Helper()
	for host, p := range map[string]string{
		k.Shim:       "/usr/lib/shim/shimx64.efi.signed",
		k.MokManager: "/usr/lib/shim/mmx64.efi.signed",
		k.Grub:       "/usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed",
	} {
		b, err := os.ReadFile(host)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tree.MkdirAll(filepath.Dir(p), rootfs.Header{Perm: 0o755, MTime: DefaultEpoch}); err != nil {
			t.Fatal(err)
		}
		if _, err := tree.Create(p, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: DefaultEpoch}, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
	}
}

// SecureBootQEMU are qemu's arguments for OVMF with Secure Boot enforced:
// the q35 machine with SMM (which OVMF needs to keep its variables from the
// OS), its flash secured, the code read-only and a copy of the variables
// with Microsoft's keys, writable, in a temp dir of the test.
func SecureBootQEMU(t testing.TB) []string {
	t.Helper()
	vars, err := os.ReadFile(OVMFSecureVars)
	if err != nil {
		t.Fatalf("Secure Boot firmware (Debian's ovmf): %v", err)
	}
	if _, err := os.Stat(OVMFSecureCode); err != nil {
		t.Fatalf("Secure Boot firmware (Debian's ovmf): %v", err)
	}
	copyVars := filepath.Join(t.TempDir(), "OVMF_VARS.fd")
	if err := os.WriteFile(copyVars, vars, 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"-machine", "q35,smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on",
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + OVMFSecureCode,
		"-drive", "if=pflash,format=raw,unit=1,file=" + copyVars}
}
