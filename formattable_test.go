package stamp

import (
	"reflect"
	"sort"
	"testing"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// TestFormatTablesAgree holds the recipe schema's formats against the
// formats package's table. Neither package imports the other, so each keeps
// its own half: recipes the keys and what an output may be made from as a
// recipe says it, formats the writer, the reader and the same graph, and the
// conductor converts the one's options into the other's. A format in one
// and not the other, or a graph that differs, fails here.
func TestFormatTablesAgree(t *testing.T) {
	table := map[string]formats.Entry{}
	for _, e := range formats.Table() {
		table[e.Name] = e
	}
	names := recipes.Formats()
	for _, name := range names {
		e, ok := table[name]
		if !ok {
			t.Errorf("a recipe may ask for format %s, which formats.Table lacks", name)
			continue
		}
		if e.Writer == nil || e.Reader == nil {
			t.Errorf("format %s has no writer or no reader", name)
		}
		if outputOptions[name] == nil {
			t.Errorf("format %s: the conductor cannot convert its options", name)
		}
		if got, want := madeFrom(recipes.MadeFrom(name)), madeFrom(e.MadeFrom); !reflect.DeepEqual(got, want) {
			t.Errorf("format %s: recipes says it is made from %v, formats %v", name, got, want)
		}
	}
	if len(outputOptions) != len(names) {
		t.Errorf("the conductor converts options of %d formats, recipes names %d", len(outputOptions), len(names))
	}
	for name := range table {
		found := false
		for _, n := range names {
			found = found || n == name
		}
		if !found {
			t.Errorf("formats.Table has %s, which no recipe can ask for", name)
		}
	}
}

// madeFrom lists a made-from graph as "kind: a b" lines, so that nil and
// empty read alike.
func madeFrom(g map[string][]string) []string {
	var out []string
	for kind, from := range g {
		line := kind + ":"
		for _, f := range from {
			line += " " + f
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out
}

// TestOutputSpecCarriesTheRecipeOptions checks the conductor's conversion
// of every format's options, as the schema decoded them, into the format's
// own typed options.
func TestOutputSpecCarriesTheRecipeOptions(t *testing.T) {
	rec, err := recipes.Parse([]byte(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: opts
base: {tarball: ./base.tar}
outputs:
  - {format: tar, compression: xz}
  - format: raw
    size: 4GiB
    freeSpace: 512MiB
    grow: false
    partitions:
      - {name: esp, type: esp, size: 64MiB}
      - {name: root, type: root, label: root}
    boot: {loader: none}
  - {format: qcow2, compression: zlib}
  - {format: vmdk, type: monolithicSparse}
  - {format: ova, cpus: 4, memory: 2GiB, network: lab}
  - {format: gce}
  - {format: compressed, compression: xz}
  - {format: erofs, compression: lz4}
  - {format: live, from: erofs, compression: gzip, boot: {cmdline: console=ttyS0}}
  - {format: cpio}
  - {format: pxe, from: cpio, boot: {cmdline: console=ttyS0}}
  - {format: oci, name: cd, kind: containerdisk, layout: archive, compression: zstd, env: [A=1], labels: {k: v}, entrypoint: [/init]}
  - {format: oci, name: disk, kind: disk, from: compressed}
`), "opts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := []*formats.Spec{
		{Format: "tar", Name: "tar", Options: &formats.TarSpec{Compression: compress.XZ}},
		{Format: "raw", Name: "raw", Options: &formats.RawSpec{Size: 4 << 30, FreeSpace: 512 << 20,
			Partitions: []formats.PartitionSpec{
				{Name: "esp", Type: "esp", Size: 64 << 20, Filesystem: "vfat"},
				{Name: "root", Type: "root", Filesystem: "ext4", Label: "root"},
			},
			Boot: &formats.BootSpec{Loader: "none"}}},
		{Format: "qcow2", Name: "qcow2", From: "raw", Options: &formats.Qcow2Spec{Compress: true}},
		{Format: "vmdk", Name: "vmdk", From: "raw", Options: &formats.VMDKSpec{Type: "monolithicSparse"}},
		{Format: "ova", Name: "ova", From: "raw", Options: &formats.OVASpec{CPUs: 4, Memory: 2 << 30, Firmware: "efi", Network: "lab"}},
		{Format: "gce", Name: "gce", From: "raw", Options: &formats.GCESpec{}},
		{Format: "compressed", Name: "compressed", From: "raw", Options: &formats.CompressedSpec{Compression: compress.XZ}},
		{Format: "erofs", Name: "erofs", Options: &formats.ErofsSpec{Compression: "lz4"}},
		{Format: "live", Name: "live", From: "erofs", Options: &formats.LiveSpec{Compression: compress.Gzip, Cmdline: "console=ttyS0"}},
		{Format: "cpio", Name: "cpio", Options: &formats.CpioSpec{Compression: compress.Zstd}},
		{Format: "pxe", Name: "pxe", From: "cpio", Options: &formats.PXESpec{Compression: compress.Zstd, Cmdline: "console=ttyS0"}},
		{Format: "oci", Name: "cd", From: "qcow2", Options: &formats.OCISpec{Kind: "containerdisk", Layout: "archive",
			Compression: compress.Zstd, Entrypoint: []string{"/init"}, Env: []string{"A=1"}, Labels: map[string]string{"k": "v"}}},
		{Format: "oci", Name: "disk", From: "compressed", Options: &formats.OCISpec{Kind: "disk", Layout: "dir", Compression: compress.None}},
	}
	if len(rec.Outputs) != len(want) {
		t.Fatalf("%d outputs, want %d", len(rec.Outputs), len(want))
	}
	for i := range rec.Outputs {
		got, err := outputSpec(&rec.Outputs[i])
		if err != nil {
			t.Fatalf("%s: %v", rec.Outputs[i].Field, err)
		}
		if !reflect.DeepEqual(got, want[i]) {
			t.Errorf("%s: spec %+v with options %+v, want %+v with %+v", rec.Outputs[i].Field, got, got.Options, want[i], want[i].Options)
		}
	}
}
