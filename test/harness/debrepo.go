package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// NodePackages are what a Kubernetes node needs from Debian; the acceptance
// tests of the debs layer install them.
var NodePackages = []string{"containerd", "runc", "conntrack", "socat", "iptables", "ebtables", "jq", "curl"}

// DebRepoRequests are the requests the test repository is built for, each
// a list of packages apt-get install is asked for. Their union, with what
// apt picks for each, is what the repository holds. They exercise:
// alternatives whose first member is missing (logrotate's
// "cron | anacron | ..." with anacron and no cron), virtual packages with
// one provider (awk) and with two (netcat), an alternative of a real and a
// virtual package (ca-certificates' "debconf | debconf-2.0"), kmod, and a
// kernel (depmod, linux-update-symlinks, the initramfs hook), and Python
// (py3compile in python3-minimal's and python3-six's postinsts).
var DebRepoRequests = [][]string{
	NodePackages,
	{"logrotate", "anacron"},
	{"mawk"},
	{"netcat-openbsd"},
	{"netcat-traditional"},
	{"ca-certificates"},
	{"kmod"},
	{KernelPackage},
	{"python3-six"},
}

// KernelPackage is Debian's kernel metapackage; it depends on the kernel
// image of the day, which brings kmod, linux-base and initramfs-tools.
const KernelPackage = "linux-image-amd64"

// DpkgBasePackages extend DefaultPackages into a base that can run real
// maintainer scripts: dpkg (update-alternatives, dpkg-maintscript-helper),
// init-system-helpers (deb-systemd-helper, in Perl) and the tools scripts
// call. The set is closed under Depends with apt's choices.
var DpkgBasePackages = append(append([]string{}, DefaultPackages...),
	"dpkg", "tar", "init-system-helpers", "usr-is-merged", "perl-base", "sed", "grep",
	"findutils", "diffutils", "debianutils", "gzip", "mawk", "libc-bin")

// DebRepo is a signed Debian repository on disk with one suite and one
// component, or a flat one, built from real packages.
type DebRepo struct {
	Dir       string // the archive root: dists/ and pool/, or a flat repository's directory
	Suite     string // "/" for a flat repository
	Component string // "" for a flat repository
	Arch      string
	// Keyring is the binary OpenPGP public keyring InRelease is signed for.
	Keyring string
	// Debs maps a package name to its .deb, relative to Dir.
	Debs map[string]string
}

// FileURL is the repository as a file:// URL.
func (r *DebRepo) FileURL() string { return "file://" + r.Dir }

// debRepoFormat changes whenever BuildDebRepo would lay out a different
// repository for the same .deb files.
const debRepoFormat = "stamp-test-debrepo/1"

// DebRepoFor returns the test repository, built once per machine and
// cached next to the base. It is shared: copy it (CopyDebRepo) before
// changing anything in it.
func DebRepoFor(t testing.TB) *DebRepo {
	t.Helper()
	var reqs [][]string
	reqs = append(reqs, DebRepoRequests...)
	reqs = append(reqs, DpkgBasePackages)
	return debRepoOf(t, reqs)
}

// loadDebRepo reads back what buildDebRepo laid out in dir, flat or not.
func loadDebRepo(dir string) *DebRepo { return loadDebRepoArch(dir, "amd64") }

// loadDebRepoArch is loadDebRepo for a repository of arch.
func loadDebRepoArch(dir, arch string) *DebRepo {
	r := &DebRepo{Dir: dir, Suite: "stamp", Component: "main", Arch: arch,
		Keyring: filepath.Join(dir, "keyring.gpg"), Debs: map[string]string{}}
	pool := filepath.Join("pool", "main")
	if _, err := os.Stat(filepath.Join(dir, "InRelease")); err == nil {
		r.Suite, r.Component, pool = "/", "", arch
	}
	found, _ := filepath.Glob(filepath.Join(dir, pool, "*.deb"))
	for _, f := range found {
		name, _, _ := strings.Cut(filepath.Base(f), "_")
		r.Debs[name] = filepath.Join(pool, filepath.Base(f))
	}
	return r
}

