package formats

import (
	"os"
	"testing"

	"github.com/stamp-dev/stamp/disk/vmdk"
	"github.com/stamp-dev/stamp/test/harness"
)

// TestRawAndVMDK writes a raw disk as both VMDK types, twice each: the two
// writes are the same bytes, qemu checks them and reads the raw disk in
// them, the VMDK adds what the raw adds, and reading it back by detection
// gives the raw's entries.
func TestRawAndVMDK(t *testing.T) {
	harness.RequireTools(t, "qemu-img")
	tree := rawTestTree(t, "amd64")
	img, _ := writeRaw(t, rawSource(tree, "amd64"), rawSpec())
	want, _ := manifest(t, img)
	for _, typ := range []vmdk.Type{vmdk.StreamOptimized, vmdk.MonolithicSparse} {
		t.Run(string(typ), func(t *testing.T) {
			spec := &Spec{Format: "vmdk", Name: "disk", From: "raw", Options: &VMDKSpec{Type: string(typ)}}
			for _, d := range writeTwiceFromRaw(t, vmdkFormat{}, tree, img, spec, "vmdk") {
				if d.res.Files[0] != "node.vmdk" {
					t.Errorf("file %s, want node.vmdk", d.res.Files[0])
				}
				facts, n := readBack(t, d.path, "vmdk", want)
				if facts["vmdk.create-type"] != string(typ) || facts["vmdk.adapter"] != "lsilogic" || facts["vmdk.cid"] == "" {
					t.Errorf("facts %v", facts)
				}
				if fi, _ := os.Stat(img); n != fi.Size() {
					t.Errorf("the plain stream: %d bytes", n)
				}
			}
		})
	}
}
