package formats

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

// pxeTestTree is tarTestTree with a kernel and a busybox. Neither runs
// here: the boot tests in test/e2e boot real ones.
func pxeTestTree(t *testing.T) *rootfs.Tree {
	t.Helper()
	tree := tarTestTree(t)
	for p, c := range map[string]string{"/boot/vmlinuz-6.1.0-9-amd64": "old kernel", "/boot/vmlinuz-6.1.0-10-amd64": "kernel image", "/usr/bin/busybox": "\x7fELF busybox"} {
		rootfstest.File(t, tree, p, 0o755, tarEpoch, c)
	}
	return tree
}

func readDirFiles(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPXEBundle(t *testing.T) {
	tree := pxeTestTree(t)
	dir := filepath.Join(t.TempDir(), "bundle")
	b, err := WritePXE(context.Background(), tree.View(), dir, PXEOptions{MTime: tarEpoch, Name: "node", Cmdline: "console=ttyS0 panic=-1"})
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := []string{PXESums, PXEScript, PXEInitrd, PXELinuxCfg, PXEKernel}
	slices.Sort(wantFiles)
	if !slices.Equal(b.Files, wantFiles) {
		t.Errorf("files = %q, want %q", b.Files, wantFiles)
	}
	files := readDirFiles(t, dir)
	if len(files) != len(wantFiles) {
		t.Errorf("the bundle directory holds %d files, want %d", len(files), len(wantFiles))
	}
	if string(files[PXEKernel]) != "kernel image" {
		t.Errorf("vmlinuz is %q, want the newest kernel", files[PXEKernel])
	}
	if want := "#!ipxe\n# stamp live boot of node: the kernel and initramfs beside this script\nkernel vmlinuz initrd=initrd.img console=ttyS0 panic=-1\ninitrd initrd.img\nboot\n"; string(files[PXEScript]) != want {
		t.Errorf("boot.ipxe:\n%s\nwant\n%s", files[PXEScript], want)
	}
	if cfg := string(files[PXELinuxCfg]); !strings.Contains(cfg, "\tKERNEL vmlinuz\n\tINITRD initrd.img\n\tAPPEND console=ttyS0 panic=-1\n") || !strings.Contains(cfg, "DEFAULT stamp\n") {
		t.Errorf("pxelinux.cfg/default:\n%s", cfg)
	}
	cmd := exec.Command("sha256sum", "--check", "--strict", PXESums)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil || strings.Count(string(out), ": OK") != 4 {
		t.Errorf("sha256sum --check: %v\n%s", err, out)
	}

	initrd, list, err := ReadCpio(context.Background(), bytes.NewReader(files[PXEInitrd]))
	if err != nil {
		t.Fatal(err)
	}
	if a, _, _ := compress.Detect(bytes.NewReader(files[PXEInitrd])); a != compress.Zstd {
		t.Errorf("initrd compression %s, want zstd", a)
	}
	var rest []*rootfs.Entry
	var init *rootfs.Entry
	for _, e := range initrd.Entries() {
		if e.Path == "/init" {
			init = e
		} else {
			rest = append(rest, e)
		}
	}
	tarCompareEntries(t, rest, tree.Entries())
	if init == nil || list == nil || init.Perm != 0o755 {
		t.Fatalf("initrd lacks /init or the xattr list")
	}
	wantAdds := []string{rootfs.ManifestLine(list, nil, false), rootfs.ManifestLine(init, nil, false)}
	for _, name := range []string{PXEScript, PXELinuxCfg, PXESums} {
		wantAdds = append(wantAdds, manifestFileLine(name, 0o644, tarEpoch, files[name]))
	}
	if !slices.Equal(b.Adds, wantAdds) {
		t.Errorf("adds\n%q\nwant\n%q", b.Adds, wantAdds)
	}
	if len(b.Warnings) != 1 || !strings.Contains(b.Warnings[0], "/usr/bin/ping") || !strings.Contains(b.Warnings[0], "setfattr") {
		t.Errorf("warnings = %q, want one naming /usr/bin/ping", b.Warnings)
	}

	again := filepath.Join(t.TempDir(), "again")
	if _, err := WritePXE(context.Background(), tree.View(), again, PXEOptions{MTime: tarEpoch, Name: "node", Cmdline: "console=ttyS0 panic=-1"}); err != nil {
		t.Fatal(err)
	}
	for name, data := range readDirFiles(t, again) {
		if !bytes.Equal(data, files[name]) {
			t.Errorf("%s differs between two builds", name)
		}
	}
}

func TestPXELiveInit(t *testing.T) {
	tree := pxeTestTree(t)
	init := string(liveInit("/usr/bin/busybox", "", tree.Children("/")))
	for _, want := range []string{
		"#!/usr/bin/busybox sh\n",
		"tar -c -f - './bin' './boot' './dev' './etc' './home' './opt' './run' './srv' './tmp' './usr' | $bb tar -x -f - -C \"$new\"",
		"exec $bb switch_root \"$new\" \"$init\" \"$@\"\n",
		"the tree has no setfattr",
	} {
		if !strings.Contains(init, want) {
			t.Errorf("live init lacks %q:\n%s", want, init)
		}
	}
	with := string(liveInit("/usr/bin/busybox", "/usr/bin/setfattr", []string{"it's"}))
	if !strings.Contains(with, "/usr/bin/setfattr -h --restore=/.stamp-xattrs") || !strings.Contains(with, `'./it'\''s'`) {
		t.Errorf("live init with setfattr:\n%s", with)
	}
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal("busybox not found; run test/scripts/deps.sh")
	}
	for _, script := range []string{init, with} {
		p := filepath.Join(t.TempDir(), "init")
		os.WriteFile(p, []byte(script), 0o755)
		if out, err := exec.Command(bb, "sh", "-n", p).CombinedOutput(); err != nil {
			t.Errorf("busybox sh -n: %v\n%s\n%s", err, out, script)
		}
	}
	// With setfattr in the tree, nothing is lost and nothing is warned.
	if _, err := tree.Create("/usr/bin/setfattr", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o755, MTime: tarEpoch}, strings.NewReader("\x7fELF")); err != nil {
		t.Fatal(err)
	}
	b, err := WritePXE(context.Background(), tree.View(), t.TempDir(), PXEOptions{Compression: compress.None})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Warnings) != 0 {
		t.Errorf("warnings = %q", b.Warnings)
	}
}

