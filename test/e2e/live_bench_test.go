//go:build boot

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkLiveRootMount is issue 33's report of the time a booted live
// initramfs takes to get the root image and mount it: the node's Debian
// tree (minbase and every Debian package of the node, its kernel
// included, as mmdebstrap installs them from the test repository) built
// by stamp into an erofs output and a live bundle, booted under qemu (TCG,
// user networking) twice: through iPXE, which fetches the image from an
// HTTP server on 127.0.0.1 and appends it to the initramfs, and with the
// initramfs fetching it itself from stamp.root=URL. Each boot reports what
// the initramfs prints: the seconds from its start to the image found,
// its sha256 checked and mounted under the overlay. init=/bin/true ends
// the boot there. Needs root, for mmdebstrap.
func BenchmarkLiveRootMount(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("needs root: mmdebstrap runs in --mode=root")
	}
	harness.RequireTools(b, "qemu-system-x86_64")
	base := harness.MmdebstrapFor(b, harness.MinbaseNodeRepoFor(b),
		harness.MmdebstrapOptions{Variant: "minbase", Include: harness.NodeDebPackages, Epoch: harness.DefaultEpoch})
	dir := b.TempDir()
	if err := os.Link(base, filepath.Join(dir, "base.tar")); err != nil {
		if out, err := exec.Command("cp", base, filepath.Join(dir, "base.tar")).CombinedOutput(); err != nil {
			b.Fatalf("cp: %v\n%s", err, out)
		}
	}
	writeFiles(b, dir, map[string]string{"recipe.yaml": `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: node
epoch: 1700000000
base: {tarball: ./base.tar}
outputs:
  - {format: erofs}
  - {format: live, from: erofs, boot: {cmdline: "console=ttyS0 panic=-1"}}
`})
	cmd := exec.Command(stampBin, "build", "recipe.yaml", "-o", filepath.Join(dir, "out"), "--cache-dir", filepath.Join(dir, "cache"),
		"--work-dir", dir, "--log-level", "error", "--no-cache")
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}
	start := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("stamp build: %v\n%s", err, lastLines(string(out), 20))
	}
	build := time.Since(start)
	bundle := filepath.Join(dir, "out", "node.live")
	st, err := os.Stat(filepath.Join(bundle, formats.LiveRoot))
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("stamp built the erofs output and the live bundle in %.1f s; the root image is %.1f MiB",
		build.Seconds(), float64(st.Size())/(1<<20))

	script, err := os.ReadFile(filepath.Join(bundle, formats.LiveScript))
	if err != nil {
		b.Fatal(err)
	}
	port := serveOverHTTP(b, bundle)
	writeFiles(b, bundle, map[string]string{
		"bench-ipxe.ipxe": strings.Replace(string(script), " panic=-1", " panic=-1 init=/bin/true", 1),
		"bench-url.ipxe": fmt.Sprintf("#!ipxe\nkernel %s initrd=%s stamp.root=http://10.0.2.2:%d/%s console=ttyS0 panic=-1 init=/bin/true\ninitrd %s\nboot\n",
			formats.LiveKernel, formats.LiveInitrd, port, formats.LiveRoot, formats.LiveInitrd),
	})
	took := regexp.MustCompile(`the image found, checked and mounted in ([0-9.]+) s`)
	b.ResetTimer()
	for range b.N {
		for _, mode := range []string{"ipxe", "url"} {
			boot := harness.BootQEMU(b, []string{"-m", "3072", "-netdev", fmt.Sprintf("user,id=n,bootfile=http://10.0.2.2:%d/bench-%s.ipxe", port, mode),
				"-device", "virtio-net-pci,netdev=n", "-boot", "n"}, 20*time.Minute)
			m := took.FindStringSubmatch(boot.Log)
			if boot.TimedOut || m == nil {
				b.Fatalf("%s: no time reported (timed out: %t); log ends:\n%s", mode, boot.TimedOut, boot.Tail(40))
			}
			s, _ := strconv.ParseFloat(m[1], 64)
			b.ReportMetric(s, mode+"-mount-s")
			b.Logf("%s: the initramfs found, checked and mounted the %.1f MiB root image in %s s (TCG; qemu ran %s from power-on to init)",
				mode, float64(st.Size())/(1<<20), m[1], boot.Took)
		}
	}
}
