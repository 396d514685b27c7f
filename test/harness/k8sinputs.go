package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// K8sInputs are everything a Kubernetes node test needs without reaching a
// Kubernetes host: the binaries, the signed .deb repository, the Debian
// packages kubelet depends on, and the control-plane images built by stamp.
type K8sInputs struct {
	Bins   *K8sBinaries
	Repo   *K8sDebRepo
	Images []K8sImage
	// Stamp is the stamp binary the images were built with, built from
	// this checkout.
	Stamp string
}

// K8sInputsHint says how to build the inputs a test found missing.
const K8sInputsHint = "the Kubernetes test binaries are not built: run `make k8s-inputs` once " +
	"(a cold build compiles Kubernetes from the Go module proxy, about an hour on two shared cores; " +
	"then everything is cached and this takes seconds)"

// K8sInputsFor returns the inputs for a test. The binaries must be in the
// cache already (make k8s-inputs); a test that finds them missing fails
// saying so, since building them would outlast any test timeout. The
// repository and the images are derived from them and built here when
// missing.
func K8sInputsFor(t testing.TB) *K8sInputs {
	t.Helper()
	RequireTools(t, "go", "nice", "dpkg-deb", "apt-ftparchive", "gpg", "gzip", "xz")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	bins, err := k8sBinaries(ctx, false, t.Logf)
	if err != nil {
		t.Fatalf("%s\n(%v)", K8sInputsHint, err)
	}
	stamp := StampBinary(t)
	in, err := k8sDerived(ctx, bins, stamp, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// BuildK8sInputs builds (or finds in the cache) every input, the
// binaries included; make k8s-inputs runs it through test/cmd/k8sinputs.
func BuildK8sInputs(ctx context.Context, stampBin string, logf func(string, ...any)) (*K8sInputs, error) {
	bins, err := BuildK8sBinaries(ctx, logf)
	if err != nil {
		return nil, err
	}
	return k8sDerived(ctx, bins, stampBin, logf)
}

func k8sDerived(ctx context.Context, bins *K8sBinaries, stampBin string, logf func(string, ...any)) (*K8sInputs, error) {
	unlock, err := lockFile(filepath.Join(k8sCacheDir(), ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	repo, err := BuildK8sDebRepo(ctx, bins, logf)
	if err != nil {
		return nil, err
	}
	images, err := BuildK8sImages(ctx, stampBin, bins, logf)
	if err != nil {
		return nil, err
	}
	return &K8sInputs{Bins: bins, Repo: repo, Images: images, Stamp: stampBin}, nil
}

// StampBinary builds cmd/stamp from the checkout this test runs in, once
// per test binary run, into a temporary directory.
func StampBinary(t testing.TB) string {
	t.Helper()
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "stamp")
	cmd := exec.Command("nice", "-n", "10", "go", "build", "-trimpath", "-o", bin, "./cmd/stamp")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building stamp in %s: %v\n%s", root, err, out)
	}
	return bin
}

// moduleRoot is the directory of stamp's go.mod, found from the working
// directory upwards.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/stamp-dev/stamp\n") {
			return d, nil
		}
		if d == filepath.Dir(d) {
			return "", fmt.Errorf("no stamp go.mod above %s", dir)
		}
	}
}

// K8sNodeDebianPackages are the Debian packages kubelet's .deb depends on
// (as apt resolves them onto an empty system), for a repository beside
// the Kubernetes one.
var K8sNodeDebianPackages = []string{"iptables", "iproute2", "mount", "conntrack", "ebtables", "ethtool", "util-linux"}

// K8sDebianDepsRepo returns a signed repository (same key as the others)
// of exactly the Debian packages installing K8sNodeDebianPackages onto an
// empty system brings, built once per machine from the deb cache. With the
// Kubernetes repository it lets apt resolve kubelet, kubeadm and kubectl
// without any host's package lists.
func K8sDebianDepsRepo(t testing.TB) *DebRepo {
	t.Helper()
	return debRepoOf(t, [][]string{K8sNodeDebianPackages})
}