// A bundle made from a cpio output holds that output with the live /init
// appended, and unpacks to the same entries as one made from the tree.
func TestPXEFromCpio(t *testing.T) {
	tree := pxeTestTree(t)
	for _, a := range []compress.Algorithm{compress.None, compress.Gzip, compress.Zstd} {
		t.Run(string(a), func(t *testing.T) {
			cpioPath := filepath.Join(t.TempDir(), "node.cpio")
			cpioData := writeCpioBytes(t, tree, CpioOptions{Compression: a, MTime: tarEpoch})
			if err := os.WriteFile(cpioPath, cpioData, 0o644); err != nil {
				t.Fatal(err)
			}
			fromDir, treeDir := t.TempDir(), t.TempDir()
			fb, err := WritePXE(context.Background(), tree.View(), fromDir, PXEOptions{FromCpio: cpioPath, MTime: tarEpoch})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := WritePXE(context.Background(), tree.View(), treeDir, PXEOptions{Compression: a, MTime: tarEpoch}); err != nil {
				t.Fatal(err)
			}
			from, _ := os.ReadFile(filepath.Join(fromDir, PXEInitrd))
			if !bytes.HasPrefix(from, cpioData) {
				t.Errorf("the initrd does not start with the cpio output")
			}
			whole, _ := os.ReadFile(filepath.Join(treeDir, PXEInitrd))
			ef, lf, err := ReadCpio(context.Background(), bytes.NewReader(from))
			if err != nil {
				t.Fatal(err)
			}
			et, lt, err := ReadCpio(context.Background(), bytes.NewReader(whole))
			if err != nil {
				t.Fatal(err)
			}
			tarCompareEntries(t, ef.Entries(), et.Entries())
			if (lf == nil) != (lt == nil) || lf != nil && rootfs.ManifestLine(lf, nil, false) != rootfs.ManifestLine(lt, nil, false) {
				t.Errorf("xattr lists differ: %v and %v", lf, lt)
			}
			if len(fb.Adds) != 4 || !strings.HasPrefix(fb.Adds[0], "/init ") {
				t.Errorf("adds = %q, want /init and the bundle's files", fb.Adds)
			}
			if a == compress.None {
				if _, err := exec.LookPath("cpio"); err == nil {
					// GNU cpio reads the first archive; the kernel reads on.
					if out := cpioTool(t, "", from, "-it", "--quiet"); !strings.Contains(out, "usr/bin/ping\n") {
						t.Errorf("cpio -it:\n%s", out)
					}
				}
			}
		})
	}
}

func TestPXEErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*rootfs.Tree)
		want string
	}{
		{"own init", func(tr *rootfs.Tree) {
			tr.Create("/init", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o755, MTime: tarEpoch}, strings.NewReader("x"))
		}, "/init"},
		{"no busybox", func(tr *rootfs.Tree) { tr.Remove("/usr/bin/busybox") }, "busybox"},
		{"no kernel", func(tr *rootfs.Tree) {
			tr.Remove("/boot/vmlinuz-6.1.0-9-amd64")
			tr.Remove("/boot/vmlinuz-6.1.0-10-amd64")
		}, "kernel"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tree := pxeTestTree(t)
			c.edit(tree)
			_, err := WritePXE(context.Background(), tree.View(), t.TempDir(), PXEOptions{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want one mentioning %q", err, c.want)
			}
		})
	}
}

func TestPXEFormat(t *testing.T) {
	tree := pxeTestTree(t)
	dir := t.TempDir()
	f, err := Lookup("pxe")
	if err != nil {
		t.Fatal(err)
	}
	res, err := f.Write(context.Background(), &Source{Tree: tree.View(), Epoch: tarEpoch, Name: "node"},
		&Spec{Format: "pxe", Options: &PXESpec{Cmdline: "console=ttyS0"}}, dir, "node")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Files, []string{"node.pxe"}) {
		t.Errorf("files = %q", res.Files)
	}
	script, err := os.ReadFile(filepath.Join(dir, "node.pxe", PXEScript))
	if err != nil || !strings.Contains(string(script), "initrd=initrd.img console=ttyS0\n") {
		t.Errorf("boot.ipxe: %v\n%s", err, script)
	}
	var names []string
	for _, a := range res.Adds {
		if c, ok := strings.CutPrefix(a, "# pxe file "); ok {
			a = c
		}
		names = append(names, strings.Fields(a)[0])
	}
	if want := []string{"initrd:" + XattrListPath, "initrd:/init", "node.pxe/boot.ipxe", "node.pxe/pxelinux.cfg/default", "node.pxe/SHA256SUMS"}; !slices.Equal(names, want) {
		t.Errorf("adds name %q, want %q", names, want)
	}
	// A failed bundle leaves nothing behind.
	tree.Create("/init", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o755, MTime: tarEpoch}, strings.NewReader("x"))
	if _, err := f.Write(context.Background(), &Source{Tree: tree.View(), Epoch: tarEpoch}, &Spec{Format: "pxe"}, dir, "bad"); err == nil {
		t.Fatal("no error")
	}
	if _, err := os.Stat(filepath.Join(dir, "bad.pxe")); err == nil {
		t.Errorf("bad.pxe was left behind")
	}
}
