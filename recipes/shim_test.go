package recipes

import (
	"strings"
	"testing"
)

// TestShim: loader shim (Secure Boot) is a raw disk's loader as
// systemd-boot is: the default partitions give it its ESP, it may boot BIOS
// machines too, and a partition list without an ESP fails naming
// boot.loader. Whether the tree holds the signed parts is the writer's to
// check: the recipe cannot see the tree.
func TestShim(t *testing.T) {
	const head = "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: x\nbase: {tarball: ./b.tar}\noutputs:\n"
	r, err := Parse([]byte(head+"  - {format: raw, boot: {loader: shim, cmdline: console=ttyS0, bios: true}}\n  - {format: ova, firmware: bios}\n"), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	raw := r.Outputs[0]
	if raw.Boot == nil || raw.Boot.Loader != "shim" || !raw.Boot.BIOS || len(raw.Partitions) != 3 || raw.Partitions[1].Type != "esp" {
		t.Errorf("raw: boot %+v, partitions %+v", raw.Boot, raw.Partitions)
	}
	_, err = Parse([]byte(head+"  - format: raw\n    partitions: [{name: root, type: root}]\n    boot: {loader: shim}\n"), "r.yaml")
	if err == nil || !strings.Contains(err.Error(), "r.yaml:8: outputs[0].boot.loader: shim needs a partition of type esp") {
		t.Errorf("shim without an ESP: %v", err)
	}
	_, err = Parse([]byte(head+"  - format: raw\n    boot: {loader: secure}\n"), "r.yaml")
	if err == nil || !strings.Contains(err.Error(), "systemd-boot, shim, uki, grub, none") {
		t.Errorf("an unknown loader: %v", err)
	}
}
