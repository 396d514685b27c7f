package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// K8sImage is a control-plane image built by stamp from the test binaries,
// as an OCI layout directory.
type K8sImage struct {
	// Name is how kubeadm and kubelet name it by default: kubeadm's own
	// image repository (asked of kubeadm, so no host is written here),
	// then Repository:Tag. Nothing ever fetches from that repository:
	// tests push the image to a registry of their own under the same path.
	Name       string
	Repository string // e.g. kube-apiserver, coredns/coredns
	Tag        string
	Layout     string // the OCI layout directory stamp wrote
	Digest     string // sha256:… of the image manifest
	Entrypoint []string
}

// k8sImagePath is where the images put the Kubernetes binaries: kubeadm's
// static-pod manifests call kube-apiserver, etcd, ... by name.
const k8sImagePath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// k8sImageFormat changes whenever the same binaries and stamp would make
// different images here.
const k8sImageFormat = "stamp-test-k8simages/1"

// imageSpec is one image: its files (path in the image → binary name) and
// entrypoint.
type imageSpec struct {
	repo, tag  string
	files      [][2]string
	entrypoint []string
}

// k8sImageSpecs are the images kubeadm v1.31 asks for. The upstream
// kube-proxy image is distroless-iptables: kube-proxy execs iptables,
// ip6tables and (in nftables mode) nft. These images are the static
// binaries alone, so kube-proxy here can only run in a mode that needs no
// such tool; a node test that needs the real datapath provides them.
// etcd carries etcdctl as upstream's image does; coredns is /coredns, as
// kubeadm's CoreDNS Deployment passes only args.
func k8sImageSpecs() []imageSpec {
	var specs []imageSpec
	for _, n := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy"} {
		specs = append(specs, imageSpec{repo: n, tag: K8sVersion,
			files: [][2]string{{"/usr/local/bin/" + n, n}}, entrypoint: []string{"/usr/local/bin/" + n}})
	}
	return append(specs,
		imageSpec{repo: "etcd", tag: EtcdVersion + "-0",
			files:      [][2]string{{"/usr/local/bin/etcd", "etcd"}, {"/usr/local/bin/etcdctl", "etcdctl"}},
			entrypoint: []string{"/usr/local/bin/etcd"}},
		imageSpec{repo: "coredns/coredns", tag: CoreDNSVersion,
			files: [][2]string{{"/coredns", "coredns"}}, entrypoint: []string{"/coredns"}},
		imageSpec{repo: "pause", tag: PauseVersion,
			files: [][2]string{{"/pause", "pause"}}, entrypoint: []string{"/pause"}},
	)
}

// kubeadmRepository is the image repository kubeadm names images in when
// no imageRepository is configured, asked of the kubeadm binary itself.
func kubeadmRepository(ctx context.Context, bins *K8sBinaries) (string, error) {
	cmd := exec.CommandContext(ctx, bins.Path("kubeadm"), "config", "images", "list", "--kubernetes-version", K8sVersion)
	home, err := os.MkdirTemp("", "stamp-kubeadm-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(home)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("kubeadm config images list: %w", err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	repo, _, ok := strings.Cut(first, "/kube-apiserver:")
	if !ok {
		return "", fmt.Errorf("kubeadm config images list: first image %q is not kube-apiserver", first)
	}
	return repo, nil
}

// BuildK8sImages builds every control-plane image with the stamp binary
// stampBin, or finds them in the cache (keyed by stamp's bytes too).
func BuildK8sImages(ctx context.Context, stampBin string, bins *K8sBinaries, logf func(string, ...any)) ([]K8sImage, error) {
	h := sha256.New()
	fmt.Fprint(h, k8sImageFormat)
	for _, f := range []string{stampBin} {
		sum, err := fileSHA256(f)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(h, "\x00%s", sum)
	}
	specs := k8sImageSpecs()
	for _, s := range specs {
		fmt.Fprintf(h, "\x00%s:%s %q", s.repo, s.tag, s.entrypoint)
		for _, f := range s.files {
			sum, err := fileSHA256(bins.Path(f[1]))
			if err != nil {
				return nil, err
			}
			fmt.Fprintf(h, " %s=%s", f[0], sum)
		}
	}
	root := filepath.Join(k8sCacheDir(), "images-"+hex.EncodeToString(h.Sum(nil)[:8]))
	if _, err := os.Stat(filepath.Join(root, "ready")); err != nil {
		start := time.Now()
		tmp := root + ".tmp"
		os.RemoveAll(tmp)
		if err := buildK8sImages(ctx, tmp, stampBin, bins, specs, logf); err != nil {
			os.RemoveAll(tmp)
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(tmp, "ready"), nil, 0o644); err != nil {
			return nil, err
		}
		os.RemoveAll(root)
		if err := os.Rename(tmp, root); err != nil {
			return nil, err
		}
		logf("k8s inputs: built %d images with stamp in %s", len(specs), time.Since(start).Round(time.Second))
	}
	repo, err := kubeadmRepository(ctx, bins)
	if err != nil {
		return nil, err
	}
	var out []K8sImage
	for _, s := range specs {
		dir := filepath.Join(root, imageDirName(s.repo))
		// stamp names an output RECIPE-OUTPUT.oci, its digest beside it.
		layout := filepath.Join(dir, "out", imageRecipeName(s.repo)+"-image.oci")
		digest, err := os.ReadFile(layout + ".digest")
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", s.repo, err)
		}
		out = append(out, K8sImage{Name: repo + "/" + s.repo + ":" + s.tag, Repository: s.repo, Tag: s.tag,
			Layout: layout, Digest: strings.TrimSpace(string(digest)), Entrypoint: s.entrypoint})
	}
	return out, nil
}

