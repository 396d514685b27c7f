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
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// NodeDebPackages is the Kubernetes node's Debian package set, what the
// first debs layer of recipes/k8s-node.yaml asks for on top of
// NodeBaseFor (the node test holds the two equal): the container runtime
// and init, the network and audit tools, cloud-init's Python stack, an SSH
// server, a kernel and the static busybox its initramfs runs. The CNI
// plugins come from the Kubernetes repository (kubernetes-cni).
var NodeDebPackages = []string{
	"systemd-sysv", "containerd", "runc", "iproute2", "ca-certificates",
	"auditd", "apt-transport-https", "conntrack", "chrony", "curl", "ebtables", "ethtool", "iptables", "jq", "gnupg",
	"libnetfilter-acct1", "libnetfilter-cttimeout1", "libnetfilter-log1", "python3-netifaces", "python3-pip",
	"socat", "cloud-init", "cloud-guest-utils", "openssh-server", "linux-image-amd64", "systemd-boot-efi",
	"busybox-static", "systemd-resolved",
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
	return dpkgBaseOf(t, NodeBasePackages, nodeBaseScripts, ".nodedb5.tar")
}

// nodeBaseScripts are the base packages whose postinsts made what later
// packages' scripts rely on, which a base merged from data.tar lacks:
// mawk's awk alternative (locales' config script runs awk), debianutils'
// which alternative (python3-* postinsts run py3compile only if which
// finds it) and libpam-runtime's /etc/pam.d/common-* (adduser runs chfn,
// which needs PAM), and passwd's shadowconfig (groupadd would otherwise
// make /etc/gshadow mode 0000), and base-files', which on a first install
// turns /var/run and /var/lock into links to /run and /run/lock (without
// them a daemon writing its PID file under /var/run, as auditd does, is
// never seen by systemd, which looks in /run). NodeBaseFor runs them for
// real, chrooted into the base, and adds what they made to the database
// tarball.
var nodeBaseScripts = []string{"base-files", "passwd", "mawk", "debianutils", "libpam-runtime"}

// NodeRepoFor returns a repository of exactly what installing
// NodeDebPackages onto an empty system brings, with apt's choices, and
// NodeBasePackages' closure, built once per machine and cached like
// DebRepoFor's. It is shared: copy it (CopyDebRepo) before changing it.
func NodeRepoFor(t testing.TB) *DebRepo {
	t.Helper()
	return debRepoOf(t, [][]string{NodeDebPackages, NodeBasePackages})
}

// dpkgBaseOf builds (once per machine) a base of pkgs' closure with a dpkg
// database, cached beside the base tarball under its name with dbSuffix.
// The postinsts of the packages in configure run in a chroot of the result
// (so it needs root) and what they made joins the database tarball.
func dpkgBaseOf(t testing.TB, pkgs, configure []string, dbSuffix string) *DpkgBase {
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
	db := strings.TrimSuffix(tarball, ".tar.zst") + dbSuffix
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
		var plain bytes.Buffer
		if err := writeDpkgDB(&plain, st, info); err != nil {
			t.Fatal(err)
		}
		extra, err := scriptState(ctx, tarball, plain.Bytes(), configure)
		if err != nil {
			t.Fatalf("dpkg base: %v", err)
		}
		if err := writeAtomic(db, func(w io.Writer) error {
			if len(extra) == 0 {
				_, err := w.Write(plain.Bytes())
				return err
			}
			return appendTar(w, plain.Bytes(), extra)
		}); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(order)
	return &DpkgBase{Tarball: tarball, DB: db, Status: status, Packages: order}
}

// scriptEntry is one path a postinst made.
type scriptEntry struct {
	hdr  tar.Header
	data []byte
}

