package formats

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// refReaderTools are the reference readers the table runs.
var refReaderTools = []string{"qemu-img", "sgdisk", "e2fsck", "fsck.vfat", "dd", "tar", "bsdtar", "cpio", "skopeo", "umoci"}

// refRow is one output's reference readers, run with no options beyond
// naming the format where a reader cannot tell it (a fixed VHD begins
// with the disk itself).
type refRow struct {
	output string // the everySpec name
	read   func(t *testing.T, r *refRun, path string)
}

// refRun is what the rows share: the raw disk every disk format holds.
type refRun struct {
	raw string
}

// refRows: a new format adds its row here; TestReferenceReaders fails for
// a format of Table with none.
var refRows = []refRow{
	{"raw", func(t *testing.T, r *refRun, p string) { checkDisk(t, p) }},
	{"qcow2", func(t *testing.T, r *refRun, p string) { r.qemuDisk(t, p, "qcow2") }},
	{"vhd", func(t *testing.T, r *refRun, p string) { r.qemuDisk(t, p, "vpc") }},
	{"vhd-dynamic", func(t *testing.T, r *refRun, p string) { r.qemuDisk(t, p, "vpc") }},
	{"vmdk", func(t *testing.T, r *refRun, p string) { r.qemuDisk(t, p, "vmdk") }},
	{"vmdk-sparse", func(t *testing.T, r *refRun, p string) { r.qemuDisk(t, p, "vmdk") }},
	{"ova", func(t *testing.T, r *refRun, p string) {
		names := tarListings(t, p, 3)
		x := extractTar(t, p)
		for _, n := range names {
			if strings.HasSuffix(n, ".vmdk") {
				r.qemuDisk(t, filepath.Join(x, n), "vmdk")
			}
		}
	}},
	{"gce", func(t *testing.T, r *refRun, p string) {
		if names := tarListings(t, p, 1); names[0] != GCEDiskName {
			t.Errorf("the archive holds %v", names)
		}
		d := filepath.Join(extractTar(t, p), GCEDiskName)
		if fi, err := os.Stat(d); err != nil || fi.Size()%gib != 0 {
			t.Fatalf("%s: %v (not a whole GiB)", d, err)
		}
		checkDisk(t, d)
	}},
	{"cpio", func(t *testing.T, r *refRun, p string) { cpioListings(t, p) }},
	{"pxe", func(t *testing.T, r *refRun, p string) {
		cpioListings(t, filepath.Join(p, PXEInitrd))
		if b, err := os.ReadFile(filepath.Join(p, PXEScript)); err != nil || !bytes.HasPrefix(b, []byte("#!ipxe")) {
			t.Errorf("%s: %v %q", PXEScript, err, b)
		}
	}},
	{"tar", func(t *testing.T, r *refRun, p string) { tarListings(t, p, 5) }},
	{"oci", func(t *testing.T, r *refRun, p string) {
		run(t, "skopeo", "inspect", "oci:"+p+":"+OCIRefName)
		umociUnpack(t, p)
	}},
	{"containerdisk", func(t *testing.T, r *refRun, p string) {
		run(t, "skopeo", "inspect", "oci-archive:"+p+":"+OCIRefName)
		root := umociUnpack(t, extractTar(t, p))
		disks, _ := filepath.Glob(filepath.Join(root, "disk", "*"))
		if len(disks) != 1 {
			t.Fatalf("the containerDisk holds %v under /disk", disks)
		}
		r.qemuDisk(t, disks[0], "qcow2")
	}},
}

// TestReferenceReaders writes an output of every format and kind from one
// tree and has each format's reference reader read it: qemu-img check
// (where qemu can check the format), compare with the raw disk and
// convert back to raw for the disk images; sgdisk -v on every disk, the
// raw, GCE's disk.raw and each image converted back, and e2fsck -fn and
// fsck.vfat -n on their partitions; GNU tar and bsdtar for tar archives,
// GNU cpio and bsdtar for cpio; skopeo inspect and umoci unpack for OCI.
// Every format of Table needs a row.
func TestReferenceReaders(t *testing.T) {
	harness.RequireTools(t, refReaderTools...)
	dir := t.TempDir()
	outs := writeEvery(t, everyTree(t), everySpec(), dir)
	rows := map[string]refRow{}
	for _, row := range refRows {
		rows[row.output] = row
	}
	r := &refRun{}
	for _, w := range outs {
		if w.spec.Format == "raw" {
			r.raw = w.path
		}
	}
	covered := map[string]bool{}
	for _, w := range outs {
		row, ok := rows[w.spec.Name]
		if !ok {
			t.Errorf("output %s (%s) has no row of reference readers", w.spec.Name, w.spec.Format)
			continue
		}
		covered[w.spec.Format] = true
		t.Run(w.spec.Name, func(t *testing.T) { row.read(t, r, w.path) })
	}
	for _, e := range Table() {
		if !covered[e.Name] {
			t.Errorf("format %s is in Table but no row reads it with its reference reader", e.Name)
		}
	}
}

