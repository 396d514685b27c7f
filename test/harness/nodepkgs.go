package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// NodeDebPackages is the Kubernetes node's package set, what its recipe's
// debs layer asks for on top of NodeBaseFor: the container runtime and
// init, the network and audit tools, cloud-init's Python stack, an SSH
// server and a kernel.
var NodeDebPackages = []string{
	"systemd-sysv", "containerd", "runc", "iproute2", "ca-certificates",
	"auditd", "apt-transport-https", "conntrack", "chrony", "curl", "ebtables", "ethtool", "iptables", "jq", "gnupg",
	"libnetfilter-acct1", "libnetfilter-cttimeout1", "libnetfilter-log1", "python3-netifaces", "python3-pip",
	"socat", "cloud-init", "cloud-guest-utils", "openssh-server", "linux-image-cloud-amd64", "systemd-boot-efi",
	"containernetworking-plugins",
}

// NodeBasePackages are DpkgBasePackages and the rest of bookworm's
// Essential set. Packages never declare a dependency on an Essential
// package, so their scripts may call any of these (util-linux's tools,
// hostname), and a real minbase has them all.
var NodeBasePackages = append(append([]string{}, DpkgBasePackages...),
	"bsdutils", "hostname", "login", "ncurses-bin", "sysvinit-utils", "util-linux")

// NodeBaseFor builds (once per machine) the node's base: NodeBasePackages
// and their dependencies with a dpkg database, as DpkgBaseFor.
func NodeBaseFor(t testing.TB) *DpkgBase {
	t.Helper()
	return dpkgBaseOf(t, NodeBasePackages)
}

// NodeRepoFor returns a repository of exactly what installing
// NodeDebPackages onto an empty system brings, with apt's choices, and
// NodeBasePackages' closure, built once per machine and cached like
// DebRepoFor's. It is shared: copy it (CopyDebRepo) before changing it.
func NodeRepoFor(t testing.TB) *DebRepo {
	t.Helper()
	return debRepoOf(t, [][]string{NodeDebPackages, NodeBasePackages})
}

// dpkgBaseOf is DpkgBaseFor for another package set.
func dpkgBaseOf(t testing.TB, pkgs []string) *DpkgBase {
	t.Helper()
	RequireTools(t, "apt-get", "dpkg-deb", "dpkg")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	names, err := aptClosure(ctx, [][]string{pkgs})
	if err != nil {
		t.Fatalf("dpkg base: %v", err)
	}
	// The default packages first, so the fixture files come out as in Base.
	order := append([]string{}, DefaultPackages...)
	in := map[string]bool{}
	for _, p := range order {
		in[p] = true
	}
	for _, n := range names {
		if !in[n] {
			order = append(order, n)
			in[n] = true
		}
	}
	tarball := BaseWith(t, BaseOptions{Packages: order})
	debs, err := cachedDebs(ctx, order, t.Logf)
	if err != nil {
		t.Fatalf("dpkg base: %v", err)
	}
	db := strings.TrimSuffix(tarball, ".tar.zst") + ".dpkgdb6.tar"
	status := strings.TrimSuffix(tarball, ".tar.zst") + ".status"
	if _, err := os.Stat(db); err != nil {
		st, err := statusFor(ctx, debs)
		if err != nil {
			t.Fatalf("dpkg base: %v", err)
		}
		info, err := infoFor(ctx, debs)
		if err != nil {
			t.Fatalf("dpkg base: %v", err)
		}
		if err := writeAtomic(status, func(w io.Writer) error { _, err := w.Write(st); return err }); err != nil {
			t.Fatal(err)
		}
		if err := writeAtomic(db, func(w io.Writer) error { return writeDpkgDB(w, st, info) }); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(order)
	return &DpkgBase{Tarball: tarball, DB: db, Status: status, Packages: order}
}

// debRepoOf is DebRepoFor for other requests: the repository holds the
// union of what apt installs for each, keyed in the cache by the exact
// .deb files.
func debRepoOf(t testing.TB, reqs [][]string) *DebRepo {
	t.Helper()
	RequireTools(t, "apt-get", "apt-cache", "apt-ftparchive", "gpg", "dpkg-deb", "dpkg")
	root := filepath.Join(cacheRoot(), "debrepo")
	if err := os.MkdirAll(filepath.Join(cacheRoot(), "base"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	unlock, err := lockFile(filepath.Join(cacheRoot(), "base", ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	names, err := aptClosure(ctx, reqs)
	if err != nil {
		t.Fatalf("debrepo: %v", err)
	}
	debs, err := cachedDebs(ctx, names, t.Logf)
	if err != nil {
		t.Fatalf("debrepo: %v", err)
	}
	h := sha256.New()
	fmt.Fprint(h, debRepoFormat)
	for _, d := range debs {
		fmt.Fprintf(h, "\x00%s", filepath.Base(d))
	}
	dir := filepath.Join(root, hex.EncodeToString(h.Sum(nil)[:8]))
	if _, err := os.Stat(filepath.Join(dir, "dists", "stamp", "InRelease")); err == nil {
		return loadDebRepo(dir)
	}
	gnupg, err := repoKey(ctx, filepath.Join(root, "gnupg"))
	if err != nil {
		t.Fatalf("debrepo: signing key: %v", err)
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if _, err := BuildDebRepo(ctx, tmp, debs, gnupg); err != nil {
		os.RemoveAll(tmp)
		t.Fatalf("debrepo: %v", err)
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("debrepo: built %s with %d packages", dir, len(debs))
	return loadDebRepo(dir)
}
