//go:build node

package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/stamp-dev/stamp/test/harness"
)

// clusterNodeDir is where make e2e-node leaves the node image, relative to
// this package; STAMP_E2E_CLUSTER_NODE names another (a node built with
// other choices, as TestNodeImage's STAMP_E2E_NODE_OUT kept it).
func clusterNodeDir() string {
	if d := os.Getenv("STAMP_E2E_CLUSTER_NODE"); d != "" {
		return d
	}
	return "../../out/e2e-node"
}

// TestCluster boots the node image make e2e-node left in out/e2e-node as
// Cluster API would boot its first control-plane machine: OVMF, 2 CPUs,
// 4 GiB, user networking with no route out, and a NoCloud seed holding the
// user-data its kubeadm bootstrap provider renders for "kubeadm init"
// (harness.KubeadmInit). The seed's postKubeadmCommands run
// clusterObserver, which reports on the serial console: kubeadm init
// succeeded with no image pulled, the node is Ready (and when, in uptime),
// every kube-system pod runs, and a pod from an image stamp built runs to
// completion once the control-plane taint is gone.
func TestCluster(t *testing.T) {
	registry, raw, in := clusterInputs(t)
	step := stepTimer(t)
	userData := clusterInitUserData(t, registry, in)

	dir := t.TempDir()
	disk := filepath.Join(dir, "disk.raw")
	if b, err := exec.Command("cp", "--sparse=always", raw, disk).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, b)
	}
	seed := harness.CIDATASeedFiles(t, dir, map[string]string{
		"user-data":      userData,
		"meta-data":      "instance-id: stamp-e2e-cluster\nlocal-hostname: node\n",
		"network-config": clusterNetworkConfig,
	})
	step("seed rendered and validated by kubeadm")
	// A boot that ends on no datasource never runs kubeadm: stop it there
	// rather than at the timeout.
	b := harness.BootQEMUUntil(t, []string{
		"-bios", harness.OVMFPath, "-smp", "2", "-m", "4096",
		"-drive", "file=" + disk + ",format=raw,if=virtio",
		"-drive", "file=" + seed + ",format=raw,if=virtio",
		"-nic", "user,restrict=on,model=virtio-net-pci,mac=" + clusterMAC,
	}, noDatasource, 50*time.Minute)
	step("boot, kubeadm init and the observer")
	if strings.Contains(b.Log, noDatasource) {
		t.Fatalf("cloud-init found no datasource: the seed disk was not read; log ends:\n%s", b.Tail(40))
	}
	checkClusterLog(t, b, "serial.log", clusterChecks)
	if m := regexp.MustCompile(`STAMP-INFO ready at uptime ([0-9.]+)`).FindStringSubmatch(b.Log); m != nil {
		t.Logf("boot to Ready: %s s after the kernel started (qemu ran %s in all); the node: %s", m[1], b.Took.Round(time.Second), clusterNodeMode(t))
	}
}

// clusterInitUserData is the user-data Cluster API's kubeadm bootstrap
// provider renders for a first control-plane machine (kubeadm init, its
// images from registry), with the scripts first (written, then run in
// turn) and the observer after it, checked by kubeadm.
func clusterInitUserData(t *testing.T, registry string, in *harness.K8sInputs, first ...harness.SeedFile) string {
	t.Helper()
	before := clusterImagesBefore(t, in, registry)
	podImage := registry + "/kube-proxy:" + harness.K8sVersion
	k := harness.KubeadmInit{
		ClusterName:          "stamp-e2e",
		KubernetesVersion:    harness.K8sVersion,
		ControlPlaneEndpoint: "10.0.2.15:6443", // qemu's user network gives the first NIC this address
		ImageRepository:      registry,
		// The pod network of the node recipe's bridge CNI configuration.
		PodSubnet:     "10.85.0.0/16",
		ServiceSubnet: "10.96.0.0/12",
		// Under TCG the control plane takes minutes to answer, longer than
		// kubeadm's default four; Cluster API users set the same field
		// for slow machines.
		ControlPlaneTimeout: 20 * time.Minute,
		Files: []harness.SeedFile{
			{Path: "/run/stamp-cluster/observe.sh", Owner: "root:root", Permissions: "0755", Content: clusterObserver(podImage, "")},
			{Path: "/run/stamp-cluster/progress.sh", Owner: "root:root", Permissions: "0755", Content: clusterProgress},
			before,
		},
		// The progress report runs beside kubeadm init: under TCG its
		// wait for the API server is minutes with nothing on the console.
		PreKubeadmCommands:  []string{before.Path, "setsid /run/stamp-cluster/progress.sh </dev/null >/dev/ttyS0 2>&1 &"},
		PostKubeadmCommands: []string{"/run/stamp-cluster/observe.sh"},
	}
	for i := len(first) - 1; i >= 0; i-- {
		k.Files = append(k.Files, first[i])
		k.PostKubeadmCommands = append([]string{first[i].Path}, k.PostKubeadmCommands...)
	}
	userData, err := k.UserData()
	if err != nil {
		t.Fatal(err)
	}
	validateKubeadmConfig(t, in.Bins.Path("kubeadm"), userData, "/run/kubeadm/kubeadm.yaml")
	return userData
}

