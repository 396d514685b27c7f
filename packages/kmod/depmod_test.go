package kmod

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

// kmod's own depmod (Debian bookworm's kmod 30) is the oracle: every test
// runs it on the same tree and compares every file it writes, byte for byte.

const testVersion = "6.1.0-99-test"

// indexNames are the files depmod writes.
var indexNames = []string{"modules.alias", "modules.alias.bin", "modules.builtin.alias.bin",
	"modules.builtin.bin", "modules.dep", "modules.dep.bin", "modules.devname", "modules.softdep",
	"modules.symbols", "modules.symbols.bin"}

// runOracle runs `depmod -b root` on the image at root, reading the
// image's depmod.d directories (kmod 30 reads the host's unless told), and
// returns what it wrote into the module directory, or its error and
// output.
func runOracle(t *testing.T, root, version string) (map[string][]byte, error) {
	t.Helper()
	args := []string{"-b", root}
	for _, d := range DefaultConfigDirs {
		args = append(args, "-C", filepath.Join(root, d))
	}
	dir := filepath.Join(root, "lib/modules", version)
	before := listDir(t, dir)
	out, err := exec.Command(harness.Tool(t, "depmod"), append(args, version)...).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, out)
	}
	got := map[string][]byte{}
	for _, name := range listDir(t, dir) {
		if slices.Contains(before, name) {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got[name] = b
		// Leave the tree as it was for the next run.
		os.Remove(filepath.Join(dir, name))
	}
	return got, nil
}

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// runOurs runs Depmod on the image at root.
func runOurs(t *testing.T, root, version string) ([]Index, error) {
	t.Helper()
	return Depmod(context.Background(), os.DirFS(root), version, Options{Warnf: t.Logf})
}

// compare runs both on root and fails on any difference.
func compare(t *testing.T, root, version string) map[string][]byte {
	t.Helper()
	want, err := runOracle(t, root, version)
	if err != nil {
		t.Fatalf("kmod's depmod: %v", err)
	}
	got, err := runOurs(t, root, version)
	if err != nil {
		t.Fatalf("Depmod: %v", err)
	}
	var names []string
	for _, ix := range got {
		names = append(names, ix.Name)
		w, ok := want[ix.Name]
		if !ok {
			t.Errorf("%s: kmod wrote no such file", ix.Name)
			continue
		}
		if !bytes.Equal(ix.Data, w) {
			t.Errorf("%s differs from kmod's (%d bytes, kmod %d): %s", ix.Name, len(ix.Data), len(w), firstDiff(ix.Data, w))
		}
	}
	for name := range want {
		if !slices.Contains(names, name) {
			t.Errorf("kmod wrote %s, Depmod did not", name)
		}
	}
	slices.Sort(names)
	if !slices.Equal(names, indexNames) {
		t.Errorf("Depmod wrote %v, want %v", names, indexNames)
	}
	return want
}

// firstDiff describes where two files part.
func firstDiff(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	lo := max(0, i-40)
	return fmt.Sprintf("at byte %d: ours %q, kmod's %q", i, a[lo:min(len(a), i+40)], b[lo:min(len(b), i+40)])
}

// TestKernels compares the indexes of Debian's amd64 and arm64 kernels, all
// of their modules (the harness unpacks each once per machine).
func TestKernels(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			kit := harness.BootPartsFor(t, arch)
			root := kernelTree(t, kit.Modules, kit.KernelVersion)
			want := compare(t, root, kit.KernelVersion)
			for _, name := range []string{"modules.dep", "modules.alias", "modules.symbols", "modules.devname", "modules.builtin.alias.bin"} {
				if len(want[name]) < 100 {
					t.Errorf("%s: kmod wrote only %d bytes; the kernel's modules were not read", name, len(want[name]))
				}
			}
			t.Logf("%s %s: %d indexes identical to kmod's, modules.dep %d lines", arch, kit.KernelVersion,
				len(want), bytes.Count(want["modules.dep"], []byte("\n")))
			if arch == "amd64" {
				throughTree(t, kit.Modules, kit.KernelVersion, want)
			}
		})
	}
}

