// Package harness holds what the tests of every package share: a base root
// filesystem built from real Debian packages, an unprivileged runner, a tar
// reader for round-trip comparisons and checks for the host tools a test needs.
// It imports "testing" and so is for tests and test commands only.
package harness

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// DefaultPackages is the base package set: small (about 45 MB unpacked) yet
// a real system with a shell, a libc, a setuid binary and one that needs a
// file capability. The libraries after libc6 are what bash and coreutils
// link against, so a chroot into the base runs them.
var DefaultPackages = []string{
	"base-files", "base-passwd", "bash", "dash", "coreutils", "libc6",
	"libtinfo6", "libacl1", "libattr1", "libselinux1", "libpcre2-8-0", "libgmp10",
	"busybox-static", "iputils-ping", "passwd",
}

// DefaultEpoch is the mtime ceiling when neither the caller nor
// SOURCE_DATE_EPOCH gives one.
var DefaultEpoch = time.Unix(1700000000, 0).UTC()

// BaseOptions says how to build a base tarball.
type BaseOptions struct {
	// Output is the tarball to write; its extension picks the compression
	// (.tar, .tar.gz, .tar.zst, .tar.xz). It appears atomically.
	Output string
	// Packages are merged in this order; a later package replaces the paths of
	// an earlier one. Nil means DefaultPackages, or every .deb in DebDir when
	// DebDir is set.
	Packages []string
	// DebDir, when set, is where the .deb files are taken from; nothing is
	// downloaded.
	DebDir string
	// CacheDir keeps downloaded .deb files across runs. Empty means DebCacheDir().
	CacheDir string
	// Epoch clamps every mtime. Zero means DefaultEpoch.
	Epoch time.Time
	// SplitUsr keeps /bin, /sbin and /lib as real directories. By default they
	// are symlinks into /usr, as on every Debian system since bookworm.
	SplitUsr bool
	// Logf, when set, receives progress lines.
	Logf func(format string, args ...any)
}

// DebCacheDir is where downloaded .deb files are kept by default.
func DebCacheDir() string {
	return filepath.Join(cacheRoot(), "debs")
}

func cacheRoot() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		openToNobody(d)
		return filepath.Join(d, "stamp-test")
	}
	if os.Geteuid() == 0 {
		return "/var/cache/stamp-test"
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "stamp-test")
	}
	return filepath.Join(os.TempDir(), "stamp-test-cache")
}

// openToNobody lets uid 65534 pass through dir when root runs the tests
// with a cache home of its own, such as XDG_CACHE_HOME=$(mktemp -d), which
// is 0700: the unprivileged builds read the repositories and bases the
// harness keeps there. Only search permission is added; nothing under dir
// becomes listable by it.
func openToNobody(dir string) {
	if os.Geteuid() != 0 {
		return
	}
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() && fi.Mode().Perm()&0o001 == 0 {
		_ = os.Chmod(dir, fi.Mode().Perm()|0o001)
	}
}

// EpochFromEnv returns SOURCE_DATE_EPOCH when it is set and valid, else DefaultEpoch.
func EpochFromEnv() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return DefaultEpoch, nil
	}
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("SOURCE_DATE_EPOCH=%q: not a non-negative integer", s)
	}
	return time.Unix(n, 0).UTC(), nil
}

// BuildBase writes a base root filesystem tarball merged from real Debian
// packages plus the synthetic entries a real base has but an unprivileged
// extraction cannot make (see addFixtures). The same .deb files and options
// always give the same bytes.
func BuildBase(ctx context.Context, opts BaseOptions) error {
	if opts.Output == "" {
		return errors.New("BuildBase: no output path")
	}
	if opts.Epoch.IsZero() {
		opts.Epoch = DefaultEpoch
	}
	logf := opts.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	debs, err := resolveDebs(ctx, opts, logf)
	if err != nil {
		return err
	}
	return buildFromDebs(ctx, opts, debs, logf)
}

func buildFromDebs(ctx context.Context, opts BaseOptions, debs []string, logf func(string, ...any)) error {
	m := newMerge(opts.Epoch, !opts.SplitUsr)
	for _, deb := range debs {
		if err := m.addDeb(ctx, deb); err != nil {
			return err
		}
	}
	m.finishUsrMerge()
	if err := addFixtures(m); err != nil {
		return err
	}
	logf("writing %s (%d entries from %d packages)", opts.Output, len(m.entries), len(debs))
	return writeAtomic(opts.Output, func(w io.Writer) error {
		cw, err := compressWriter(w, opts.Output)
		if err != nil {
			return err
		}
		if err := m.write(cw); err != nil {
			return err
		}
		return cw.Close()
	})
}

