//go:build boot

package e2e

import (
	"fmt"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/test/harness"
)

// The live system of TestLiveBoot's recipe boots the other ways: the
// initramfs fetches the image itself from stamp.root=URL over the
// network, and the iso boots the same system with no network copied to a
// USB stick under OVMF (the GPT's ESP) and to a disk under SeaBIOS (GRUB
// from the MBR).
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

	// The iso copied to a USB stick under OVMF and to a disk under
	// SeaBIOS; TestLiveBoot boots it as a CD under each.
	for _, c := range liveISOBoots(filepath.Join(out1, "live.iso"))[2:] {
		t.Run("iso-"+c.name, func(t *testing.T) { bootLiveISO(t, c.args) })
	}
}
