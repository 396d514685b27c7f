package formats

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// TestOVA writes an OVA of a raw disk twice and takes it apart with the
// system's tar: the same bytes both times; the descriptor, the disk and the
// manifest in that order, each a USTAR member owned by 0:0 at the epoch;
// the manifest's SHA256 digests those of the extracted files; the
// descriptor well-formed OVF 1.0 whose references, capacity and hardware
// match; qemu checks the disk clean and reads the raw in it; and reading
// the OVA back by detection gives the raw's entries.
func TestOVA(t *testing.T) {
	harness.RequireTools(t, "qemu-img", "tar")
	tree := rawTestTree(t, "amd64")
	img, _ := writeRaw(t, rawSource(tree, "amd64"), rawSpec())
	fi, err := os.Stat(img)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := manifest(t, img)
	var sums [][32]byte
	for range 2 {
		dir := t.TempDir()
		src := rawSource(tree, "amd64")
		src.From, src.FromAdds, src.WorkDir = img, readAdds(t, img, tree), t.TempDir()
		res, err := ovaFormat{}.Write(context.Background(), src, &Spec{Format: "ova", Name: "ova", From: "raw",
			Options: &OVASpec{CPUs: 4, Memory: 8 << 30, Network: "k8s & co"}}, dir, "node")
		if err != nil {
			t.Fatal(err)
		}
		ova := filepath.Join(dir, res.Files[0])
		if res.Files[0] != "node.ova" || !slices.Equal(res.Adds, src.FromAdds) {
			t.Errorf("files %v adds %v", res.Files, res.Adds)
		}
		if left, _ := os.ReadDir(src.WorkDir); len(left) != 0 {
			t.Errorf("the scratch VMDK is left in the work directory: %v", left)
		}
		sums = append(sums, sumFile(t, ova))

		listing := run(t, "tar", "--numeric-owner", "--utc", "-tvf", ova)
		lines := strings.Split(strings.TrimSpace(listing), "\n")
		if len(lines) != 3 {
			t.Fatalf("tar -tv:\n%s", listing)
		}
		for i, name := range []string{"node.ovf", "node.vmdk", "node.mf"} {
			f := strings.Fields(lines[i])
			if f[0] != "-rw-r--r--" || f[1] != "0/0" || f[3]+" "+f[4] != tarEpoch.UTC().Format("2006-01-02 15:04") || f[5] != name {
				t.Errorf("member %d: %s, want %s, 0/0, at the epoch", i, lines[i], name)
			}
		}
		f, err := os.Open(ova)
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(f)
		for {
			hdr, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if hdr.Format != tar.FormatUSTAR {
				t.Errorf("%s: tar format %v, want USTAR", hdr.Name, hdr.Format)
			}
		}
		f.Close()

		x := t.TempDir()
		run(t, "tar", "-xf", ova, "-C", x)
		mf, err := os.ReadFile(filepath.Join(x, "node.mf"))
		if err != nil {
			t.Fatal(err)
		}
		var wantMF string
		for _, name := range []string{"node.ovf", "node.vmdk"} {
			b, err := os.ReadFile(filepath.Join(x, name))
			if err != nil {
				t.Fatal(err)
			}
			s := sha256.Sum256(b)
			wantMF += fmt.Sprintf("SHA256(%s)= %s\n", name, hex.EncodeToString(s[:]))
		}
		if string(mf) != wantMF {
			t.Errorf("manifest:\n%s\nwant:\n%s", mf, wantMF)
		}

		ovfBytes, err := os.ReadFile(filepath.Join(x, "node.ovf"))
		if err != nil {
			t.Fatal(err)
		}
		o, err := ParseOVF(ovfBytes)
		if err != nil {
			t.Fatalf("%v\n%s", err, ovfBytes)
		}
		vfi, err := os.Stat(filepath.Join(x, "node.vmdk"))
		if err != nil {
			t.Fatal(err)
		}
		if len(o.References) != 1 || o.References[0].Href != "node.vmdk" || o.References[0].Size != vfi.Size() {
			t.Errorf("references %+v, want node.vmdk of %d bytes", o.References, vfi.Size())
		}
		if len(o.Disks) != 1 || o.Disks[0].FileRef != o.References[0].ID || o.Disks[0].Capacity != fi.Size() ||
			o.Disks[0].Units != "byte" || o.Disks[0].Format != OVFDiskFormat || o.Disks[0].Populated <= 0 {
			t.Errorf("disks %+v, want one of %d bytes, stream-optimized, on the reference", o.Disks, fi.Size())
		}
		if len(o.Networks) != 1 || o.Networks[0].Name != "k8s & co" {
			t.Errorf("networks %+v", o.Networks)
		}
		if o.System.ID != "node" || o.System.Type != "vmx-13" || o.System.OS.ID != "101" {
			t.Errorf("virtual system %s, hardware %s, OS %+v", o.System.ID, o.System.Type, o.System.OS)
		}
		got := map[int]string{}
		for _, it := range o.System.Items {
			got[it.ResourceType] = fmt.Sprintf("%s %d %s %s %s", it.ResourceSubType, it.VirtualQuantity, it.HostResource, it.Connection, it.Parent)
		}
		for typ, w := range map[int]string{3: " 4   ", 4: " 8192   ", 20: "vmware.sata.ahci 0   ", 17: " 0 ovf:/disk/vmdisk1  3", 10: "VmxNet3 0  k8s & co "} {
			if got[typ] != w {
				t.Errorf("item of resource type %d: %q, want %q", typ, got[typ], w)
			}
		}
		if len(o.System.Config) != 1 || o.System.Config[0].Key != "firmware" || o.System.Config[0].Value != "efi" {
			t.Errorf("config %+v", o.System.Config)
		}

		vm := filepath.Join(x, "node.vmdk")
		if out := run(t, "qemu-img", "check", "-f", "vmdk", vm); !strings.Contains(out, "No errors were found") {
			t.Errorf("qemu-img check:\n%s", out)
		}
		if out := run(t, "qemu-img", "info", "-f", "vmdk", vm); !strings.Contains(out, "create type: streamOptimized") {
			t.Errorf("qemu-img info:\n%s", out)
		}
		if out := run(t, "qemu-img", "compare", "-f", "raw", "-F", "vmdk", img, vm); !strings.Contains(out, "Images are identical.") {
			t.Errorf("qemu-img compare:\n%s", out)
		}

		facts, n := readBack(t, ova, "ova", want)
		if facts["ova.files"] != "node.ovf node.vmdk node.mf" || facts["ova.manifest"] != "2 digests checked" ||
			facts["ova.cpus"] != "4" || facts["ova.firmware"] != "efi" || facts["ova.vmdk.create-type"] != "streamOptimized" {
			t.Errorf("facts %v", facts)
		}
		if n != fi.Size() {
			t.Errorf("the plain stream: %d bytes", n)
		}
	}
	if sums[0] != sums[1] {
		t.Error("two OVAs of the same raw disk differ")
	}
}

