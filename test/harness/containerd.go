package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// UpstreamContainerdVersion is the containerd Kubernetes' image-builder
// pins for its v1.31 nodes (kubernetes-version-dependencies/release-1-31),
// where Debian bookworm ships 1.6.
const UpstreamContainerdVersion = "2.3.2"

// upstreamContainerdTools are the programs a test runs of it: the daemon,
// its client and the runc shim it starts containers with.
var upstreamContainerdTools = []string{"containerd", "ctr", "containerd-shim-runc-v2"}

// UpstreamContainerd builds containerd, ctr and containerd-shim-runc-v2 at
// UpstreamContainerdVersion from the Go module proxy, static (no cgo, so no
// btrfs, devmapper or zfs snapshotter), once per machine, and returns the
// directory holding them. A cold build takes several minutes on two busy
// cores; it runs under nice.
func UpstreamContainerd(tb testing.TB) string {
	tb.Helper()
	dir := filepath.Join(cacheRoot(), "containerd-"+UpstreamContainerdVersion)
	if err := os.MkdirAll(cacheRoot(), 0o755); err != nil {
		tb.Fatal(err)
	}
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		tb.Fatal(err)
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
		return dir
	}
	start := time.Now()
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	args := []string{"-n", "10", "go", "install", "-trimpath", "-tags", "no_btrfs no_devmapper no_zfs"}
	for _, t := range upstreamContainerdTools {
		args = append(args, "github.com/containerd/containerd/v2/cmd/"+t+"@v"+UpstreamContainerdVersion)
	}
	cmd := exec.CommandContext(ctx, "nice", args...)
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOFLAGS=-mod=mod")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		tb.Fatalf("building containerd %s from the module proxy: %v\n%s", UpstreamContainerdVersion, err, tail(string(out), 4000))
	}
	if err := os.WriteFile(filepath.Join(tmp, "ready"), nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("built containerd %s from the module proxy in %s", UpstreamContainerdVersion, time.Since(start).Round(time.Second))
	return dir
}

// UpstreamContainerdPackage is the dpkg version a tree holding the upstream
// containerd records, as a .deb of it would.
func UpstreamContainerdPackage() string { return fmt.Sprintf("%s-1", UpstreamContainerdVersion) }

// upstreamContainerdService is upstream's containerd.service, as its
// release tarball ships it.
const upstreamContainerdService = `[Unit]
Description=containerd container runtime
Documentation=https://containerd.io
After=network.target dbus.service

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=/usr/bin/containerd
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
`

// UpstreamContainerdRepo is a signed flat repository (as the Kubernetes
// one is) holding the upstream containerd as the package containerd.io at
// UpstreamContainerdPackage, made once per machine from UpstreamContainerd.
func UpstreamContainerdRepo(tb testing.TB) *DebRepo {
	tb.Helper()
	bin := UpstreamContainerd(tb)
	dir := filepath.Join(cacheRoot(), "containerd-"+UpstreamContainerdVersion+"-repo")
	unlock, err := lockFile(dir + ".lock")
	if err != nil {
		tb.Fatal(err)
	}
	defer unlock()
	ctx := context.Background()
	gnupg, err := sharedRepoKey(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
		return loadDebRepo(filepath.Join(dir, "repo"))
	}
	spec := debSpec{name: "containerd.io", version: UpstreamContainerdPackage(), section: "admin",
		summary: "An open and reliable container runtime, upstream's build",
		files:   []debFile{{path: "/usr/lib/systemd/system/containerd.service", mode: 0o644, content: upstreamContainerdService}}}
	for _, t := range upstreamContainerdTools {
		spec.files = append(spec.files, debFile{path: "/usr/bin/" + t, mode: 0o755, from: filepath.Join(bin, t)})
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	deb, err := buildDeb(ctx, spec, filepath.Join(tmp, "debs"))
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := BuildFlatDebRepo(ctx, filepath.Join(tmp, "repo"), []string{deb}, gnupg); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "ready"), nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		tb.Fatal(err)
	}
	return loadDebRepo(filepath.Join(dir, "repo"))
}