func imageDirName(repo string) string { return strings.ReplaceAll(repo, "/", "_") }

// imageRecipeName is the recipe's name: a valid one, and the image's own.
func imageRecipeName(repo string) string { return strings.ReplaceAll(repo, "/", "-") }

// buildK8sImages writes one recipe per image under root and builds it:
// a tiny base (the directories and account files a distroless image has)
// plus the binaries, to a single-layer OCI image.
func buildK8sImages(ctx context.Context, root, stampBin string, bins *K8sBinaries, specs []imageSpec, logf func(string, ...any)) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	base := filepath.Join(root, "base.tar")
	if err := writeAtomic(base, writeImageBase); err != nil {
		return fmt.Errorf("image base %s: %w", base, err)
	}
	for _, s := range specs {
		dir := filepath.Join(root, imageDirName(s.repo))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var r strings.Builder
		fmt.Fprintf(&r, "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: %s\narch: amd64\nepoch: %d\n",
			imageRecipeName(s.repo), DefaultEpoch.Unix())
		fmt.Fprintf(&r, "base:\n  tarball: %s\ncustomize:\n  layers:\n    - files:\n", base)
		for _, f := range s.files {
			fmt.Fprintf(&r, "        - {path: %s, from: %s, mode: \"0755\", owner: \"0:0\"}\n", f[0], bins.Path(f[1]))
		}
		fmt.Fprintf(&r, "seal:\n  cleanup: none\noutputs:\n  - format: oci\n    name: image\n    kind: rootfs\n    layout: dir\n")
		fmt.Fprintf(&r, "    entrypoint: [%s]\n    env: [%q]\n", strings.Join(s.entrypoint, ", "), k8sImagePath)
		fmt.Fprintf(&r, "    labels: {org.opencontainers.image.title: %q, org.opencontainers.image.version: %q}\n", s.repo, s.tag)
		recipe := filepath.Join(dir, "recipe.yaml")
		if err := os.WriteFile(recipe, []byte(r.String()), 0o644); err != nil {
			return err
		}
		start := time.Now()
		if err := stampBuild(ctx, stampBin, recipe, dir, filepath.Join(root, "cache")); err != nil {
			return err
		}
		logf("k8s inputs:   image %s:%s in %s", s.repo, s.tag, time.Since(start).Round(time.Second))
	}
	return os.RemoveAll(filepath.Join(root, "cache"))
}

// writeImageBase writes the base of every image: root's and nobody's
// accounts, /tmp, and name-service configuration, as a distroless static
// image has them.
func writeImageBase(w io.Writer) error {
	tw := tar.NewWriter(w)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode, ModTime: DefaultEpoch, Format: tar.FormatPAX})
	}
	file := func(name, content string) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content)),
			ModTime: DefaultEpoch, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := io.WriteString(tw, content)
		return err
	}
	for _, d := range []struct {
		name string
		mode int64
	}{{"./", 0o755}, {"etc/", 0o755}, {"root/", 0o700}, {"tmp/", 0o1777}, {"usr/", 0o755},
		{"usr/local/", 0o755}, {"usr/local/bin/", 0o755}, {"var/", 0o755}} {
		if err := dir(d.name, d.mode); err != nil {
			return err
		}
	}
	for _, f := range [][2]string{
		{"etc/group", "root:x:0:\nnobody:x:65534:\n"},
		{"etc/nsswitch.conf", "hosts: files dns\n"},
		{"etc/passwd", "root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"},
	} {
		if err := file(f[0], f[1]); err != nil {
			return err
		}
	}
	return tw.Close()
}

// PushK8sImages pushes every image with stamp push to reg under its
// repository path and tag, and returns the pushed references by image name,
// each "ADDR/REPO:TAG@sha256:…", ready for an images: or oci: entry.
func PushK8sImages(ctx context.Context, stampBin string, images []K8sImage, reg *Registry) (map[string]string, error) {
	refs := map[string]string{}
	for _, im := range images {
		ref := reg.Addr + "/" + im.Repository + ":" + im.Tag
		cmd := exec.CommandContext(ctx, stampBin, "push", im.Layout, ref, "--insecure")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("stamp push %s %s: %w\n%s", im.Layout, ref, err, out)
		}
		refs[im.Name] = ref + "@" + im.Digest
	}
	return refs, nil
}