// resolveDebs returns the .deb file of every package in merge order,
// downloading into the cache what is missing.
func resolveDebs(ctx context.Context, opts BaseOptions, logf func(string, ...any)) ([]string, error) {
	if opts.DebDir != "" {
		if opts.Packages == nil {
			debs, err := filepath.Glob(filepath.Join(opts.DebDir, "*.deb"))
			if err != nil {
				return nil, err
			}
			if len(debs) == 0 {
				return nil, fmt.Errorf("%s: no .deb files", opts.DebDir)
			}
			sort.Strings(debs)
			return debs, nil
		}
		var debs []string
		for _, p := range opts.Packages {
			f, err := findDeb(ctx, opts.DebDir, p)
			if err != nil {
				return nil, err
			}
			if f == "" {
				return nil, fmt.Errorf("%s: no .deb for package %q", opts.DebDir, p)
			}
			debs = append(debs, f)
		}
		return debs, nil
	}

	pkgs := opts.Packages
	if pkgs == nil {
		pkgs = DefaultPackages
	}
	cache := opts.CacheDir
	if cache == "" {
		cache = DebCacheDir()
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, fmt.Errorf("deb cache: %w", err)
	}
	return debsIn(ctx, cache, pkgs, nil, logf)
}

// debsIn returns the .deb of every named package from the deb cache dir
// cache, downloading what is missing with apt-get and the options
// aptOpts (the host's apt when there are none).
func debsIn(ctx context.Context, cache string, pkgs, aptOpts []string, logf func(string, ...any)) ([]string, error) {
	var missing []string
	for _, p := range pkgs {
		f, err := findDeb(ctx, cache, p)
		if err != nil {
			return nil, err
		}
		if f == "" {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		logf("downloading %s into %s", strings.Join(missing, " "), cache)
		if err := aptDownload(ctx, cache, missing, aptOpts); err != nil {
			return nil, err
		}
	}
	debs := make([]string, 0, len(pkgs))
	for _, p := range pkgs {
		f, err := findDeb(ctx, cache, p)
		if err != nil {
			return nil, err
		}
		if f == "" {
			return nil, fmt.Errorf("%s: apt-get download gave no .deb for %q", cache, p)
		}
		debs = append(debs, f)
	}
	return debs, nil
}

// findDeb returns the newest .deb of pkg in dir, or "" when there is none.
// A cache that outlived a Debian point release holds several versions.
func findDeb(ctx context.Context, dir, pkg string) (string, error) {
	// Package names cannot hold '_', so this never matches another package.
	found, err := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if err != nil || len(found) == 0 {
		return "", err
	}
	sort.Strings(found)
	best, bestVer := found[0], ""
	for _, f := range found {
		out, err := exec.CommandContext(ctx, "dpkg-deb", "-f", f, "Version").Output()
		if err != nil {
			return "", fmt.Errorf("%s: dpkg-deb -f: %w", f, err)
		}
		v := strings.TrimSpace(string(out))
		if bestVer == "" {
			best, bestVer = f, v
			continue
		}
		if exec.CommandContext(ctx, "dpkg", "--compare-versions", v, "gt", bestVer).Run() == nil {
			best, bestVer = f, v
		}
	}
	return best, nil
}

// aptDownload fetches pkgs into cache through a scratch directory, so a
// failed run never leaves a partial .deb under a name findDeb would take.
func aptDownload(ctx context.Context, cache string, pkgs, aptOpts []string) error {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("apt-get not found: the base fixture needs Debian's apt (run test/scripts/deps.sh): %w", err)
	}
	tmp, err := os.MkdirTemp(cache, ".download-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	args := append(append([]string{}, aptOpts...), "download", "-q")
	if os.Geteuid() == 0 {
		// As root apt drops to _apt for downloads, which cannot write a
		// directory that root made 0700; stay root instead.
		args = append(args, "-o", "APT::Sandbox::User=root")
	}
	args = append(args, pkgs...)
	cmd := exec.CommandContext(ctx, "apt-get", args...)
	cmd.Dir = tmp
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("apt-get download %s: %w\n%s(hint: apt-get update, or pass the .deb files with -debs)",
			strings.Join(pkgs, " "), err, out.String())
	}
	got, err := filepath.Glob(filepath.Join(tmp, "*.deb"))
	if err != nil {
		return err
	}
	for _, f := range got {
		if err := os.Rename(f, filepath.Join(cache, filepath.Base(f))); err != nil {
			return err
		}
	}
	return nil
}

