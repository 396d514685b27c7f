package sandbox

import (
	"fmt"
	"os"
	"runtime"
	"strings"
)

// qemuNames are the binfmt_misc entry names Debian's qemu-user-static
// registers, by the Debian architecture of the programs they run.
var qemuNames = map[string]string{"amd64": "qemu-x86_64", "arm64": "qemu-aarch64"}

// binfmtDir is where the kernel lists binfmt_misc handlers.
const binfmtDir = "/proc/sys/fs/binfmt_misc"

// CheckArch says why programs of an image of arch (a Debian architecture)
// cannot run in a sandbox on this machine, or nil: they run natively on a
// machine of that architecture, and elsewhere only through an enabled
// binfmt_misc handler with the F flag, which the kernel opens when it is
// registered, so it works inside the chroot where its path does not exist.
// Registering one needs root; stamp never does it.
func CheckArch(arch string) error { return checkArch(arch, binfmtDir) }

// checkArch is CheckArch with the binfmt_misc handlers listed in dir.
func checkArch(arch, dir string) error {
	if arch == "" || arch == runtime.GOARCH {
		return nil
	}
	name, ok := qemuNames[arch]
	if !ok {
		return fmt.Errorf("programs of an %s image cannot run on this %s machine", arch, runtime.GOARCH)
	}
	b, err := os.ReadFile(dir + "/" + name)
	if err == nil && strings.HasPrefix(string(b), "enabled\n") {
		for _, l := range strings.Split(string(b), "\n") {
			if f, ok := strings.CutPrefix(l, "flags: "); ok && strings.Contains(f, "F") {
				return nil
			}
		}
	}
	return fmt.Errorf("it runs programs of the %s image, and this %s machine has no binfmt_misc handler %s with the F flag to run them (package qemu-user-static registers one, as root)",
		arch, runtime.GOARCH, name)
}
