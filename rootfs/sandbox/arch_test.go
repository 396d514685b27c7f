package sandbox

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Programs of the machine's own architecture always run; another's only
// through an enabled binfmt_misc handler with the F flag.
func TestCheckArch(t *testing.T) {
	other := map[string]string{"amd64": "arm64", "arm64": "amd64"}[runtime.GOARCH]
	if other == "" {
		t.Fatalf("no other architecture known for %s", runtime.GOARCH)
	}
	dir := t.TempDir()
	if err := checkArch(runtime.GOARCH, dir); err != nil {
		t.Errorf("the machine's own architecture: %v", err)
	}
	entry := filepath.Join(dir, qemuNames[other])
	for _, c := range []struct {
		name, content string
		ok            bool
	}{
		{"no handler", "", false},
		{"disabled", "disabled\ninterpreter /usr/libexec/qemu-binfmt/x\nflags: OCF\n", false},
		{"without F", "enabled\ninterpreter /usr/libexec/qemu-binfmt/x\nflags: OC\n", false},
		{"enabled with F", "enabled\ninterpreter /usr/libexec/qemu-binfmt/x\nflags: OCF\noffset 0\n", true},
	} {
		os.Remove(entry)
		if c.content != "" {
			if err := os.WriteFile(entry, []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		err := checkArch(other, dir)
		if c.ok != (err == nil) {
			t.Errorf("%s: got %v", c.name, err)
		}
		if err != nil && !strings.Contains(err.Error(), "programs of the "+other+" image") {
			t.Errorf("%s: the error does not name the architecture: %v", c.name, err)
		}
	}
	if err := checkArch("s390x", dir); err == nil {
		t.Error("s390x: want an error")
	}
}