// clusterNodeMode says which of the node recipe's choices make e2e-node
// built (node.env), for the boot-to-Ready line.
func clusterNodeMode(t *testing.T) string {
	env := readNodeEnv(t, filepath.Join(clusterNodeDir(), "node.env"))
	c, i := env["CONTAINERD"], env["IMAGES_INTO"]
	if c == "" {
		c = "debian"
	}
	if i == "" {
		i = "containerd"
	}
	return "containerd=" + c + " images_into=" + i
}

// clusterImagesBefore is a preKubeadmCommands script: before kubeadm
// writes kubelet's configuration, so before kubelet has ever run, the
// runtime lists every image kubeadm will ask for. It waits for containerd
// to answer (cloud-init's final stage may start first) and reports
// "images before kubelet".
func clusterImagesBefore(t *testing.T, in *harness.K8sInputs, registry string) harness.SeedFile {
	t.Helper()
	images, err := harness.KubeadmImageNames(context.Background(), in.Bins, registry)
	if err != nil {
		t.Fatal(err)
	}
	if len(images) != 7 {
		t.Fatalf("kubeadm asks for %d images, want seven: %q", len(images), images)
	}
	return harness.SeedFile{Path: "/run/stamp-cluster/before.sh", Owner: "root:root", Permissions: "0755", Content: `#!/bin/sh
exec >/dev/ttyS0 2>&1
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
i=0
until crictl images >/dev/null 2>&1 || [ $i -ge 120 ]; do sleep 1; i=$((i + 1)); done
echo "STAMP-INFO images before kubelet, at uptime $(cut -d' ' -f1 /proc/uptime):"
crictl images 2>&1 | sed 's/^/STAMP-INFO before: /'
missing=""
for im in ` + strings.Join(images, " ") + `; do
	crictl images -o json | grep -q "\"$im\"" || missing="$missing $im"
done
if [ -e /var/lib/kubelet/config.yaml ]; then
	echo "STAMP-CLUSTER FAIL images before kubelet: kubelet's configuration is there already"
elif [ -n "$missing" ]; then
	echo "STAMP-CLUSTER FAIL images before kubelet: missing$missing"
else
	echo "STAMP-CLUSTER ok images before kubelet"
fi
`}
}

// clusterInputs are what a cluster test boots: the registry the node's
// images name, make e2e-node's raw image, and the Kubernetes inputs.
func clusterInputs(t *testing.T) (registry, raw string, in *harness.K8sInputs) {
	t.Helper()
	harness.RequireTools(t, "qemu-system-x86_64", "cp")
	env := readNodeEnv(t, filepath.Join(clusterNodeDir(), "node.env"))
	if env["KUBERNETES_VERSION"] != harness.K8sVersion {
		t.Fatalf("%s was built for Kubernetes %s, the test is for %s: run make e2e-node again", clusterNodeDir(), env["KUBERNETES_VERSION"], harness.K8sVersion)
	}
	raw = filepath.Join(clusterNodeDir(), "k8s-node.raw")
	if _, err := os.Stat(raw); err != nil {
		t.Fatalf("no node image (make e2e-node makes it): %v", err)
	}
	return env["REGISTRY"], raw, harness.K8sInputsFor(t)
}

