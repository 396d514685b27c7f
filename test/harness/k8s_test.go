package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestBuildDebReproducible builds the same package twice, with different
// umasks, and wants the same bytes, owned by root, with epoch mtimes.
func TestBuildDebReproducible(t *testing.T) {
	RequireTools(t, "dpkg-deb", "nice")
	host := filepath.Join(t.TempDir(), "tool")
	if err := os.WriteFile(host, []byte("#!/bin/sh\necho tool\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	spec := debSpec{name: "stamp-k8s-probe", version: "1.0-1.1", section: "admin", summary: "A probe",
		depends: []string{"iptables (>= 1.4.21)"},
		files: []debFile{{path: "/usr/bin/tool", mode: 0o755, from: host},
			{path: "/usr/lib/systemd/system/kubelet.service", mode: 0o644, content: kubeletService},
			{path: "/etc/default/kubelet", mode: 0o644, content: "KUBELET_EXTRA_ARGS=\n"}},
		conffiles: []string{"/etc/default/kubelet"},
		scripts:   map[string]string{"postinst": kubeletPostinst}}
	var sums []string
	for i, mask := range []int{0o022, 0o077} {
		old := umask(mask)
		deb, err := buildDeb(context.Background(), spec, filepath.Join(t.TempDir(), fmt.Sprint(i)))
		umask(old)
		if err != nil {
			t.Fatal(err)
		}
		sum, err := fileSHA256(deb)
		if err != nil {
			t.Fatal(err)
		}
		sums = append(sums, sum)
		list := exec.Command("dpkg-deb", "--contents", deb)
		list.Env = []string{"PATH=/usr/bin:/bin", "TZ=UTC"}
		out, err := list.Output()
		if err != nil {
			t.Fatal(err)
		}
		want := "-rw-r--r-- root/root        20 2023-11-14 22:13 ./etc/default/kubelet\n"
		if !strings.Contains(string(out), want) || !strings.Contains(string(out), "-rwxr-xr-x root/root") {
			t.Errorf("dpkg-deb --contents: want %q and an executable tool in\n%s", want, out)
		}
		f, err := exec.Command("dpkg-deb", "-f", deb, "Depends").Output()
		if err != nil || string(f) != "iptables (>= 1.4.21)\n" {
			t.Errorf("Depends: %q %v", f, err)
		}
	}
	if sums[0] != sums[1] {
		t.Errorf("two builds differ: %s %s", sums[0], sums[1])
	}
}

func umask(m int) int { return syscall.Umask(m) }