// aptClosure asks apt which packages installing each request brings onto an
// empty system (without Recommends) and returns the union, sorted.
// The answer is cached per request set until apt's lists change, as asking
// apt takes seconds per request.
func aptClosure(ctx context.Context, reqs [][]string) ([]string, error) {
	h := sha256.New()
	fmt.Fprint(h, debRepoFormat)
	if fi, err := os.Stat("/var/lib/apt/lists"); err == nil {
		fmt.Fprintf(h, "\x00%d", fi.ModTime().UnixNano())
	}
	for _, r := range reqs {
		fmt.Fprintf(h, "\x00%s", strings.Join(r, " "))
	}
	memo := filepath.Join(cacheRoot(), "debrepo", "closure-"+hex.EncodeToString(h.Sum(nil)[:8]))
	if b, err := os.ReadFile(memo); err == nil {
		return strings.Fields(string(b)), nil
	}
	names, err := askAptClosure(ctx, reqs)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(memo), 0o755); err == nil {
		_ = writeAtomic(memo, func(w io.Writer) error { _, err := io.WriteString(w, strings.Join(names, "\n")+"\n"); return err })
	}
	return names, nil
}

func askAptClosure(ctx context.Context, reqs [][]string) ([]string, error) {
	empty, err := os.CreateTemp("", "stamp-empty-status-")
	if err != nil {
		return nil, err
	}
	empty.Close()
	defer os.Remove(empty.Name())
	return aptInstallClosure(ctx, []string{"-q", "-o", "Dir::State::status=" + empty.Name(), "-o", "APT::Get::Show-Versions=false"}, reqs)
}

// aptInstallClosure is the union, sorted, of what apt-get with the options
// aptOpts would install (without Recommends) for each request.
func aptInstallClosure(ctx context.Context, aptOpts []string, reqs [][]string) ([]string, error) {
	set := map[string]bool{}
	for _, req := range reqs {
		args := append(append([]string{}, aptOpts...), "-s", "install", "--no-install-recommends")
		out, err := exec.CommandContext(ctx, "apt-get", append(args, req...)...).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("apt-get -s install %s: %w\n%s(hint: apt-get update)", strings.Join(req, " "), err, out)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "Inst" {
				set[f[1]] = true
			}
		}
	}
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// cachedDebs returns the .deb of every named package from the deb cache,
// downloading what is missing.
func cachedDebs(ctx context.Context, names []string, logf func(string, ...any)) ([]string, error) {
	return resolveDebs(ctx, BaseOptions{Packages: names}, logf)
}

// repoKey makes (once) a throwaway signing key in a GnuPG home under dir.
func repoKey(ctx context.Context, dir string) (string, error) {
	if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
		return dir, nil
	}
	os.RemoveAll(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "gpg", "--batch", "--homedir", dir, "--passphrase", "",
		"--quick-gen-key", "stamp test repository <repo@stamp.invalid>", "ed25519", "sign", "never")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("gpg --quick-gen-key: %w\n%s", err, out)
	}
	return dir, os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644)
}

// BuildDebRepo lays out a repository in dir from debs: pool/main/*.deb,
// dists/stamp/main/binary-amd64/Packages{,.gz,.xz} by apt-ftparchive, a
// Release, and InRelease and Release.gpg signed with the key in gnupgHome,
// whose public part is written to dir/keyring.gpg.
func BuildDebRepo(ctx context.Context, dir string, debs []string, gnupgHome string) (*DebRepo, error) {
	return buildDebRepo(ctx, dir, debs, gnupgHome, false, "amd64")
}

// BuildDebRepoArch is BuildDebRepo for packages of another architecture:
// dists/stamp/main/binary-ARCH.
func BuildDebRepoArch(ctx context.Context, dir string, debs []string, gnupgHome, arch string) (*DebRepo, error) {
	return buildDebRepo(ctx, dir, debs, gnupgHome, false, arch)
}

// BuildFlatDebRepo lays out a flat repository in dir, as the Kubernetes
// project publishes its packages: amd64/*.deb, and Packages{,.gz,.xz},
// Release, InRelease and Release.gpg beside them in dir itself, read by
// apt as "deb URL /".
func BuildFlatDebRepo(ctx context.Context, dir string, debs []string, gnupgHome string) (*DebRepo, error) {
	return buildDebRepo(ctx, dir, debs, gnupgHome, true, "amd64")
}