// checkClusterLog keeps the console (as name under STAMP_E2E_CLUSTER_OUT),
// logs what the observer printed, and requires every check in want to be
// reported ok and none to have failed.
func checkClusterLog(t *testing.T, b *harness.Boot, name string, want []string) {
	t.Helper()
	if o := os.Getenv("STAMP_E2E_CLUSTER_OUT"); o != "" {
		if err := os.MkdirAll(o, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(o, name), []byte(b.Log), 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("serial log kept in %s", filepath.Join(o, name))
	}
	for _, l := range strings.Split(b.Log, "\n") {
		if strings.Contains(l, "STAMP-INFO") || strings.Contains(l, "STAMP-CLUSTER") {
			t.Log(strings.TrimSpace(l))
		}
	}
	switch {
	case b.TimedOut:
		t.Fatalf("qemu did not finish within its time; log ends:\n%s", b.Tail(80))
	case strings.Contains(b.Log, "Kernel panic"):
		t.Fatalf("the kernel panicked; log ends:\n%s", b.Tail(60))
	case !strings.Contains(b.Log, "STAMP-CLUSTER done"):
		t.Fatalf("the observer did not finish; log ends:\n%s", b.Tail(80))
	}
	ok := map[string]bool{}
	for _, m := range regexp.MustCompile(`STAMP-CLUSTER ok (.*?)\r?\n`).FindAllStringSubmatch(b.Log, -1) {
		ok[m[1]] = true
	}
	for _, m := range regexp.MustCompile(`STAMP-CLUSTER FAIL (.*?)\r?\n`).FindAllStringSubmatch(b.Log, -1) {
		t.Error(m[1])
	}
	for _, w := range want {
		if !ok[w] {
			t.Errorf("the observer did not report %q ok", w)
		}
	}
}

// noDatasource is what cloud-init says on the console when it found no
// seed.
const noDatasource = "Datasource DataSourceNone"

// clusterMAC is the node's first NIC, as clusterNetworkConfig matches it.
const clusterMAC = "52:54:00:12:34:56"

// clusterNetworkConfig is the NoCloud network-config (version 2) the seed
// carries, as the infrastructure providers of metal and private clouds
// (Metal3, OpenStack) hand one over. The address still comes by DHCP.
// qemu's user network with restrict=on is what keeps every packet from
// leaving the machine, but its DHCP server then offers no router and no
// DNS server, where a real network offers both: kubeadm finds the node's
// address from the default route, and CoreDNS refuses to start with no
// upstream server. The route and the server here are qemu's own (10.0.2.2
// and 10.0.2.3), which answer nothing beyond the machine.
const clusterNetworkConfig = `version: 2
ethernets:
  nic0:
    match:
      macaddress: "` + clusterMAC + `"
    dhcp4: true
    routes:
      - to: 0.0.0.0/0
        via: 10.0.2.2
    nameservers:
      addresses: [10.0.2.3]
`

// clusterChecks are what clusterObserver must report ok.
var clusterChecks = []string{
	"images before kubelet", "kubeadm init", "no image pulled", "node Ready",
	"pod etcd Running", "pod kube-apiserver Running", "pod kube-controller-manager Running",
	"pod kube-scheduler Running", "pod kube-proxy Running", "pod coredns Running",
	"control-plane taint removed", "pod from a stamp image Succeeded", "pod on the node",
	"pod resolves kubernetes.default through coredns",
}

// observerStarted is the observer's first line: kubeadm init has ended,
// the sentinel written or not.
const observerStarted = "STAMP-INFO observer started"

// clusterObserver is the script the seed's postKubeadmCommands run on the
// node: it waits for each milestone, prints STAMP-CLUSTER ok or FAIL per
// check and STAMP-INFO facts, then powers the node off.
func clusterObserver(podImage, worker string) string {
	return `#!/bin/sh
# stamp's cluster test (test/e2e/cluster_test.go): Cluster API's
# postKubeadmCommands, run by cloud-init after kubeadm init.
exec >/dev/ttyS0 2>&1
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
KUBECONFIG=/etc/kubernetes/admin.conf
export PATH KUBECONFIG
up() { cut -d' ' -f1 /proc/uptime; }
secs() { cut -d. -f1 /proc/uptime; }
ok() { echo "STAMP-CLUSTER ok $1"; }
fail() { echo "STAMP-CLUSTER FAIL $1: $(echo "$2" | tr '\n' ' ' | cut -c1-800)"; }
info() { sed "s|^|STAMP-INFO $1: |"; }
echo "` + observerStarted + ` at uptime $(up)"
# When kubeadm init wrote what each of its phases leaves, in uptime, from
# the files' mtimes: where its minutes under TCG go.
boot=$(echo "$(date +%s.%N) $(up)" | awk '{ printf "%.3f", $1 - $2 }')
for f in /run/kubeadm/kubeadm.yaml /etc/kubernetes/pki/apiserver.crt /etc/kubernetes/pki/front-proxy-client.crt \
	/etc/kubernetes/pki/etcd/server.crt /etc/kubernetes/pki/apiserver-etcd-client.crt /etc/kubernetes/admin.conf \
	/etc/kubernetes/scheduler.conf /etc/kubernetes/manifests/etcd.yaml /etc/kubernetes/manifests/kube-scheduler.yaml \
	/var/lib/kubelet/config.yaml /run/cluster-api/bootstrap-success.complete; do
	[ -e "$f" ] && stat -c '%.3Y %n' "$f" | awk -v b="$boot" '{ printf "STAMP-INFO kubeadm wrote %s at uptime %.1f\n", $2, $1 - b }'
done
if [ -f /run/cluster-api/bootstrap-success.complete ]; then
	ok "kubeadm init"
else
	fail "kubeadm init" "no /run/cluster-api/bootstrap-success.complete"
	journalctl -b -u kubelet --no-pager | tail -n 40 | info kubelet
	crictl ps -a 2>&1 | info crictl
fi
if kubectl wait --for=condition=Ready node/node --timeout=20m >/dev/null 2>&1; then
	ok "node Ready"
	echo "STAMP-INFO ready at uptime $(up)"
else
	fail "node Ready" "$(kubectl get nodes -o wide 2>&1; kubectl describe node node 2>&1 | tail -n 30)"
fi
# Each kube-system component: its pods Running and Ready. A Deployment's
# or DaemonSet's pods may not exist yet, so wait for them to appear too.
waitpods() {
	end=$(($(secs) + 1200))
	while [ "$(secs)" -lt $end ]; do
		if kubectl -n kube-system wait --for=condition=Ready pod -l "$2" --timeout=60s >/dev/null 2>&1; then
			phases=$(kubectl -n kube-system get pods -l "$2" -o jsonpath='{.items[*].status.phase}')
			if [ -n "$phases" ] && [ -z "$(echo "$phases" | tr ' ' '\n' | grep -vx Running)" ]; then
				ok "pod $1 Running"
				echo "STAMP-INFO $1 ready at uptime $(up)"
				return
			fi
		fi
		sleep 5
	done
	fail "pod $1 Running" "$(kubectl -n kube-system get pods -l "$2" -o wide 2>&1; kubectl -n kube-system describe pods -l "$2" 2>&1 | tail -n 25)"
}
waitpods etcd component=etcd
waitpods kube-apiserver component=kube-apiserver
waitpods kube-controller-manager component=kube-controller-manager
waitpods kube-scheduler component=kube-scheduler
waitpods kube-proxy k8s-app=kube-proxy
waitpods coredns k8s-app=kube-dns
if out=$(kubectl taint nodes node node-role.kubernetes.io/control-plane:NoSchedule- 2>&1); then
	ok "control-plane taint removed"
else
	fail "control-plane taint removed" "$out"
fi
# A pod of an image stamp built, never pulled: it asks the cluster's DNS
# for the API server's Service, through kube-proxy's rules and coredns.
# On this node: the node recipe's bridge network is one node's, so a pod's
# DNS query reaches CoreDNS only there.
kubectl run stamp-pod --image=` + podImage + ` --image-pull-policy=Never --restart=Never \
	--overrides='{"apiVersion": "v1", "spec": {"nodeSelector": {"kubernetes.io/hostname": "node"}}}' --command -- \
	sh -c 'kube-proxy --version; iptables --version; getent hosts kubernetes.default.svc.cluster.local; echo stamp-pod-ran' 2>&1 | info run
if kubectl wait --for=jsonpath='{.status.phase}'=Succeeded pod/stamp-pod --timeout=15m >/dev/null 2>&1; then
	ok "pod from a stamp image Succeeded"
	echo "STAMP-INFO pod succeeded at uptime $(up)"
else
	fail "pod from a stamp image Succeeded" "$(kubectl describe pod stamp-pod 2>&1 | tail -n 25)"
fi
logs=$(kubectl logs stamp-pod 2>&1)
echo "$logs" | info pod-log
node=$(kubectl get pod stamp-pod -o jsonpath='{.spec.nodeName}')
if [ "$node" = node ]; then ok "pod on the node"; else fail "pod on the node" "on '$node'"; fi
if echo "$logs" | grep -q '^10\.96\.0\.1 .*kubernetes\.default\.svc\.cluster\.local'; then
	ok "pod resolves kubernetes.default through coredns"
else
	fail "pod resolves kubernetes.default through coredns" "$logs"
fi
WORKER=` + worker + `
if [ -n "$WORKER" ]; then
	# A worker joins: it must become Ready, and the scheduler must place a
	# pod there that runs to completion. kubectl wait on a node not yet
	# registered fails at once, so wait for the worker's Node first.
	end=$(($(secs) + 1800))
	until kubectl get "node/$WORKER" >/dev/null 2>&1 || [ "$(secs)" -ge $end ]; do sleep 10; done
	if kubectl wait --for=condition=Ready "node/$WORKER" --timeout=20m >/dev/null 2>&1; then
		ok "worker Ready"
		echo "STAMP-INFO worker ready at uptime $(up)"
	else
		fail "worker Ready" "$(kubectl get nodes -o wide 2>&1)"
	fi
	kubectl run worker-pod --image=` + podImage + ` --image-pull-policy=Never --restart=Never \
		--overrides='{"apiVersion": "v1", "spec": {"nodeSelector": {"kubernetes.io/hostname": "'"$WORKER"'"}}}' \
		--command -- sh -c 'kube-proxy --version; echo worker-pod-ran' 2>&1 | info run
	if kubectl wait --for=jsonpath='{.status.phase}'=Succeeded pod/worker-pod --timeout=15m >/dev/null 2>&1; then
		ok "pod scheduled on the worker Succeeded"
	else
		fail "pod scheduled on the worker Succeeded" "$(kubectl describe pod worker-pod 2>&1 | tail -n 25)"
	fi
	node=$(kubectl get pod worker-pod -o jsonpath='{.spec.nodeName}')
	if [ "$node" = "$WORKER" ]; then ok "pod on the worker"; else fail "pod on the worker" "on '$node'"; fi
	kubectl logs worker-pod 2>&1 | info worker-pod-log
fi
# Nothing came from a registry: containerd's CRI logs each pull it starts.
pulls=$(journalctl -b -u containerd --no-pager | grep -c 'PullImage ')
if [ "$pulls" -eq 0 ]; then
	ok "no image pulled"
else
	fail "no image pulled" "$(journalctl -b -u containerd --no-pager | grep 'PullImage ' | head -n 5)"
fi
kubectl get nodes -o wide 2>&1 | info nodes
kubectl get pods -A -o wide 2>&1 | info pods
crictl images 2>&1 | info crictl
# The boot is not finished while cloud-final runs this, so systemd-analyze
# answers nothing: each unit's activation time instead (from leaving
# inactive to active, as blame counts it), the slowest first, and when the
# milestones were reached, in seconds since the kernel started.
systemctl show '*' -p Id -p InactiveExitTimestampMonotonic -p ActiveEnterTimestampMonotonic 2>/dev/null |
	awk -F= '/^Id=/ { id = $2 } /^InactiveExit/ { s = $2 } /^ActiveEnter/ { if (s > 0 && $2 > s) printf "%.3fs %s\n", ($2 - s) / 1e6, id }' |
	sort -rn | head -n 10 | info blame
for u in multi-user.target containerd.service kubelet.service cloud-final.service; do
	echo "STAMP-INFO reached $u $(systemctl show -p ActiveEnterTimestampMonotonic --value "$u" | awk '{ printf "%.1f", $1 / 1e6 }')"
done
echo "STAMP-INFO started cloud-final.service $(systemctl show -p ExecMainStartTimestampMonotonic --value cloud-final.service | awk '{ printf "%.1f", $1 / 1e6 }')"
free -m 2>&1 | info free
echo "STAMP-INFO observer ended at uptime $(up)"
touch /run/stamp-cluster/done
echo "STAMP-CLUSTER done"
systemctl poweroff
`
}

// clusterProgress prints, every 20 seconds until the observer ends, the
// uptime and each container's name, state and restart count, and the last
// lines of each container that exited, so a slow or failing control plane
// shows on the console as it happens.
const clusterProgress = `#!/bin/sh
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
while [ ! -e /run/stamp-cluster/done ]; do
	sleep 20
	echo "STAMP-INFO progress $(cut -d' ' -f1 /proc/uptime): $(crictl ps -a -o json 2>/dev/null | jq -r '.containers[] | "\(.metadata.name)=\(.state | ltrimstr("CONTAINER_"))/\(.metadata.attempt)"' 2>/dev/null | sort | tr '\n' ' ')"
	# What kubelet and containerd complained about meanwhile.
	journalctl -u kubelet -u containerd --since -20s --no-pager -o cat 2>/dev/null | grep -E '^E[0-9]{4}|level=error' |
		tail -n 4 | cut -c1-500 | sed 's/^/STAMP-INFO error: /'
	# The last words of every container that exited, once each.
	for id in $(crictl ps -a -q --state exited 2>/dev/null); do
		grep -qx "$id" /run/stamp-cluster/exited 2>/dev/null && continue
		echo "$id" >>/run/stamp-cluster/exited
		name=$(crictl inspect "$id" 2>/dev/null | jq -r '"\(.status.metadata.name) exit \(.status.exitCode)"')
		crictl logs --tail 6 "$id" 2>&1 | sed "s|^|STAMP-INFO exited $name: |" | cut -c1-400
	done
done
`

// validateKubeadmConfig has the test's own kubeadm read the seed's
// /run/kubeadm/kubeadm.yaml, with the node name cloud-init would render,
// so a configuration kubeadm refuses fails in seconds, not after a boot.
func validateKubeadmConfig(t *testing.T, kubeadm, userData, path string) {
	t.Helper()
	// Read as cloud-init reads it, after jinja has named the node.
	var doc struct {
		WriteFiles []struct{ Path, Content string } `yaml:"write_files"`
	}
	if err := yaml.Unmarshal([]byte(strings.ReplaceAll(userData, "{{ ds.meta_data.local_hostname }}", "node")), &doc); err != nil {
		t.Fatalf("the user-data is not YAML: %v", err)
	}
	body := ""
	for _, f := range doc.WriteFiles {
		if f.Path == path {
			body = f.Content
		}
	}
	if body == "" {
		t.Fatalf("no %s in the user-data", path)
	}
	file := filepath.Join(t.TempDir(), "kubeadm.yaml")
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(kubeadm, "config", "validate", "--config", file)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kubeadm config validate: %v\n%s\n%s", err, out, body)
	}
}

// readNodeEnv reads make e2e-node's node.env: KEY=VALUE lines.
func readNodeEnv(t *testing.T, name string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatalf("%v (make e2e-node writes it)", err)
	}
	env := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, "="); ok && !strings.HasPrefix(l, "#") {
			env[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return env
}
