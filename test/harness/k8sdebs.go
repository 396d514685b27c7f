package harness

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// The Kubernetes package repository. Upstream publishes one flat
// repository per minor version (core:/stable:/v1.31/deb/, read by apt as
// "deb URL/core:/stable:/v1.31/deb/ /") holding kubelet, kubeadm, kubectl,
// cri-tools and kubernetes-cni. Stamp's debs layer reads dists/SUITE, so
// the test repository for a minor lives in its own directory named after
// it (…/k8s/repo-KEY/v1.31) and is read with
//
//	debs: {repo: file://…/v1.31, suite: stamp, components: [main], keyring: …/v1.31/keyring.gpg}
//
// i.e. the minor's flat repository becomes suite "stamp", component "main"
// of a repository of its own, signed with the key of the Debian test
// repository (BuildDebRepo).

// k8sDebRevision is the Debian revision upstream's packages carry.
const k8sDebRevision = "1.1"

// k8sDebFormat changes whenever the same binaries would be packaged
// differently.
const k8sDebFormat = "stamp-test-k8sdebs/2"

// k8sRepoPath is the flat repository's directory under the cache entry,
// named as upstream names it per minor version ("v1.31/deb").
var k8sRepoPath = filepath.Join("v"+strings.Join(strings.Split(strings.TrimPrefix(K8sVersion, "v"), ".")[:2], "."), "deb")

// kubeletService is /usr/lib/systemd/system/kubelet.service as upstream's
// kubelet package ships it.
const kubeletService = `[Unit]
Description=kubelet: The Kubernetes Node Agent
Documentation=https://kubernetes.io/docs/
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=/usr/bin/kubelet
Restart=always
StartLimitInterval=0
RestartSec=10

[Install]
WantedBy=multi-user.target
`

// kubeadmDropIn is /usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf
// as upstream's kubeadm .deb ships it: its build points the last-resort
// environment file at /etc/default/kubelet, which the kubelet .deb ships.
const kubeadmDropIn = `# Note: This dropin only works with kubeadm and kubelet v1.11+
[Service]
Environment="KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf"
Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml"
# This is a file that "kubeadm init" and "kubeadm join" generates at runtime, populating the KUBELET_KUBEADM_ARGS variable dynamically
EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env
# This is a file that the user can use for overrides of the kubelet args as a last resort. Preferably, the user should use
# the .NodeRegistration.KubeletExtraArgs object in the configuration files instead. KUBELET_EXTRA_ARGS should be sourced from this file.
EnvironmentFile=-/etc/default/kubelet
ExecStart=
ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS
`

// kubeletPostinst and kubeletPostrm are what debhelper's systemd snippets
// do for a unit enabled by default: enable it on first install, purge its
// state on purge. Upstream's build turns the spec's %systemd_post into the
// same deb-systemd-helper calls.
const kubeletPostinst = `#!/bin/sh
set -e
if [ "$1" = "configure" ] || [ "$1" = "abort-upgrade" ] || [ "$1" = "abort-deconfigure" ] || [ "$1" = "abort-remove" ] ; then
	deb-systemd-helper unmask 'kubelet.service' >/dev/null || true
	if deb-systemd-helper --quiet was-enabled 'kubelet.service'; then
		deb-systemd-helper enable 'kubelet.service' >/dev/null || true
	else
		deb-systemd-helper update-state 'kubelet.service' >/dev/null || true
	fi
fi
`

const kubeletPostrm = `#!/bin/sh
set -e
if [ "$1" = "remove" ]; then
	if [ -x "/usr/bin/deb-systemd-helper" ]; then
		deb-systemd-helper mask 'kubelet.service' >/dev/null || true
	fi
fi
if [ "$1" = "purge" ]; then
	if [ -x "/usr/bin/deb-systemd-helper" ]; then
		deb-systemd-helper purge 'kubelet.service' >/dev/null || true
		deb-systemd-helper unmask 'kubelet.service' >/dev/null || true
	fi
fi
`

// debFile is one member of a package's data.
type debFile struct {
	path    string // absolute, in the installed system
	mode    os.FileMode
	content string // used when from is empty
	from    string // a host file
}

// debSpec is one binary package, its control fields as upstream's spec
// gives them.
type debSpec struct {
	name, version, section, summary string
	depends                         []string
	conflicts                       []string
	files                           []debFile
	conffiles                       []string
	scripts                         map[string]string // postinst, postrm, ...
}

