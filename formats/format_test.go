package formats

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// everySpec is one output spec per format and kind, in an order where
// what an output is made from comes first. A format added to Table
// without a line here fails TestTableWritesAndReadsEveryFormat.
func everySpec() []*Spec {
	return []*Spec{
		{Format: "raw", Name: "raw", Options: rawSpec()},
		{Format: "qcow2", Name: "qcow2", Options: &Qcow2Spec{Compress: true}},
		{Format: "vhd", Name: "vhd", Options: &VHDSpec{}},
		{Format: "vhd", Name: "vhd-dynamic", Options: &VHDSpec{Dynamic: true}},
		{Format: "vmdk", Name: "vmdk", Options: &VMDKSpec{}},
		{Format: "vmdk", Name: "vmdk-sparse", Options: &VMDKSpec{Type: "monolithicSparse"}},
		{Format: "ova", Name: "ova", Options: &OVASpec{}},
		{Format: "gce", Name: "gce", Options: &GCESpec{}},
		{Format: "cpio", Name: "cpio", Options: &CpioSpec{Compression: compress.Gzip}},
		{Format: "pxe", Name: "pxe", Options: &PXESpec{Cmdline: "console=ttyS0"}},
		{Format: "tar", Name: "tar", Options: &TarSpec{Compression: compress.Zstd}},
		{Format: "oci", Name: "oci", Options: &OCISpec{Kind: "rootfs"}},
		{Format: "compressed", Name: "compressed", Options: &CompressedSpec{Compression: compress.XZ}},
		{Format: "erofs", Name: "erofs", Options: &ErofsSpec{}},
		{Format: "live", Name: "live", Options: &LiveSpec{Cmdline: "console=ttyS0"}},
		{Format: "iso", Name: "iso", Options: &ISOSpec{Cmdline: "console=ttyS0", BIOS: true}},
		{Format: "oci", Name: "containerdisk", Options: &OCISpec{Kind: "containerdisk", Layout: "archive"}},
		{Format: "oci", Name: "disk", Options: &OCISpec{Kind: "disk"}},
	}
}

// everyTree is the tree everySpec's outputs are written from: the raw
// tests' small bootable tree, with the real static busybox and the modules
// a live bundle's initramfs needs to mount its image. It returns the
// busybox's bytes too.
func everyTree(t *testing.T) (*rootfs.Tree, []byte) {
	t.Helper()
	tree := rawTestTree(t, "amd64")
	k := addLiveParts(t, tree, rawKernel)
	busybox, err := os.ReadFile(k.Busybox)
	if err != nil {
		t.Fatal(err)
	}
	return tree, busybox
}

// writtenOutput is one output of writeEvery.
type writtenOutput struct {
	spec *Spec
	res  *Result
	path string // its first file
}

// writeEvery writes every spec from tree into dir, each made from the
// first output of the format its entry names.
func writeEvery(t *testing.T, tree *rootfs.Tree, specs []*Spec, dir string) []writtenOutput {
	t.Helper()
	byName := map[string]Entry{}
	for _, e := range Table() {
		byName[e.Name] = e
	}
	written := map[string]string{} // format -> main file, the first written
	adds := map[string][]string{}
	var out []writtenOutput
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
		res, err := e.Writer.Write(context.Background(), src, spec, dir, "node-"+spec.Name)
		if err != nil {
			t.Fatalf("%s: %v", spec.Name, err)
		}
		// A sum the writer hands the conductor goes into SHA256SUMS
		// unread: it must be the file's.
		for name, sum := range res.Sums {
			if got, _, err := hashio.File(filepath.Join(dir, name), true); err != nil || got != sum {
				t.Errorf("%s: Sums says %s is %s; it is %s (%v)", spec.Name, name, sum, got, err)
			}
		}
		if written[spec.Format] == "" {
			written[spec.Format], adds[spec.Format] = res.Files[0], res.Adds
		}
		out = append(out, writtenOutput{spec: spec, res: res, path: filepath.Join(dir, res.Files[0])})
	}
	return out
}

