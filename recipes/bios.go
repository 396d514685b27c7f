package recipes

// Legacy BIOS boot: a raw disk's boot.bios, and an ova's firmware bios,
// which needs the raw disk it holds to boot by BIOS.

// biosPartition is the BIOS boot partition a raw disk with boot.bios gets
// when the recipe lists no partitions: room for GRUB's core.img.
var biosPartition = Partition{Name: "bios", Type: "bios", Size: 1 << 20, Filesystem: "none"}

// biosLoaderMsg says why boot.bios needs systemd-boot or shim: GRUB for
// i386-pc boots BIOS machines from the kernel and initramfs that their ESP
// holds, beside them.
const biosLoaderMsg = "BIOS boot needs loader systemd-boot or shim (GRUB boots BIOS machines from the kernel and initramfs they put on the ESP), not %s"

// checkFirmware fails an ova with firmware bios whose raw disk does not
// boot by BIOS.
func (d *decoder) checkFirmware(ons []outputNode, out []Output) {
	byName := map[string]*Output{}
	for i := range out {
		byName[out[i].Name] = &out[i]
	}
	for i, o := range out {
		f := ons[i].seen["firmware"]
		if o.Format != FormatOVA || o.Firmware != "bios" || f == nil || d.failed(f) {
			continue
		}
		if src := byName[o.From]; src != nil && src.Format == FormatRaw && (src.Boot == nil || !src.Boot.BIOS) {
			d.fail(d.resolveQuiet(f), child(o.Field, "firmware"), "firmware bios needs the raw output %q to boot BIOS machines: give it boot.bios: true", o.From)
		}
	}
}