// throughTree runs Depmod on the kernel as the maintainer-script handler
// does, through a rootfs.Tree's view, whose module directory lives under
// /usr as on a merged-/usr image, and compares with kmod's indexes.
func throughTree(t *testing.T, modules, version string, want map[string][]byte) {
	t.Helper()
	tr := rootfstest.New(t, rootfstest.Epoch)
	dst := filepath.Join(tr.Dir(), "usr/lib/modules", version)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", modules, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v\n%s", err, out)
	}
	if err := os.Symlink("usr/lib", filepath.Join(tr.Dir(), "lib")); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Rescan(context.Background(), rootfs.Origin{Layer: "test"}); err != nil {
		t.Fatal(err)
	}
	got, err := Depmod(context.Background(), tr.View().FS(), version, Options{Warnf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	for _, ix := range got {
		if !bytes.Equal(ix.Data, want[ix.Name]) {
			t.Errorf("through a rootfs.Tree: %s differs from kmod's: %s", ix.Name, firstDiff(ix.Data, want[ix.Name]))
		}
	}
}

// kernelTree makes an image root whose module directory holds the kernel's
// files: the module tree as a symlink into the harness's cache (both sides
// follow it), the small files copied.
func kernelTree(t *testing.T, modules, version string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "lib/modules", version)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ents, err := os.ReadDir(modules)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		src := filepath.Join(modules, e.Name())
		if e.IsDir() {
			if err := os.Symlink(src, filepath.Join(dir, e.Name())); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(dir, e.Name()), b)
	}
	return root
}

