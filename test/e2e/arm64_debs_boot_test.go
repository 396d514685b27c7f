//go:build boot

package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

// arm64BootstrapMarker is what the booted arm64 image's own systemd prints
// at multi-user.target; the unit appends the path of PID 1.
const arm64BootstrapMarker = "stamp-bootstrap-arm64: multi-user.target reached, PID 1 is /usr/lib/systemd/systemd"

// TestARM64BaseDebsBoots bootstraps an arm64 minbase with systemd-sysv,
// Debian's arm64 kernel, systemd-boot and busybox-static from arm64 .debs
// (a local signed repository of them), on this amd64 machine as uid 65534,
// where no program of the image can run natively: every maintainer script
// goes through the offline handlers, depmod's indexes and the journal
// catalog written in Go with no emulator (systemd-hwdb waits for first
// boot). Built again as root,
// the disk is the same byte for byte. It boots
// under AAVMF to multi-user.target, where a unit prints the marker.
func TestARM64BaseDebsBoots(t *testing.T) {
	harness.RequireSetpriv(t)
	harness.RequireTools(t, "qemu-system-aarch64", "sgdisk")
	pkgs := []string{"systemd-sysv", "linux-image-arm64", "systemd-boot-efi", "busybox-static"}
	repo := harness.ForeignDebRepoFor(t, "arm64", harness.MinbaseRequest, append(append([]string{}, harness.MinbaseRequest...), pkgs...))
	extra := markerBootLayers("/dev/ttyAMA0",
		`echo "stamp-modprobe: $(modprobe -n -q vfat && echo found vfat)"`,
		`echo "stamp-bootstrap-arm64: multi-user.target reached, PID 1 is $(readlink /proc/1/exe)"`)
	recipe := baseDebsRecipe(repo.FileURL(), "minbase", pkgs, extra)
	recipe = strings.Replace(recipe, "arch: amd64\n", "arch: arm64\n", 1)
	recipe = strings.Replace(recipe, "  - {format: tar, name: rootfs}\n",
		"  - format: raw\n    boot: {loader: systemd-boot, cmdline: \"rw console=ttyAMA0 panic=-1\"}\n", 1)
	dir := bootstrapDir(t, repo, recipe)
	out := filepath.Join(dir, "out")
	start := time.Now()
	build := stampAs65534(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir).mustSucceed(t)
	// What may wait for first boot: systemd-hwdb, where the machine cannot
	// run the image's arm64 program in the sandbox (journalctl
	// --update-catalog and depmod are written in Go). Anything more would
	// be target code the offline handlers could not do.
	for _, l := range strings.Split(build.stderr, "\n") {
		if !strings.Contains(l, "deferred to first boot") {
			continue
		}
		t.Logf("deferred: %s", l)
		if !strings.Contains(l, "systemd-hwdb") {
			t.Errorf("deferred beyond systemd-hwdb: %s", l)
		}
	}
	t.Logf("arm64 bootstrap and raw disk as uid 65534: %s", time.Since(start).Round(time.Second))
	asRoot := filepath.Join(dir, "out-root")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", asRoot, "--cache-dir", filepath.Join(dir, "cache-root")).mustSucceed(t)
	if a, b := diskSums(t, out)["e2e-bootstrap.raw"], diskSums(t, asRoot)["e2e-bootstrap.raw"]; a == "" || a != b {
		t.Errorf("e2e-bootstrap.raw: %q as uid 65534, %q as root", a, b)
	}
	manifest, err := os.ReadFile(filepath.Join(out, "manifest.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`\n/usr/lib/modules/[^/]+-arm64/modules\.dep\.bin type=file`).Match(manifest) {
		t.Errorf("the image has no modules.dep.bin: depmod did not run")
	}
	raw := filepath.Join(out, "e2e-bootstrap.raw")
	log := harness.RunQEMUFor(t, "arm64", []string{"-bios", harness.AAVMFPath, "-m", "1024",
		"-drive", "file=" + raw + ",format=raw,if=virtio", "-snapshot"}, arm64BootstrapMarker, 10*time.Minute)
	if !strings.Contains(log, "Reached target") {
		t.Errorf("systemd's own status lines are not on the console")
	}
	// modprobe finds a module only through the indexes depmod wrote.
	if !strings.Contains(log, "stamp-modprobe: found vfat") {
		t.Errorf("the booted image's modprobe does not find vfat through the module indexes")
	}
}
