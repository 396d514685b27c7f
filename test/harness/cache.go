package harness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// baseFormat changes whenever BuildBase would write different bytes for the
// same packages, so stale cached tarballs are never reused.
const baseFormat = "stamp-test-base/1"

// Base returns the path of the default base tarball (.tar.zst), built once
// per machine and cached. Parallel test binaries serialise on a lock file.
// It fails, never skips, when the base cannot be built: CI must run
// test/scripts/deps.sh first.
func Base(t testing.TB) string {
	t.Helper()
	return BaseWith(t, BaseOptions{})
}

// BaseWith is Base for other packages, epochs or layouts. Output, DebDir and
// Logf in opts are ignored: the result lives in the cache.
func BaseWith(t testing.TB, opts BaseOptions) string {
	t.Helper()
	RequireTools(t, "apt-get", "dpkg-deb", "dpkg")
	if opts.Packages == nil {
		opts.Packages = DefaultPackages
	}
	if opts.Epoch.IsZero() {
		opts.Epoch = DefaultEpoch
	}
	opts.DebDir = ""
	opts.Logf = t.Logf

	dir := filepath.Join(cacheRoot(), "base")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("base cache: %v", err)
	}
	// One lock for the whole cache: the deb cache is shared by every key.
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		t.Fatalf("base cache lock: %v", err)
	}
	defer unlock()

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	const hint = "building the base fixture (needs apt-get reaching Debian; run test/scripts/deps.sh)"
	debs, err := resolveDebs(ctx, opts, opts.Logf)
	if err != nil {
		t.Fatalf("%s: %v", hint, err)
	}
	// Keyed by the exact .deb files, so a Debian point release that brings a
	// newer deb into the cache brings a new base with it.
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%d\x00%t", baseFormat, opts.Epoch.Unix(), opts.SplitUsr)
	for _, d := range debs {
		fmt.Fprintf(h, "\x00%s", filepath.Base(d))
	}
	out := filepath.Join(dir, hex.EncodeToString(h.Sum(nil)[:8])+".tar.zst")
	if fi, err := os.Stat(out); err == nil && fi.Size() > 0 {
		return out
	}
	opts.Output = out
	if err := buildFromDebs(ctx, opts, debs, opts.Logf); err != nil {
		t.Fatalf("%s: %v", hint, err)
	}
	return out
}

// lockFile takes an exclusive flock on name, waiting for other holders.
func lockFile(name string) (func(), error) {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
