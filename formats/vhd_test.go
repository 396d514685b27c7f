package formats

import (
	"context"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/disk"
	"github.com/stamp-dev/stamp/disk/vhd"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// manifest lists an image's entries and extras as manifest lines.
func manifest(t testing.TB, img string) (string, *Image) {
	t.Helper()
	im, err := ReadImage(context.Background(), img)
	if err != nil {
		t.Fatal(err)
	}
	entries := im.Tree.Entries()
	first := rootfs.FirstLinks(entries)
	var lines []string
	for _, e := range entries {
		lines = append(lines, rootfs.ManifestLine(e, first, false))
	}
	for _, e := range im.Extra {
		lines = append(lines, rootfs.ManifestLine(e, nil, false))
	}
	return strings.Join(lines, "\n"), im
}

// readBack reads an output encoded from a raw disk back as inspect does:
// it must be detected as format and hold the raw's entries (want). It
// returns the facts its reader found and the length of its plain stream,
// the disk inspect measures region offsets in.
func readBack(t testing.TB, out, format, want string) (facts map[string]string, plain int64) {
	t.Helper()
	got, im := manifest(t, out)
	if im.Format != format || got != want {
		t.Errorf("%s read back as %s, entries:\n%s\nwant:\n%s", out, im.Format, got, want)
	}
	facts = map[string]string{}
	for _, f := range im.Facts {
		facts[f.Key] = f.Value
	}
	im.Path = out
	rc, err := OpenPlain(im)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if plain, err = io.Copy(io.Discard, rc); err != nil {
		t.Errorf("%s: the plain stream: %v", out, err)
	}
	return facts, plain
}

// TestRawAndVHD writes a raw disk as both VHD types, twice each: the two
// writes are the same bytes, qemu reads the raw disk in them, the VHD adds
// what the raw adds, and reading it back by detection gives the raw's
// entries, its footer's identifier derived from the seed and output name.
func TestRawAndVHD(t *testing.T) {
	harness.RequireTools(t, "qemu-img")
	tree := rawTestTree(t, "amd64")
	img, _ := writeRaw(t, rawSource(tree, "amd64"), rawSpec())
	want, _ := manifest(t, img)
	for _, typ := range []string{"fixed", "dynamic"} {
		t.Run(typ, func(t *testing.T) {
			spec := &Spec{Format: "vhd", Name: "disk-" + typ, From: "raw", Options: &VHDSpec{Dynamic: typ == "dynamic"}}
			for _, d := range writeTwiceFromRaw(t, vhdFormat{}, tree, img, spec, "vpc") {
				if d.res.Files[0] != "node.vhd" {
					t.Errorf("file %s, want node.vhd", d.res.Files[0])
				}
				if typ == "fixed" {
					checkSparse(t, d.path)
				}
				facts, n := readBack(t, d.path, "vhd", want)
				if facts["vhd.type"] != typ || facts["vhd.unique-id"] != disk.FormatUUID(disk.VHDUniqueID("node", "disk-"+typ)) ||
					facts["vhd.timestamp"] != strconv.FormatUint(uint64(vhd.Timestamp(d.src.Epoch)), 10) {
					t.Errorf("facts %v", facts)
				}
				fi, _ := os.Stat(img)
				if typ == "dynamic" && n != vhd.VirtualSize(fi.Size()) {
					t.Errorf("the plain stream: %d bytes", n)
				}
			}
		})
	}
}