func buildDebRepo(ctx context.Context, dir string, debs []string, gnupgHome string, flat bool, arch string) (*DebRepo, error) {
	poolRel, indexDir, relDir := "pool/main", filepath.Join(dir, "dists", "stamp", "main", "binary-"+arch), "dists/stamp"
	if flat {
		poolRel, indexDir, relDir = arch, dir, "."
	}
	pool := filepath.Join(dir, poolRel)
	for _, d := range []string{pool, indexDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	for _, d := range debs {
		if err := copyFile(d, filepath.Join(pool, filepath.Base(d))); err != nil {
			return nil, err
		}
	}
	run := func(stdout io.Writer, name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = stdout, &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, stderr.String())
		}
		return nil
	}
	var pk bytes.Buffer
	if err := run(&pk, "apt-ftparchive", "packages", poolRel); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(indexDir, "Packages"), pk.Bytes(), 0o644); err != nil {
		return nil, err
	}
	for _, c := range [][]string{{"gzip", "-9knf"}, {"xz", "-kf"}} {
		if err := run(io.Discard, c[0], append(c[1:], filepath.Join(indexDir, "Packages"))...); err != nil {
			return nil, err
		}
	}
	opts := []string{
		"-o", "APT::FTPArchive::Release::Origin=stamp-test",
		"-o", "APT::FTPArchive::Release::Architectures=" + arch,
	}
	if !flat {
		opts = append(opts,
			"-o", "APT::FTPArchive::Release::Suite=stamp",
			"-o", "APT::FTPArchive::Release::Codename=stamp",
			"-o", "APT::FTPArchive::Release::Components=main")
	}
	var rel bytes.Buffer
	if err := run(&rel, "apt-ftparchive", append(opts, "release", relDir)...); err != nil {
		return nil, err
	}
	dist := filepath.Join(dir, relDir)
	if err := os.WriteFile(filepath.Join(dist, "Release"), rel.Bytes(), 0o644); err != nil {
		return nil, err
	}
	gpg := []string{"--batch", "--homedir", gnupgHome, "--yes"}
	if err := run(io.Discard, "gpg", append(gpg, "--clearsign", "-o", filepath.Join(dist, "InRelease"), filepath.Join(dist, "Release"))...); err != nil {
		return nil, err
	}
	if err := run(io.Discard, "gpg", append(gpg, "-abs", "-o", filepath.Join(dist, "Release.gpg"), filepath.Join(dist, "Release"))...); err != nil {
		return nil, err
	}
	if err := run(io.Discard, "gpg", append(gpg, "--export", "-o", filepath.Join(dir, "keyring.gpg"))...); err != nil {
		return nil, err
	}
	if err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return os.Chmod(p, 0o755)
		}
		return os.Chmod(p, 0o644)
	}); err != nil {
		return nil, err
	}
	return loadDebRepoArch(dir, arch), nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// CopyDebRepo copies the repository into a fresh directory under
