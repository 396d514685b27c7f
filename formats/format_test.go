package formats

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/rootfs/compress"
)

// TestTableWritesAndReadsEveryFormat writes one output of every format in
// Table (and of every kind a format makes from another output) from one
// tree, each made from the first format its entry names, and reads each back
// by detection alone: every entry has a writer, a detector that knows its
// own output and no other's, and a reader.
func TestTableWritesAndReadsEveryFormat(t *testing.T) {
	ctx := context.Background()
	tree := rawTestTree(t, "amd64")
	// A live bundle's initramfs needs a real static busybox and the
	// modules that mount its image.
	addLiveParts(t, tree, rawKernel)
	// One spec per format and kind, in an order where what an output is
	// made from comes first. A format added to Table without a line here
	// fails below.
	specs := []*Spec{
		{Format: "raw", Name: "raw", Options: rawSpec()},
		{Format: "qcow2", Name: "qcow2", Options: &Qcow2Spec{Compress: true}},
		{Format: "vhd", Name: "vhd", Options: &VHDSpec{}},
		{Format: "vhd", Name: "vhd-dynamic", Options: &VHDSpec{Dynamic: true}},
		{Format: "vmdk", Name: "vmdk", Options: &VMDKSpec{}},
		{Format: "vmdk", Name: "vmdk-sparse", Options: &VMDKSpec{Type: "monolithicSparse"}},
		{Format: "ova", Name: "ova", Options: &OVASpec{}},
		{Format: "gce", Name: "gce", Options: &GCESpec{}},
		{Format: "compressed", Name: "compressed", Options: &CompressedSpec{Compression: compress.XZ}},
		{Format: "erofs", Name: "erofs", Options: &ErofsSpec{}},
		{Format: "live", Name: "live", Options: &LiveSpec{Cmdline: "console=ttyS0"}},
		{Format: "iso", Name: "iso", Options: &ISOSpec{Cmdline: "console=ttyS0", BIOS: true}},
		{Format: "cpio", Name: "cpio", Options: &CpioSpec{Compression: compress.Gzip}},
		{Format: "pxe", Name: "pxe", Options: &PXESpec{Cmdline: "console=ttyS0"}},
		{Format: "tar", Name: "tar", Options: &TarSpec{Compression: compress.Zstd}},
		{Format: "oci", Name: "oci", Options: &OCISpec{Kind: "rootfs"}},
		{Format: "oci", Name: "containerdisk", Options: &OCISpec{Kind: "containerdisk", Layout: "archive"}},
		{Format: "oci", Name: "disk", Options: &OCISpec{Kind: "disk"}},
	}
	table := Table()
	byName := map[string]Entry{}
	for _, e := range table {
		if _, dup := byName[e.Name]; dup {
			t.Fatalf("format %s is in the table twice", e.Name)
		}
		byName[e.Name] = e
		if e.Writer == nil || e.Reader == nil {
			t.Fatalf("format %s has no writer or no reader", e.Name)
		}
		if e.Reader.Format() != e.Name {
			t.Errorf("format %s: its reader names itself %s", e.Name, e.Reader.Format())
		}
	}
	dir := t.TempDir()
	written := map[string]string{} // format -> main file, the first written
	adds := map[string][]string{}
	for _, spec := range specs {
		e, ok := byName[spec.Format]
		if !ok {
			t.Fatalf("the test writes format %s, which Table lacks", spec.Format)
		}
		src := rawSource(tree, "amd64")
		kind := ""
		if o, ok := spec.Options.(*OCISpec); ok {
			kind = o.Kind
		}
		if from := e.MadeFrom[kind]; len(from) > 0 {
			if written[from[0]] == "" {
				t.Fatalf("%s (%s) is made from %s, which the test has not written yet", spec.Name, kind, from[0])
			}
			src.From, src.FromAdds = filepath.Join(dir, written[from[0]]), adds[from[0]]
		}
		src.WorkDir = t.TempDir()
		res, err := e.Writer.Write(ctx, src, spec, dir, "node-"+spec.Name)
		if err != nil {
			t.Fatalf("%s: %v", spec.Name, err)
		}
		if written[spec.Format] == "" {
			written[spec.Format], adds[spec.Format] = res.Files[0], res.Adds
		}
		im, err := ReadImage(ctx, filepath.Join(dir, res.Files[0]))
		if err != nil {
			t.Fatalf("%s: reading %s back: %v", spec.Name, res.Files[0], err)
		}
		if im.Format != spec.Format {
			t.Errorf("%s: %s is read back as %s", spec.Name, res.Files[0], im.Format)
		}
		if im.Tree.Len() == 0 {
			t.Errorf("%s: %s reads back with no entries", spec.Name, res.Files[0])
		}
	}
	for _, e := range table {
		if written[e.Name] == "" {
			t.Errorf("format %s is in Table but this test writes none", e.Name)
		}
		for kind, from := range e.MadeFrom {
			for _, f := range from {
				if _, ok := byName[f]; !ok {
					t.Errorf("format %s (kind %q) is made from %s, which Table lacks", e.Name, kind, f)
				}
			}
		}
	}
	if _, err := Lookup("vmdk4"); err == nil || !strings.Contains(err.Error(), "not supported") {
		t.Errorf("Lookup of an unknown format: %v", err)
	}
}
