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

// The Kubernetes test inputs: every binary is built from the Go module
// proxy, so no test reaches a Kubernetes release bucket, package repository
// or container registry.
//
// K8sVersion is the newest v1.31 patch for which the proxy serves
// k8s.io/kubernetes and every published staging module the binaries import
// (v1.31.14 lacks k8s.io/endpointslice, kube-scheduler and
// kube-controller-manager at v0.31.14). The other versions are those
// kubeadm v1.31.13 names (constants.SupportedEtcdVersion, CoreDNSVersion,
// PauseVersion) or packages beside it.
const (
	K8sVersion     = "v1.31.13"
	EtcdVersion    = "3.5.15"
	CoreDNSVersion = "v1.11.3"
	PauseVersion   = "3.10"
	// CrictlVersion: the proxy serves no cri-tools v1.31.x (neither as
	// sigs.k8s.io/cri-tools nor under its old github.com path); v1.34.0 is
	// the nearest it has, and crictl speaks the same CRI v1 API.
	CrictlVersion = "v1.34.0"
	// CNIPluginsVersion is what the kubernetes-cni package of the v1.31
	// repository carries.
	CNIPluginsVersion = "v1.5.1"
	// K8sGoToolchain is the Go release upstream builds K8sVersion with (the
	// .go-version at the root of its source), fetched from the module proxy
	// as golang.org/toolchain. The binaries must behave as released ones do:
	// built with a newer Go, kubeadm's HTTPProxyCIDR preflight check fails,
	// as net/url refuses its bracketed IPv4 URL since Go 1.25.2.
	K8sGoToolchain = "go1.23.12"
)

// k8sStagingVersions are the published versions of the modules that
// k8s.io/kubernetes replaces by ./staging. The proxy lacks
// k8s.io/kube-proxy v0.31.13; v0.31.11 has the same source but its go.mod.
func k8sStagingVersions() (def string, over map[string]string) {
	return "v0.31.13", map[string]string{"k8s.io/kube-proxy": "v0.31.11"}
}

// K8sBinaryNames are the Kubernetes binaries built from k8s.io/kubernetes.
var K8sBinaryNames = []string{"kubelet", "kubeadm", "kubectl", "kube-apiserver",
	"kube-controller-manager", "kube-scheduler", "kube-proxy"}

// CNIPluginNames are the CNI plugins kubernetes-cni ships for Linux.
var CNIPluginNames = []string{"bandwidth", "bridge", "dhcp", "dummy", "firewall", "host-device",
	"host-local", "ipvlan", "loopback", "macvlan", "portmap", "ptp", "sbr", "static", "tap",
	"tuning", "vlan", "vrf"}

// k8sBinFormat changes whenever the same versions would build different
// binaries (flags, tags, layout of the cache), so stale ones are not reused.
const k8sBinFormat = "stamp-test-k8sbin/1"

// goBuild is one scratch module and the binaries built from it.
type goBuild struct {
	group   string            // names the scratch module
	require map[string]string // module → version
	replace map[string]string // module → "module version"
	bins    map[string]string // binary name → package
	tags    string
	ldflags string
	// main, when set, is the whole main.go of the scratch module itself.
	main string
	// toolchain is the Go release that builds the group, as GOTOOLCHAIN
	// names it; empty for this machine's own.
	toolchain string
}

