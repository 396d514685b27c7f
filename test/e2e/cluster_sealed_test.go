//go:build node

package e2e

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/test/harness"
)

// TestClusterSealed builds the node recipe with disk=sealed (a UKI signed
// with a key made for the test, /usr read-only on a dm-verity partition)
// as uid 65534, and boots it as TestCluster boots the plain node, but
// under OVMF with Secure Boot and a software TPM: the first boot, in setup
// mode, enrols the disk's keys; the second, with them enforced, runs
// Cluster API's kubeadm init seed. Beside TestCluster's checks, the node
// reports that the firmware enforces Secure Boot, that /usr is the verity
// device, read-only and valid, and the PCR 11 the TPM holds, which must be
// the one stamp predicted.
func TestClusterSealed(t *testing.T) {
	harness.RequireTools(t, "qemu-system-x86_64", "swtpm", "sgdisk", "cp")
	step := stepTimer(t)
	nb := prepareNodeBuild(t, step)
	key := harness.NewSecureBootKey(t, "stamp e2e sealed node", 0)
	writeFiles(t, nb.dir, map[string]string{"db.key": string(key.KeyPEM), "db.crt": string(key.CertPEM)})
	out := filepath.Join(nb.dir, "out")
	args := append([]string{"build", "k8s-node.yaml", "-o", out, "--cache-dir", filepath.Join(nb.dir, "cache"), "--work-dir", nb.dir,
		"--insecure-registry", nb.reg.Addr}, nb.setArgs...)
	args = append(args, "--set", "disk=sealed", "--set", "secure_boot_key=./db.key", "--set", "secure_boot_cert=./db.crt")
	stampAs65534(t, nb.dir, nil, args...).mustSucceed(t)
	step("sealed node built as uid 65534")
	raw := filepath.Join(out, "k8s-node.raw")
	checkRawDisk(t, raw, disk.TypeESP, disk.TypeUsrAMD64, disk.TypeUsrVerityAMD64, disk.TypeRootAMD64)
	insp := stamp(t, nb.dir, nil, "inspect", raw).mustSucceed(t).stdout
	if !strings.Contains(insp, "/usr's data, its hash partition and the UKI's usrhash= agree") {
		t.Errorf("inspect does not vouch for the verified /usr:\n%s", insp)
	}
	keyNowhere(t, key.KeyPEM, out)
	pcr11 := sealedNodePCR11(t, out)
	step("disk checked")

	dir := t.TempDir()
	bootDisk := filepath.Join(dir, "disk.raw")
	if b, err := exec.Command("cp", "--sparse=always", raw, bootDisk).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, b)
	}
	// Setup mode: systemd-boot enrols the keys and resets, which ends qemu.
	vars := harness.SetupModeVars(t)
	r := harness.BootQEMU(t, append(harness.SecureBootVarsQEMU(t, vars), "-m", "1024", "-nic", "none",
		"-drive", "file="+raw+",format=raw,if=virtio,snapshot=on"), 5*time.Minute)
	if r.TimedOut || !strings.Contains(r.Log, `Enrolling secure boot keys from directory: \loader\keys\auto`) || strings.Contains(r.Log, "Linux version") {
		t.Fatalf("systemd-boot did not enrol the keys and reset (timed out %t after %s); log ends:\n%s", r.TimedOut, r.Took, r.Tail(30))
	}
	step("keys enrolled")

	userData := clusterInitUserData(t, nb.reg.Addr, nb.in, clusterSealedCheck)
	seed := harness.CIDATASeedFiles(t, dir, map[string]string{
		"user-data":      userData,
		"meta-data":      "instance-id: stamp-e2e-cluster-sealed\nlocal-hostname: node\n",
		"network-config": clusterNetworkConfig,
	})
	qemu := append(append(harness.SecureBootVarsQEMU(t, vars), harness.SwTPM(t)...),
		"-smp", "2", "-m", "4096",
		"-drive", "file="+bootDisk+",format=raw,if=virtio",
		"-drive", "file="+seed+",format=raw,if=virtio",
		"-nic", "user,restrict=on,model=virtio-net-pci,mac="+clusterMAC)
	b := harness.BootQEMUUntil(t, qemu, noDatasource, 50*time.Minute)
	step("sealed boot, kubeadm init and the observer")
	if strings.Contains(b.Log, noDatasource) {
		t.Fatalf("cloud-init found no datasource: the seed disk was not read; log ends:\n%s", b.Tail(40))
	}
	if !strings.Contains(b.Log, "secureboot: Secure boot enabled") {
		t.Error("the kernel does not say Secure Boot is enabled")
	}
	checkClusterLog(t, b, "serial-sealed.log", append(append([]string{}, clusterChecks...), sealedNodeChecks...))
	m := regexp.MustCompile(`STAMP-INFO pcr11=([0-9a-fA-F]+)`).FindStringSubmatch(b.Log)
	switch {
	case m == nil:
		t.Error("the node did not report PCR 11")
	case !strings.EqualFold(m[1], pcr11):
		t.Errorf("PCR 11 read on the node %s, predicted %s", m[1], pcr11)
	default:
		t.Logf("PCR 11 read on the node %s, as predicted", m[1])
	}
	if m := regexp.MustCompile(`STAMP-INFO ready at uptime ([0-9.]+)`).FindStringSubmatch(b.Log); m != nil {
		t.Logf("boot to Ready: %s s after the kernel started (qemu ran %s in all)", m[1], b.Took.Round(time.Second))
	}
}

