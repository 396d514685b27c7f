package scripts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Chroot runs programs of the image for real, chrooted into its directory,
// as mmdebstrap's root mode runs maintainer scripts: in a mount and PID
// namespace of their own, with /proc mounted and a minimal /dev on a tmpfs,
// and a policy-rc.d that forbids starting services. The namespace holds
// every mount, so nothing is left mounted on the host when the program
// ends, however it ends. It needs root, or a kernel that lets this user
// make a user namespace; there the build user is root, and only its own ids
// are mapped, so a chown to another user fails.
type Chroot struct {
	Dir   string // the tree's directory
	Epoch time.Time
	// Logf receives what the programs print; nil discards it.
	Logf func(format string, args ...any)

	userns  bool // set by Available for a build that is not root
	checked bool // the tools and the namespace probe passed once
}

// chrootSetup runs in the new namespaces, as root, before chroot(2). The
// tree's /proc and /dev were checked to be directories, not symlinks.
const chrootSetup = `set -e
root=$1; shift
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=0755,size=1m stamp-dev "$root/dev"
# The host's nodes, bound: a user namespace may not mknod.
for name in null zero full random urandom tty; do
	: >"$root/dev/$name"
	mount --bind "/dev/$name" "$root/dev/$name"
done
ln -s /proc/self/fd "$root/dev/fd"
ln -s /proc/self/fd/0 "$root/dev/stdin"
ln -s /proc/self/fd/1 "$root/dev/stdout"
ln -s /proc/self/fd/2 "$root/dev/stderr"
mkdir "$root/dev/pts" "$root/dev/shm"
umask 022
exec chroot "$root" "$@"
`

// MaintainerEnv is what dpkg sets for a maintainer script it runs itself;
// dpkg-maintscript-helper refuses to work without it.
func MaintainerEnv(pkg, script, arch string) []string {
	return []string{"DPKG_MAINTSCRIPT_PACKAGE=" + pkg, "DPKG_MAINTSCRIPT_NAME=" + script,
		"DPKG_MAINTSCRIPT_ARCH=" + arch, "DPKG_MAINTSCRIPT_PACKAGE_REFCOUNT=1",
		"DPKG_ROOT=", "DPKG_ADMINDIR=/var/lib/dpkg", "DPKG_RUNNING_VERSION=1.21.22"}
}

// policyRcd is /usr/sbin/policy-rc.d for the run: invoke-rc.d asks it and
// starts nothing.
const policyRcd = "/usr/sbin/policy-rc.d"

// Available says why Run cannot work here, or nil.
func (c *Chroot) Available() error {
	if err := c.probe(); err != nil {
		return err
	}
	// Checked on every run: a script of the last one may have replaced
	// /proc or /dev with a symlink out of the tree.
	for _, d := range []string{"proc", "dev"} {
		fi, err := os.Lstat(c.Dir + "/" + d)
		if err != nil || !fi.IsDir() {
			return fmt.Errorf("the tree's /%s is not a directory; a chroot needs it as a mount point", d)
		}
	}
	return nil
}

// probe checks once for the tools and for root or a user namespace.
func (c *Chroot) probe() error {
	if c.checked {
		return nil
	}
	for _, tool := range []string{"unshare", "chroot", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("running maintainer scripts in a chroot needs %s on the build machine: %w", tool, err)
		}
	}
	if os.Geteuid() != 0 {
		probe := exec.Command("unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "true")
		probe.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		if out, err := probe.CombinedOutput(); err != nil {
			return fmt.Errorf("running maintainer scripts in a chroot needs a root build or user namespaces, and this build (uid %d) may not make one: %v: %s",
				os.Geteuid(), err, bytes.TrimSpace(out))
		}
		c.userns = true
	}
	c.checked = true
	return nil
}

// Run runs argv (a path inside the image and its arguments) chrooted into
// the tree with a fixed environment and the extra variables env. A
// non-zero exit is a *ScriptError with what the program printed.
func (c *Chroot) Run(ctx context.Context, pkg, name string, env []string, argv ...string) error {
	if err := c.Available(); err != nil {
		return err
	}
	// The file goes straight to disk, so every directory on its way must
	// be a real one: a symlink there could lead out of the tree.
	for _, d := range []string{"/usr", "/usr/sbin"} {
		if fi, err := os.Lstat(c.Dir + d); err != nil || !fi.IsDir() {
			return fmt.Errorf("chroot: the tree's %s is not a directory", d)
		}
	}
	policy := c.Dir + policyRcd
	if _, err := os.Lstat(policy); errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(policy, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
			return fmt.Errorf("chroot: %w", err)
		}
		defer os.Remove(policy)
	}
	var args []string
	if c.userns {
		args = []string{"--user", "--map-root-user"}
	}
	args = append(args, "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private",
		"/bin/sh", "-c", chrootSetup, "stamp-chroot", c.Dir, "/usr/bin/env", "-i",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8", "LC_ALL=C.UTF-8", "TZ=UTC", "HOME=/root", "SHELL=/bin/sh",
		"DEBIAN_FRONTEND=noninteractive", "DEBCONF_NONINTERACTIVE_SEEN=true",
		"SOURCE_DATE_EPOCH="+strconv.FormatInt(c.Epoch.Unix(), 10))
	args = append(args, env...)
	args = append(args, argv...)
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if c.Logf != nil && out.Len() > 0 {
		c.Logf("%s %s (chroot): %s", pkg, name, bytes.TrimSpace(out.Bytes()))
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() > 0 {
			msg := string(bytes.TrimSpace(out.Bytes()))
			if c.userns && bytes.Contains(out.Bytes(), []byte("Invalid argument")) {
				msg += "\n(in a user namespace only the build user's own ids are mapped to root: a chown to another user fails; build as root)"
			}
			return &ScriptError{Package: pkg, Script: name, Status: uint8(ee.ExitCode()), Output: msg}
		}
		return fmt.Errorf("%s %s: chroot: %w", pkg, name, err)
	}
	return nil
}
