package scripts

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

// An arm64 image's depmod, on this amd64 machine, runs under the host's
// qemu-aarch64-static, named on the command line (no binfmt handler), and
// writes the module indexes; without the emulator depmod is unhandled.
func TestDepmodForeignArch(t *testing.T) {
	if runtime.GOARCH == "arm64" {
		t.Fatal("this test needs a build machine that is not arm64")
	}
	harness.RequireTools(t, "qemu-aarch64-static")
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
	for _, d := range debs {
		unpack(t, tr, d)
	}
	mods := "/lib/modules/" + kit.KernelVersion
	for _, rel := range []string{"modules.order", "modules.builtin", "modules.builtin.modinfo",
		"kernel/fs/ext4/ext4.ko", "kernel/fs/jbd2/jbd2.ko", "kernel/fs/mbcache.ko", "kernel/lib/crc16.ko"} {
		b, err := os.ReadFile(filepath.Join(kit.Modules, rel))
		if err != nil {
			t.Fatal(err)
		}
		file(t, tr, mods+"/"+rel, string(b))
	}
	script := Script{Package: "linux-image-" + kit.KernelVersion, Name: "postinst",
		Body: []byte("#!/bin/sh\nset -e\ndepmod " + kit.KernelVersion + "\n")}
	e := &Env{Tree: tr, Arch: "arm64", Epoch: epoch}

	t.Setenv("PATH", t.TempDir())
	err = Run(ctx, e, script, "configure", "")
	var ue *UnhandledError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "qemu-aarch64-static") {
		t.Fatalf("without qemu-aarch64-static: err = %v, want depmod unhandled, naming it", err)
	}
	if tr.Get(mods+"/modules.dep") != nil {
		t.Error("depmod unhandled, yet modules.dep was written")
	}

	t.Setenv("PATH", "/usr/bin:/bin")
	if err := Run(ctx, e, script, "configure", ""); err != nil {
		t.Fatalf("under qemu-aarch64-static: %v", err)
	}
	f, err := tr.Open(mods + "/modules.dep")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 4096)
	n, _ := f.Read(b)
	dep := string(b[:n])
	if !strings.Contains(dep, "kernel/fs/ext4/ext4.ko: ") || !strings.Contains(dep, "kernel/fs/jbd2/jbd2.ko") || !strings.Contains(dep, "kernel/fs/mbcache.ko") {
		t.Errorf("modules.dep does not give ext4 its dependencies:\n%s", dep)
	}
	for _, idx := range []string{"modules.dep.bin", "modules.alias.bin", "modules.symbols.bin"} {
		if e := tr.Get(mods + "/" + idx); e == nil || e.Size == 0 {
			t.Errorf("%s is missing or empty", idx)
		}
	}
}