// TempDirFor65534, so a test may break it without touching the shared one.
func CopyDebRepo(t testing.TB, r *DebRepo) *DebRepo {
	t.Helper()
	dir := filepath.Join(TempDirFor65534(t), "repo")
	err := filepath.Walk(r.Dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(r.Dir, p)
		dst := filepath.Join(dir, rel)
		if fi.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if err := copyFile(p, dst); err != nil {
			return err
		}
		return os.Chmod(dst, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	c := *r
	c.Dir = dir
	c.Keyring = filepath.Join(dir, "keyring.gpg")
	return &c
}

// ServeDebRepo serves dir over HTTP on 127.0.0.1 until the test ends and
// returns the base URL.
func ServeDebRepo(t testing.TB, dir string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// AptSimulate runs apt-get install --simulate --no-install-recommends of
// pkgs against the repository (trusted through its keyring) and the dpkg
// status file status, with every apt directory private to the call, and
// returns "name=version" of what apt would install, sorted. An error
// carries apt's output.
func AptSimulate(t testing.TB, r *DebRepo, repoURL, status string, pkgs ...string) ([]string, error) {
	t.Helper()
	return aptSimulate(t, fmt.Sprintf("deb [signed-by=%s] %s %s %s\n", r.Keyring, repoURL, r.Suite, r.Component), status, pkgs...)
}

// aptSimulate is AptSimulate over the sources.list text src; an empty
// status stands for an empty system.
func aptSimulate(t testing.TB, src, status string, pkgs ...string) ([]string, error) {
	t.Helper()
	opts := aptUpdated(t, src, status)
	args := append(opts, "install", "--simulate", "--no-install-recommends")
	out, err := exec.Command("apt-get", append(args, pkgs...)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("apt-get install --simulate %s: %w\n%s", strings.Join(pkgs, " "), err, out)
	}
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		// Inst NAME (VERSION SUITE [ARCH])
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == "Inst" && strings.HasPrefix(f[2], "(") {
			got = append(got, f[1]+"="+strings.TrimPrefix(f[2], "("))
		}
	}
	sort.Strings(got)
	return got, nil
}

// AptDpkgCalls runs apt-get install --no-install-recommends of pkgs
// against the repository and the dpkg status file status (empty for an
// empty system) with Debug::pkgDpkgPm, so apt plans the whole install and
// prints each dpkg call instead of making it, and returns the calls: the
// dpkg action ("--unpack", "--configure", "--configure --pending") and the
// package names, in order. aptOpts are more apt-get options. Unpacks are listed by file, never through
// dpkg's --recursive directory, so their order shows.
func AptDpkgCalls(t testing.TB, r *DebRepo, status string, aptOpts []string, pkgs ...string) [][]string {
	t.Helper()
	opts := aptUpdated(t, fmt.Sprintf("deb [signed-by=%s] %s %s %s\n", r.Keyring, r.FileURL(), r.Suite, r.Component), status)
	args := append(append(opts, aptOpts...), "-o", "Debug::pkgDpkgPm=1", "-o", "Dpkg::Install::Recursive::force=true",
		"-o", "Dpkg::Use-Pty=0", "install", "--yes", "--no-install-recommends")
	out, err := exec.Command("apt-get", append(args, pkgs...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("apt-get install %s: %v\n%s", strings.Join(pkgs, " "), err, out)
	}
	var calls [][]string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || filepath.Base(f[0]) != "dpkg" {
			continue
		}
		var call []string
		for _, a := range f[1:] {
			switch {
			case a == "--unpack" || a == "--configure":
				call = append(call, a)
			case a == "--pending":
				call[0] += " --pending"
			case strings.HasPrefix(a, "-") || a == "--status-fd" || isDigits(a):
			case strings.HasSuffix(a, ".deb"):
				name, _, _ := strings.Cut(filepath.Base(a), "_")
				call = append(call, name)
			default:
				name, _, _ := strings.Cut(a, ":")
				call = append(call, name)
			}
		}
		if len(call) > 0 {
			calls = append(calls, call)
		}
	}
	if len(calls) == 0 {
		t.Fatalf("apt-get printed no dpkg call:\n%s", out)
	}
	return calls
}

func isDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s != ""
}

// aptUpdated makes apt a state of its own for the sources.list text src
// and the status file status (an empty system when ""), runs apt-get
// update, and returns the options that confine apt to it.
func aptUpdated(t testing.TB, src, status string) []string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"lists/partial", "cache/archives/partial", "etc/sources.list.d", "etc/preferences.d", "etc/apt.conf.d", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "sources.list"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if status == "" {
		status = filepath.Join(dir, "status")
		if err := os.WriteFile(status, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	opts := AptOptions(dir, status)
	if out, err := exec.Command("apt-get", append(opts, "update")...).CombinedOutput(); err != nil {
		t.Fatalf("apt-get update: %v\n%s", err, out)
	}
	return opts
}

// AptOptions are apt-get options that confine apt to dir (lists, cache,
// sources, logs) and the given dpkg status file, so it runs without root
// and without touching the host's apt state.
func AptOptions(dir, status string) []string {
	return []string{
		"-q",
		"-o", "Dir::State::status=" + status,
		"-o", "Dir::State::Lists=" + filepath.Join(dir, "lists"),
		"-o", "Dir::State::extended_states=" + filepath.Join(dir, "extended_states"),
		"-o", "Dir::Cache=" + filepath.Join(dir, "cache"),
		"-o", "Dir::Etc::sourcelist=" + filepath.Join(dir, "etc", "sources.list"),
		"-o", "Dir::Etc::sourceparts=" + filepath.Join(dir, "etc", "sources.list.d"),
		"-o", "Dir::Etc::preferencesparts=" + filepath.Join(dir, "etc", "preferences.d"),
		"-o", "Dir::Etc::parts=" + filepath.Join(dir, "etc", "apt.conf.d"),
		"-o", "Dir::Log=" + filepath.Join(dir, "log"),
		"-o", "APT::Architecture=amd64",
		"-o", "APT::Architectures=amd64",
		"-o", "APT::Sandbox::User=root",
		"-o", "Debug::NoLocking=true",
		"-o", "APT::Get::Show-Versions=false",
	}
}

// DpkgBase is a base tarball that can run real maintainer scripts, and a
// second tarball holding its dpkg database: a status listing every base
// package as installed, and the directories dpkg and update-alternatives
// expect. Stamp's tests apply both as layers; the oracle extracts both.
type DpkgBase struct {
	Tarball  string   // the base (BaseWith DpkgBasePackages)
	DB       string   // var/lib/dpkg and friends, a plain tar
	Status   string   // the status file alone, for apt --simulate
	Packages []string // what the status lists, sorted
}

// DpkgBaseFor builds (once per machine) the base with a dpkg database.
func DpkgBaseFor(t testing.TB) *DpkgBase {
	t.Helper()
	return dpkgBaseOf(t, DpkgBasePackages, nil, ".dpkgdb6.tar")
}

// statusFor writes a dpkg status listing every .deb as installed, sorted
// by package name as dpkg writes it.
func statusFor(ctx context.Context, debs []string) ([]byte, error) {
	type entry struct{ name, para string }
	var ents []entry
	for _, d := range debs {
		out, err := exec.CommandContext(ctx, "dpkg-deb", "-f", d).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: dpkg-deb -f: %w", d, err)
		}
		lines := strings.SplitAfter(string(out), "\n")
		var b strings.Builder
		name := ""
		for i, l := range lines {
			if l == "" {
				continue
			}
			b.WriteString(l)
			if i == 0 {
				name = strings.TrimSpace(strings.TrimPrefix(l, "Package:"))
				b.WriteString("Status: install ok installed\n")
			}
		}
		ents = append(ents, entry{name, b.String()})
	}
	sort.Slice(ents, func(i, j int) bool { return ents[i].name < ents[j].name })
	var b bytes.Buffer
	for _, e := range ents {
		b.WriteString(e.para)
		b.WriteString("\n")
	}
	return b.Bytes(), nil
}

// infoFor makes the info files dpkg keeps for each package: PKG.list (the
// data.tar members) and every control file but control itself, named
// PKG:ARCH for Multi-Arch: same packages; and the trigger interests dpkg
// records when it configures them.
func infoFor(ctx context.Context, debs []string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, d := range debs {
		fields, err := exec.CommandContext(ctx, "dpkg-deb", "-f", d, "Package", "Architecture", "Multi-Arch").Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d, err)
		}
		f := map[string]string{}
		for _, l := range strings.Split(string(fields), "\n") {
			if k, v, ok := strings.Cut(l, ": "); ok {
				f[k] = v
			}
		}
		name := f["Package"]
		if f["Multi-Arch"] == "same" {
			name += ":" + f["Architecture"]
		}
		members, err := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", d).Output()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d, err)
		}
		ents, err := ReadTarStream(bytes.NewReader(members))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d, err)
		}
		var list bytes.Buffer
		for _, e := range ents {
			n := e.Name
			if n == "/" {
				n = "/."
			}
			list.WriteString(n + "\n")
		}
		out["var/lib/dpkg/info/"+name+".list"] = list.Bytes()
		tmp, err := os.MkdirTemp("", "stamp-ctrl-")
		if err != nil {
			return nil, err
		}
		err = exec.CommandContext(ctx, "dpkg-deb", "-e", d, tmp).Run()
		if err == nil {
			// dpkg keeps every control file but control itself: the
			// maintainer scripts (libc-bin's postinst runs ldconfig when
			// its trigger fires), conffiles, shlibs, symbols, triggers.
			ents, _ := os.ReadDir(tmp)
			for _, e := range ents {
				if e.Name() == "control" || !e.Type().IsRegular() {
					continue
				}
				if b, rerr := os.ReadFile(filepath.Join(tmp, e.Name())); rerr == nil {
					out["var/lib/dpkg/info/"+name+"."+e.Name()] = b
				}
			}
			// dpkg records the triggers a configured package is
			// interested in: named ones (libc-bin's ldconfig) in a file
			// each, file triggers in File. Without them dpkg would take
			// every interest for new and fire it, as on a first install.
			if b, rerr := os.ReadFile(filepath.Join(tmp, "triggers")); rerr == nil {
				for _, line := range strings.Split(string(b), "\n") {
					f := strings.Fields(line)
					if len(f) < 2 {
						continue
					}
					who := strings.SplitN(name, ":", 2)[0]
					switch f[0] {
					case "interest", "interest-await":
					case "interest-noawait":
						who += "/noawait"
					default:
						continue
					}
					if strings.HasPrefix(f[1], "/") {
						out["var/lib/dpkg/triggers/File"] = append(out["var/lib/dpkg/triggers/File"], f[1]+" "+who+"\n"...)
					} else {
						out["var/lib/dpkg/triggers/"+f[1]] = append(out["var/lib/dpkg/triggers/"+f[1]], who+"\n"...)
					}
				}
			}
		}
		os.RemoveAll(tmp)
		if err != nil {
			return nil, fmt.Errorf("%s: dpkg-deb -e: %w", d, err)
		}
	}
	out["var/lib/dpkg/info/format"] = []byte("1\n")
	return out, nil
}

