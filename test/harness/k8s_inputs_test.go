//go:build k8s

// TestK8sInputs needs the Kubernetes binaries, a cold build of about an
// hour on two cores, so it runs in make k8s-inputs (go test -tags k8s), not
// in make test, which must pass on a fresh machine.

package harness

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// TestK8sInputs checks the Kubernetes inputs end to end: the binaries say
// the pinned versions and are static, kubeadm asks for exactly the images
// built, apt resolves kubelet, kubeadm and kubectl from the signed
// repository, and every image is in a real registry under its name.
// It needs make k8s-inputs to have run once (K8sInputsHint).
func TestK8sInputs(t *testing.T) {
	start := time.Now()
	in := K8sInputsFor(t)
	t.Logf("inputs ready in %s", time.Since(start).Round(time.Millisecond))

	t.Run("binaries", func(t *testing.T) {
		checks := []struct {
			bin  string
			env  []string
			args []string
			want string
		}{
			{"kubelet", nil, []string{"--version"}, "Kubernetes " + K8sVersion + "\n"},
			{"kubeadm", nil, []string{"version", "-o", "short"}, K8sVersion + "\n"},
			{"kubectl", nil, []string{"version", "--client", "-o", "yaml"}, "gitVersion: " + K8sVersion + "\n"},
			{"kube-apiserver", nil, []string{"--version"}, "Kubernetes " + K8sVersion + "\n"},
			{"kube-controller-manager", nil, []string{"--version"}, "Kubernetes " + K8sVersion + "\n"},
			{"kube-scheduler", nil, []string{"--version"}, "Kubernetes " + K8sVersion + "\n"},
			{"kube-proxy", nil, []string{"--version"}, "Kubernetes " + K8sVersion + "\n"},
			{"etcd", nil, []string{"--version"}, "etcd Version: " + EtcdVersion + "\n"},
			{"etcdctl", nil, []string{"version"}, "etcdctl version: " + EtcdVersion + "\n"},
			{"coredns", nil, []string{"-version"}, "CoreDNS-" + strings.TrimPrefix(CoreDNSVersion, "v") + "\n"},
			{"crictl", nil, []string{"--version"}, "crictl version " + strings.TrimPrefix(CrictlVersion, "v") + "\n"},
			{"pause", nil, []string{"-v"}, "pause.go version " + PauseVersion + "\n"},
			{"bridge", []string{"CNI_COMMAND=VERSION"}, nil, `"cniVersion":`},
			{"bridge", nil, nil, "CNI bridge plugin " + CNIPluginsVersion + "\n"},
		}
		for _, c := range checks {
			cmd := exec.Command(in.Bins.Path(c.bin), c.args...)
			cmd.Env = append([]string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}, c.env...)
			out, _ := cmd.CombinedOutput() // the CNI plugins exit 1 when called without CNI_COMMAND
			if !strings.Contains(string(out), c.want) {
				t.Errorf("%s %s: want %q in\n%s", c.bin, strings.Join(c.args, " "), c.want, out)
			}
		}
		for name, p := range in.Bins.Paths {
			f, err := elf.Open(p)
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			for _, prog := range f.Progs {
				if prog.Type == elf.PT_INTERP {
					t.Errorf("%s (%s) is dynamically linked", name, p)
				}
			}
			if f.Machine != elf.EM_X86_64 {
				t.Errorf("%s: machine %s, want x86-64", name, f.Machine)
			}
			f.Close()
		}
		// The Kubernetes binaries are built with the Go release upstream
		// builds them with, as the binary's build information says.
		for _, n := range K8sBinaryNames {
			info, err := buildinfo.ReadFile(in.Bins.Path(n))
			if err != nil {
				t.Errorf("%s: %v", n, err)
			} else if info.GoVersion != K8sGoToolchain {
				t.Errorf("%s was built with %s, want %s", n, info.GoVersion, K8sGoToolchain)
			}
		}
		// The pause container ends on SIGTERM, as kubelet stops a sandbox.
		pause := exec.Command(in.Bins.Path("pause"))
		var stderr bytes.Buffer
		pause.Stderr = &stderr
		if err := pause.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond)
		pause.Process.Signal(os.Interrupt)
		if err := pause.Wait(); err != nil || !strings.Contains(stderr.String(), "Shutting down") {
			t.Errorf("pause after SIGINT: %v %q", err, stderr.String())
		}
	})

	t.Run("kubeadm images", func(t *testing.T) {
		cmd := exec.Command(in.Bins.Path("kubeadm"), "config", "images", "list", "--kubernetes-version", K8sVersion)
		cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("kubeadm config images list: %v\n%s", err, stderr.String())
		}
		got := strings.Fields(stdout.String())
		var built []string
		for _, im := range in.Images {
			built = append(built, im.Name)
		}
		sort.Strings(got)
		sort.Strings(built)
		if !slices.Equal(got, built) {
			t.Errorf("kubeadm asks for\n%s\nbuilt\n%s", strings.Join(got, "\n"), strings.Join(built, "\n"))
		}
	})

	t.Run("apt", func(t *testing.T) {
		deps := K8sDebianDepsRepo(t)
		got, err := aptSimulateFrom(t, []*DebRepo{in.Repo.DebRepo, deps}, "kubelet", "kubeadm", "kubectl")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"kubelet", "kubeadm", "kubectl", "cri-tools", "kubernetes-cni"} {
			if want := p + "=" + in.Repo.Versions[p]; !slices.Contains(got, want) {
				t.Errorf("apt would not install %s; it would install\n%s", want, strings.Join(got, "\n"))
			}
		}
		for _, p := range []string{"iptables", "iproute2", "conntrack", "ebtables", "ethtool"} {
			if !slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, p+"=") }) {
				t.Errorf("kubelet's dependency %s is not pulled in: %s", p, strings.Join(got, " "))
			}
		}
		// What the packages carry, as upstream's do.
		members := map[string][]string{
			"kubelet": {"./usr/bin/kubelet", "./usr/lib/systemd/system/kubelet.service", "./etc/default/kubelet",
				"./var/lib/kubelet/.kubelet-keep", "./etc/kubernetes/manifests/.kubelet-keep"},
			"kubeadm":        {"./usr/bin/kubeadm", "./usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"},
			"kubectl":        {"./usr/bin/kubectl"},
			"cri-tools":      {"./usr/bin/crictl"},
			"kubernetes-cni": {"./opt/cni/bin/bridge", "./opt/cni/bin/host-local", "./opt/cni/bin/loopback", "./opt/cni/bin/portmap"},
		}
		for p, want := range members {
			deb := filepath.Join(in.Repo.Dir, in.Repo.Debs[p])
			out, err := exec.Command("dpkg-deb", "--contents", deb).Output()
			if err != nil {
				t.Fatalf("dpkg-deb --contents %s: %v", deb, err)
			}
			for _, m := range want {
				if !strings.Contains(string(out), " "+m+"\n") {
					t.Errorf("%s lacks %s:\n%s", deb, m, out)
				}
			}
			if !strings.Contains(string(out), "root/root") || strings.Contains(string(out), "nobody") {
				t.Errorf("%s: members not owned by root:\n%s", deb, out)
			}
		}
	})

	t.Run("registry", func(t *testing.T) {
		skopeo := Tool(t, "skopeo")
		reg := StartRegistry(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		refs, err := PushK8sImages(ctx, in.Stamp, in.Images, reg)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("pushed %d images in %s", len(refs), time.Since(start).Round(time.Millisecond))
		for _, im := range in.Images {
			ref := reg.Addr + "/" + im.Repository + ":" + im.Tag
			if refs[im.Name] != ref+"@"+im.Digest {
				t.Errorf("%s pushed as %q", im.Name, refs[im.Name])
			}
			out, err := exec.Command(skopeo, "inspect", "--tls-verify=false", "docker://"+ref).Output()
			if err != nil {
				t.Fatalf("skopeo inspect %s: %v", ref, err)
			}
			var info struct {
				Digest, Architecture, Os string
				Layers                   []string
			}
			if err := json.Unmarshal(out, &info); err != nil {
				t.Fatalf("skopeo inspect %s: %v\n%s", ref, err, out)
			}
			if info.Digest != im.Digest || info.Architecture != "amd64" || info.Os != "linux" || len(info.Layers) != 1 {
				t.Errorf("%s: skopeo sees %+v, built %s", ref, info, im.Digest)
			}
			out, err = exec.Command(skopeo, "inspect", "--config", "--tls-verify=false", "docker://"+ref).Output()
			if err != nil {
				t.Fatalf("skopeo inspect --config %s: %v", ref, err)
			}
			var cfg struct {
				Config struct{ Entrypoint, Env []string }
			}
			if err := json.Unmarshal(out, &cfg); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(cfg.Config.Entrypoint, im.Entrypoint) || !slices.Contains(cfg.Config.Env, k8sImagePath) {
				t.Errorf("%s: config %+v, want entrypoint %q and %s", ref, cfg.Config, im.Entrypoint, k8sImagePath)
			}
		}
	})
}

// aptSimulateFrom is AptSimulate over several repositories at once (each
// trusted through its keyring), from an empty dpkg status.
func aptSimulateFrom(t testing.TB, repos []*DebRepo, pkgs ...string) ([]string, error) {
	t.Helper()
	var src strings.Builder
	for _, r := range repos {
		fmt.Fprintf(&src, "deb [signed-by=%s] %s %s %s\n", r.Keyring, r.FileURL(), r.Suite, r.Component)
	}
	return aptSimulate(t, src.String(), "", pkgs...)
}
