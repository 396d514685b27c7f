//go:build node

package e2e

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/test/harness"
)

// disklessMemory is the diskless machine's memory: TestCluster's 4 GiB
// and room for the root image and what the node writes, all in RAM.
const disklessMemory = "6144"

// TestClusterDiskless boots the node recipe's live output, which make
// e2e-node leaves in out/e2e-node, as a diskless first control-plane
// machine: no disk at all; iPXE fetches the bundle's kernel, initramfs and
// root image from an HTTP server on 127.0.0.1, the initramfs checks the
// image and runs the tree from RAM (containerd's and kubelet's state on a
// tmpfs of their own), and cloud-init fetches TestCluster's NoCloud seed
// from the same server, named on the kernel command line
// (ds=nocloud-net;s=URL: Debian bookworm's cloud-init 22.4 reads a seed
// over the network only in that form; with ds=nocloud the seed is for its
// local stage, which reads files alone, and the boot ends on no
// datasource at all).
// The observer's checks are TestCluster's. The user network is not
// restricted, because a restricted one keeps the guest from the host's
// server too; "no image pulled" still holds the node to what it carries.
// It logs the boot to Ready and the memory the node used.
func TestClusterDiskless(t *testing.T) {
	registry, _, in := clusterInputs(t)
	bundle := filepath.Join(clusterNodeDir(), "k8s-node.live")
	script, err := os.ReadFile(filepath.Join(bundle, formats.LiveScript))
	if err != nil {
		t.Fatalf("no live bundle of the node (make e2e-node makes it from the recipe's live output): %v", err)
	}
	step := stepTimer(t)
	userData := clusterInitUserData(t, registry, in)
	seed := t.TempDir()
	writeFiles(t, seed, map[string]string{
		"user-data": userData,
		"meta-data": "instance-id: stamp-e2e-diskless\nlocal-hostname: node\n",
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	// The bundle's own script, with the seed's URL on the kernel line.
	kernelLine := regexp.MustCompile(`(?m)^kernel .*$`)
	if !kernelLine.Match(script) {
		t.Fatalf("%s has no kernel line:\n%s", formats.LiveScript, script)
	}
	diskless := kernelLine.ReplaceAllStringFunc(string(script), func(line string) string {
		return fmt.Sprintf("%s ds=nocloud-net;s=http://10.0.2.2:%d/seed/", line, port)
	})
	mux := http.NewServeMux()
	mux.Handle("/", http.FileServer(http.Dir(bundle)))
	mux.Handle("/seed/", http.StripPrefix("/seed/", http.FileServer(http.Dir(seed))))
	mux.HandleFunc("/diskless.ipxe", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, diskless) })
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	step("seed rendered and validated by kubeadm, served with the bundle")

	// A boot that ends on no datasource never runs kubeadm: stop it there
	// rather than at the timeout.
	b := harness.BootQEMUUntil(t, []string{
		"-smp", "2", "-m", disklessMemory,
		"-netdev", fmt.Sprintf("user,id=n,bootfile=http://10.0.2.2:%d/diskless.ipxe", port),
		"-device", "virtio-net-pci,netdev=n,mac=" + clusterMAC, "-boot", "n",
	}, noDatasource, 60*time.Minute)
	step("iPXE, the node from RAM, kubeadm init and the observer")
	if strings.Contains(b.Log, "stamp-live: giving up") {
		t.Fatalf("the live initramfs gave up; log ends:\n%s", b.Tail(40))
	}
	if strings.Contains(b.Log, noDatasource) {
		t.Fatalf("cloud-init found no datasource: the seed at http://10.0.2.2:%d/seed/ was not read; log ends:\n%s", port, b.Tail(40))
	}
	checkClusterLog(t, b, "serial-diskless.log", clusterChecks)
	if m := regexp.MustCompile(`the image found, checked and mounted in ([0-9.]+) s`).FindStringSubmatch(b.Log); m != nil {
		t.Logf("the initramfs found, checked and mounted the root image in %s s", m[1])
	}
	if m := regexp.MustCompile(`STAMP-INFO ready at uptime ([0-9.]+)`).FindStringSubmatch(b.Log); m != nil {
		t.Logf("boot to Ready: %s s after the kernel started, diskless, %s MiB of memory (qemu ran %s in all)", m[1], disklessMemory, b.Took.Round(time.Second))
	}
}