// writeDpkgDB writes the tar of the dpkg database directories, status and
// info files.
func writeDpkgDB(w io.Writer, status []byte, info map[string][]byte) error {
	tw := tar.NewWriter(w)
	mt := DefaultEpoch
	dirs := []string{"etc/", "etc/alternatives/", "var/", "var/lib/", "var/lib/dpkg/", "var/lib/dpkg/alternatives/",
		"var/lib/dpkg/info/", "var/lib/dpkg/triggers/", "var/lib/dpkg/updates/"}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: mt, Format: tar.FormatPAX}); err != nil {
			return err
		}
	}
	files := []struct {
		name string
		data []byte
	}{
		{"var/lib/dpkg/available", nil},
		{"var/lib/dpkg/status", status},
	}
	names := make([]string, 0, len(info))
	for n := range info {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		files = append(files, struct {
			name string
			data []byte
		}{n, info[n]})
	}
	for _, f := range files {
		mode := int64(0o644)
		switch path.Ext(f.name) {
		case ".preinst", ".postinst", ".prerm", ".postrm", ".config":
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: f.name, Mode: mode, Size: int64(len(f.data)), ModTime: mt, Format: tar.FormatPAX}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	return tw.Close()
}

// FlatDebRepoFor lays out r's packages and the .deb files extra again as
// a flat repository (see BuildFlatDebRepo), signed with the same key, in a
// fresh directory under TempDirFor65534.
func FlatDebRepoFor(t testing.TB, r *DebRepo, extra ...string) *DebRepo {
	t.Helper()
	return relaidDebRepo(t, r, extra, true)
}

// DebRepoWith lays out r's packages and the .deb files extra again as a
// repository like r, signed with the same key, in a fresh directory under
// TempDirFor65534.
func DebRepoWith(t testing.TB, r *DebRepo, extra ...string) *DebRepo {
	t.Helper()
	return relaidDebRepo(t, r, extra, false)
}

func relaidDebRepo(t testing.TB, r *DebRepo, extra []string, flat bool) *DebRepo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	gnupg, err := sharedRepoKey(ctx)
	if err != nil {
		t.Fatalf("repository: signing key: %v", err)
	}
	var debs []string
	for _, d := range r.Debs {
		debs = append(debs, filepath.Join(r.Dir, d))
	}
	sort.Strings(debs)
	debs = append(debs, extra...)
	out, err := buildDebRepo(ctx, filepath.Join(TempDirFor65534(t), "deb"), debs, gnupg, flat, "amd64")
	if err != nil {
		t.Fatalf("repository: %v", err)
	}
	return out
}
