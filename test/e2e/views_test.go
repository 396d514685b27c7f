package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/rootfs"
)

// viewOutputs are everyFormat's outputs one by one, each with the outputs
// it is made from, so that each can be built alone.
var viewOutputs = []struct {
	name  string   // as SHA256SUMS names its files: e2e-views[-NAME]...
	chain []string // recipe lines, the made-from outputs first
}{
	{"pxe", []string{"  - {format: pxe}\n"}},
	{"tar", []string{"  - {format: tar, compression: zstd}\n"}},
	{"plain", []string{"  - {format: tar, name: plain}\n"}},
	{"cpio", []string{"  - {format: cpio, compression: zstd}\n"}},
	{"initrd", []string{"  - {format: cpio, name: initrd, compression: none}\n"}},
	{"oci", []string{"  - {format: oci, kind: rootfs, layout: dir}\n"}},
	{"ociarchive", []string{"  - {format: oci, name: ociarchive, kind: rootfs, layout: archive}\n"}},
	{"raw", []string{rawOutputs[:strings.Index(rawOutputs, "  - {format: qcow2")]}},
	{"qcow2", []string{rawOutputs}},
	{"qz", []string{rawOutputs, "  - {format: qcow2, name: qz, from: raw, compression: zlib}\n"}},
	{"cdisk", []string{rawOutputs, "  - {format: oci, name: cdisk, kind: containerdisk, from: qcow2}\n"}},
}

// TestOutputsDoNotLeakIntoEachOther builds every format alone and all of
// them together: each output's bytes must not depend on what else the
// recipe asks for. A raw disk's repart drop-in lives in the disk's own
// view of the tree, so the tar, cpio and OCI outputs never carry it.
func TestOutputsDoNotLeakIntoEachOther(t *testing.T) {
	// Each variant is the same recipe file in a directory of its own, as a
	// user would edit the outputs of one recipe.
	build := func(variant, outputs string) (string, map[string]string) {
		dir := proofDir(t, map[string]string{"recipe.yaml": proofRecipe("e2e-views", "", nil, outputs)})
		out := filepath.Join(dir, "out")
		stamp(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", filepath.Join(dir, "work")).mustSucceed(t)
		sums := map[string]string{}
		for _, l := range readSums(t, filepath.Join(out, "SHA256SUMS")) {
			sum, name, _ := strings.Cut(l, "  ")
			sums[name] = sum
		}
		t.Logf("%s: %d files", variant, len(sums))
		return out, sums
	}
	outAll, all := build("all", everyFormat)
	for _, o := range viewOutputs {
		_, alone := build(o.name, "outputs:\n"+strings.Join(o.chain, ""))
		for name, sum := range alone {
			if all[name] != sum {
				t.Errorf("%s: built alone it is %s, beside every other output %s", name, sum, all[name])
			}
		}
	}

	ctx := context.Background()
	for _, name := range []string{"e2e-views-plain.tar", "e2e-views-initrd.cpio"} {
		im, err := formats.ReadImage(ctx, filepath.Join(outAll, name))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range append(im.Tree.Entries(), im.Extra...) {
			if strings.Contains(e.Path, "repart.d") {
				t.Errorf("%s holds %s, which only the raw disk's view of the tree has", name, e.Path)
			}
		}
	}
	raw, err := formats.ReadImage(ctx, filepath.Join(outAll, "e2e-views.raw"))
	if err != nil {
		t.Fatal(err)
	}
	var rootAdds []string
	for _, e := range raw.Extra {
		if p, ok := strings.CutPrefix(e.Path, "root:"); ok {
			rootAdds = append(rootAdds, p)
		}
	}
	want := []string{"/lost+found", "/usr/lib/repart.d", formats.GrowDropIn}
	if !slices.Equal(rootAdds, want) {
		t.Errorf("the raw disk's root adds %q, want %q", rootAdds, want)
	}

	// The record, the same in every output, says what a raw disk may add.
	var rec struct {
		Views []struct{ Format, Path string }
	}
	if err := json.Unmarshal(raw.Record, &rec); err != nil {
		t.Fatalf("record: %v", err)
	}
	var views []string
	for _, v := range rec.Views {
		if v.Format == "raw" {
			views = append(views, v.Path)
		}
	}
	slices.Sort(views)
	if !slices.Equal(views, want) {
		t.Errorf("the record says a raw disk may add %q, want %q", views, want)
	}
}

// TestInspectCountsWhatTheManifestLists holds every output's manifest
// section against what a reader finds in the output beyond the tree:
// line for line, and in the count stamp inspect prints.
func TestInspectCountsWhatTheManifestLists(t *testing.T) {
	dir := proofDir(t, map[string]string{"recipe.yaml": proofRecipe("e2e-adds", "", nil, everyFormat)})
	out := filepath.Join(dir, "out")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache")).mustSucceed(t)
	sections := manifestSections(t, filepath.Join(out, "manifest.txt"))
	if len(sections) != 11 {
		t.Fatalf("manifest.txt has %d output sections, want 11", len(sections))
	}
	adds := regexp.MustCompile(`(?m)^format adds:\s+(\d+) entries`)
	for file, lines := range sections {
		t.Run(file, func(t *testing.T) {
			im, err := formats.ReadImage(context.Background(), filepath.Join(out, file))
			if err != nil {
				t.Fatal(err)
			}
			var read []string
			for _, e := range im.Extra {
				read = append(read, rootfs.ManifestLine(e, nil, false))
			}
			slices.Sort(read)
			slices.Sort(lines)
			if !slices.Equal(read, lines) {
				t.Errorf("read back beyond the tree:\n%s\nthe manifest section lists:\n%s", strings.Join(read, "\n"), strings.Join(lines, "\n"))
			}
			r := stamp(t, dir, nil, "inspect", filepath.Join(out, file)).mustSucceed(t)
			got := "0"
			if m := adds.FindStringSubmatch(r.stdout); m != nil {
				got = m[1]
			}
			if got != fmt.Sprint(len(lines)) {
				t.Errorf("inspect says the format adds %s entries; its manifest section lists %d", got, len(lines))
			}
		})
	}
}

// manifestSections maps each output's main file to the entry lines of its
// manifest.txt section, comments left out.
func manifestSections(t *testing.T, p string) map[string][]string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]string{}
	cur := ""
	for _, l := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if rest, ok := strings.CutPrefix(l, "## output "); ok {
			_, file, _ := strings.Cut(rest, " ")
			cur = file
			out[cur] = []string{}
			continue
		}
		if cur != "" && !strings.HasPrefix(l, "#") {
			out[cur] = append(out[cur], l)
		}
	}
	return out
}