func writeFile(t *testing.T, p string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// tree is a hand-made image: modules by path under the module directory,
// other files by image path.
type tree struct {
	modules map[string]testModule
	files   map[string]string
}

func (tr tree) write(t *testing.T, root string) {
	t.Helper()
	dir := filepath.Join(root, "lib/modules", testVersion)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, m := range tr.modules {
		writeFile(t, filepath.Join(dir, p), m.bytes())
	}
	for p, body := range tr.files {
		p = strings.ReplaceAll(p, "$MODDIR", "/lib/modules/"+testVersion)
		writeFile(t, filepath.Join(root, p), []byte(body))
	}
}

// compressed writes the module at rel, compressed by the tool cmd (xz, zstd,
// gzip) to rel+ext.
func compressed(t *testing.T, root, rel, ext string, m testModule, cmd ...string) {
	t.Helper()
	p := filepath.Join(root, "lib/modules", testVersion, rel)
	c := exec.Command(harness.Tool(t, cmd[0]), cmd[1:]...)
	c.Stdin = bytes.NewReader(m.bytes())
	out, err := c.Output()
	if err != nil {
		t.Fatalf("%s: %v", cmd[0], err)
	}
	writeFile(t, p+ext, out)
}

// order is a modules.order naming the paths.
func order(paths ...string) string { return strings.Join(paths, "\n") + "\n" }

func TestHandMade(t *testing.T) {
	base := map[string]testModule{
		"kernel/lib/crc-x.ko": {modinfo: []string{"license=GPL", "description=crc"},
			exports: []string{"crc_x", "crc_x_update"}, crcs: true, versions: []string{"module_layout"}},
		"kernel/fs/fsx/fsx.ko": {modinfo: []string{"license=GPL", "alias=fs-fsx", "alias=devname:fsx-ctl", "alias=char-major-10-229",
			"softdep=pre: crc-x post: helper_a", "depends=crc-x,jbdx"},
			exports: []string{"fsx_register"}, needs: []string{"crc_x", "jbdx_start", "printk", "kfree"},
			versions: []string{"module_layout", "crc_x", "printk"}},
		"kernel/fs/jbdx/jbdx.ko": {modinfo: []string{"license=GPL"}, exports: []string{"jbdx_start", "jbdx_stop"},
			needs: []string{"crc_x_update", "optional_thing"}, weak: []string{"optional_thing"}},
		"kernel/drivers/net/net-a.ko": {modinfo: []string{"alias=pci:v00001AF4d00001000sv*sd*bc*sc*i*",
			"alias=pci:v0000[0-9]d-1*", "alias=net-pf-10-proto-6", "alias=bad]bracket", "alias=bad[bracket"},
			needs: []string{"fsx_register", "optional_thing"}, weak: []string{"optional_thing"}},
		"kernel/drivers/net/helper_a.ko": {modinfo: []string{"alias=devname:helper", "alias=block-major-8-*",
			"alias=block-major-259-0", "alias=char-major-4294967296-+7"}, exports: []string{"optional_thing"}},
		"kernel/drivers/misc/nosyms.ko": {modinfo: []string{"license=GPL", "alias=devname:lonely"}},
		"kernel/drivers/misc/empty.ko":  {},
		// Two modules export dup_sym: the later one in module order owns it.
		"kernel/drivers/misc/dup1.ko": {exports: []string{"dup_sym"}},
		"kernel/drivers/misc/dup2.ko": {exports: []string{"dup_sym"}},
		"kernel/drivers/misc/user.ko": {needs: []string{"dup_sym", ".crc_x"}},
		// Modules that modules.order does not name come after it, in
		// kmod's hash order.
		"extra/zzz.ko": {needs: []string{"crc_x"}}, "extra/aaa.ko": {}, "extra/mmm-x.ko": {needs: []string{"jbdx_stop"}},
		"kernel/arch/big32.ko": {elf32: true, msb: true, machine: 22, modinfo: []string{"alias=s390-thing"},
			exports: []string{"big32_fn"}, needs: []string{"crc_x"}},
		"kernel/arch/little32.ko": {elf32: true, machine: 3, needs: []string{"big32_fn"}, versions: []string{"big32_fn", "module_layout"}},
	}
	baseOrder := order("kernel/lib/crc-x.ko", "kernel/fs/jbdx/jbdx.ko", "kernel/fs/fsx/fsx.ko",
		"kernel/drivers/net/helper_a.ko", "kernel/drivers/net/net-a.ko", "kernel/drivers/misc/nosyms.ko",
		"kernel/drivers/misc/empty.ko", "kernel/drivers/misc/dup2.ko", "kernel/drivers/misc/dup1.ko",
		"kernel/drivers/misc/user.ko", "kernel/arch/big32.ko", "kernel/arch/little32.ko", "kernel/not/there.ko")
	builtin := "kernel/fs/ext4/ext4.ko\nkernel/crypto/crc32c-generic.ko\nkernel/lib/zlib_inflate/zlib_inflate.ko\n" +
		"kernel/fs/ext4/ext4.ko\n3rd/bad.ko\nnoext\n"
	builtinModinfo := "ext4.alias=fs-ext4\x00ext4.license=GPL\x00ext4.alias=ext3\x00ext4.alias=fs-ext3\x00" +
		"crc32c_generic.alias=crypto-crc32c\x00crc32c_generic.alias=crc32c-generic\x00" +
		"nodot=broken\x00ext4.alias\x00skipped.alias=gone\x00" +
		"zlib.alias=z[lib]-x\x00zlib.alias=unterminated"

	cases := []struct {
		name    string
		tree    tree
		prepare func(t *testing.T, root string)
	}{
		{name: "modules", tree: tree{modules: base, files: map[string]string{
			"$MODDIR/modules.order": baseOrder, "$MODDIR/modules.builtin": builtin,
			"$MODDIR/modules.builtin.modinfo": builtinModinfo}}},
		{name: "no modules", tree: tree{}},
		{name: "no modules.order", tree: tree{modules: base}},
		{name: "modules.order without last newline", tree: tree{modules: base, files: map[string]string{
			"$MODDIR/modules.order": strings.TrimSuffix(baseOrder, "\n")}}},
		{name: "search override exclude", tree: tree{
			modules: map[string]testModule{
				"kernel/a/dup.ko":      {exports: []string{"from_kernel"}},
				"updates/dup.ko":       {exports: []string{"from_updates"}},
				"extra/dup.ko":         {exports: []string{"from_extra"}},
				"kernel/b/over-x.ko":   {exports: []string{"over_kernel"}},
				"weak/over-x.ko":       {exports: []string{"over_weak"}},
				"kernel/c/skipme/s.ko": {exports: []string{"skipped"}},
				"kernel/c/t.ko":        {needs: []string{"skipped", "from_extra", "from_kernel", "over_weak"}},
				"build/built.ko":       {exports: []string{"never"}},
				"kernel/c/source":      {},
			},
			files: map[string]string{
				"/etc/depmod.d/10-search.conf": "# which first\nsearch extra updates built-in\n\nexclude skipme\n",
				"/lib/depmod.d/override.conf":  "override over-x * weak\noverride dup 5.* updates\n  bogus line\noverride short\n",
				// Hidden by /etc's file of the same name.
				"/lib/depmod.d/10-search.conf":   "search updates\n",
				"/etc/depmod.d/notconf":          "search kernel\n",
				"/run/depmod.d/20-wrapped.conf":  "exclude \\\nnothing\n",
				"/usr/local/lib/depmod.d/x.conf": "override dup 6\\.1\\..* extra\n",
			}}},
		{name: "default search", tree: tree{modules: map[string]testModule{
			"kernel/a/dup.ko": {exports: []string{"from_kernel"}},
			"updates/dup.ko":  {exports: []string{"from_updates"}},
			"kernel/x/u.ko":   {needs: []string{"from_updates", "from_kernel"}},
		}}},
		{name: "external", tree: tree{modules: map[string]testModule{
			"kernel/a/ext-mod.ko": {exports: []string{"in_kernel"}},
			"kernel/a/user.ko":    {needs: []string{"in_external", "in_kernel"}},
		}}, prepare: func(t *testing.T, root string) {
			// kmod 30 reads external directories from the host even
			// with -b; the image holds the same files at the same path.
			ext := t.TempDir()
			for _, dir := range []string{ext, filepath.Join(root, ext)} {
				writeFile(t, filepath.Join(dir, "ext-mod.ko"), testModule{exports: []string{"in_external", "in_kernel"}}.bytes())
				writeFile(t, filepath.Join(dir, "sub/other.ko"), testModule{needs: []string{"in_kernel"}}.bytes())
			}
			writeFile(t, filepath.Join(root, "etc/depmod.d/ext.conf"),
				[]byte("search external built-in\nexternal * "+ext+"\nexternal 5.4 /nowhere\n"))
		}},
		{name: "compressed", tree: tree{modules: map[string]testModule{
			"kernel/plain.ko": {exports: []string{"plain_sym"}, needs: []string{"xz_sym", "zst_sym", "gz_sym"}},
		}, files: map[string]string{"$MODDIR/modules.order": order("kernel/c/xzmod.ko", "kernel/plain.ko", "kernel/c/zstmod.ko")}},
			prepare: func(t *testing.T, root string) {
				compressed(t, root, "kernel/c/xzmod.ko", ".xz", testModule{exports: []string{"xz_sym"}, modinfo: []string{"alias=xz-alias"}}, "xz", "-c", "--check=crc32")
				compressed(t, root, "kernel/c/zstmod.ko", ".zst", testModule{exports: []string{"zst_sym"}, needs: []string{"xz_sym"}}, "zstd", "-c", "-q")
				// kmod 30 in bookworm is built without zlib: no module.
				compressed(t, root, "kernel/c/gzmod.ko", ".gz", testModule{exports: []string{"gz_sym"}}, "gzip", "-c", "-n")
				// Content decides, not the name: an xz stream named .ko
				// is read, and so is a plain module named .ko.zst.
				compressed(t, root, "kernel/c/named.ko", "", testModule{exports: []string{"named_sym"}}, "xz", "-c")
				writeFile(t, filepath.Join(root, "lib/modules", testVersion, "kernel/c/liar.ko.zst"), testModule{needs: []string{"named_sym"}}.bytes())
				// Not a module, and too short to be one.
				writeFile(t, filepath.Join(root, "lib/modules", testVersion, "kernel/c/junk.ko"), []byte("junk file"))
				writeFile(t, filepath.Join(root, "lib/modules", testVersion, "kernel/c/tiny.ko"), []byte("\x7fEL"))
			}},
		{name: "symlinks", tree: tree{modules: map[string]testModule{
			"kernel/real/r.ko": {exports: []string{"real_sym"}},
			"kernel/u.ko":      {needs: []string{"real_sym", "linked_sym", "file_sym"}},
		}}, prepare: func(t *testing.T, root string) {
			writeFile(t, filepath.Join(root, "opt/mods/l.ko"), testModule{exports: []string{"linked_sym"}}.bytes())
			writeFile(t, filepath.Join(root, "opt/file.ko"), testModule{exports: []string{"file_sym"}}.bytes())
			dir := filepath.Join(root, "lib/modules", testVersion)
			for link, target := range map[string]string{"kernel/linkdir": "../../../../opt/mods", "kernel/f.ko": "../../../../opt/file.ko",
				"kernel/dangling.ko": "nowhere.ko", "kernel/fifo.ko": ""} {
				if target == "" {
					if err := syscall.Mkfifo(filepath.Join(dir, link), 0o644); err != nil {
						t.Fatal(err)
					}
					continue
				}
				if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
					t.Fatal(err)
				}
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			c.tree.write(t, root)
			if err := os.MkdirAll(filepath.Join(root, "lib/modules", testVersion), 0o755); err != nil {
				t.Fatal(err)
			}
			if c.prepare != nil {
				c.prepare(t, root)
			}
			want := compare(t, root, testVersion)
			if testing.Verbose() {
				t.Logf("modules.dep:\n%s", want["modules.dep"])
			}
		})
	}
}

// A dependency cycle fails both, and neither writes an index.
func TestCycle(t *testing.T) {
	root := t.TempDir()
	tree{modules: map[string]testModule{
		"kernel/a.ko": {exports: []string{"a_sym"}, needs: []string{"b_sym"}},
		"kernel/b.ko": {exports: []string{"b_sym"}, needs: []string{"c_sym"}},
		"kernel/c.ko": {exports: []string{"c_sym"}, needs: []string{"a_sym"}},
		"kernel/d.ko": {needs: []string{"a_sym"}},
		"kernel/e.ko": {exports: []string{"e_sym"}, needs: []string{"e_sym"}},
	}}.write(t, root)
	_, kerr := runOracle(t, root, testVersion)
	if kerr == nil || !strings.Contains(kerr.Error(), "Cycle detected") {
		t.Fatalf("kmod's depmod: %v, want a cycle reported", kerr)
	}
	if names := listDir(t, filepath.Join(root, "lib/modules", testVersion)); slices.Contains(names, "modules.dep") {
		t.Fatalf("kmod wrote %v", names)
	}
	_, err := runOurs(t, root, testVersion)
	var ce *CycleError
	if !errors.As(err, &ce) {
		t.Fatalf("Depmod: %v, want a CycleError", err)
	}
	if ce.Modules != 4 || len(ce.Cycles) != 2 {
		t.Errorf("cycles %v (%d modules), want a -> b -> c -> a and e -> e", ce.Cycles, ce.Modules)
	}
	t.Logf("kmod: %v\nours: %v", kerr, err)
}

func TestValidVersion(t *testing.T) {
	for v, want := range map[string]bool{"6.1.0-57-amd64": true, "6.1": true, " 6. 1": true, "+6.-1x": true,
		"6": false, "6.": false, "x6.1": false, "": false, "6..1": false} {
		if got := ValidVersion(v); got != want {
			t.Errorf("ValidVersion(%q) = %v, want %v", v, got, want)
		}
	}
}

// depmod -A: nothing to do while no module is newer than modules.dep, to
// the second, as kmod's depfile_up_to_date compares them.
func TestUpToDate(t *testing.T) {
	root := t.TempDir()
	tree{modules: map[string]testModule{"kernel/a/a.ko": {}, "kernel/b.ko": {}},
		files: map[string]string{"$MODDIR/build/new.ko": "", "$MODDIR/kernel/a/notes.txt": ""}}.write(t, root)
	dir := filepath.Join(root, "lib/modules", testVersion)
	fsys := os.DirFS(root)
	if fresh, err := UpToDate(fsys, testVersion); err == nil || fresh {
		t.Errorf("without modules.dep: %v, %v; want stale, with an error", fresh, err)
	}
	writeFile(t, filepath.Join(dir, "modules.dep"), nil)
	at := func(rel string, sec int64) {
		tm := time.Unix(sec, 500_000_000)
		if err := os.Chtimes(filepath.Join(dir, rel), tm, tm); err != nil {
			t.Fatal(err)
		}
	}
	at("modules.dep", 1000)
	at("kernel/a/a.ko", 1000)
	at("kernel/b.ko", 999)
	// Not modules, or not walked: newer, and they do not count.
	at("build/new.ko", 2000)
	at("kernel/a/notes.txt", 2000)
	if fresh, err := UpToDate(fsys, testVersion); err != nil || !fresh {
		t.Errorf("nothing newer: %v, %v; want up to date", fresh, err)
	}
	at("kernel/a/a.ko", 1001)
	if fresh, err := UpToDate(fsys, testVersion); err != nil || fresh {
		t.Errorf("a.ko newer: %v, %v; want stale", fresh, err)
	}
}

// A module that decompresses to more than MaxModuleSize is not read whole
// into memory: it is listed, as one kmod cannot open is, with a warning.
func TestDecompressionBomb(t *testing.T) {
	root := t.TempDir()
	tree{modules: map[string]testModule{"kernel/user.ko": {needs: []string{"bomb_sym"}}}}.write(t, root)
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(testModule{exports: []string{"bomb_sym"}}.bytes())
	zeros := make([]byte, 1<<20)
	const limit = 4 << 20
	for range limit >> 20 {
		zw.Write(zeros)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "lib/modules", testVersion, "kernel/bomb.ko.zst"), buf.Bytes())
	var warnings []string
	idx, err := Depmod(context.Background(), os.DirFS(root), testVersion, Options{MaxModuleSize: limit,
		Warnf: func(f string, a ...any) { warnings = append(warnings, fmt.Sprintf(f, a...)) }})
	if err != nil {
		t.Fatal(err)
	}
	for _, ix := range idx {
		if ix.Name == "modules.dep" && string(ix.Data) != "kernel/bomb.ko.zst:\nkernel/user.ko:\n" {
			t.Errorf("modules.dep:\n%s", ix.Data)
		}
	}
	if !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "bomb.ko.zst") && strings.Contains(w, "more than") }) {
		t.Errorf("no warning names the module: %q", warnings)
	}
}

// A byte above 127 cannot go into kmod's tries (kmod indexes out of its
// child table with it): the run fails, naming the module.
func TestNonASCIIRefused(t *testing.T) {
	root := t.TempDir()
	tree{modules: map[string]testModule{"kernel/ok.ko": {}, "kernel/odd.ko": {modinfo: []string{"alias=caf\xc3\xa9"}}}}.write(t, root)
	_, err := runOurs(t, root, testVersion)
	if err == nil || !strings.Contains(err.Error(), "kernel/odd.ko") || !strings.Contains(err.Error(), "7-bit ASCII") {
		t.Errorf("err = %v, want the module and the byte named", err)
	}
}
