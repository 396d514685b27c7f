package e2e

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/formats/attest"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// sealedHead starts the sealed recipes; sealedParts are partitions of the
// Discoverable Partitions Specification with /usr verified.
const (
	sealedHead = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: sealed
arch: amd64
epoch: 1700000000
base:
  tarball: ./base.tar
outputs:
`
	sealedParts = `    partitions:
      - {name: esp, type: esp, size: 64MiB}
      - {name: usr, type: usr}
      - {name: usr-verity, type: usr-verity}
      - {name: root, type: root}
`
)

// The sealed disks of one tree: booted by systemd-boot, and the UKI alone
// with another command line, both signed with key a.
const sealedRecipe = sealedHead + `  - format: raw
` + sealedParts + `    boot: {loader: uki, cmdline: "console=ttyS0 rw panic=-1", secureBoot: {key: ./a.key, cert: ./a.crt}}
  - format: raw
    name: alone
` + sealedParts + `    boot: {loader: uki, systemdBoot: false, cmdline: "console=ttyS0 rw panic=-1 stamp.alone", secureBoot: {key: ./a.key, cert: ./a.crt}}
`

// The UKI alone signed with another key, b, which the machine does not
// trust; and a recipe whose key is not its certificate's.
const (
	sealedOtherRecipe = sealedHead + `  - format: raw
    name: alone
` + sealedParts + `    boot: {loader: uki, systemdBoot: false, cmdline: "console=ttyS0 rw panic=-1 stamp.alone", secureBoot: {key: ./b.key, cert: ./b.crt}}
`
	sealedMismatchRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: mismatch
arch: amd64
epoch: 1700000000
base:
  tarball: ./base.tar
outputs:
  - {format: tar}
  - format: raw
    partitions:
      - {name: esp, type: esp, size: 64MiB}
      - {name: root, type: root}
    boot: {loader: uki, secureBoot: {key: ./a.key, cert: ./b.crt}}
`
)

// sealedInit is the sealed tree's /sbin/init: it says whether the firmware
// enforces Secure Boot, what PCR 11 holds (the kernel reads it from the TPM
// for sysfs), whether a file of /usr reads back and as what, and that /usr
// is read-only and / writable. The marker is printed in two pieces.
const sealedInit = `insmod /lib/modules/$(uname -r)/kernel/fs/efivarfs/efivarfs.ko
mount -t efivarfs efivarfs /sys/firmware/efi/efivars
set -- $(od -An -tu1 /sys/firmware/efi/efivars/SecureBoot-` + efiGlobalVariable + `)
eval sb=\${$#}
echo "stamp-sealed: secure-boot=$sb"
echo "stamp-sealed: pcr11=$(cat /sys/class/tpm/tpm0/pcr-sha256/11)"
if sum=$(sha256sum /usr/share/stamp/probe); then echo "stamp-sealed: probe ${sum%% *}"; else echo "stamp-sealed: probe unreadable"; fi
if touch /usr/share/stamp/written 2>/dev/null; then echo "stamp-sealed: /usr writable"; else echo "stamp-sealed: /usr read-only"; fi
if echo ok > /var/written; then echo "stamp-sealed: / writable"; fi
echo "stamp-sealed: /usr from $(grep ' /usr ' /proc/mounts | cut -d' ' -f1)"
echo "stamp-sealed:" "booted"
`

const (
	sealedMarker = "stamp-sealed: booted"
	sealedProbe  = "/usr/share/stamp/probe"
)

