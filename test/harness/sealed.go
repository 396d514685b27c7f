package harness

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io/fs"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
)

// SecureBootKey is a Secure Boot signing key made for one test: an RSA key and
// its self-signed certificate, as PEM files in the test's temp dir.
type SecureBootKey struct {
	KeyPEM, CertPEM   []byte
	KeyPath, CertPath string
}

// NewSecureBootKey makes an RSA key of bits (2048 when 0) and a self-signed
// certificate for it named cn, valid from 2020 to 2099 so no verifier's
// clock refuses it, and writes both as PEM files.
func NewSecureBootKey(t testing.TB, cn string, bits int) *SecureBootKey {
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
	k := &SecureBootKey{
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

// AddDebs unpacks Debian packages (downloaded into the deb cache) into a
// test tree as dpkg would place their files, owned by root: through the
// tree's merged-/usr links (a file of /lib lands in /usr/lib), directories
// made as their files need them, so no package's directory replaces a
// link of the tree.
func AddDebs(t testing.TB, tree *rootfs.Tree, pkgs ...string) {
	t.Helper()
	for _, deb := range Debs(t, pkgs...) {
		dir := t.TempDir()
		if out, err := exec.Command("dpkg-deb", "-x", deb, dir).CombinedOutput(); err != nil {
			t.Fatalf("dpkg-deb -x %s: %v\n%s", deb, err, out)
		}
		var paths []string
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			paths = append(paths, p)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		sort.Strings(paths)
		for _, p := range paths {
			rel, _ := filepath.Rel(dir, p)
			tp := "/" + filepath.ToSlash(rel)
			fi, err := os.Lstat(p)
			if err != nil {
				t.Fatal(err)
			}
			h := rootfs.Header{Perm: uint32(fi.Mode().Perm()), MTime: DefaultEpoch}
			if fi.Mode()&fs.ModeSymlink != 0 {
				target, err := os.Readlink(p)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := tree.Lookup(tp, false); err == nil {
					continue // the tree has it already (a merged-/usr link, say)
				}
				h.Type, h.Perm, h.Target = rootfs.TypeSymlink, 0o777, target
				if _, err := tree.Create(tp, h, nil); err != nil {
					t.Fatalf("%s: %s: %v", filepath.Base(deb), tp, err)
				}
				continue
			}
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			h.Type = rootfs.TypeRegular
			_, err = tree.Create(tp, h, f)
			f.Close()
			if err != nil {
				t.Fatalf("%s: %s: %v", filepath.Base(deb), tp, err)
			}
		}
	}
}

// VerityModuleGlobs are the modules a tree needs for stamp's initramfs to
// open a dm-verity /usr (dm-verity and what it depends on), relative to
// the modules directory.
var VerityModuleGlobs = []string{"kernel/drivers/md/dm-mod.ko", "kernel/drivers/md/dm-bufio.ko",
	"kernel/drivers/md/dm-verity.ko", "kernel/lib/reed_solomon/reed_solomon.ko"}

// DmsetupPackages are Debian's dmsetup and the libraries it loads, which
// stamp's initramfs takes from the tree to open a verified /usr.
var DmsetupPackages = []string{"dmsetup", "libdevmapper1.02.1", "libselinux1", "libudev1", "libpcre2-8-0", "libc6"}

// SealedTree is Tree made ready for a sealed disk (boot.loader uki with /usr
// on a verified partition): merged-/usr with /lib64 a link too, the modules
// of the boot initramfs and of dm-verity besides o.Modules, Debian's dmsetup
// with its libraries, and systemd-boot-efi's stub and systemd-boot where
// the package installs them.
func (k *BootKit) SealedTree(t testing.TB, o BootTreeOptions) *rootfs.Tree {
	t.Helper()
	o.Modules = append(append(append([]string{}, o.Modules...), BootModuleGlobs...), VerityModuleGlobs...)
	tree := k.Tree(t, o)
	ep := o.Epoch
	if ep.IsZero() {
		ep = DefaultEpoch
	}
	if _, err := tree.Create("/lib64", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, MTime: ep, Target: "usr/lib64"}, nil); err != nil {
		t.Fatal(err)
	}
	AddDebs(t, tree, DmsetupPackages...)
	for host, p := range map[string]string{k.LinuxStub: "/usr/lib/systemd/boot/efi/" + filepath.Base(k.LinuxStub),
		k.SystemdBoot: "/usr/lib/systemd/boot/efi/" + filepath.Base(k.SystemdBoot)} {
		f, err := os.Open(host)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tree.Create(p, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: ep}, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return tree
}

// The firmware of Debian's ovmf that enforces Secure Boot (built with
// SMM), and its variable store with no keys at all: a machine in setup
// mode, which takes the keys a boot loader enrols.
const (
	OVMFSecBootCode = "/usr/share/OVMF/OVMF_CODE_4M.secboot.fd"
	OVMFEmptyVars   = "/usr/share/OVMF/OVMF_VARS_4M.fd"
)

// SetupModeVars copies OVMF's empty variable store into the test's temp
// dir: the machine it is given to starts in setup mode.
func SetupModeVars(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(OVMFEmptyVars)
	if err != nil {
		t.Fatalf("OVMF variables (Debian's ovmf): %v", err)
	}
	p := filepath.Join(t.TempDir(), "OVMF_VARS.fd")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// CopyVars copies a variable store (one a boot has enrolled keys into), so
// that each boot from it starts from the same variables.
func CopyVars(t testing.TB, vars string) string {
	t.Helper()
	b, err := os.ReadFile(vars)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "OVMF_VARS.fd")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// SecureBootVarsQEMU are qemu's arguments for OVMF that enforces Secure
// Boot with the variables in vars (written by the firmware): q35 with
// SMM, the flash secured, the code read-only.
func SecureBootVarsQEMU(t testing.TB, vars string) []string {
	t.Helper()
	if _, err := os.Stat(OVMFSecBootCode); err != nil {
		t.Fatalf("Secure Boot firmware (Debian's ovmf): %v", err)
	}
	return []string{"-machine", "q35,smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on",
		"-drive", "if=pflash,format=raw,unit=0,readonly=on,file=" + OVMFSecBootCode,
		"-drive", "if=pflash,format=raw,unit=1,file=" + vars}
}

// SwTPM starts a software TPM 2.0 (Debian's swtpm) for one qemu run, with
// a state of its own, and returns qemu's arguments for it: a TIS device
// the firmware measures into and Linux reads its PCRs from. It ends when
// qemu lets go of it, or with the test.
func SwTPM(t testing.TB) []string {
	t.Helper()
	swtpm := Tool(t, "swtpm")
	dir := t.TempDir()
	sock := filepath.Join(dir, "swtpm.sock")
	log := filepath.Join(dir, "swtpm.log")
	cmd := exec.Command(swtpm, "socket", "--tpm2", "--tpmstate", "dir="+dir,
		"--ctrl", "type=unixio,path="+sock, "--terminate", "--log", "file="+log+",level=1")
	if err := cmd.Start(); err != nil {
		t.Fatalf("swtpm: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock); err == nil {
			return []string{"-chardev", "socket,id=chrtpm,path=" + sock,
				"-tpmdev", "emulator,id=tpm0,chardev=chrtpm", "-device", "tpm-tis,tpmdev=tpm0"}
		}
		time.Sleep(50 * time.Millisecond)
	}
	b, _ := os.ReadFile(log)
	t.Fatalf("swtpm made no socket %s; its log:\n%s", sock, b)
	return nil
}

// SealedPackages are what recipes/examples/sealed.yaml installs on the
// demo's base: a kernel, systemd-boot-efi and dmsetup.
var SealedPackages = []string{"linux-image-cloud-amd64", "systemd-boot-efi", "dmsetup"}

// SealedRepoFor returns a signed repository of what installing
// SealedPackages brings onto an empty system, built once per machine like
// DebRepoFor's. It is shared: copy it (CopyDebRepo) before changing it.
func SealedRepoFor(t testing.TB) *DebRepo {
	t.Helper()
	return debRepoOf(t, [][]string{SealedPackages})
}