// kubeProxyFormat changes whenever the same inputs and stamp would make a
// different kube-proxy image here.
const kubeProxyFormat = "stamp-test-kube-proxy-debian/1"

// KubeProxyDebianImage builds, with stamp and once per machine, the
// kube-proxy image a node that runs a real datapath needs: upstream's is
// distroless-iptables, Debian's iptables and conntrack beside the binary,
// since kube-proxy execs them. This one is base (a Debian root with its
// dpkg database) plus those packages from repo, installed by stamp's debs
// layer, plus the kube-proxy binary; it replaces in.Images' static
// kube-proxy, which serves tests that never start it.
func KubeProxyDebianImage(tb testing.TB, in *K8sInputs, repo *DebRepo, base string) K8sImage {
	tb.Helper()
	var static *K8sImage
	for i := range in.Images {
		if in.Images[i].Repository == "kube-proxy" {
			static = &in.Images[i]
		}
	}
	if static == nil {
		tb.Fatal("the Kubernetes inputs have no kube-proxy image")
	}
	h := sha256.New()
	fmt.Fprint(h, kubeProxyFormat)
	for _, f := range []string{in.Stamp, in.Bins.Path("kube-proxy"), base, filepath.Join(repo.Dir, "dists", repo.Suite, "InRelease")} {
		sum, err := fileSHA256(f)
		if err != nil {
			tb.Fatal(err)
		}
		fmt.Fprintf(h, "\x00%s", sum)
	}
	root := filepath.Join(k8sCacheDir(), "kube-proxy-"+hex.EncodeToString(h.Sum(nil)[:8]))
	layout := filepath.Join(root, "out", "kube-proxy-image.oci")
	unlock, err := lockFile(filepath.Join(k8sCacheDir(), ".lock"))
	if err != nil {
		tb.Fatal(err)
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(root, "ready")); err != nil {
		start := time.Now()
		tmp := root + ".tmp"
		os.RemoveAll(tmp)
		if err := buildKubeProxyImage(tmp, in, repo, base); err != nil {
			os.RemoveAll(tmp)
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tmp, "ready"), nil, 0o644); err != nil {
			tb.Fatal(err)
		}
		os.RemoveAll(root)
		if err := os.Rename(tmp, root); err != nil {
			tb.Fatal(err)
		}
		tb.Logf("k8s inputs: built the Debian kube-proxy image with stamp in %s", time.Since(start).Round(time.Second))
	}
	digest, err := os.ReadFile(layout + ".digest")
	if err != nil {
		tb.Fatalf("kube-proxy image: %v", err)
	}
	im := *static
	im.Layout, im.Digest = layout, strings.TrimSpace(string(digest))
	return im
}

// buildKubeProxyImage writes the recipe in root and builds it there.
func buildKubeProxyImage(root string, in *K8sInputs, repo *DebRepo, base string) error {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	recipe := fmt.Sprintf(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: kube-proxy
arch: amd64
epoch: %d
base:
  tarball: %s
customize:
  layers:
    - debs:
        repo: %s
        suite: %s
        keyring: %s
        packages: [iptables, conntrack]
    - files:
        - {path: /usr/local/bin/kube-proxy, from: %s, mode: "0755", owner: "0:0"}
outputs:
  - format: oci
    name: image
    kind: rootfs
    layout: dir
    entrypoint: [/usr/local/bin/kube-proxy]
    env: [%q]
    labels: {org.opencontainers.image.title: kube-proxy, org.opencontainers.image.version: %q}
`, DefaultEpoch.Unix(), base, repo.FileURL(), repo.Suite, repo.Keyring, in.Bins.Path("kube-proxy"), k8sImagePath, K8sVersion)
	file := filepath.Join(root, "recipe.yaml")
	if err := os.WriteFile(file, []byte(recipe), 0o644); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if err := stampBuild(ctx, in.Stamp, file, root, filepath.Join(root, "cache")); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(root, "cache"))
}

// stampBuild builds recipe with stampBin into dir/out, niced, at the
// harness's epoch, working in dir/work (removed afterwards) with cache.
func stampBuild(ctx context.Context, stampBin, recipe, dir, cache string) error {
	cmd := exec.CommandContext(ctx, "nice", "-n", "10", stampBin, "build", recipe, "-o", filepath.Join(dir, "out"),
		"--work-dir", filepath.Join(dir, "work"), "--cache-dir", cache, "--log-format", "json")
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+fmt.Sprint(DefaultEpoch.Unix()))
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("stamp build %s: %w\n%s", recipe, err, tail(stderr.String(), 4000))
	}
	return os.RemoveAll(filepath.Join(dir, "work"))
}
