package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
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

// aptSimulateFrom is AptSimulate over several repositories at once (each
// trusted through its keyring), from an empty dpkg status.
func aptSimulateFrom(t testing.TB, repos []*DebRepo, pkgs ...string) ([]string, error) {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"lists/partial", "cache/archives/partial", "etc/sources.list.d", "etc/preferences.d", "etc/apt.conf.d", "log"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var src strings.Builder
	for _, r := range repos {
		fmt.Fprintf(&src, "deb [signed-by=%s] %s %s %s\n", r.Keyring, r.FileURL(), r.Suite, r.Component)
	}
	if err := os.WriteFile(filepath.Join(dir, "etc", "sources.list"), []byte(src.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	status := filepath.Join(dir, "status")
	if err := os.WriteFile(status, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	opts := AptOptions(dir, status)
	if out, err := exec.Command("apt-get", append(opts, "update")...).CombinedOutput(); err != nil {
		t.Fatalf("apt-get update: %v\n%s", err, out)
	}
	args := append(opts, "install", "--simulate", "--no-install-recommends")
	out, err := exec.Command("apt-get", append(args, pkgs...)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("apt-get install --simulate %s: %w\n%s", strings.Join(pkgs, " "), err, out)
	}
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) >= 3 && f[0] == "Inst" && strings.HasPrefix(f[2], "(") {
			got = append(got, f[1]+"="+strings.TrimPrefix(f[2], "("))
		}
	}
	sort.Strings(got)
	return got, nil
}

func umask(m int) int { return syscall.Umask(m) }
