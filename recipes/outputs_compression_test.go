package recipes

import (
	"strings"
	"testing"
)

func TestCompressionPerFormat(t *testing.T) {
	base := "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: x\nbase: {tarball: ./b.tar}\noutputs:\n  - {format: raw}\n"
	ok := []string{
		"  - {format: qcow2, from: raw, compression: zlib}\n",
		"  - {format: qcow2, from: raw, compression: none}\n",
		"  - {format: cpio}\n  - {format: pxe, from: cpio, boot: {cmdline: \"console=ttyS0 panic=-1\"}}\n",
		"  - {format: erofs}\n",
		"  - {format: erofs, compression: none}\n",
	}
	for _, o := range ok {
		r, err := Parse([]byte(base+o), "r.yaml")
		if err != nil {
			t.Fatalf("%q: %v", o, err)
		}
		if last := r.Outputs[len(r.Outputs)-1]; last.Format == "erofs" && last.Compression == "" {
			t.Fatalf("erofs: no default compression")
		}
		if last := r.Outputs[len(r.Outputs)-1]; last.Format == "pxe" && (last.Boot == nil || last.Boot.Cmdline != "console=ttyS0 panic=-1") {
			t.Fatalf("pxe cmdline lost: %+v", last.Boot)
		}
	}
	for _, c := range []struct{ out, want string }{
		{"  - {format: qcow2, from: raw, compression: zstd}\n", "r.yaml:7: outputs[1].compression: compression \"zstd\" must be one of none, zlib for format qcow2"},
		{"  - {format: tar, compression: zlib}\n", "r.yaml:7: outputs[1].compression: compression \"zlib\" must be one of none, gzip, zstd, xz for format tar"},
		{"  - {format: oci, compression: xz}\n", "r.yaml:7: outputs[1].compression: compression \"xz\" must be one of gzip, zstd, none for format oci"},
		{"  - {format: erofs, compression: zstd}\n", "r.yaml:7: outputs[1].compression: compression \"zstd\" must be one of lz4, lz4hc, none for format erofs"},
	} {
		_, err := Parse([]byte(base+c.out), "r.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("got %v, want %q", err, c.want)
		}
	}
}

// TestOCICompression: an OCI layer is gzip unless the recipe says
// otherwise, for both kinds.
func TestOCICompression(t *testing.T) {
	base := "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: x\nbase: {tarball: ./b.tar}\noutputs:\n  - {format: raw}\n  - {format: qcow2}\n"
	for out, want := range map[string]string{
		"  - {format: oci}\n":                                         "gzip",
		"  - {format: oci, kind: containerdisk}\n":                    "gzip",
		"  - {format: oci, compression: zstd}\n":                      "zstd",
		"  - {format: oci, kind: containerdisk, compression: none}\n": "none",
	} {
		r, err := Parse([]byte(base+out), "r.yaml")
		if err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		if got := r.Outputs[len(r.Outputs)-1].Compression; got != want {
			t.Errorf("%q: compression %q, want %q", out, got, want)
		}
	}
}

// TestVHDType: a VHD is fixed, the type Azure takes, unless the recipe asks
// for dynamic, and is made from the raw output before it.
func TestVHDType(t *testing.T) {
	base := "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: x\nbase: {tarball: ./b.tar}\noutputs:\n  - {format: raw, name: disk}\n"
	for out, want := range map[string]string{
		"  - {format: vhd}\n":                         "fixed",
		"  - {format: vhd, type: fixed}\n":            "fixed",
		"  - {format: vhd, name: d, type: dynamic}\n": "dynamic",
	} {
		r, err := Parse([]byte(base+out), "r.yaml")
		if err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		o := r.Outputs[len(r.Outputs)-1]
		if o.Type != want || o.From != "disk" || o.Compression != "" {
			t.Errorf("%q: type %q from %q compression %q, want %q from disk", out, o.Type, o.From, o.Compression, want)
		}
	}
}

// TestVMDKAndOVADefaults: a VMDK is stream-optimized unless the recipe asks
// for monolithicSparse; an OVA describes 2 CPUs, 4 GiB, EFI and "VM
// Network" unless told otherwise; every one is made from the raw before it.
func TestVMDKAndOVADefaults(t *testing.T) {
	base := "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: x\nbase: {tarball: ./b.tar}\noutputs:\n  - {format: raw, name: disk}\n"
	for out, want := range map[string]Output{
		"  - {format: vmdk}\n":                         {Format: "vmdk", Type: "streamOptimized"},
		"  - {format: vmdk, type: monolithicSparse}\n": {Format: "vmdk", Type: "monolithicSparse"},
		"  - {format: ova}\n":                          {Format: "ova", CPUs: 2, Memory: 4 << 30, Firmware: "efi", Network: "VM Network"},
		"  - {format: ova, cpus: 4, memory: 8GiB, firmware: efi, network: k8s}\n": {Format: "ova", CPUs: 4, Memory: 8 << 30, Firmware: "efi", Network: "k8s"},
		"  - {format: gce}\n": {Format: "gce"},
	} {
		r, err := Parse([]byte(base+out), "r.yaml")
		if err != nil {
			t.Fatalf("%q: %v", out, err)
		}
		o := r.Outputs[len(r.Outputs)-1]
		if o.Format != want.Format || o.Type != want.Type || o.CPUs != want.CPUs || o.Memory != want.Memory ||
			o.Firmware != want.Firmware || o.Network != want.Network || o.From != "disk" || o.Compression != "" {
			t.Errorf("%q: %+v, want %+v from disk", out, o, want)
		}
	}
}
