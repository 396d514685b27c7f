//go:build boot

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/test/harness"
)

// The live system of TestLiveBoot's recipe boots every other way: the
// initramfs fetches the image itself from stamp.root=URL over the
// network; an image whose sha256 is not the one the kernel command line
// names is refused, with the reason on the console; and the iso boots the
// same system with no network: as a CD-ROM under OVMF (El Torito's EFI
// image, systemd-boot) and under SeaBIOS (El Torito's GRUB), and copied
// to a USB stick under OVMF (the GPT's ESP) and to a disk under SeaBIOS
// (GRUB from the MBR).
func TestLiveBootVariants(t *testing.T) {
	_, out1, _ := liveBuild(t)
	bundle := filepath.Join(out1, "live.live")
	boot, port := liveNetBoot(t, bundle)

	// The same kernel and initramfs, the image fetched by the initramfs;
	// the sha256 is the one the initramfs was built with.
	writeFiles(t, bundle, map[string]string{"url.ipxe": fmt.Sprintf("#!ipxe\nkernel %s initrd=%s stamp.root=http://10.0.2.2:%d/%s console=ttyS0 panic=-1\ninitrd %s\nboot\n",
		formats.LiveKernel, formats.LiveInitrd, port, formats.LiveRoot, formats.LiveInitrd)})
	t.Run("url", func(t *testing.T) {
		log := harness.RunQEMU(t, boot("url.ipxe"), liveMarker, bootTimeout)
		if !regexp.MustCompile(`stamp-live: fetching http://10\.0\.2\.2:\d+/root\.erofs through eth0`).MatchString(log) {
			t.Errorf("the initramfs did not fetch the image itself")
		}
		checkLiveRootLog(t, log)
	})

	// Another image than the one the command line's sha256 names.
	good, err := os.ReadFile(filepath.Join(bundle, formats.LiveRoot))
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	bad[len(bad)/2] ^= 0x40
	script, err := os.ReadFile(filepath.Join(bundle, formats.LiveScript))
	if err != nil {
		t.Fatal(err)
	}
	badScript := strings.NewReplacer("initrd="+formats.LiveRoot, "initrd=bad.erofs",
		"initrd "+formats.LiveRoot+" ", "initrd bad.erofs ").Replace(string(script))
	writeFiles(t, bundle, map[string]string{"bad.erofs": string(bad), "bad.ipxe": badScript})
	t.Run("refused", func(t *testing.T) {
		b := harness.BootQEMU(t, boot("bad.ipxe"), bootTimeout)
		switch {
		case b.TimedOut:
			t.Fatalf("qemu did not stop within %s; log ends:\n%s", bootTimeout, b.Tail(30))
		case strings.Contains(b.Log, liveMarker):
			t.Fatalf("a damaged image booted; log ends:\n%s", b.Tail(30))
		case !regexp.MustCompile(`stamp-live: the root image's sha256 is [0-9a-f]{64}, not the [0-9a-f]{64} it must be: refusing to boot it`).MatchString(b.Log):
			t.Fatalf("no refusal on the console; log ends:\n%s", b.Tail(30))
		}
	})

	iso := filepath.Join(out1, "live.iso")
	for _, c := range []struct {
		name string
		args []string
	}{
		{"cd-uefi", []string{"-bios", harness.OVMFPath, "-drive", "if=none,id=cd,media=cdrom,readonly=on,format=raw,file=" + iso,
			"-device", "ide-cd,drive=cd,bootindex=0"}},
		{"cd-bios", []string{"-drive", "if=none,id=cd,media=cdrom,readonly=on,format=raw,file=" + iso, "-device", "ide-cd,drive=cd,bootindex=0"}},
		{"usb-uefi", []string{"-bios", harness.OVMFPath, "-drive", "if=none,id=stick,format=raw,snapshot=on,file=" + iso,
			"-device", "qemu-xhci", "-device", "usb-storage,drive=stick,bootindex=0"}},
		{"disk-bios", []string{"-drive", "if=none,id=hd,format=raw,snapshot=on,file=" + iso, "-device", "ide-hd,drive=hd,bootindex=0"}},
	} {
		t.Run("iso-"+c.name, func(t *testing.T) {
			log := harness.RunQEMU(t, append([]string{"-m", "1024", "-nic", "none"}, c.args...), liveMarker, 2*bootTimeout)
			if strings.Contains(log, "fetching") {
				t.Errorf("the initramfs fetched the image instead of finding it beside itself")
			}
			checkLiveRootLog(t, log)
		})
	}
}