// TestSealedDisk builds sealed disks (boot.loader uki, secureBoot with a
// key made for the test, /usr on a verified partition) from a tree of real
// Debian parts and boots them under OVMF with Secure Boot, TCG and a
// software TPM (swtpm):
//   - on a machine in setup mode, systemd-boot enrols the disk's keys and
//     resets; from then on the firmware enforces Secure Boot with them;
//   - the disk boots with them: Secure Boot is on, /usr is the dm-verity
//     device, read-only, its file reads back right, / is writable, and the
//     PCR 11 read from the TPM is the one stamp predicted (provenance.json,
//     manifest, inspect);
//   - the UKI alone, as the removable media boot file, boots too, and its
//     other command line gives another PCR 11, as predicted;
//   - the same UKI signed by another key, and the disk's UKI with one byte
//     changed, are refused by the firmware;
//   - one byte changed in /usr's partition gives an I/O error reading the
//     file, never other data.
//
// The builds as root and as uid 65534 are the same bytes, stamp verify
// agrees, inspect --check accounts for the disks, and the key is found in
// no output, manifest or cache file. A key that is not its certificate's
// fails the build before any output exists, naming the field.
func TestSealedDisk(t *testing.T) {
	t.Parallel()
	harness.RequireTools(t, "qemu-system-x86_64", "swtpm", "sgdisk", "fsck.vfat", "e2fsck", "dd")
	kit := harness.BootParts(t)
	tree := kit.SealedTree(t, harness.BootTreeOptions{Marker: sealedMarker, Init: sealedInit, Modules: []string{"kernel/fs/efivarfs"}})
	// The probe is text that repeats nowhere, so one place of the disk
	// holds its first bytes.
	var probe string
	for h := sha256.Sum256([]byte("stamp-sealed-probe")); len(probe) < 12000; h = sha256.Sum256(h[:]) {
		probe += hex.EncodeToString(h[:])
	}
	if _, err := tree.MkdirAll("/usr/share/stamp", rootfs.Header{Perm: 0o755, MTime: harness.DefaultEpoch}); err != nil {
		t.Fatal(err)
	}
	if _, err := tree.Create(sealedProbe, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: harness.DefaultEpoch}, strings.NewReader(probe)); err != nil {
		t.Fatal(err)
	}
	probeSum := sha256.Sum256([]byte(probe))

	dir := harness.TempDirFor65534(t)
	a := harness.NewSecureBootKey(t, "stamp sealed test a", 0)
	b := harness.NewSecureBootKey(t, "stamp sealed test b", 0)
	writeFiles(t, dir, map[string]string{"recipe.yaml": sealedRecipe, "other.yaml": sealedOtherRecipe, "mismatch.yaml": sealedMismatchRecipe,
		"a.key": string(a.KeyPEM), "a.crt": string(a.CertPEM), "b.key": string(b.KeyPEM), "b.crt": string(b.CertPEM)})
	writeBaseTar(t, filepath.Join(dir, "base.tar"), tree)

	refused := filepath.Join(dir, "refused")
	stamp(t, dir, nil, "build", "mismatch.yaml", "-o", refused).mustFail(t, 2,
		"outputs[1].boot.secureBoot.key: the key does not match the certificate (CN=stamp sealed test b)")
	if left, _ := os.ReadDir(refused); len(left) != 0 {
		t.Errorf("a refused build left %v", left)
	}

	out, cacheDir := filepath.Join(dir, "out"), filepath.Join(dir, "cache")
	stampCached(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", cacheDir).mustSucceed(t)
	raw, alone := filepath.Join(out, "sealed.raw"), filepath.Join(out, "sealed-alone.raw")
	for _, p := range []string{raw, alone} {
		checkRawDisk(t, p, disk.TypeESP, disk.TypeUsrAMD64, disk.TypeUsrVerityAMD64, disk.TypeRootAMD64)
		stamp(t, dir, nil, "inspect", "--check", p).mustSucceed(t)
	}
	pred := predictedPCR11(t, out)
	if pred["sealed.raw"] == "" || pred["sealed-alone.raw"] == "" || pred["sealed.raw"] == pred["sealed-alone.raw"] {
		t.Fatalf("predicted PCR 11 values: %v", pred)
	}
	manifest, err := os.ReadFile(filepath.Join(out, "manifest.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(manifest), "# fact uki.pcr11.sha256 "+pred["sealed.raw"]+"\n") {
		t.Errorf("the manifest does not name the predicted PCR 11 %s", pred["sealed.raw"])
	}
	insp := stamp(t, dir, nil, "inspect", raw).mustSucceed(t).stdout
	for _, want := range []string{"uki.pcr11.sha256: " + pred["sealed.raw"], "uki.signer: CN=stamp sealed test a sha256:",
		"secure-boot.boot-loader: /EFI/BOOT/BOOTX64.EFI CN=stamp sealed test a", "uki.section.linux: ", "uki.section.cmdline: ",
		"/usr's data, its hash partition and the UKI's usrhash= agree", "secure-boot.enroll: /loader/keys/auto: CN=stamp sealed test a"} {
		if !strings.Contains(insp, want) {
			t.Errorf("inspect does not say %q:\n%s", want, insp)
		}
	}
	keyNowhere(t, a.KeyPEM, out, cacheDir)
	// From the cache, the disks come back with what they said of
	// themselves: the same manifest and provenance.json.
	again := filepath.Join(dir, "again")
	if r := stampCached(t, dir, nil, "build", "recipe.yaml", "-o", again, "--cache-dir", cacheDir).mustSucceed(t); !strings.Contains(r.stderr, "no phase runs") {
		t.Errorf("the second build did not come from the cache:\n%s", r.stderr)
	}
	for _, f := range []string{"manifest.txt", "provenance.json", "SHA256SUMS"} {
		if !bytes.Equal(mustRead(t, filepath.Join(out, f)), mustRead(t, filepath.Join(again, f))) {
			t.Errorf("%s differs when the outputs come from the cache", f)
		}
	}

	sameAs65534(t, dir, out, "sealed.raw", "sealed-alone.raw")
	stamp(t, dir, nil, "verify", "recipe.yaml", "-o", filepath.Join(dir, "verify")).mustSucceed(t)
	outB := filepath.Join(dir, "out-b")
	stamp(t, dir, nil, "build", "other.yaml", "-o", outB).mustSucceed(t)

	boot := func(vars, p string) []string {
		return append(append(harness.SecureBootVarsQEMU(t, vars), harness.SwTPM(t)...),
			"-m", "1024", "-nic", "none", "-drive", "file="+p+",format=raw,if=virtio,snapshot=on")
	}

	// Setup mode: systemd-boot enrols the keys and resets, which ends qemu.
	vars := harness.SetupModeVars(t)
	r := harness.BootQEMU(t, boot(vars, raw), 4*time.Minute)
	if r.TimedOut || !strings.Contains(r.Log, `Enrolling secure boot keys from directory: \loader\keys\auto`) || strings.Contains(r.Log, "Linux version") {
		t.Fatalf("systemd-boot did not enrol the keys and reset (timed out %t after %s); log ends:\n%s", r.TimedOut, r.Took, r.Tail(30))
	}
	if b, _ := os.ReadFile(vars); bytes.Equal(b, mustRead(t, harness.OVMFEmptyVars)) {
		t.Fatal("the variable store is unchanged after enrolment")
	}
	t.Logf("keys enrolled in %s", r.Took)

	// The disk, under Secure Boot with its own keys.
	log := harness.RunQEMU(t, boot(harness.CopyVars(t, vars), raw), sealedMarker, 6*time.Minute)
	got := sealedReport(log)
	for k, want := range map[string]string{"secure-boot": "1", "probe": hex.EncodeToString(probeSum[:]), "/usr": "read-only", "/": "writable",
		"pcr11": pred["sealed.raw"], "/usr from": "/dev/mapper/usr"} {
		if !strings.EqualFold(got[k], want) {
			t.Errorf("the sealed disk says %s %q, want %q", k, got[k], want)
		}
	}
	t.Logf("PCR 11 read %s, predicted %s", got["pcr11"], pred["sealed.raw"])
	if !strings.Contains(log, "secureboot: Secure boot enabled") {
		t.Error("the kernel does not say Secure Boot is enabled")
	}

	// The UKI alone, with its other command line.
	log = harness.RunQEMU(t, boot(harness.CopyVars(t, vars), alone), sealedMarker, 6*time.Minute)
	got = sealedReport(log)
	if !strings.EqualFold(got["pcr11"], pred["sealed-alone.raw"]) || got["secure-boot"] != "1" || !strings.Contains(commandLine(log), "stamp.alone") {
		t.Errorf("the UKI alone: PCR 11 %s (predicted %s), Secure Boot %q, command line %q", got["pcr11"], pred["sealed-alone.raw"], got["secure-boot"], commandLine(log))
	}
	t.Logf("the UKI alone: PCR 11 read %s, predicted %s", got["pcr11"], pred["sealed-alone.raw"])

	// Refused by the firmware: the UKI signed by b, and the disk's UKI
	// with one byte of its command line changed. The firmware then says it
	// found nothing to boot and waits in its menu, where the run ends.
	refusedBy := func(name, p, want string) {
		t.Helper()
		r := harness.BootQEMUUntil(t, boot(harness.CopyVars(t, vars), p), "No bootable option or device was found", 3*time.Minute)
		if r.TimedOut || strings.Contains(r.Log, "Linux version") || strings.Contains(r.Log, sealedMarker) || !strings.Contains(r.Log, want) {
			t.Errorf("%s: not refused (timed out %t after %s); log ends:\n%s", name, r.TimedOut, r.Took, r.Tail(30))
		}
		for _, l := range strings.Split(r.Log, "\n") {
			if strings.Contains(l, "Access Denied") {
				t.Logf("%s: %s", name, strings.TrimSpace(l))
			}
		}
	}
	refusedBy("the UKI signed by another key", filepath.Join(outB, "sealed-alone.raw"), "Access Denied")
	refusedBy("the UKI with a byte changed", flipped(t, raw, []byte("console=ttyS0 rw panic=-1 usrhash="), len("console=ttyS0 ")), `Error loading \EFI\Linux\sealed.efi: Access Denied`)

	// One byte changed in /usr: reading the file is an I/O error.
	log = harness.RunQEMU(t, boot(harness.CopyVars(t, vars), flipped(t, raw, []byte(probe[:64]), 3)), sealedMarker, 6*time.Minute)
	got = sealedReport(log)
	if got["probe"] != "unreadable" || !strings.Contains(log, "Input/output error") || !strings.Contains(log, "is corrupted") {
		t.Errorf("with a byte of /usr changed, the probe reads %q; log:\n%s", got["probe"], log)
	}
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "is corrupted") || strings.Contains(l, "Input/output error") {
			t.Log(strings.TrimSpace(l))
		}
	}
}

