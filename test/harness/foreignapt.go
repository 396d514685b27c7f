package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// ForeignApt is an apt state of its own for another architecture's
// packages: the host's sources (and keyrings), read for arm64 instead of
// the host's architecture, with lists, cache and downloads under the test
// cache. The host's apt state is never touched, and no mirror is named
// here: the sources are the host's.
type ForeignApt struct {
	Arch string
	Dir  string // lists/, cache/, status, debs/
}

// foreignListsMaxAge is how long fetched lists are used before apt-get
// update runs again: long enough that a day of test runs downloads them once.
const foreignListsMaxAge = 24 * time.Hour

// ForeignAptFor returns the apt state for arch, running apt-get update
// when its lists are missing or older than a day.
func ForeignAptFor(ctx context.Context, arch string) (*ForeignApt, error) {
	a := &ForeignApt{Arch: arch, Dir: filepath.Join(cacheRoot(), "apt-"+arch)}
	for _, d := range []string{"lists/partial", "cache/archives/partial", "log", "debs"} {
		if err := os.MkdirAll(filepath.Join(a.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("apt state for %s: %w", arch, err)
		}
	}
	if err := os.WriteFile(filepath.Join(a.Dir, "status"), nil, 0o644); err != nil {
		return nil, fmt.Errorf("apt state for %s: %w", arch, err)
	}
	unlock, err := lockFile(filepath.Join(a.Dir, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	stamp := filepath.Join(a.Dir, "updated")
	if fi, err := os.Stat(stamp); err == nil && time.Since(fi.ModTime()) < foreignListsMaxAge {
		return a, nil
	}
	if out, err := exec.CommandContext(ctx, "apt-get", append(a.Options(), "update")...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("apt-get update for %s: %w\n%s", arch, err, out)
	}
	return a, os.WriteFile(stamp, nil, 0o644)
}

// Options confine apt-get and apt-cache to the state: the host's sources,
// this architecture only, an empty dpkg status.
func (a *ForeignApt) Options() []string {
	return []string{
		"-q",
		"-o", "Dir::State::status=" + filepath.Join(a.Dir, "status"),
		"-o", "Dir::State::Lists=" + filepath.Join(a.Dir, "lists"),
		"-o", "Dir::State::extended_states=" + filepath.Join(a.Dir, "extended_states"),
		"-o", "Dir::Cache=" + filepath.Join(a.Dir, "cache"),
		"-o", "Dir::Log=" + filepath.Join(a.Dir, "log"),
		"-o", "APT::Architecture=" + a.Arch,
		"-o", "APT::Architectures=" + a.Arch,
		"-o", "APT::Sandbox::User=root",
		"-o", "Debug::NoLocking=true",
		"-o", "APT::Get::Show-Versions=false",
	}
}

// Closure is what installing each request (without Recommends) brings onto
// an empty system of this architecture, the union sorted.
func (a *ForeignApt) Closure(ctx context.Context, reqs ...[]string) ([]string, error) {
	return aptInstallClosure(ctx, a.Options(), reqs)
}

// Debs returns the .deb of every named package from this state's deb
// cache, downloading what is missing.
func (a *ForeignApt) Debs(ctx context.Context, pkgs []string, logf func(string, ...any)) ([]string, error) {
	cache := filepath.Join(a.Dir, "debs")
	unlock, err := lockFile(filepath.Join(cache, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	return debsIn(ctx, cache, pkgs, a.Options(), logf)
}

// ForeignDebRepoFor returns a signed repository of arch's packages: what
// the requests bring onto an empty system of that architecture, fetched
// through ForeignAptFor and built once per machine like DebRepoFor's. It is
// shared: copy it (CopyDebRepo) before changing it.
func ForeignDebRepoFor(t testing.TB, arch string, reqs ...[]string) *DebRepo {
	t.Helper()
	RequireTools(t, "apt-get", "apt-ftparchive", "gpg", "dpkg-deb", "dpkg")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	apt, err := ForeignAptFor(ctx, arch)
	if err != nil {
		t.Fatalf("debrepo %s: %v", arch, err)
	}
	names, err := apt.Closure(ctx, reqs...)
	if err != nil {
		t.Fatalf("debrepo %s: %v", arch, err)
	}
	debs, err := apt.Debs(ctx, names, t.Logf)
	if err != nil {
		t.Fatalf("debrepo %s: %v", arch, err)
	}
	root := filepath.Join(cacheRoot(), "debrepo")
	for _, d := range []string{root, filepath.Join(cacheRoot(), "base")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// debRepoOf's lock: the signing key in root/gnupg is made once, by
	// whichever repository comes first.
	unlock, err := lockFile(filepath.Join(cacheRoot(), "base", ".lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	h := sha256.New()
	fmt.Fprint(h, debRepoFormat)
	for _, d := range debs {
		fmt.Fprintf(h, "\x00%s", filepath.Base(d))
	}
	dir := filepath.Join(root, arch+"-"+hex.EncodeToString(h.Sum(nil)[:8]))
	if _, err := os.Stat(filepath.Join(dir, "dists", "stamp", "InRelease")); err == nil {
		return loadDebRepoArch(dir, arch)
	}
	gnupg, err := repoKey(ctx, filepath.Join(root, "gnupg"))
	if err != nil {
		t.Fatalf("debrepo %s: signing key: %v", arch, err)
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	if _, err := BuildDebRepoArch(ctx, tmp, debs, gnupg, arch); err != nil {
		os.RemoveAll(tmp)
		t.Fatalf("debrepo %s: %v", arch, err)
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		t.Fatal(err)
	}
	t.Logf("debrepo: built %s with %d %s packages", dir, len(debs), arch)
	return loadDebRepoArch(dir, arch)
}