// TestTableWritesAndReadsEveryFormat writes one output of every format in
// Table (and of every kind a format makes from another output) from one
// tree, each made from the first format its entry names, and reads each back
// by detection alone: every entry has a writer, a detector that knows its
// own output and no other's, and a reader.
func TestTableWritesAndReadsEveryFormat(t *testing.T) {
	ctx := context.Background()
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
	written := map[string]bool{}
	tree, busybox := everyTree(t)
	for _, w := range writeEvery(t, tree, everySpec(), t.TempDir()) {
		written[w.spec.Format] = true
		im, err := ReadImage(ctx, w.path)
		if err != nil {
			t.Fatalf("%s: reading %s back: %v", w.spec.Name, w.path, err)
		}
		if im.Format != w.spec.Format {
			t.Errorf("%s: %s is read back as %s", w.spec.Name, w.path, im.Format)
		}
		if im.Tree.Len() == 0 {
			t.Errorf("%s: %s reads back with no entries", w.spec.Name, w.path)
		}
		// Every offset a reader names is in the stream OpenPlain gives,
		// whatever the format wraps around it.
		plainHolds(t, w.spec.Name, im)
		// One file's content read back, where the format can give it.
		data, err := ReadTreeFile(ctx, im, "/usr/bin/busybox", 16<<20)
		switch w.spec.Format {
		case "tar", "raw", "qcow2", "vhd", "vmdk", "ova", "erofs":
			if err != nil || !bytes.Equal(data, busybox) {
				t.Errorf("%s: ReadTreeFile: %d bytes, not the busybox's %d: %v", w.spec.Name, len(data), len(busybox), err)
			}
		default:
			if !errors.Is(err, ErrCannotReadFile) {
				t.Errorf("%s: ReadTreeFile: %v, want ErrCannotReadFile", w.spec.Name, err)
			}
		}
	}
	for _, e := range table {
		if !written[e.Name] {
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

// plainHolds checks that OpenPlain opens the stream im's Regions are
// measured in, and that every region lies inside it. A directory (a pxe
// bundle, an OCI layout) is no one stream: verify compares its files.
func plainHolds(t *testing.T, name string, im *Image) {
	t.Helper()
	if fi, err := os.Stat(im.Path); err != nil || fi.IsDir() {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
		return
	}
	rc, err := OpenPlain(im)
	if err != nil {
		t.Errorf("%s: OpenPlain (%q): %v", name, im.Plain, err)
		return
	}
	defer rc.Close()
	n, err := io.Copy(io.Discard, rc)
	if err != nil {
		t.Errorf("%s: reading the plain stream (%q): %v", name, im.Plain, err)
		return
	}
	for _, r := range im.Regions {
		if r.Offset+r.Size > n {
			t.Errorf("%s: region %s ends at %d, past the plain stream's %d bytes (%q)", name, r.Name, r.Offset+r.Size, n, im.Plain)
			return
		}
	}
}

// TestViewAdditions holds what the formats may add to their views to the
// list the embedded record has always carried: a change here changes every
// tree's record, and with it its digest.
func TestViewAdditions(t *testing.T) {
	want := []ViewAddition{
		{"cpio", XattrListPath, "entries carry xattrs the kernel's unpacker drops"},
		{"pxe", "/init", "always: the live init of the initramfs"},
		{"pxe", XattrListPath, "entries carry xattrs the kernel's unpacker drops"},
		{"raw", "/lost+found", "the tree has none: the root file system's own"},
		{"raw", GrowDropIn, "grow is true (the default) and the tree has none"},
		{"raw", path.Dir(GrowDropIn), "grow is true and the tree has no such directory"},
	}
	if got := ViewAdditions(); !reflect.DeepEqual(got, want) {
		t.Errorf("ViewAdditions() = %q\nwant %q", got, want)
	}
}
