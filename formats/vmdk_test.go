package formats

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
			var sums [][32]byte
			for range 2 {
				dir := t.TempDir()
				src := rawSource(tree, "amd64")
				src.From = img
				src.FromAdds = readAdds(t, img, tree)
				res, err := vmdkFormat{}.Write(context.Background(), src, &Spec{Format: "vmdk", Name: "disk", From: "raw", Options: &VMDKSpec{Type: string(typ)}}, dir, "node")
				if err != nil {
					t.Fatal(err)
				}
				v := filepath.Join(dir, res.Files[0])
				if res.Files[0] != "node.vmdk" {
					t.Errorf("file %s, want node.vmdk", res.Files[0])
				}
				if out := run(t, "qemu-img", "check", "-f", "vmdk", v); !strings.Contains(out, "No errors were found") {
					t.Fatalf("qemu-img check:\n%s", out)
				}
				if out := run(t, "qemu-img", "compare", "-f", "raw", "-F", "vmdk", img, v); !strings.Contains(out, "Images are identical.") {
					t.Fatalf("qemu-img compare:\n%s", out)
				}
				sums = append(sums, sumFile(t, v))
				if want := readAdds(t, img, tree); !slices.Equal(res.Adds, want) {
					t.Errorf("vmdk adds %q, want the raw disk's %q", res.Adds, want)
				}
				facts, n := readBack(t, v, "vmdk", want)
				if facts["vmdk.create-type"] != string(typ) || facts["vmdk.adapter"] != "lsilogic" || facts["vmdk.cid"] == "" {
					t.Errorf("facts %v", facts)
				}
				if fi, _ := os.Stat(img); n != fi.Size() {
					t.Errorf("the plain stream: %d bytes", n)
				}
			}
			if sums[0] != sums[1] {
				t.Error("two VMDK encodings of the same raw disk differ")
			}
		})
	}
}