// sealedNodePCR11 is the PCR 11 provenance.json predicts for the node's
// disk once booted: after the boot phases when the tree's systemd
// measures them, the stub's own measurements otherwise.
func sealedNodePCR11(t *testing.T, out string) string {
	t.Helper()
	const disk = "k8s-node.raw"
	stub, ready := predictedPCR11(t, out)[disk], predictedPCR11After(t, out, "after-ready")[disk]
	t.Logf("predicted PCR 11: %s (after sysinit %q, after ready %q)", stub, predictedPCR11After(t, out, "after-sysinit")[disk], ready)
	switch {
	case ready != "":
		return ready
	case stub != "":
		return stub
	}
	t.Fatal("provenance.json predicts no PCR 11 for " + disk)
	return ""
}

// sealedNodeChecks are what clusterSealedCheck must report ok.
var sealedNodeChecks = []string{"secure boot enforced", "/usr is the verity device", "/usr read-only", "/usr verity valid", "no failed unit"}

// clusterSealedCheck runs on the sealed node after kubeadm init, before
// the observer: Secure Boot as the firmware says, /usr's device, mount
// options and verity status, and PCR 11 as the TPM says.
var clusterSealedCheck = harness.SeedFile{Path: "/run/stamp-cluster/sealed.sh", Owner: "root:root", Permissions: "0755", Content: `#!/bin/sh
exec >/dev/ttyS0 2>&1
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
ok() { echo "STAMP-CLUSTER ok $1"; }
fail() { echo "STAMP-CLUSTER FAIL $1: $2"; }
set -- $(od -An -tu1 /sys/firmware/efi/efivars/SecureBoot-` + efiGlobalVariable + `)
eval sb=\${$#}
if [ "$sb" = 1 ]; then ok "secure boot enforced"; else fail "secure boot enforced" "SecureBoot is '$sb'"; fi
src=$(findmnt -no SOURCE /usr)
opts=$(findmnt -no OPTIONS /usr)
if [ "$src" = /dev/mapper/usr ]; then ok "/usr is the verity device"; else fail "/usr is the verity device" "it is '$src'"; fi
case ",$opts," in *,ro,*) ok "/usr read-only" ;; *) fail "/usr read-only" "$opts" ;; esac
st=$(dmsetup status usr 2>&1)
echo "STAMP-INFO dmsetup status usr: $st"
case "$st" in *" verity V"*) ok "/usr verity valid" ;; *) fail "/usr verity valid" "$st" ;; esac
echo "STAMP-INFO pcr11=$(cat /sys/class/tpm/tpm0/pcr-sha256/11)"
# Nothing failed for want of a writable /usr, or of what a UKI boot starts.
failed=$(systemctl list-units --failed --no-legend --plain | awk '{ print $1 }' | tr '\n' ' ')
if [ -z "$failed" ]; then ok "no failed unit"; else fail "no failed unit" "$failed"; fi
journalctl -b --no-pager -o cat | grep -i 'read-only file system' | head -n 5 | sed 's/^/STAMP-INFO read-only: /'
`}