// qemuDisk reads a disk image as qemu-img reads it with only its format
// named: check (qemu's vpc driver has none, and says so), the same size
// and bytes as the raw disk, and converted to raw, the raw disk byte for
// byte, whose table and file systems pass their checkers.
func (r *refRun) qemuDisk(t *testing.T, img, format string) {
	t.Helper()
	out, err := exec.Command("qemu-img", "check", "-f", format, img).CombinedOutput()
	switch {
	case format == "vpc" && strings.Contains(string(out), "does not support checks"):
	case err != nil || !strings.Contains(string(out), "No errors were found"):
		t.Errorf("qemu-img check -f %s: %v\n%s", format, err, out)
	}
	fi, err := os.Stat(r.raw)
	if err != nil {
		t.Fatal(err)
	}
	if info := run(t, "qemu-img", "info", "--output=json", "-f", format, img); !strings.Contains(info, fmt.Sprintf(`"virtual-size": %d,`, fi.Size())) {
		t.Errorf("qemu-img info: not the raw's %d bytes:\n%s", fi.Size(), info)
	}
	if out := run(t, "qemu-img", "compare", "-f", "raw", "-F", format, r.raw, img); !strings.Contains(out, "Images are identical.") {
		t.Errorf("qemu-img compare: %s", out)
	}
	back := filepath.Join(t.TempDir(), "back.raw")
	run(t, "qemu-img", "convert", "-f", format, "-O", "raw", img, back)
	if !sameFile(t, back, r.raw) {
		t.Errorf("qemu-img convert back to raw does not give the raw disk")
	}
	checkDisk(t, back)
}

// checkDisk is sgdisk -v on a disk, then fsck.vfat -n or e2fsck -fn on
// each of its partitions, by the file system it holds.
func checkDisk(t *testing.T, img string) {
	t.Helper()
	sgdiskClean(t, img)
	_, parts := readGPT(t, img)
	if len(parts) == 0 {
		t.Fatalf("%s: no partitions", img)
	}
	for _, p := range parts {
		x := extract(t, img, p)
		head := make([]byte, 2048)
		f, err := os.Open(x)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadFull(f, head)
		f.Close()
		switch {
		case string(head[1080:1082]) == "\x53\xef":
			run(t, "e2fsck", "-fn", x)
		case string(head[82:87]) == "FAT32" || string(head[54:59]) == "FAT16" || string(head[54:59]) == "FAT12":
			run(t, "fsck.vfat", "-n", x)
		default:
			t.Errorf("%s: partition %s holds no file system a checker knows", img, p.Name)
		}
	}
}

// tarListings lists a tar archive with GNU tar and with bsdtar, which must
// agree, holding at least min members; it returns GNU tar's names.
func tarListings(t *testing.T, p string, min int) []string {
	t.Helper()
	gnu := lines(run(t, "tar", "-tf", p))
	bsd := lines(run(t, "bsdtar", "-tf", p))
	if !slices.Equal(gnu, bsd) {
		t.Errorf("GNU tar lists %d members, bsdtar %d:\n%v\n%v", len(gnu), len(bsd), gnu, bsd)
	}
	if len(gnu) < min {
		t.Errorf("%s: %d members", p, len(gnu))
	}
	return gnu
}

// cpioListings lists a compressed cpio archive with GNU cpio (from its
// decompressor, as cpio reads plain archives) and bsdtar, which must
// agree and read it without complaint.
func cpioListings(t *testing.T, p string) {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", p, err)
	}
	cmd := exec.Command("cpio", "-t", "--quiet")
	cmd.Stdin = zr
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || stderr.Len() > 0 {
		t.Fatalf("cpio -t: %v\n%s", err, stderr.String())
	}
	gnu := lines(string(out))
	bsd := lines(run(t, "bsdtar", "-tf", p))
	if !slices.Equal(gnu, bsd) {
		t.Errorf("GNU cpio lists %d members, bsdtar %d", len(gnu), len(bsd))
	}
	if !slices.ContainsFunc(gnu, func(s string) bool { return regexp.MustCompile(`^(\./)?(usr/)?bin/su$`).MatchString(s) }) {
		t.Errorf("%s: no usr/bin/su among %d members", p, len(gnu))
	}
}

// umociUnpack unpacks the layout's image with umoci into a bundle and
// returns its root file system.
func umociUnpack(t *testing.T, layout string) string {
	t.Helper()
	bundle := filepath.Join(t.TempDir(), "bundle")
	run(t, "umoci", "unpack", "--rootless", "--image", layout+":"+OCIRefName, bundle)
	root := filepath.Join(bundle, "rootfs")
	if entries, err := os.ReadDir(root); err != nil || len(entries) == 0 {
		t.Fatalf("umoci unpack: an empty root file system (%v)", err)
	}
	return root
}

// extractTar extracts a (compressed) tar with GNU tar into a new
// directory.
func extractTar(t *testing.T, p string) string {
	t.Helper()
	x := t.TempDir()
	run(t, "tar", "-xf", p, "-C", x)
	return x
}

func lines(s string) []string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

// sameFile compares two files' bytes.
func sameFile(t *testing.T, a, b string) bool {
	t.Helper()
	fa, err := os.Open(a)
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		t.Fatal(err)
	}
	defer fb.Close()
	ba, bb := make([]byte, 1<<20), make([]byte, 1<<20)
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false
		}
		if ea != nil || eb != nil {
			return ea == eb || (ea == io.ErrUnexpectedEOF || ea == io.EOF) && (eb == io.ErrUnexpectedEOF || eb == io.EOF)
		}
	}
}