// TestOVARefuses: BIOS firmware for a disk that boots by UEFI only, and an
// arm64 disk, which the descriptor cannot describe, are refused by name.
func TestOVARefuses(t *testing.T) {
	uefiOnly, _ := writeRaw(t, rawSource(rawTestTree(t, "amd64"), "amd64"), rawSpec())
	for _, c := range []struct {
		arch string
		o    OVASpec
		want string
	}{
		{"amd64", OVASpec{Firmware: "bios"}, "firmware: bios, but the raw disk does not boot by BIOS: the protective MBR has no boot code"},
		{"arm64", OVASpec{}, "arch arm64"},
	} {
		src := &Source{Arch: c.arch, From: uefiOnly}
		_, err := ovaFormat{}.Write(context.Background(), src, &Spec{Format: "ova", Name: "ova", Options: &c.o}, t.TempDir(), "node")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s %+v: %v, want %q", c.arch, c.o, err, c.want)
		}
	}
}

// TestOVAManifestChecked: a member whose bytes the manifest does not
// match is named when the OVA is read.
func TestOVAManifestChecked(t *testing.T) {
	tree := rawTestTree(t, "amd64")
	img, _ := writeRaw(t, rawSource(tree, "amd64"), rawSpec())
	dir := t.TempDir()
	src := rawSource(tree, "amd64")
	src.From, src.WorkDir = img, t.TempDir()
	res, err := ovaFormat{}.Write(context.Background(), src, &Spec{Format: "ova", Name: "ova", Options: &OVASpec{}}, dir, "node")
	if err != nil {
		t.Fatal(err)
	}
	ova := filepath.Join(dir, res.Files[0])
	b, err := os.ReadFile(ova)
	if err != nil {
		t.Fatal(err)
	}
	// The CPU count in the descriptor, the first member: one byte changed.
	i := strings.Index(string(b), "<rasd:VirtualQuantity>2<")
	b[i+len("<rasd:VirtualQuantity>")] = '3'
	if err := os.WriteFile(ova, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadImage(context.Background(), ova); err == nil || !strings.Contains(err.Error(), "member node.ovf: sha256") {
		t.Errorf("a changed descriptor: %v", err)
	}
}
