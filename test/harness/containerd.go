package harness

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// UpstreamContainerdVersion and UpstreamRuncVersion are the containerd and
// runc Kubernetes' image-builder pins (images/capi/packer/config/
// containerd.json), where Debian bookworm ships containerd 1.6 and runc 1.1.
const (
	UpstreamContainerdVersion = "2.3.2"
	UpstreamRuncVersion       = "1.4.3"
)

// upstreamContainerdRevision is the commit of containerd's v2.3.2 tag, as
// the module proxy's .info names it (Origin.Hash). Upstream's release
// links it in beside the version, and "containerd --version" prints both:
// image-builder's goss check reads the version from that line.
const upstreamContainerdRevision = "fff62f14765df376e5fc36f5a8f8e795b5670f61"

// upstreamContainerdTools are the programs a test runs of it: the daemon,
// its client and the runc shim it starts containers with.
var upstreamContainerdTools = []string{"containerd", "ctr", "containerd-shim-runc-v2"}

// upstreamGoBuild is one "go install" from the module proxy into a cache
// directory keyed by everything that decides its output.
type upstreamGoBuild struct {
	name    string // the cache directory's prefix and what logs call it
	pkgs    []string
	tags    string
	ldflags string
	cgo     bool
}

// UpstreamContainerd builds containerd, ctr and containerd-shim-runc-v2 at
// UpstreamContainerdVersion from the Go module proxy, static (no cgo, so no
// btrfs, devmapper or zfs snapshotter), with the version and revision
// linked in as upstream's Makefile does, once per machine, and returns the
// directory holding them. A cold build takes several minutes on two busy
// cores; it runs under nice.
func UpstreamContainerd(tb testing.TB) string {
	tb.Helper()
	const pkg = "github.com/containerd/containerd/v2"
	b := upstreamGoBuild{name: "containerd-" + UpstreamContainerdVersion, tags: "no_btrfs no_devmapper no_zfs",
		ldflags: fmt.Sprintf("-X %[1]s/version.Version=v%[2]s -X %[1]s/version.Revision=%[3]s -X %[1]s/version.Package=%[1]s",
			pkg, UpstreamContainerdVersion, upstreamContainerdRevision)}
	for _, t := range upstreamContainerdTools {
		b.pkgs = append(b.pkgs, pkg+"/cmd/"+t+"@v"+UpstreamContainerdVersion)
	}
	return b.build(tb)
}

// UpstreamRunc builds runc at UpstreamRuncVersion from the Go module proxy
// as upstream's "make static" does: cgo (runc's namespace setup is C),
// libseccomp linked in (without it runc refuses the RuntimeDefault seccomp
// profile kubeadm's control-plane pods ask for), static, so the binary
// needs nothing of the image. Once per machine; returns the directory
// holding runc.
func UpstreamRunc(tb testing.TB) string {
	tb.Helper()
	RequireTools(tb, "gcc", "pkg-config")
	if out, err := exec.Command("pkg-config", "--exists", "libseccomp").CombinedOutput(); err != nil {
		tb.Fatalf("libseccomp's development files are missing (test/scripts/deps.sh installs libseccomp-dev): %v %s", err, out)
	}
	return upstreamGoBuild{name: "runc-" + UpstreamRuncVersion, cgo: true,
		pkgs: []string{"github.com/opencontainers/runc@v" + UpstreamRuncVersion},
		tags: "seccomp urfave_cli_no_docs netgo osusergo", ldflags: "-extldflags -static"}.build(tb)
}

// build runs the go install once per machine, under the cache's lock.
func (b upstreamGoBuild) build(tb testing.TB) string {
	tb.Helper()
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%t\x00%s", strings.Join(b.pkgs, " "), b.tags, b.ldflags, b.cgo, runtime.Version())
	dir := filepath.Join(cacheRoot(), fmt.Sprintf("%s-%x", b.name, h.Sum(nil)[:6]))
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
	args := append([]string{"-n", "10", "go", "install", "-trimpath", "-tags", b.tags, "-ldflags", b.ldflags}, b.pkgs...)
	cmd := exec.CommandContext(ctx, "nice", args...)
	cgo := "CGO_ENABLED=0"
	if b.cgo {
		cgo = "CGO_ENABLED=1"
	}
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, cgo, "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		tb.Fatalf("building %s from the module proxy: %v\n%s", b.name, err, tail(string(out), 4000))
	}
	if err := os.WriteFile(filepath.Join(tmp, "ready"), nil, 0o644); err != nil {
		tb.Fatal(err)
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("built %s from the module proxy in %s", b.name, time.Since(start).Round(time.Second))
	return dir
}

// UpstreamContainerdPackage and UpstreamRuncPackage are the dpkg versions
// of the packages UpstreamContainerdRepo holds (containerd.io and runc), as
// a tree holding them records them.
func UpstreamContainerdPackage() string { return UpstreamContainerdVersion + "-1" }

// UpstreamRuncPackage is runc's; see UpstreamContainerdPackage.
func UpstreamRuncPackage() string { return UpstreamRuncVersion + "-1" }

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
// one is) holding upstream's containerd as the package containerd.io at
// UpstreamContainerdPackage, as Docker's repository names it, and runc at
// UpstreamRuncPackage, made once per machine from UpstreamContainerd and
// UpstreamRunc. containerd.io depends on that runc and conflicts with
// Debian's containerd, so a tree never holds both.
func UpstreamContainerdRepo(tb testing.TB) *DebRepo {
	tb.Helper()
	bin, runc := UpstreamContainerd(tb), UpstreamRunc(tb)
	ctd := debSpec{name: "containerd.io", version: UpstreamContainerdPackage(), section: "admin",
		summary:   "An open and reliable container runtime, upstream's build",
		depends:   []string{"runc (>= " + UpstreamRuncVersion + ")"},
		conflicts: []string{"containerd"},
		files:     []debFile{{path: "/usr/lib/systemd/system/containerd.service", mode: 0o644, content: upstreamContainerdService}}}
	for _, t := range upstreamContainerdTools {
		ctd.files = append(ctd.files, debFile{path: "/usr/bin/" + t, mode: 0o755, from: filepath.Join(bin, t)})
	}
	rc := debSpec{name: "runc", version: UpstreamRuncPackage(), section: "admin",
		summary: "Open Container Project runtime, upstream's static build",
		files:   []debFile{{path: "/usr/sbin/runc", mode: 0o755, from: filepath.Join(runc, "runc")}}}
	// The key names the binaries the packages hold, so a rebuild of either
	// makes a new repository.
	h := sha256.New()
	for _, s := range []debSpec{ctd, rc} {
		fmt.Fprintf(h, "\x00%s=%s %s %s", s.name, s.version, strings.Join(s.depends, ","), strings.Join(s.conflicts, ","))
		for _, f := range s.files {
			fmt.Fprintf(h, "\x00%s %o %q %s", f.path, f.mode, f.content, f.from)
		}
	}
	dir := filepath.Join(cacheRoot(), fmt.Sprintf("containerd-%s-runc-%s-repo-%x", UpstreamContainerdVersion, UpstreamRuncVersion, h.Sum(nil)[:6]))
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
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	var debs []string
	for _, s := range []debSpec{ctd, rc} {
		deb, err := buildDeb(ctx, s, filepath.Join(tmp, "debs"))
		if err != nil {
			tb.Fatal(err)
		}
		debs = append(debs, deb)
	}
	if _, err := BuildFlatDebRepo(ctx, filepath.Join(tmp, "repo"), debs, gnupg); err != nil {
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