// key identifies everything that makes the group's bytes; localGo is this
// machine's Go release, which builds the groups that name none.
func (b *goBuild) key(localGo string) string {
	goVersion := localGo
	if b.toolchain != "" {
		goVersion = b.toolchain
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%s\x00%s\x00%s", k8sBinFormat, goVersion, b.group, b.tags, b.ldflags, b.main)
	for _, m := range [][2]map[string]string{{b.require, b.replace}, {b.bins, nil}} {
		for _, mm := range m {
			for _, k := range sortedKeys(mm) {
				fmt.Fprintf(h, "\x00%s=%s", k, mm[k])
			}
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

// k8sBuildDate is the build date stamped into the Kubernetes binaries, as
// hack/lib/version.sh derives it from SOURCE_DATE_EPOCH.
var k8sBuildDate = DefaultEpoch.Format("2006-01-02T15:04:05Z")

// k8sGoBuilds lists every group. stagingReplaces are the k8s.io modules
// k8s.io/kubernetes replaces by ./staging, read from its go.mod.
func k8sGoBuilds(stagingReplaces []string) []*goBuild {
	major, minor := "1", strings.Split(K8sVersion, ".")[1]
	var x []string
	// The flags hack/lib/version.sh gives both version packages; kubeadm
	// derives the control-plane image tags from gitVersion.
	for _, kv := range [][2]string{{"buildDate", k8sBuildDate}, {"gitVersion", K8sVersion},
		{"gitMajor", major}, {"gitMinor", minor}, {"gitTreeState", "clean"}} {
		for _, p := range []string{"k8s.io/client-go/pkg/version", "k8s.io/component-base/version"} {
			x = append(x, fmt.Sprintf("-X '%s.%s=%s'", p, kv[0], kv[1]))
		}
	}
	def, over := k8sStagingVersions()
	repl := map[string]string{}
	for _, m := range stagingReplaces {
		v := def
		if o, ok := over[m]; ok {
			v = o
		}
		repl[m] = m + " " + v
	}
	kube := &goBuild{group: "kubernetes", require: map[string]string{"k8s.io/kubernetes": K8sVersion},
		replace: repl, bins: map[string]string{}, tags: "selinux,notest",
		ldflags: "-s -w " + strings.Join(x, " "), toolchain: K8sGoToolchain}
	for _, n := range K8sBinaryNames {
		kube.bins[n] = "k8s.io/kubernetes/cmd/" + n
	}
	cni := &goBuild{group: "cni", require: map[string]string{"github.com/containernetworking/plugins": CNIPluginsVersion},
		bins:    map[string]string{},
		ldflags: "-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=" + CNIPluginsVersion}
	for _, n := range CNIPluginNames {
		dir := "main"
		switch n {
		case "dhcp", "host-local", "static":
			dir = "ipam"
		case "bandwidth", "firewall", "portmap", "sbr", "tuning", "vrf":
			dir = "meta"
		}
		cni.bins[n] = "github.com/containernetworking/plugins/plugins/" + dir + "/" + n
	}
	// Kubernetes last: a cold build of the small groups shows a problem
	// with the proxy or the toolchain within minutes, not after an hour.
	return []*goBuild{
		{group: "pause", bins: map[string]string{"pause": "stamp.test/pause"}, ldflags: "-s -w", main: pauseMain},
		// etcd's own version is a constant of go.etcd.io/etcd/api/v3/version.
		{group: "etcd", require: map[string]string{"go.etcd.io/etcd/server/v3": "v" + EtcdVersion, "go.etcd.io/etcd/etcdctl/v3": "v" + EtcdVersion},
			bins:    map[string]string{"etcd": "go.etcd.io/etcd/server/v3", "etcdctl": "go.etcd.io/etcd/etcdctl/v3"},
			ldflags: "-s -w"},
		{group: "coredns", require: map[string]string{"github.com/coredns/coredns": CoreDNSVersion},
			bins: map[string]string{"coredns": "github.com/coredns/coredns"}, ldflags: "-s -w"},
		{group: "crictl", require: map[string]string{"sigs.k8s.io/cri-tools": CrictlVersion},
			bins:    map[string]string{"crictl": "sigs.k8s.io/cri-tools/cmd/crictl"},
			ldflags: "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=" + strings.TrimPrefix(CrictlVersion, "v")},
		cni,
		kube,
	}
}

// pauseMain is the pause container: PID 1 of a pod's sandbox, which holds
// the namespaces, reaps orphans and exits on SIGINT or SIGTERM.
const pauseMain = `package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("pause.go version ` + PauseVersion + `")
		return
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", s)
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
`

// K8sBinaries are the built binaries, each a static linux/amd64 executable.
type K8sBinaries struct {
	// Paths maps a binary's name (kubelet, etcd, bridge, pause, ...) to its
	// file in the cache. CNI plugins are under their plugin names.
	Paths map[string]string
}

// Path is the file of the named binary; it panics on an unknown name, which
// is a bug in the caller.
func (b *K8sBinaries) Path(name string) string {
	p, ok := b.Paths[name]
	if !ok {
		panic("no Kubernetes test binary " + name)
	}
	return p
}

// k8sCacheDir is where every Kubernetes input lives.
func k8sCacheDir() string { return filepath.Join(cacheRoot(), "k8s") }

// BuildK8sBinaries builds (or finds in the cache) every binary. A cold
// build compiles Kubernetes: tens of minutes on two shared cores, so it
// runs under nice with at most two compile jobs. logf reports progress.
func BuildK8sBinaries(ctx context.Context, logf func(string, ...any)) (*K8sBinaries, error) {
	return k8sBinaries(ctx, true, logf)
}

// k8sBinaries finds the binaries in the cache and, when build is set,
// builds what is missing; otherwise a missing binary is an error naming it.
func k8sBinaries(ctx context.Context, build bool, logf func(string, ...any)) (*K8sBinaries, error) {
	root := k8sCacheDir()
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, err
	}
	unlock, err := lockFile(filepath.Join(root, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	goVersion, err := goEnv(ctx, "GOVERSION")
	if err != nil {
		return nil, err
	}
	staging, err := k8sStagingModules(ctx, root)
	if err != nil {
		return nil, err
	}
	out := &K8sBinaries{Paths: map[string]string{}}
	for _, g := range k8sGoBuilds(staging) {
		dir := filepath.Join(root, "bin", g.group+"-"+g.key(goVersion))
		if _, err := os.Stat(filepath.Join(dir, "ready")); err != nil {
			if !build {
				return nil, fmt.Errorf("%s: %s is not built", dir, g.group)
			}
			start := time.Now()
			logf("k8s inputs: building %s (%s) ...", g.group, strings.Join(sortedKeys(g.bins), " "))
			if err := g.build(ctx, filepath.Join(root, "src", g.group+"-"+g.key(goVersion)), dir, logf); err != nil {
				return nil, fmt.Errorf("building %s: %w", g.group, err)
			}
			logf("k8s inputs: built %s in %s", g.group, time.Since(start).Round(time.Second))
		}
		for n := range g.bins {
			out.Paths[n] = filepath.Join(dir, n)
		}
	}
	return out, nil
}

// k8sStagingModules reads, from k8s.io/kubernetes's go.mod, the modules it
// replaces by ./staging; the answer is kept beside the binaries.
func k8sStagingModules(ctx context.Context, root string) ([]string, error) {
	memo := filepath.Join(root, "staging-"+K8sVersion)
	if b, err := os.ReadFile(memo); err == nil {
		return strings.Fields(string(b)), nil
	}
	tmp, err := os.MkdirTemp("", "stamp-k8s-gomod-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte("module stamp.test/probe\n\ngo 1.22.0\n"), 0o644); err != nil {
		return nil, err
	}
	var stdout bytes.Buffer
	if err := goCmd(ctx, tmp, "", &stdout, "mod", "download", "-json", "k8s.io/kubernetes@"+K8sVersion); err != nil {
		return nil, err
	}
	var gomod string
	for _, l := range strings.Split(stdout.String(), "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), ": "); ok && k == `"GoMod"` {
			gomod = strings.Trim(strings.TrimSuffix(v, ","), `"`)
		}
	}
	b, err := os.ReadFile(gomod)
	if err != nil {
		return nil, fmt.Errorf("k8s.io/kubernetes@%s go.mod: %w", K8sVersion, err)
	}
	var mods []string
	for _, l := range strings.Split(string(b), "\n") {
		// e.g. "	k8s.io/api => ./staging/src/k8s.io/api"
		f := strings.Fields(l)
		if len(f) == 3 && f[1] == "=>" && strings.HasPrefix(f[2], "./staging/") {
			mods = append(mods, f[0])
		}
	}
	if len(mods) == 0 {
		return nil, fmt.Errorf("%s: no ./staging replaces", gomod)
	}
	sort.Strings(mods)
	return mods, writeAtomic(memo, func(w io.Writer) error { _, err := io.WriteString(w, strings.Join(mods, "\n")+"\n"); return err })
}

// build writes the scratch module in src, resolves it against the proxy
// and builds every binary into dir, which appears complete or not at all.
func (b *goBuild) build(ctx context.Context, src, dir string, logf func(string, ...any)) error {
	if err := os.MkdirAll(src, 0o755); err != nil {
		return err
	}
	var mod strings.Builder
	fmt.Fprintf(&mod, "module stamp.test/%s\n\ngo 1.22.0\n", b.group)
	for _, m := range sortedKeys(b.require) {
		fmt.Fprintf(&mod, "\nrequire %s %s\n", m, b.require[m])
	}
	for _, m := range sortedKeys(b.replace) {
		fmt.Fprintf(&mod, "replace %s => %s\n", m, b.replace[m])
	}
	// go get rewrites go.mod; start from the spec only when there is none.
	if _, err := os.Stat(filepath.Join(src, "go.sum")); err != nil {
		if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(mod.String()), 0o644); err != nil {
			return err
		}
	}
	if b.main != "" {
		if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(b.main), 0o644); err != nil {
			return err
		}
	}
	var get []string
	for _, n := range sortedKeys(b.bins) {
		p := b.bins[n]
		if b.main == "" {
			p += "@" + b.versionOf(p)
		}
		get = append(get, p)
	}
	if b.main == "" {
		// Adds the requirements and go.sum lines the packages need; the
		// proxy sometimes answers 403 for a moment, so try again once.
		if err := goCmd(ctx, src, b.toolchain, io.Discard, append([]string{"get"}, get...)...); err != nil {
			logf("k8s inputs: %s: go get failed, retrying: %v", b.group, err)
			if err := goCmd(ctx, src, b.toolchain, io.Discard, append([]string{"get"}, get...)...); err != nil {
				return err
			}
		}
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	for _, n := range sortedKeys(b.bins) {
		start := time.Now()
		args := []string{"build", "-trimpath", "-ldflags", b.ldflags, "-o", filepath.Join(tmp, n)}
		if b.tags != "" {
			args = append(args, "-tags", b.tags)
		}
		pkg := b.bins[n]
		if b.main != "" {
			pkg = "."
		}
		if err := goCmd(ctx, src, b.toolchain, io.Discard, append(args, pkg)...); err != nil {
			return err
		}
		logf("k8s inputs:   %s in %s", n, time.Since(start).Round(time.Second))
	}
	if err := os.WriteFile(filepath.Join(tmp, "ready"), nil, 0o644); err != nil {
		return err
	}
	os.RemoveAll(dir)
	return os.Rename(tmp, dir)
}

// versionOf is the required version of the module that holds pkg.
func (b *goBuild) versionOf(pkg string) string {
	best := ""
	for m := range b.require {
		if (pkg == m || strings.HasPrefix(pkg, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	return b.require[best]
}

// goEnv is one value of go env.
func goEnv(ctx context.Context, name string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// goCmd runs the go command in dir, niced and with at most two jobs, for
// linux/amd64 without cgo, with the named toolchain (this machine's when
// empty) and no other. Its stderr is in the error.
func goCmd(ctx context.Context, dir, toolchain string, stdout io.Writer, args ...string) error {
	if toolchain == "" {
		toolchain = "local"
	}
	cmd := exec.CommandContext(ctx, "nice", append([]string{"-n", "15", "go"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+toolchain, "GOFLAGS=-mod=mod -p=2 -buildvcs=false", "GOWORK=off",
		"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), dir, err, tail(stderr.String(), 4000))
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