// writeAtomic writes name through a temp file in the same directory and
// renames it into place only when fill succeeded.
func writeAtomic(name string, fill func(io.Writer) error) error {
	dir := filepath.Dir(name)
	f, err := os.CreateTemp(dir, "."+filepath.Base(name)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := fill(f); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := os.Rename(tmp, name); err != nil {
		return err
	}
	ok = true
	return nil
}

// merge is the in-memory union of the packages' data members, keyed by clean
// relative path ("." for the root).
type merge struct {
	epoch   time.Time
	usr     bool // merged-/usr: /bin, /sbin, /lib* live under /usr
	entries map[string]*member
	moved   map[string]bool // top-level directories folded into /usr
}

type member struct {
	hdr  tar.Header
	data []byte
}

func newMerge(epoch time.Time, usrMerge bool) *merge {
	return &merge{epoch: epoch, usr: usrMerge, entries: map[string]*member{}, moved: map[string]bool{}}
}

// usrDirs are the top-level directories a merged-/usr system turns into symlinks.
var usrDirs = map[string]bool{"bin": true, "sbin": true, "lib": true, "lib32": true, "lib64": true, "libx32": true}

// key turns a member name into the merge key, folding /bin and friends into /usr.
func (m *merge) key(name string) (string, error) {
	k := strings.TrimSuffix(strings.TrimPrefix(strings.TrimPrefix(name, "./"), "/"), "/")
	if k == "" || k == "." {
		return ".", nil
	}
	for _, c := range strings.Split(k, "/") {
		if c == "" || c == "." || c == ".." {
			return "", fmt.Errorf("member %q is not a clean path", name)
		}
	}
	if m.usr {
		top, _, _ := strings.Cut(k, "/")
		if usrDirs[top] {
			m.moved[top] = true
			k = "usr/" + k
		}
	}
	return k, nil
}

func (m *merge) addDeb(ctx context.Context, deb string) error {
	cmd := exec.CommandContext(ctx, "dpkg-deb", "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: dpkg-deb: %w", deb, err)
	}
	readErr := m.addTar(out)
	if readErr != nil {
		// Drain so dpkg-deb does not block on a full pipe before Wait.
		_, _ = io.Copy(io.Discard, out)
	}
	waitErr := cmd.Wait()
	if readErr != nil {
		return fmt.Errorf("%s: %w", deb, readErr)
	}
	if waitErr != nil {
		return fmt.Errorf("%s: dpkg-deb --fsys-tarfile: %w: %s", deb, waitErr, stderr.String())
	}
	return nil
}

func (m *merge) addTar(r io.Reader) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		k, err := m.key(h.Name)
		if err != nil {
			return err
		}
		nh := tar.Header{
			Typeflag: h.Typeflag,
			Mode:     h.Mode & 0o7777,
			Uid:      h.Uid,
			Gid:      h.Gid,
			ModTime:  h.ModTime,
			Devmajor: h.Devmajor,
			Devminor: h.Devminor,
		}
		var data []byte
		switch h.Typeflag {
		case tar.TypeReg:
			if data, err = io.ReadAll(tr); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		case tar.TypeLink:
			if nh.Linkname, err = m.key(h.Linkname); err != nil {
				return err
			}
		case tar.TypeSymlink:
			nh.Linkname = h.Linkname
		case tar.TypeDir, tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		default:
			return fmt.Errorf("%s: unsupported tar type %q", h.Name, h.Typeflag)
		}
		for rk, rv := range h.PAXRecords {
			if strings.HasPrefix(rk, "SCHILY.xattr.") {
				if nh.PAXRecords == nil {
					nh.PAXRecords = map[string]string{}
				}
				nh.PAXRecords[rk] = rv
			}
		}
		m.put(k, nh, data)
	}
}

