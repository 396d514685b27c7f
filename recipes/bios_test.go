package recipes

import (
	"reflect"
	"testing"
)

// TestBIOSDefaults: a raw disk with boot.bios and no partitions listed gets
// a BIOS boot partition before the ESP and the root; an ova of it may
// describe a BIOS machine.
func TestBIOSDefaults(t *testing.T) {
	src := "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: x\nbase: {tarball: ./b.tar}\noutputs:\n" +
		"  - {format: raw, name: disk, boot: {cmdline: console=ttyS0, bios: true}}\n" +
		"  - {format: ova, firmware: bios}\n"
	r, err := Parse([]byte(src), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	raw, ova := r.Outputs[0], r.Outputs[1]
	want := []Partition{
		{Name: "bios", Type: "bios", Size: 1 << 20, Filesystem: "none"},
		{Name: "esp", Type: "esp", Size: 256 << 20, Filesystem: "vfat"},
		{Name: "root", Type: "root", Filesystem: "ext4"},
	}
	if !reflect.DeepEqual(raw.Partitions, want) {
		t.Errorf("partitions: %+v\nwant %+v", raw.Partitions, want)
	}
	if raw.Boot == nil || !raw.Boot.BIOS || raw.Boot.Loader != "systemd-boot" {
		t.Errorf("boot: %+v", raw.Boot)
	}
	if ova.Firmware != "bios" || ova.From != "disk" {
		t.Errorf("ova: firmware %q from %q", ova.Firmware, ova.From)
	}
}
