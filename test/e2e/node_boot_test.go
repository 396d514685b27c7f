//go:build node

package e2e

import (
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

// nodeCheck is one point the booted node must pass: a shell condition run
// inside it by the check script, reported as "STAMP-CHECK ok NAME" or
// "STAMP-CHECK FAIL NAME: output".
type nodeCheck struct{ name, sh string }

// nodeSysctls are the kernel parameters the recipe sets, as they must read
// after boot.
var nodeSysctls = [][2]string{
	{"net.bridge.bridge-nf-call-iptables", "1"}, {"net.bridge.bridge-nf-call-ip6tables", "1"},
	{"net.ipv4.ip_forward", "1"}, {"net.ipv6.conf.all.forwarding", "1"}, {"net.ipv6.conf.all.disable_ipv6", "0"},
	{"net.ipv4.conf.all.rp_filter", "1"}, {"vm.overcommit_memory", "1"}, {"kernel.panic", "10"}, {"kernel.panic_on_oops", "1"},
}

// nodeInstalled are the packages that must be installed: image-builder's
// Debian-family set and the node's own.
var nodeInstalled = []string{
	"auditd", "apt-transport-https", "conntrack", "chrony", "curl", "ebtables", "ethtool", "iptables", "jq", "gnupg",
	"libnetfilter-acct1", "libnetfilter-cttimeout1", "libnetfilter-log1", "python3-netifaces", "python3-pip",
	"socat", "cloud-init", "cloud-guest-utils",
	"systemd", "openssh-server", "linux-image-amd64",
	"kubelet", "kubeadm", "kubectl", "cri-tools", "kubernetes-cni",
}

// gossContainerdVersion is image-builder's goss check of containerd's
// version (images/capi/packer/goss/goss-command.yaml), as it runs it: the
// third field of "containerd --version" less its leading "v" must be the
// pinned version, with nothing on stderr. Debian's 1.6.20 prints
// "1.6.20~ds1" there, which it reads as ".6.20~ds1".
const gossContainerdVersion = `PATH=/opt/bin:/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin containerd --version | awk -F' ' '{print substr($3,2); }'`

// nodeChecks is every point of the node issue that can only be seen on a
// running node.
func nodeChecks(registry string, images []string, mode nodeMode) []nodeCheck {
	var cs []nodeCheck
	add := func(name, sh string) { cs = append(cs, nodeCheck{name, sh}) }
	for _, kv := range nodeSysctls {
		add("sysctl "+kv[0]+"="+kv[1], fmt.Sprintf(`[ "$(sysctl -n %s)" = %s ]`, kv[0], kv[1]))
	}
	for _, m := range []string{"overlay", "br_netfilter"} {
		add("module "+m, "[ -d /sys/module/"+m+" ]")
	}
	add("no swap", `[ -z "$(swapon --show=NAME --noheadings)" ] && ! grep -qw swap /etc/fstab`)
	for _, u := range []string{"containerd", "auditd", "chrony", "ssh"} {
		add("active "+u, "systemctl is-active "+u+".service")
	}
	for _, u := range []string{"containerd.service", "auditd.service", "chrony.service", "kubelet.service"} {
		add("enabled "+u, "[ \"$(systemctl is-enabled "+u+")\" = enabled ]")
	}
	for _, u := range []string{"apt-daily.timer", "apt-daily-upgrade.timer", "docker.service", "dockerd.service", "conntrackd.service"} {
		add("not enabled "+u, "! systemctl is-enabled -q "+u)
	}
	add("kubelet idle until kubeadm", "[ ! -e /var/lib/kubelet/config.yaml ] && [ -f /usr/lib/systemd/system/kubelet.service ] && [ -f /usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf ]")
	for _, p := range nodeInstalled {
		add("dpkg "+p, "[ \"$(dpkg-query -W -f='${Status}' "+p+")\" = 'install ok installed' ]")
	}
	for _, p := range mode.runtimePackages() {
		add("dpkg "+p[0], "[ \"$(dpkg-query -W -f='${Status}' "+p[0]+")\" = 'install ok installed' ]")
		if p[1] != "" {
			add("dpkg "+p[0]+" "+p[1], "[ \"$(dpkg-query -W -f='${Version}' "+p[0]+")\" = "+p[1]+" ]")
		}
	}
	if mode.upstream() {
		add("goss containerd version "+harness.UpstreamContainerdVersion,
			`out=$( { `+gossContainerdVersion+`; } 2>/tmp/goss-stderr); st=$?; echo "$out"; cat /tmp/goss-stderr; [ $st -eq 0 ] && [ "$out" = `+harness.UpstreamContainerdVersion+` ] && [ ! -s /tmp/goss-stderr ]`)
		add("runc version "+harness.UpstreamRuncVersion, `runc --version | head -n 1 | grep -qx 'runc version `+harness.UpstreamRuncVersion+`'`)
		add("no Debian containerd", `[ "$(dpkg-query -W -f='${Status}' containerd 2>/dev/null)" != 'install ok installed' ]`)
	}
	add("no ntp", "[ \"$(dpkg-query -W -f='${Status}' ntp 2>/dev/null)\" != 'install ok installed' ] && [ ! -e /usr/sbin/ntpd ]")
	add("dpkg audit clean", "[ -z \"$(dpkg --audit)\" ]")
	add("kubelet version", `kubelet --version | grep -qx 'Kubernetes `+harness.K8sVersion+`'`)
	add("kubeadm version", `[ "$(kubeadm version -o short)" = `+harness.K8sVersion+` ]`)
	add("kubectl version", `kubectl version --client -o json | grep -q '"gitVersion": "`+harness.K8sVersion+`"'`)
	add("crictl version", `crictl --version | grep -q 'crictl version `+strings.TrimPrefix(harness.CrictlVersion, "v")+`'`)
	add("containerd SystemdCgroup", "containerd config dump | grep -q 'SystemdCgroup = true'")
	// 1.6 dumps sandbox_image = "..."; 2.x, which reads the version 2
	// file as its version 3, dumps it as pinned_images' sandbox = '...'
	// (its TOML writer quotes a plain string with single quotes).
	add("containerd sandbox image", `containerd config dump 2>/dev/null | grep -Eq "^ *(sandbox_image|sandbox) = [\"']`+registry+`/pause:3.10[\"']"`)
	add("CNI plugins and conflist", "[ -x /opt/cni/bin/bridge ] && [ -x /opt/cni/bin/host-local ] && [ -x /opt/cni/bin/portmap ] && [ -f /etc/cni/net.d/10-stamp-bridge.conflist ]")
	add("crictl.yaml", "grep -q 'unix:///run/containerd/containerd.sock' /etc/crictl.yaml")
	for _, im := range images {
		add("image "+im, "crictl images -o json | grep -q '\""+im+"\"'")
	}
	add("seven images", "[ \"$(crictl images -q | sort -u | wc -l)\" -ge 7 ]")
	if mode.imagesInto == "archives" {
		add("images imported at first boot", "systemctl is-active -q stamp-import-images.service")
		add("no pull", "! journalctl -b -u containerd --no-pager | grep -q 'PullImage '")
	} else {
		// They were in containerd's state when it started: no import
		// unit, and containerd neither pulled nor imported one.
		add("no import unit", "! systemctl cat stamp-import-images.service >/dev/null 2>&1")
		add("no pull or import", "! journalctl -b -u containerd --no-pager | grep -Eq 'PullImage |/images/create|images import'")
		if mode.upstream() {
			// Pinned as its CRI plugin pins the sandbox image from 1.7.3
			// on, so kubelet's image garbage collection never removes it.
			add("sandbox image pinned", `crictl images -o json | jq -e '[.images[] | select(.repoTags | any(. == "`+registry+`/pause:3.10")) | .pinned] == [true]'`)
		}
	}
	add("ssh host keys made at first boot", "ls /etc/ssh/ssh_host_ed25519_key /etc/ssh/ssh_host_rsa_key")
	// The hardware database was compiled at build time: no first-boot
	// unit is left, and udev's lookups answer from it.
	add("nothing deferred to first boot", "! systemctl cat stamp-dpkg-configure.service >/dev/null 2>&1")
	add("hardware database", "systemd-hwdb query usb:v1D6Bp0002 | grep -qx 'ID_VENDOR_FROM_DATABASE=Linux Foundation'")
	add("machine-id made at boot", "grep -Eqx '[0-9a-f]{32}' /etc/machine-id")
	add("stamp-release", `. /etc/stamp-release && [ "$STAMP_RECIPE" = k8s-node ] && [ "${STAMP_RECIPE_DIGEST#sha256:}" != "$STAMP_RECIPE_DIGEST" ] && [ -n "$STAMP_VERSION" ]`)
	add("cloud-init datasource nocloud", `[ "$(cloud-id)" = nocloud ]`)
	add("DHCP on the first NIC", "ip -4 -o addr show | grep -q 'inet 10.0.2.15/'")
	// kubelet makes no pod sandbox without a resolv.conf; resolved writes
	// what networkd learns, and needs the system bus.
	add("resolv.conf from systemd-resolved", `[ "$(readlink /etc/resolv.conf)" = ../run/systemd/resolve/stub-resolv.conf ] && systemctl is-active -q systemd-resolved && [ -s /run/systemd/resolve/resolv.conf ]`)
	add("D-Bus system bus", "systemctl is-active -q dbus && [ -S /run/dbus/system_bus_socket ]")
	add("root read-write", "touch /var/lib/stamp-rw-check && rm /var/lib/stamp-rw-check")
	// Every preflight check passes, none ignored: the images are present,
	// so nothing is pulled.
	add("kubeadm init phase preflight", "kubeadm init phase preflight --config /run/stamp-check/kubeadm.yaml")
	return cs
}

// nodeCheckScript is the script the seed's runcmd runs. It runs every
// check, prints facts for the log (boot times, images), and powers the
// node off.
func nodeCheckScript(cs []nodeCheck) string {
	var b strings.Builder
	b.WriteString(`#!/bin/sh
# stamp's node checks (test/e2e/node_boot_test.go), run by cloud-init's runcmd.
exec >/dev/ttyS0 2>&1
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
c() {
	if out=$(sh -c "$2" 2>&1); then
		echo "STAMP-CHECK ok $1"
	else
		echo "STAMP-CHECK FAIL $1: $(echo "$out" | tr '\n' ' ' | cut -c1-600)"
	fi
}
echo "STAMP-INFO check script started at uptime $(cut -d' ' -f1 /proc/uptime)"
`)
	for _, c := range cs {
		fmt.Fprintf(&b, "c %s %s\n", shQuote(c.name), shQuote(c.sh))
	}
	b.WriteString(`echo "STAMP-INFO checks ended at uptime $(cut -d' ' -f1 /proc/uptime)"
systemd-analyze 2>&1 | sed 's/^/STAMP-INFO analyze: /'
systemd-analyze blame 2>&1 | head -n 25 | sed 's/^/STAMP-INFO blame: /'
crictl images 2>&1 | sed 's/^/STAMP-INFO crictl: /'
# The boot is not finished while cloud-final runs this, so blame says
# nothing: the first-boot units' own start and end times instead.
for u in stamp-ssh-keygen stamp-import-images cloud-config containerd; do
	echo "STAMP-INFO unit $u: $(systemctl show -p ExecMainStartTimestampMonotonic -p ExecMainExitTimestampMonotonic -p ActiveEnterTimestampMonotonic "$u.service" | tr '\n' ' ')"
done
systemctl --failed --no-legend 2>&1 | sed 's/^/STAMP-INFO failed unit: /'
for u in $(systemctl list-units --state=failed,activating --no-legend --plain | cut -d' ' -f1); do
	journalctl -b -u "$u" --no-pager 2>&1 | tail -n 15 | sed "s|^|STAMP-INFO journal $u: |"
done
dmesg | grep -E 'crng|random:' | sed 's/^/STAMP-INFO kernel: /'
df -h / 2>&1 | sed 's/^/STAMP-INFO df: /'
echo "STAMP-CHECK done"
systemctl poweroff
`)
	return b.String()
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// nodeKubeadmConfig is what kubeadm's preflight reads: the cluster's image
// repository is the registry the images were pre-seeded from, so preflight
// finds each one present and pulls nothing.
func nodeKubeadmConfig(registry string) string {
	return `apiVersion: kubeadm.k8s.io/v1beta4
kind: InitConfiguration
nodeRegistration:
  criSocket: unix:///run/containerd/containerd.sock
  imagePullPolicy: IfNotPresent
---
apiVersion: kubeadm.k8s.io/v1beta4
kind: ClusterConfiguration
kubernetesVersion: ` + harness.K8sVersion + `
imageRepository: ` + registry + `
`
}

// bootNode boots a copy of the raw disk as a cloud would: OVMF, 2 CPUs,
// 4 GiB, user networking with no route out, and a NoCloud seed whose
// user-data runs the checks. Every check must report ok.
func bootNode(t *testing.T, raw, registry string, images []string, mode nodeMode) {
	t.Helper()
	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.raw")
	if b, err := exec.Command("cp", "--sparse=always", raw, disk).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, b)
	}
	cs := nodeChecks(registry, images, mode)
	userData := fmt.Sprintf(`#cloud-config
write_files:
  - path: /run/stamp-check/check.sh
    permissions: "0755"
    encoding: b64
    content: %s
  - path: /run/stamp-check/kubeadm.yaml
    permissions: "0644"
    encoding: b64
    content: %s
runcmd:
  - [sh, /run/stamp-check/check.sh]
`, base64.StdEncoding.EncodeToString([]byte(nodeCheckScript(cs))), base64.StdEncoding.EncodeToString([]byte(nodeKubeadmConfig(registry))))
	seed := harness.CIDATASeed(t, dir, userData, "instance-id: stamp-e2e-node\nlocal-hostname: node\n")
	log := harness.RunQEMU(t, []string{
		"-bios", harness.OVMFPath, "-smp", "2", "-m", "4096",
		"-drive", "file=" + disk + ",format=raw,if=virtio",
		"-drive", "file=" + seed + ",format=raw,if=virtio",
		"-nic", "user,restrict=on,model=virtio-net-pci",
	}, "STAMP-CHECK done", 30*time.Minute)
	if o := os.Getenv("STAMP_E2E_NODE_OUT"); o != "" {
		if err := os.WriteFile(filepath.Join(o, "serial.log"), []byte(log), 0o644); err != nil {
			t.Error(err)
		}
	}

	if !strings.Contains(log, "stamp-initramfs: root=") {
		t.Error("the serial log does not show stamp's initramfs mounting the root")
	}
	okRE := regexp.MustCompile(`STAMP-CHECK ok (.*?)\r?\n`)
	ok := map[string]bool{}
	for _, m := range okRE.FindAllStringSubmatch(log, -1) {
		ok[m[1]] = true
	}
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "STAMP-CHECK FAIL") || strings.Contains(l, "STAMP-INFO") {
			t.Log(strings.TrimSpace(l))
		}
		if strings.Contains(l, "STAMP-CHECK FAIL") {
			t.Error(strings.TrimSpace(l))
		}
	}
	passed := 0
	for _, c := range cs {
		if ok[c.name] {
			passed++
		} else if !strings.Contains(log, "STAMP-CHECK FAIL "+c.name+":") {
			t.Errorf("check %q did not report", c.name)
		}
	}
	t.Logf("%d of %d in-node checks passed", passed, len(cs))
}