// put adds or replaces the entry at key k. A non-directory replacing a
// directory takes the directory's subtree with it, as a fresh unpack would.
func (m *merge) put(k string, h tar.Header, data []byte) {
	if old, ok := m.entries[k]; ok && old.hdr.Typeflag == tar.TypeDir && h.Typeflag != tar.TypeDir {
		prefix := k + "/"
		for p := range m.entries {
			if strings.HasPrefix(p, prefix) {
				delete(m.entries, p)
			}
		}
	}
	if h.ModTime.IsZero() || h.ModTime.After(m.epoch) {
		h.ModTime = m.epoch
	}
	h.ModTime = h.ModTime.Truncate(time.Second)
	if h.Typeflag == tar.TypeReg {
		h.Size = int64(len(data))
	}
	m.entries[k] = &member{hdr: h, data: data}
}

// finishUsrMerge makes the symlinks that stand for the folded directories.
// bin, sbin and lib always exist on a merged system, whatever the packages held.
func (m *merge) finishUsrMerge() {
	if !m.usr {
		return
	}
	for _, d := range []string{"bin", "sbin", "lib"} {
		m.moved[d] = true
	}
	for d := range m.moved {
		m.put(d, tar.Header{Typeflag: tar.TypeSymlink, Mode: 0o777, Linkname: "usr/" + d}, nil)
	}
}

// ensureDir adds k and its missing parents as root-owned 0755 directories.
func (m *merge) ensureDir(k string) {
	if k == "." || k == "" {
		return
	}
	m.ensureDir(path.Dir(k))
	if _, ok := m.entries[k]; !ok {
		m.put(k, tar.Header{Typeflag: tar.TypeDir, Mode: 0o755}, nil)
	}
}

// add puts a fixture entry, creating its parent directories.
func (m *merge) add(k string, h tar.Header, data []byte) {
	m.ensureDir(path.Dir(k))
	m.put(k, h, data)
}

// write emits the merge as one sorted tar stream. Hard links are grouped so
// the first name in sorted order carries the content and the others link to
// it, whichever name the package made the link.
func (m *merge) write(w io.Writer) error {
	keys := make([]string, 0, len(m.entries))
	for k := range m.entries {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	// Each link resolves to one regular file, so grouping by that file
	// gives disjoint groups.
	groups := map[string][]string{}
	for _, k := range keys {
		if m.entries[k].hdr.Typeflag != tar.TypeLink {
			continue
		}
		t, err := m.linkTarget(k)
		if err != nil {
			return err
		}
		if groups[t] == nil {
			groups[t] = []string{t}
		}
		groups[t] = append(groups[t], k)
	}
	leader := map[string]string{} // group member -> first name in sorted order
	source := map[string]string{} // group member -> the regular file
	for t, g := range groups {
		first := g[0]
		for _, k := range g {
			first = min(first, k)
		}
		for _, k := range g {
			leader[k], source[k] = first, t
		}
	}

	tw := tar.NewWriter(w)
	for _, k := range keys {
		e := m.entries[k]
		h := e.hdr
		h.Name = tarName(k, h.Typeflag == tar.TypeDir)
		h.Format = tar.FormatPAX
		data := e.data
		if first, ok := leader[k]; ok {
			src := m.entries[source[k]]
			h = src.hdr
			h.Name = tarName(k, false)
			h.Format = tar.FormatPAX
			data = src.data
			if first != k {
				h.Typeflag, h.Linkname, h.Size, data = tar.TypeLink, tarName(first, false), 0, nil
			}
		}
		if err := tw.WriteHeader(&h); err != nil {
			return fmt.Errorf("%s: %w", h.Name, err)
		}
		if len(data) > 0 {
			if _, err := tw.Write(data); err != nil {
				return fmt.Errorf("%s: %w", h.Name, err)
			}
		}
	}
	return tw.Close()
}

// linkTarget follows a hard link (through other hard links) to the regular file it names.
func (m *merge) linkTarget(k string) (string, error) {
	seen := map[string]bool{}
	cur := k
	for {
		e, ok := m.entries[cur]
		if !ok {
			return "", fmt.Errorf("hard link /%s: target /%s is missing", k, cur)
		}
		switch e.hdr.Typeflag {
		case tar.TypeReg:
			return cur, nil
		case tar.TypeLink:
			if seen[cur] {
				return "", fmt.Errorf("hard link /%s: loop", k)
			}
			seen[cur] = true
			cur = e.hdr.Linkname
		default:
			return "", fmt.Errorf("hard link /%s: target /%s is not a regular file", k, cur)
		}
	}
}

// tarName spells a key the way debootstrap and mmdebstrap tarballs do.
func tarName(k string, dir bool) string {
	if k == "." {
		return "./"
	}
	if dir {
		return "./" + k + "/"
	}
	return "./" + k
}
