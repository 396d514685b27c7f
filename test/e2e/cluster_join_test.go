//go:build node

package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

// The two machines' second NICs share a qemu socket network, the
// cluster's own; their first NICs are qemu user networks as in TestCluster.
const (
	joinControlPlaneIP  = "192.168.77.10"
	joinWorkerIP        = "192.168.77.11"
	joinControlPlaneMAC = "52:54:00:77:00:10"
	joinWorkerMAC       = "52:54:00:77:00:11"
	// joinToken is the bootstrap token the init machine's configuration
	// carries and the worker presents, as Cluster API hands one to each
	// joining machine.
	joinToken = "stampj.0123456789abcdef"
)

// TestClusterJoin boots two machines from make e2e-node's image, one after the other:
// a control plane with TestCluster's seed (its API server on the cluster
// network), and a worker whose seed is what Cluster API's kubeadm
// bootstrap provider renders for a worker: kubeadm join with the bootstrap
// token and the CA's pin. The control plane's observer requires, beyond
// TestCluster's checks, the worker Ready and a pod the scheduler places on
// it run to completion.
func TestClusterJoin(t *testing.T) {
	registry, raw, in := clusterInputs(t)
	step := stepTimer(t)
	before := clusterImagesBefore(t, in, registry)
	pki, err := harness.NewClusterPKI()
	if err != nil {
		t.Fatal(err)
	}
	podImage := registry + "/kube-proxy:" + harness.K8sVersion
	progress := harness.SeedFile{Path: "/run/stamp-cluster/progress.sh", Owner: "root:root", Permissions: "0755", Content: clusterProgress}
	progressCmd := "setsid /run/stamp-cluster/progress.sh </dev/null >/dev/ttyS0 2>&1 &"
	cp := harness.KubeadmInit{
		ClusterName:          "stamp-e2e-join",
		KubernetesVersion:    harness.K8sVersion,
		ControlPlaneEndpoint: joinControlPlaneIP + ":6443",
		ImageRepository:      registry,
		PodSubnet:            "10.85.0.0/16",
		ServiceSubnet:        "10.96.0.0/12",
		ControlPlaneTimeout:  30 * time.Minute,
		// Both machines have the same address on their first NIC, where
		// the default route is: the API server and each kubelet are told
		// their cluster address, as on a machine with two networks.
		AdvertiseAddress: joinControlPlaneIP,
		NodeIP:           joinControlPlaneIP,
		BootstrapToken:   joinToken,
		PKI:              pki,
		// While the worker boots, two emulated machines share two cores
		// and the API server can take more than the 5 s a lease renewal
		// waits (half the 10 s renew deadline): the controller-manager and
		// the scheduler lose their leases, exit, and back off for minutes,
		// and a worker's certificate waits for the controller-manager to
		// sign it. Longer leases, in the KubeadmControlPlane's
		// clusterConfiguration as a user sets them for slow machines.
		ControllerManagerArgs: slowLeases,
		SchedulerArgs:         slowLeases,
		Files: []harness.SeedFile{
			{Path: "/run/stamp-cluster/observe.sh", Owner: "root:root", Permissions: "0755", Content: clusterObserver(podImage, "worker")},
			progress, before,
		},
		PreKubeadmCommands:  []string{before.Path, progressCmd},
		PostKubeadmCommands: []string{"/run/stamp-cluster/observe.sh"},
	}
	worker := harness.KubeadmJoin{
		APIServerEndpoint: joinControlPlaneIP + ":6443",
		Token:             joinToken,
		CACertHashes:      []string{pki.CACertHash()},
		// The API server answers by the time the worker boots; the bound
		// is for a control plane that TCG on a busy machine slows down.
		DiscoveryTimeout:   30 * time.Minute,
		NodeIP:             joinWorkerIP,
		Files:              []harness.SeedFile{progress},
		PreKubeadmCommands: []string{progressCmd},
	}
	cpData, err := cp.UserData()
	if err != nil {
		t.Fatal(err)
	}
	workerData, err := worker.UserData()
	if err != nil {
		t.Fatal(err)
	}
	validateKubeadmConfig(t, in.Bins.Path("kubeadm"), cpData, "/run/kubeadm/kubeadm.yaml")
	validateKubeadmConfig(t, in.Bins.Path("kubeadm"), workerData, "/run/kubeadm/kubeadm-join-config.yaml")

	dir := t.TempDir()
	machine := func(name, userData, ip, mac string) (disk, seed string) {
		d := filepath.Join(dir, name)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		disk = filepath.Join(d, "disk.raw")
		if b, err := exec.Command("cp", "--sparse=always", raw, disk).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v\n%s", err, b)
		}
		seed = harness.CIDATASeedFiles(t, d, map[string]string{
			"user-data":      userData,
			"meta-data":      fmt.Sprintf("instance-id: stamp-e2e-%s\nlocal-hostname: %s\n", name, name),
			"network-config": clusterNetworkConfig + joinNetworkConfig(ip, mac),
		})
		return disk, seed
	}
	cpDisk, cpSeed := machine("node", cpData, joinControlPlaneIP, joinControlPlaneMAC)
	workerDisk, workerSeed := machine("worker", workerData, joinWorkerIP, joinWorkerMAC)
	step("seeds rendered and validated by kubeadm")

	// Cluster API renders a worker's bootstrap data only once the control
	// plane is initialised, so the worker boots when kubeadm init has
	// finished there (the observer starts), not beside it: two machines
	// under TCG on two cores starting at once starve the control plane's
	// controller-manager of its API server. The control plane listens on
	// the socket network and the worker connects.
	port := freePort(t)
	workerLog := filepath.Join(dir, "worker-serial.log")
	wl, err := os.Create(workerLog)
	if err != nil {
		t.Fatal(err)
	}
	defer wl.Close()
	wcmd := exec.Command(harness.Tool(t, "qemu-system-x86_64"), "-accel", "tcg", "-nographic", "-no-reboot",
		"-bios", harness.OVMFPath, "-smp", "2", "-m", "3072",
		"-drive", "file="+workerDisk+",format=raw,if=virtio",
		"-drive", "file="+workerSeed+",format=raw,if=virtio",
		"-nic", "user,restrict=on,model=virtio-net-pci,mac="+clusterMAC,
		"-netdev", fmt.Sprintf("socket,id=cluster,connect=127.0.0.1:%d", port),
		"-device", "virtio-net-pci,netdev=cluster,mac="+joinWorkerMAC)
	wcmd.Stdout, wcmd.Stderr = wl, wl
	var workerStarted time.Time
	var workerErr error
	t.Cleanup(func() {
		if !workerStarted.IsZero() && wcmd.ProcessState == nil {
			wcmd.Process.Kill()
			wcmd.Wait()
		}
	})
	b := harness.BootQEMUWatching(t, []string{
		"-bios", harness.OVMFPath, "-smp", "2", "-m", "4096",
		"-drive", "file=" + cpDisk + ",format=raw,if=virtio",
		"-drive", "file=" + cpSeed + ",format=raw,if=virtio",
		"-nic", "user,restrict=on,model=virtio-net-pci,mac=" + clusterMAC,
		"-netdev", fmt.Sprintf("socket,id=cluster,listen=127.0.0.1:%d", port),
		"-device", "virtio-net-pci,netdev=cluster,mac=" + joinControlPlaneMAC,
	}, func(log []byte) bool {
		if workerStarted.IsZero() && workerErr == nil && bytes.Contains(log, []byte(observerStarted)) {
			if workerErr = wcmd.Start(); workerErr == nil {
				workerStarted = time.Now()
			}
		}
		return false
	}, 60*time.Minute)
	// BootQEMUWatching has stopped calling the watcher when it returns.
	if !workerStarted.IsZero() {
		wcmd.Process.Kill()
		wcmd.Wait()
		t.Logf("the worker ran for %s, from the control plane's kubeadm init", time.Since(workerStarted).Round(time.Second))
	}
	if workerErr != nil {
		t.Fatalf("starting the worker: %v", workerErr)
	}
	if workerStarted.IsZero() {
		t.Errorf("the control plane never printed %q, so the worker never booted", observerStarted)
	}
	step("both machines booted, init, join and the observer")
	if wb, err := os.ReadFile(workerLog); err == nil {
		for _, l := range strings.Split(string(wb), "\n") {
			if strings.Contains(l, "STAMP-INFO") || strings.Contains(l, "kubeadm") || strings.Contains(l, "[preflight]") {
				t.Logf("worker: %s", strings.TrimSpace(l))
			}
		}
		if o := os.Getenv("STAMP_E2E_CLUSTER_OUT"); o != "" {
			if err := os.WriteFile(filepath.Join(o, "join-worker-serial.log"), wb, 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	checkClusterLog(t, b, "join-serial.log", append(clusterChecks, "worker Ready", "pod scheduled on the worker Succeeded", "pod on the worker"))
}

// slowLeases are the leader-election flags TestClusterJoin gives the
// controller-manager and the scheduler: four times the default lease and
// renew deadline, the retry period as it is.
var slowLeases = map[string]string{"leader-elect-lease-duration": "60s", "leader-elect-renew-deadline": "40s"}

// joinNetworkConfig is the second NIC's entry under clusterNetworkConfig's
// ethernets: a static address on the cluster network, as Metal3 and
// OpenStack hand a machine its network data.
func joinNetworkConfig(ip, mac string) string {
	return `  cluster:
    match:
      macaddress: "` + mac + `"
    addresses: [` + ip + `/24]
`
}

// freePort is a TCP port on 127.0.0.1 nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
