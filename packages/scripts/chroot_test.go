package scripts

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A tree whose /proc leads elsewhere is refused before anything is mounted:
// the mount would follow the symlink.
func TestChrootRefusesSymlinkedMountPoints(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"dev", "usr/sbin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(dir, "proc")); err != nil {
		t.Fatal(err)
	}
	c := &Chroot{Dir: dir, Epoch: time.Unix(0, 0)}
	if err := c.probe(); err != nil {
		t.Skipf("no chroot on this machine: %v", err)
	}
	err := c.Run(context.Background(), "p", "postinst", nil, "/bin/true")
	if err == nil || !strings.Contains(err.Error(), "/proc is not a directory") {
		t.Fatalf("err = %v, want a refusal naming /proc", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "usr/sbin/policy-rc.d")); err == nil {
		t.Fatal("policy-rc.d was written for a run that was refused")
	}
}