// k8sDebSpecs are the five packages of upstream's v1.31 repository.
// Upstream's kubelet for v1.31 depends on kubernetes-cni (>= 1.2.0) and
// the tools it runs: iptables, iproute2, mount, conntrack, ethtool, and
// ebtables (dropped from later builds), util-linux; kubeadm 1.30-1.31
// depends on cri-tools (>= 1.30.0) alone.
func k8sDebSpecs(bins *K8sBinaries) []debSpec {
	kv := strings.TrimPrefix(K8sVersion, "v") + "-" + k8sDebRevision
	bin := func(name, dest string) debFile {
		return debFile{path: dest, mode: 0o755, from: bins.Path(name)}
	}
	cni := debSpec{name: "kubernetes-cni", version: strings.TrimPrefix(CNIPluginsVersion, "v") + "-" + k8sDebRevision,
		section: "net", summary: "Binaries required to provision kubernetes container networking",
		files: []debFile{{path: "/etc/cni/net.d/.kubernetes-cni-keep", mode: 0o644}}}
	for _, n := range CNIPluginNames {
		cni.files = append(cni.files, bin(n, "/opt/cni/bin/"+n))
	}
	return []debSpec{
		{name: "cri-tools", version: strings.TrimPrefix(CrictlVersion, "v") + "-" + k8sDebRevision, section: "admin",
			summary: "Command-line utility for interacting with a container runtime",
			files:   []debFile{bin("crictl", "/usr/bin/crictl")}},
		{name: "kubeadm", version: kv, section: "admin",
			summary: "Command-line utility for administering a Kubernetes cluster",
			depends: []string{"cri-tools (>= 1.30.0)"},
			files: []debFile{bin("kubeadm", "/usr/bin/kubeadm"),
				{path: "/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf", mode: 0o644, content: kubeadmDropIn}}},
		{name: "kubectl", version: kv, section: "admin",
			summary: "Command-line utility for interacting with a Kubernetes cluster",
			files:   []debFile{bin("kubectl", "/usr/bin/kubectl")}},
		{name: "kubelet", version: kv, section: "net", summary: "Node agent for Kubernetes clusters",
			depends: []string{"iptables (>= 1.4.21)", "kubernetes-cni (>= 1.2.0)", "iproute2", "mount", "conntrack",
				"ebtables", "ethtool", "util-linux"},
			files: []debFile{bin("kubelet", "/usr/bin/kubelet"),
				{path: "/usr/lib/systemd/system/kubelet.service", mode: 0o644, content: kubeletService},
				{path: "/var/lib/kubelet/.kubelet-keep", mode: 0o644},
				{path: "/etc/kubernetes/manifests/.kubelet-keep", mode: 0o644},
				{path: "/etc/default/kubelet", mode: 0o644, content: "KUBELET_EXTRA_ARGS=\n"}},
			conffiles: []string{"/etc/default/kubelet"},
			scripts:   map[string]string{"postinst": kubeletPostinst, "postrm": kubeletPostrm}},
		cni,
	}
}

// K8sDebRepo is the signed flat repository of the Kubernetes packages,
// laid out as the official one: "deb [signed-by=...] URL /".
type K8sDebRepo struct {
	*DebRepo
	// Versions maps each package to its version.
	Versions map[string]string
}

// BuildK8sDebRepo packages the binaries as .debs and lays out the signed
// repository, or finds it in the cache.
func BuildK8sDebRepo(ctx context.Context, bins *K8sBinaries, logf func(string, ...any)) (*K8sDebRepo, error) {
	specs := k8sDebSpecs(bins)
	h := sha256.New()
	fmt.Fprint(h, k8sDebFormat)
	for _, s := range specs {
		fmt.Fprintf(h, "\x00%s=%s %s %s", s.name, s.version, strings.Join(s.depends, ","), strings.Join(s.conffiles, ","))
		for _, f := range s.files {
			fmt.Fprintf(h, "\x00%s %o %q", f.path, f.mode, f.content)
			if f.from != "" {
				sum, err := fileSHA256(f.from)
				if err != nil {
					return nil, err
				}
				fmt.Fprintf(h, " %s", sum)
			}
		}
		for _, k := range sortedKeys(s.scripts) {
			fmt.Fprintf(h, "\x00%s %q", k, s.scripts[k])
		}
	}
	versions := map[string]string{}
	for _, s := range specs {
		versions[s.name] = s.version
	}
	root := filepath.Join(k8sCacheDir(), "repo-"+hex.EncodeToString(h.Sum(nil)[:8]))
	dir := filepath.Join(root, k8sRepoPath)
	if _, err := os.Stat(filepath.Join(dir, "InRelease")); err == nil {
		return &K8sDebRepo{DebRepo: loadDebRepo(dir), Versions: versions}, nil
	}
	start := time.Now()
	gnupg, err := sharedRepoKey(ctx)
	if err != nil {
		return nil, fmt.Errorf("k8s repo: signing key: %w", err)
	}
	tmp := root + ".tmp"
	os.RemoveAll(tmp)
	debDir := filepath.Join(tmp, "debs")
	var debs []string
	for _, s := range specs {
		d, err := buildDeb(ctx, s, debDir)
		if err != nil {
			os.RemoveAll(tmp)
			return nil, fmt.Errorf("k8s repo: %s: %w", s.name, err)
		}
		debs = append(debs, d)
	}
	if _, err := BuildFlatDebRepo(ctx, filepath.Join(tmp, k8sRepoPath), debs, gnupg); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("k8s repo: %w", err)
	}
	os.RemoveAll(debDir)
	os.RemoveAll(root)
	if err := os.Rename(tmp, root); err != nil {
		return nil, err
	}
	logf("k8s inputs: packaged %d .debs into %s in %s", len(debs), dir, time.Since(start).Round(time.Second))
	return &K8sDebRepo{DebRepo: loadDebRepo(dir), Versions: versions}, nil
}

