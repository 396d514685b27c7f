package scripts

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

// An arm64 image's depmod, on this amd64 machine, needs no emulator:
// packages/kmod writes the module indexes from the tree, and they are the
// bytes the host's kmod depmod writes for the same modules. An image
// without kmod has no depmod, and the command is unhandled.
func TestDepmodForeignArch(t *testing.T) {
	if runtime.GOARCH == "arm64" {
		t.Fatal("this test needs a build machine that is not arm64")
	}
	oracle := harness.Tool(t, "depmod")
	kit := harness.BootPartsFor(t, "arm64")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	apt, err := harness.ForeignAptFor(ctx, "arm64")
	if err != nil {
		t.Fatal(err)
	}
	names, err := apt.Closure(ctx, []string{"kmod"})
	if err != nil {
		t.Fatal(err)
	}
	debs, err := apt.Debs(ctx, names, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTree(t)
	// The same module directory on the host, for the host's depmod.
	host := t.TempDir()
	mods := "/lib/modules/" + kit.KernelVersion
	for _, rel := range []string{"modules.order", "modules.builtin", "modules.builtin.modinfo",
		"kernel/fs/ext4/ext4.ko", "kernel/fs/jbd2/jbd2.ko", "kernel/fs/mbcache.ko", "kernel/lib/crc16.ko",
		"kernel/drivers/block/virtio_blk.ko", "kernel/drivers/virtio/virtio_mmio.ko", "kernel/drivers/virtio/virtio_balloon.ko",
		"kernel/drivers/char/virtio_console.ko", "kernel/fs/fuse/fuse.ko"} {
		b, err := os.ReadFile(filepath.Join(kit.Modules, rel))
		if err != nil {
			t.Fatal(err)
		}
		file(t, tr, mods+"/"+rel, string(b))
		p := filepath.Join(host, mods, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	script := Script{Package: "linux-image-" + kit.KernelVersion, Name: "postinst",
		Body: []byte("#!/bin/sh\nset -e\ndepmod " + kit.KernelVersion + "\n")}
	e := &Env{Tree: tr, Arch: "arm64", Epoch: epoch}
	// No emulator, nor anything else of the host's, to be found.
	t.Setenv("PATH", t.TempDir())

	err = Run(ctx, e, script, "configure", "")
	var ue *UnhandledError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "no depmod") {
		t.Fatalf("without kmod in the image: err = %v, want depmod unhandled", err)
	}
	if tr.Get(mods+"/modules.dep") != nil {
		t.Error("depmod unhandled, yet modules.dep was written")
	}

	for _, d := range debs {
		unpack(t, tr, d)
	}
	if err := Run(ctx, e, script, "configure", ""); err != nil {
		t.Fatalf("depmod: %v", err)
	}
	if out, err := exec.Command(oracle, "-b", host, "-C", filepath.Join(host, "etc/depmod.d"), kit.KernelVersion).CombinedOutput(); err != nil {
		t.Fatalf("the host's depmod: %v\n%s", err, out)
	}
	ents, err := os.ReadDir(filepath.Join(host, mods))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, de := range ents {
		name := de.Name()
		if de.IsDir() || !strings.HasPrefix(name, "modules.") || name == "modules.order" || strings.HasPrefix(name, "modules.builtin") && !strings.HasSuffix(name, ".bin") {
			continue
		}
		want, err := os.ReadFile(filepath.Join(host, mods, name))
		if err != nil {
			t.Fatal(err)
		}
		got, err := tr.Open(mods + "/" + name)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		b, err := io.ReadAll(got)
		got.Close()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, want) {
			t.Errorf("%s: %d bytes, the host's depmod wrote %d other bytes", name, len(b), len(want))
		}
		n++
	}
	if n != 10 {
		t.Errorf("compared %d indexes, want the 10 depmod writes", n)
	}
	dep := string(rootfstest.Read(t, tr, mods+"/modules.dep"))
	if !strings.Contains(dep, "kernel/fs/ext4/ext4.ko: ") || !strings.Contains(dep, "kernel/fs/jbd2/jbd2.ko") || !strings.Contains(dep, "kernel/fs/mbcache.ko") {
		t.Errorf("modules.dep does not give ext4 its dependencies:\n%s", dep)
	}
}