// sealedReport reads the sealed init's "stamp-sealed: KEY=VALUE" and
// "stamp-sealed: KEY VALUE" lines.
func sealedReport(log string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(log, "\n") {
		_, rest, ok := strings.Cut(strings.TrimSpace(l), "stamp-sealed: ")
		if !ok {
			continue
		}
		switch {
		case strings.HasPrefix(rest, "secure-boot="), strings.HasPrefix(rest, "pcr11="):
			k, v, _ := strings.Cut(rest, "=")
			out[k] = v
		case strings.HasPrefix(rest, "/usr from "):
			out["/usr from"] = strings.TrimPrefix(rest, "/usr from ")
		default:
			k, v, _ := strings.Cut(rest, " ")
			out[k] = v
		}
	}
	return out
}

// predictedPCR11 reads the PCR 11 each output's subject carries in
// provenance.json: what the stub measures.
func predictedPCR11(t *testing.T, out string) map[string]string {
	t.Helper()
	return predictedPCR11After(t, out, "")
}

// predictedPCR11After reads the PCR 11 predicted after a boot phase
// ("after-sysinit", "after-ready"; "" for the stub's own), by output name.
func predictedPCR11After(t *testing.T, out, phase string) map[string]string {
	t.Helper()
	st, err := attest.ReadStatement(filepath.Join(out, "provenance.json"))
	if err != nil {
		t.Fatal(err)
	}
	key := "stamp.dev/uki.pcr11.sha256"
	if phase != "" {
		key += "." + phase
	}
	pred := map[string]string{}
	for _, s := range st.Subject {
		if v := s.Annotations[key]; v != "" {
			pred[s.Name] = v
		}
	}
	return pred
}

// flipped copies the disk p with one bit changed at offset at of the one
// place pattern occurs.
func flipped(t *testing.T, p string, pattern []byte, at int) string {
	t.Helper()
	b := mustRead(t, p)
	i := bytes.Index(b, pattern)
	if i < 0 || bytes.Contains(b[i+1:], pattern) {
		t.Fatalf("%q is not in %s exactly once", pattern, filepath.Base(p))
	}
	b[i+at] ^= 0x20
	out := filepath.Join(t.TempDir(), filepath.Base(p))
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return out
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// keyNowhere fails the test if the private key, as PEM text or as its DER,
// is in any file under dirs.
func keyNowhere(t *testing.T, keyPEM []byte, dirs ...string) {
	t.Helper()
	blk, _ := pem.Decode(keyPEM)
	if blk == nil {
		t.Fatal("no PEM key")
	}
	if _, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err != nil {
		t.Fatal(err)
	}
	needles := [][]byte{blk.Bytes[len(blk.Bytes)-64:], []byte(strings.Split(string(keyPEM), "\n")[5])}
	for _, d := range dirs {
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.Type().IsRegular() {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, n := range needles {
				if bytes.Contains(b, n) {
					t.Errorf("%s holds the private key", p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