// buildDeb writes NAME_VERSION_amd64.deb into outDir with dpkg-deb, owned
// by root, xz-compressed, every mtime the epoch.
func buildDeb(ctx context.Context, s debSpec, outDir string) (string, error) {
	stage, err := os.MkdirTemp("", "stamp-deb-"+s.name+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(stage)
	// dpkg-deb refuses a control directory group- or world-writable; the
	// tree's modes must not depend on the caller's umask either.
	var size int64
	for _, f := range s.files {
		dst := filepath.Join(stage, f.path)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		if f.from != "" {
			if err := copyFile(f.from, dst); err != nil {
				return "", fmt.Errorf("%s: %w", f.from, err)
			}
		} else if err := os.WriteFile(dst, []byte(f.content), 0o644); err != nil {
			return "", err
		}
		if err := os.Chmod(dst, f.mode); err != nil {
			return "", err
		}
		fi, err := os.Stat(dst)
		if err != nil {
			return "", err
		}
		size += (fi.Size() + 1023) / 1024
	}
	ctl := filepath.Join(stage, "DEBIAN")
	if err := os.MkdirAll(ctl, 0o755); err != nil {
		return "", err
	}
	var c strings.Builder
	fmt.Fprintf(&c, "Package: %s\nVersion: %s\nArchitecture: amd64\nMaintainer: Kubernetes Authors <dev@kubernetes.io>\n", s.name, s.version)
	fmt.Fprintf(&c, "Installed-Size: %d\n", size)
	if len(s.depends) > 0 {
		fmt.Fprintf(&c, "Depends: %s\n", strings.Join(s.depends, ", "))
	}
	if len(s.conflicts) > 0 {
		fmt.Fprintf(&c, "Conflicts: %s\n", strings.Join(s.conflicts, ", "))
	}
	fmt.Fprintf(&c, "Section: %s\nPriority: optional\nHomepage: https://kubernetes.io\nDescription: %s\n %s.\n", s.section, s.summary, s.summary)
	ctlFiles := map[string]string{"control": c.String()}
	if len(s.conffiles) > 0 {
		ctlFiles["conffiles"] = strings.Join(s.conffiles, "\n") + "\n"
	}
	for k, v := range s.scripts {
		ctlFiles[k] = v
	}
	for _, k := range sortedKeys(ctlFiles) {
		mode := os.FileMode(0o644)
		if k != "control" && k != "conffiles" {
			mode = 0o755
		}
		if err := os.WriteFile(filepath.Join(ctl, k), []byte(ctlFiles[k]), mode); err != nil {
			return "", err
		}
		if err := os.Chmod(filepath.Join(ctl, k), mode); err != nil {
			return "", err
		}
	}
	var paths []string
	if err := filepath.Walk(stage, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() {
			if err := os.Chmod(p, 0o755); err != nil {
				return err
			}
		}
		paths = append(paths, p)
		return nil
	}); err != nil {
		return "", err
	}
	sort.Sort(sort.Reverse(sort.StringSlice(paths)))
	for _, p := range paths {
		if err := os.Chtimes(p, DefaultEpoch, DefaultEpoch); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	out := filepath.Join(outDir, fmt.Sprintf("%s_%s_amd64.deb", s.name, s.version))
	cmd := exec.CommandContext(ctx, "nice", "-n", "15", "dpkg-deb", "--root-owner-group", "-Zxz", "--build", stage, out)
	cmd.Env = append(os.Environ(), fmt.Sprintf("SOURCE_DATE_EPOCH=%d", DefaultEpoch.Unix()))
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("dpkg-deb --build %s: %w\n%s", out, err, stderr.String())
	}
	return out, nil
}

func fileSHA256(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sharedRepoKey is the Debian test repository's signing key, made under
// the base cache's lock as DebRepoFor makes it, so every test repository
// verifies with the same keyring.
func sharedRepoKey(ctx context.Context) (string, error) {
	if err := os.MkdirAll(filepath.Join(cacheRoot(), "base"), 0o755); err != nil {
		return "", err
	}
	unlock, err := lockFile(filepath.Join(cacheRoot(), "base", ".lock"))
	if err != nil {
		return "", err
	}
	defer unlock()
	return repoKey(ctx, filepath.Join(cacheRoot(), "debrepo", "gnupg"))
}
