package harness

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Debs returns the .deb file of each named package, downloading into the
// deb cache what is missing, so a test that reads real packages names the
// ones it needs instead of hoping an earlier test run left them behind.
func Debs(t testing.TB, pkgs ...string) []string {
	t.Helper()
	RequireTools(t, "apt-get", "dpkg-deb", "dpkg")
	dir := filepath.Join(cacheRoot(), "base")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("deb cache: %v", err)
	}
	// The lock BaseWith takes: both write the same deb cache.
	unlock, err := lockFile(filepath.Join(dir, ".lock"))
	if err != nil {
		t.Fatalf("deb cache lock: %v", err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	debs, err := resolveDebs(ctx, BaseOptions{Packages: pkgs}, t.Logf)
	if err != nil {
		t.Fatalf("fetching %v (needs apt-get reaching Debian; run test/scripts/deps.sh): %v", pkgs, err)
	}
	return debs
}
