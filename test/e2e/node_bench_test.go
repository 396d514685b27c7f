//go:build node

package e2e

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

// BenchmarkNodeBuild builds recipes/k8s-node.yaml (with a tar output added)
// from a cold cache and again from the warm one, and installs the same
// package set with mmdebstrap (minbase, the node's packages and the
// Kubernetes ones, from the same local repositories) into a tarball. It
// reports both build times, mmdebstrap's time, and the size of the node's
// tree (without the container images in containerd's state, which
// mmdebstrap does not make) against mmdebstrap's tarball; and, from the
// images layer's own report, how long writing containerd's state for the
// seven images took in the cold build, and its sizes: the content store,
// the layer blobs in it (what discardLayers leaves out), and the unpacked
// snapshots. Needs root: mmdebstrap --mode=root.
func BenchmarkNodeBuild(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Fatal("needs root: mmdebstrap runs in --mode=root beside stamp")
	}
	mmdebstrap := harness.Tool(b, "mmdebstrap")
	nb := prepareNodeBuild(b, func(string) {})
	recipe := filepath.Join(nb.dir, "k8s-node.yaml")
	y, err := os.ReadFile(recipe)
	if err != nil {
		b.Fatal(err)
	}
	// outputs: is the recipe's last section.
	if err := os.WriteFile(recipe, append(y, "  - {format: tar}\n"...), 0o644); err != nil {
		b.Fatal(err)
	}
	// The same packages as the recipe installs: its runtime, as the mode
	// chooses it, in place of Debian's.
	include := slices.DeleteFunc(slices.Clone(harness.NodeDebPackages), func(p string) bool { return p == "containerd" || p == "runc" })
	for _, p := range nb.mode.runtimePackages() {
		if p[1] != "" {
			p[0] += "=" + p[1]
		}
		include = append(include, p[0])
	}
	include = append(include, "kubelet", "kubeadm", "kubectl", "cri-tools", "kubernetes-cni")
	sources := []string{
		fmt.Sprintf("deb [signed-by=%s] %s %s %s", filepath.Join(nb.dir, "debian.gpg"), "copy://"+nb.repo.Dir, nb.repo.Suite, nb.repo.Component),
		fmt.Sprintf("deb [signed-by=%s] %s %s", filepath.Join(nb.dir, "kubernetes.gpg"), "copy://"+nb.in.Repo.Dir, nb.in.Repo.Suite),
	}
	if nb.ctdRepo != nil {
		sources = append(sources, fmt.Sprintf("deb [signed-by=%s] %s %s", filepath.Join(nb.dir, "containerd.gpg"), "copy://"+nb.ctdRepo.Dir, nb.ctdRepo.Suite))
	}

	var cold, warm, mm time.Duration
	var stampAll, stampPkgs, mmSize int64
	var state imagesReport
	for i := 0; i < b.N; i++ {
		cache := filepath.Join(nb.dir, fmt.Sprintf("cache-%d", i))
		var log []byte
		build := func(out string) time.Duration {
			b.Helper()
			args := append([]string{"build", "k8s-node.yaml", "-o", out, "--cache-dir", cache, "--work-dir", nb.dir,
				"--insecure-registry", nb.reg.Addr, "--log-level", "info", "--log-format", "json", "--no-cache"}, nb.setArgs...)
			cmd := exec.Command(stampBin, args...)
			cmd.Dir = nb.dir
			exec.Command("sync").Run()
			start := time.Now()
			var err error
			if log, err = cmd.CombinedOutput(); err != nil {
				b.Fatalf("stamp build: %v\n%s", err, log)
			}
			return time.Since(start)
		}
		coldOut, warmOut := filepath.Join(nb.dir, "cold"), filepath.Join(nb.dir, "warm")
		cold += build(coldOut)
		r := imagesLayerReport(b, log)
		state.seconds += r.seconds
		state.contentBytes, state.layerBytes, state.snapshotBytes = r.contentBytes, r.layerBytes, r.snapshotBytes
		warm += build(warmOut)
		stampAll, stampPkgs = nodeTarSizes(b, filepath.Join(coldOut, "k8s-node.tar"))
		os.RemoveAll(coldOut)
		os.RemoveAll(warmOut)
		os.RemoveAll(cache)

		tarball := filepath.Join(nb.dir, "mmdebstrap.tar")
		exec.Command("sync").Run()
		start := time.Now()
		// copy://, not file://: mmdebstrap's apt runs chrooted, where
		// the host's repository paths do not exist.
		cmd := exec.Command(mmdebstrap, append([]string{"--mode=root", "--variant=minbase", "--quiet",
			"--include=" + strings.Join(include, ","), nb.repo.Suite, tarball}, sources...)...)
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1700000000")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("mmdebstrap: %v\n%s", err, out)
		}
		mm += time.Since(start)
		fi, err := os.Stat(tarball)
		if err != nil {
			b.Fatal(err)
		}
		mmSize = fi.Size()
		os.Remove(tarball)
	}
	n := float64(b.N)
	b.ReportMetric(cold.Seconds()/n, "cold-s/op")
	b.ReportMetric(warm.Seconds()/n, "warm-s/op")
	b.ReportMetric(mm.Seconds()/n, "mmdebstrap-s/op")
	b.ReportMetric(float64(stampAll)/(1<<20), "stamp-tar-MiB")
	b.ReportMetric(float64(stampPkgs)/(1<<20), "stamp-no-images-MiB")
	b.ReportMetric(float64(mmSize)/(1<<20), "mmdebstrap-tar-MiB")
	b.ReportMetric(float64(stampPkgs)/float64(mmSize), "size-ratio")
	b.ReportMetric(state.seconds/n, "containerd-state-s/op")
	b.ReportMetric(float64(state.contentBytes)/(1<<20), "content-MiB")
	b.ReportMetric(float64(state.layerBytes)/(1<<20), "layer-blobs-MiB")
	b.ReportMetric(float64(state.snapshotBytes)/(1<<20), "snapshots-MiB")
	if s := state.seconds / n; s > 5 {
		b.Logf("over budget: writing containerd's state for the node's images took %.1f s of the cold build; the budget is 5 s", s)
	}
}

// imagesReport is what the images layer reports of containerd's state.
type imagesReport struct {
	seconds                                 float64
	contentBytes, layerBytes, snapshotBytes int64
}

// imagesLayerReport finds the images layer's report in a build's JSON log.
func imagesLayerReport(b *testing.B, log []byte) imagesReport {
	b.Helper()
	for _, l := range strings.Split(string(log), "\n") {
		var e struct {
			Msg                                     string  `json:"msg"`
			Seconds                                 float64 `json:"seconds"`
			ContentBytes, LayerBytes, SnapshotBytes int64
		}
		if json.Unmarshal([]byte(l), &e) == nil && strings.Contains(e.Msg, "into containerd's state") {
			return imagesReport{e.Seconds, e.ContentBytes, e.LayerBytes, e.SnapshotBytes}
		}
	}
	b.Fatalf("the build's log has no report of the images layer:\n%s", log)
	return imagesReport{}
}

// nodeTarSizes returns the tarball's size, and that size less the
// images in containerd's state under /var/lib/containerd.
func nodeTarSizes(b *testing.B, p string) (all, withoutImages int64) {
	b.Helper()
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		b.Fatal(err)
	}
	var images int64
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			b.Fatalf("%s: %v", p, err)
		}
		if strings.HasPrefix(strings.TrimPrefix(h.Name, "./"), "var/lib/containerd/") {
			images += 512 + (h.Size+511)/512*512
		}
	}
	return fi.Size(), fi.Size() - images
}