// scriptState extracts the base and its database into a scratch root,
// runs the postinsts of pkgs there (configure, as dpkg would, in a
// chroot) and returns every path they added or changed, in walk order.
func scriptState(ctx context.Context, tarball string, db []byte, pkgs []string) ([]scriptEntry, error) {
	if len(pkgs) == 0 {
		return nil, nil
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("running the base's postinsts in a chroot needs root")
	}
	root, err := os.MkdirTemp("", "stamp-nodebase-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(root)
	x := exec.CommandContext(ctx, "tar", "--zstd", "-x", "--numeric-owner", "-p", "-f", tarball, "-C", root)
	if out, err := x.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tar -x %s: %v\n%s", tarball, err, out)
	}
	x = exec.CommandContext(ctx, "tar", "-x", "--numeric-owner", "-p", "-C", root)
	x.Stdin = bytes.NewReader(db)
	if out, err := x.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("tar -x of the database: %v\n%s", err, out)
	}
	// A path's state: type, mode, owner, and content or target.
	state := func(p string, fi os.FileInfo) string {
		st := fi.Sys().(*syscall.Stat_t)
		s := fmt.Sprintf("%v %d:%d", fi.Mode(), st.Uid, st.Gid)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			t, _ := os.Readlink(p)
			s += " -> " + t
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			sum := sha256.Sum256(b)
			s += " " + hex.EncodeToString(sum[:])
		}
		return s
	}
	before := map[string]string{}
	if err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err == nil {
			before[p] = state(p, fi)
		}
		return err
	}); err != nil {
		return nil, err
	}
	for _, p := range pkgs {
		cmd := exec.CommandContext(ctx, "chroot", root, "/var/lib/dpkg/info/"+p+".postinst", "configure", "")
		cmd.Dir = "/"
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C.UTF-8",
			"DPKG_MAINTSCRIPT_PACKAGE=" + p, "DPKG_MAINTSCRIPT_NAME=postinst", "DPKG_ROOT=", "SOURCE_DATE_EPOCH=1700000000"}
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("%s postinst: %v\n%s", p, err, out)
		}
	}
	var out []scriptEntry
	err = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || before[p] == state(p, fi) {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		st := fi.Sys().(*syscall.Stat_t)
		h := tar.Header{Name: rel, Mode: int64(fi.Mode().Perm()), Uid: int(st.Uid), Gid: int(st.Gid), ModTime: DefaultEpoch, Format: tar.FormatPAX}
		if fi.Mode()&os.ModeSetgid != 0 {
			h.Mode |= 0o2000
		}
		var data []byte
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			h.Typeflag = tar.TypeSymlink
			h.Linkname, _ = os.Readlink(p)
			h.Mode = 0o777
		case fi.IsDir():
			h.Typeflag, h.Name = tar.TypeDir, rel+"/"
		case fi.Mode().IsRegular():
			h.Typeflag = tar.TypeReg
			if data, err = os.ReadFile(p); err != nil {
				return err
			}
			h.Size = int64(len(data))
		default:
			return fmt.Errorf("%s: a postinst made a %s", rel, fi.Mode().Type())
		}
		out = append(out, scriptEntry{h, data})
		return nil
	})
	return out, err
}

// appendTar copies the tar in plain and adds the entries after its own.
func appendTar(w io.Writer, plain []byte, extra []scriptEntry) error {
	tr := tar.NewReader(bytes.NewReader(plain))
	tw := tar.NewWriter(w)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := io.Copy(tw, tr); err != nil {
			return err
		}
	}
	for _, e := range extra {
		if err := tw.WriteHeader(&e.hdr); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// debRepoOf is DebRepoFor for other requests: the repository holds the
// union of what apt installs for each, keyed in the cache by the exact
// .deb files.
func debRepoOf(t testing.TB, reqs [][]string) *DebRepo {
	t.Helper()
	RequireTools(t, "apt-get", "apt-cache", "apt-ftparchive", "gpg", "dpkg-deb", "dpkg")
	root := filepath.Join(cacheRoot(), "debrepo")
	// The base cache's lock: the deb cache is shared with the base fixture.
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
