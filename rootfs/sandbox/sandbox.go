// Package sandbox runs programs of the image for real, with the tree's
// directory as their root, and folds what they did back into the tree's
// index. The debs layer's `scripts: chroot` and the `run` layer both go
// through it, so they share one set of namespaces, one environment and one
// fold-back.
//
// It sits under rootfs rather than packages: nothing in it is Debian's (the
// debs layer adds dpkg's variables and policy-rc.d through its options),
// packages may not import layers, and as a part of rootfs it may hand the
// tree its own rescan. It knows no recipe and no layer.
package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/rootfs"
)

// Sandbox runs programs chrooted into a tree, as mmdebstrap's root mode
// runs maintainer scripts: in a mount and PID namespace of their own, with
// /proc mounted, a minimal /dev on a tmpfs, a fresh tmpfs /tmp, and unless
// Network is set a network namespace of their own whose only interface is
// a loopback that is down. The namespaces hold every mount and process, so
// nothing is left mounted or running on the host when the program ends,
// however it ends.
//
// It needs root, or a kernel that lets the build user make a user
// namespace. There the build user is root and only its own ids are
// mapped: a chown to another user fails, and files the index gives to
// other owners look root's to the program.
type Sandbox struct {
	Tree  *rootfs.Tree
	Epoch time.Time
	// Network shares the build machine's network with the program.
	Network bool
	// DenyServices puts a policy-rc.d that answers 101 ("action
	// forbidden") in the tree while a program runs, so invoke-rc.d starts
	// no service; one the tree holds already is left as it is.
	DenyServices bool
	// Logf receives what the programs print; nil discards it.
	Logf func(format string, args ...any)
	// ReadOnly runs the program on the tree mounted read-only, always in
	// a user namespace (where even a root build's program holds no
	// privilege over the host): nothing it does changes the tree or needs
	// a fold-back, and what it makes goes to Output.
	ReadOnly bool
	// OutputHost, when set, is a host directory the program may write,
	// seen inside at OutputDir; the caller reads back what it left there.
	OutputHost string
	// OutputAt, when set, is a directory of the tree where OutputHost is
	// bound as well, hiding what the tree holds there: for a program that
	// writes beside what it reads, into a directory no option of it
	// moves. No part of its path may be a symlink.
	OutputAt string

	userns  bool // the build is not root: the program runs in a user namespace
	checked bool // the tools and the namespace probe passed once
}

// Path is the PATH programs run with.
const Path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// OutputDir is where a program sees Sandbox.OutputHost: under the sandbox's
// own /dev, so no mount point is needed in the tree.
const OutputDir = "/dev/stamp-output"

// ExitError is a program that ran and exited non-zero, with what it printed.
type ExitError struct {
	Name   string
	Status int
	Output string
}

func (e *ExitError) Error() string {
	s := fmt.Sprintf("%s exited with status %d", e.Name, e.Status)
	if e.Output != "" {
		s += ":\n" + e.Output
	}
	return s
}

// setup runs in the new namespaces, as root, before chroot(2). Available
// checked the mount points to be directories, not symlinks. Its arguments
// are the tree, "ro" or "rw", the host directory to bind at OutputDir (or
// "") and the tree's directory to bind it at too (or ""), then the
// environment, the host's chroot, the tree and the program: the host's env
// and chroot start it, so the image needs neither.
const setup = `set -e
root=$1; mode=$2; output=$3; at=$4; shift 4
if [ "$mode" = ro ]; then
	mount --bind "$root" "$root"
	mount -o remount,bind,ro,nosuid,nodev "$root"
fi
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
if [ -n "$output" ]; then
	mkdir "$root` + OutputDir + `"
	mount --bind "$output" "$root` + OutputDir + `"
	if [ -n "$at" ]; then mount --bind "$output" "$root$at"; fi
fi
if [ -d "$root/tmp" ]; then mount -t tmpfs -o mode=1777 stamp-tmp "$root/tmp"; fi
umask 022
exec env -i "$@"
`

// policyRcd is where invoke-rc.d asks whether it may start a service.
const policyRcd = "/usr/sbin/policy-rc.d"

// hostEnv is the environment of the helpers (unshare, mount, chroot) on the
// host side, whatever the caller's.
var hostEnv = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}

// namespaces are unshare's flags for a run: a user namespace for a build
// that is not root, and a network namespace unless network is shared.
func namespaces(userns, network bool) []string {
	var args []string
	if userns {
		args = append(args, "--user", "--map-root-user")
	}
	args = append(args, "--mount", "--pid", "--fork")
	if !network {
		args = append(args, "--net")
	}
	return args
}

// Check says why a sandbox cannot run on this machine, or nil. It needs
// no tree, so the conductor calls it before a build writes anything.
func Check(network bool) error {
	return probe(os.Geteuid() != 0, network)
}

// CheckReadOnly is Check for a ReadOnly sandbox, which always needs a user
// namespace.
func CheckReadOnly() error { return probe(true, false) }

// probe looks for the tools and makes the namespaces a run needs once,
// running true in them.
func probe(userns, network bool) error {
	for _, tool := range []string{"unshare", "chroot", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("a sandbox needs %s on the build machine: %w", tool, err)
		}
	}
	cmd := exec.Command("unshare", append(namespaces(userns, network), "true")...)
	cmd.Env = hostEnv
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(string(out))
	if userns {
		hint := ""
		switch {
		case strings.Contains(msg, "No space left on device"):
			hint = " (the sysctl user.max_user_namespaces is 0, or its limit is reached)"
		case strings.Contains(msg, "Operation not permitted"):
			hint = " (the kernel or a security policy forbids them: kernel.unprivileged_userns_clone, AppArmor, seccomp)"
		}
		if os.Geteuid() == 0 {
			return fmt.Errorf("a read-only sandbox needs a user namespace, and this build may not make one: %v: %s%s", err, msg, hint)
		}
		return fmt.Errorf("a sandbox needs a root build or user namespaces, and this build (uid %d) may not make a user namespace: %v: %s%s",
			os.Geteuid(), err, msg, hint)
	}
	return fmt.Errorf("a sandbox needs mount, PID and network namespaces, and this root build may not make them: %v: %s", err, msg)
}

// Available says why Run cannot work on this tree, or nil.
func (s *Sandbox) Available() error {
	if !s.checked {
		userns := os.Geteuid() != 0 || s.ReadOnly
		if err := probe(userns, s.Network); err != nil {
			return err
		}
		s.userns, s.checked = userns, true
	}
	// Checked on every run: the last program may have replaced a mount
	// point with a symlink out of the tree.
	for _, d := range []string{"/proc", "/dev"} {
		fi, err := os.Lstat(s.Tree.Dir() + d)
		if err != nil || !fi.IsDir() {
			return fmt.Errorf("the tree's %s is not a directory; a sandbox needs it as a mount point", d)
		}
	}
	if fi, err := os.Lstat(s.Tree.Dir() + "/tmp"); err == nil && !fi.IsDir() {
		return errors.New("the tree's /tmp is not a directory; a sandbox mounts a fresh one there")
	}
	return s.checkOutputAt()
}

// checkOutputAt refuses an OutputAt that is not a directory of the tree
// reached through directories alone: a symlink on the way would bind the
// output over whatever it names on the host.
func (s *Sandbox) checkOutputAt() error {
	if s.OutputAt == "" {
		return nil
	}
	if s.OutputHost == "" || !path.IsAbs(s.OutputAt) || path.Clean(s.OutputAt) != s.OutputAt || s.OutputAt == "/" {
		return fmt.Errorf("sandbox: output directory at %q: an absolute, clean directory below / of the tree, with an output directory to bind", s.OutputAt)
	}
	p := s.Tree.Dir()
	for _, c := range strings.Split(s.OutputAt[1:], "/") {
		p += "/" + c
		if fi, err := os.Lstat(p); err != nil || !fi.IsDir() {
			return fmt.Errorf("sandbox: the tree's %s is not a directory reached through directories alone; the output directory cannot be bound there", s.OutputAt)
		}
	}
	return nil
}

// Environ is the whole environment of a run: PATH, LANG=C.UTF-8, TZ=UTC
// and SOURCE_DATE_EPOCH, then extra ("KEY=value", a later key replacing an
// earlier one), sorted by key.
func (s *Sandbox) Environ(extra []string) []string {
	vars := map[string]string{
		"PATH":              Path,
		"LANG":              "C.UTF-8",
		"TZ":                "UTC",
		"SOURCE_DATE_EPOCH": strconv.FormatInt(s.Epoch.Unix(), 10),
	}
	for _, kv := range extra {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	keys := make([]string, 0, len(vars))
	for k := range vars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+vars[k])
	}
	return out
}

// Run runs argv (a program of the image, found through PATH inside it, and
// its arguments) in the sandbox, in / with umask 022 and exactly the
// environment Environ(env). name labels its output and errors. A non-zero
// exit is an *ExitError. Run changes the directory only: FoldBack brings
// the changes into the index.
func (s *Sandbox) Run(ctx context.Context, name string, env []string, argv ...string) error {
	if len(argv) == 0 {
		return fmt.Errorf("%s: no command", name)
	}
	// Available checks the tree's directory, which must be all there.
	if err := s.Tree.Materialize(ctx); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if err := s.Available(); err != nil {
		return err
	}
	if err := s.checkOutputAt(); err != nil { // on the tree as materialized
		return err
	}
	if !s.userns && !s.ReadOnly {
		if err := s.showOwners(ctx); err != nil {
			return err
		}
	}
	if s.DenyServices {
		undo, err := s.denyServices()
		if err != nil {
			return err
		}
		defer undo()
	}
	mode := "rw"
	if s.ReadOnly {
		mode = "ro"
	}
	args := namespaces(s.userns, s.Network)
	chroot, err := exec.LookPath("chroot")
	if err != nil {
		return fmt.Errorf("%s: sandbox: %w", name, err)
	}
	args = append(args, "--kill-child", "--propagation", "private",
		"/bin/sh", "-c", setup, "stamp-sandbox", s.Tree.Dir(), mode, s.OutputHost, s.OutputAt)
	args = append(args, s.Environ(env)...)
	args = append(args, chroot, s.Tree.Dir())
	args = append(args, argv...)
	cmd := exec.CommandContext(ctx, "unshare", args...)
	cmd.Env = hostEnv
	cmd.Dir = "/"
	// A process group of its own, so that cancelling the build stops
	// everything the program started, not only unshare.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	if s.Logf != nil && out.Len() > 0 {
		s.Logf("%s: %s", name, bytes.TrimSpace(out.Bytes()))
	}
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		msg := string(bytes.TrimSpace(out.Bytes()))
		if s.userns && bytes.Contains(out.Bytes(), []byte("Invalid argument")) {
			msg += "\n(in a user namespace only the build user's own ids are mapped to root: a chown to another user fails; build as root)"
		}
		return &ExitError{Name: name, Status: ee.ExitCode(), Output: msg}
	}
	return fmt.Errorf("%s: sandbox: %w", name, err)
}

// showOwners gives every path on disk the owner the index holds, so that a
// program run as root sees the image's owners, and a chown it makes back
// to root is seen by the fold-back. The tree records the new disk state,
// so the fold-back takes for a change only what the program did. In a user
// namespace only the build user is mapped: there the program sees every
// path as root's.
func (s *Sandbox) showOwners(ctx context.Context) error {
	dir := s.Tree.Dir()
	for _, p := range s.Tree.Paths() {
		if err := ctx.Err(); err != nil {
			return err
		}
		e := s.Tree.Get(p)
		hp := s.Tree.DiskPath(p)
		if hp != path.Join(dir, p) {
			continue // content kept in another tree, which is not this one's to change
		}
		var st unix.Stat_t
		if err := unix.Lstat(hp, &st); err != nil {
			return fmt.Errorf("sandbox: %s: %w", p, err)
		}
		if st.Uid == e.UID && st.Gid == e.GID {
			continue
		}
		if err := os.Lchown(hp, int(e.UID), int(e.GID)); err != nil {
			return fmt.Errorf("sandbox: %s: %w", p, err)
		}
		// Update records the new disk state.
		if err := s.Tree.Update(p, func(*rootfs.Inode) {}); err != nil {
			return fmt.Errorf("sandbox: %s: %w", p, err)
		}
	}
	return nil
}

// denyServices writes policy-rc.d straight to the directory (it never
// enters the index) and returns what removes it again.
func (s *Sandbox) denyServices() (func(), error) {
	// Every directory on the way must be a real one: a symlink there
	// could lead the write out of the tree. Without them there is no
	// invoke-rc.d to ask either.
	for _, d := range []string{"/usr", "/usr/sbin"} {
		fi, err := os.Lstat(s.Tree.Dir() + d)
		if errors.Is(err, os.ErrNotExist) {
			return func() {}, nil
		}
		if err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("sandbox: the tree's %s is not a directory", d)
		}
	}
	p := s.Tree.Dir() + policyRcd
	if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
		return func() {}, nil
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 101\n"), 0o755); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return func() { os.Remove(p) }, nil
}

// FoldBack brings what the programs did to the directory into the index,
// with the owners they gave: in a user namespace the build user's own ids
// were root's.
func (s *Sandbox) FoldBack(ctx context.Context, origin rootfs.Origin) (*rootfs.Changes, error) {
	uid, gid := uint32(0), uint32(0)
	if os.Geteuid() != 0 {
		uid, gid = uint32(os.Geteuid()), uint32(os.Getegid())
	}
	return s.Tree.RescanAsRoot(ctx, origin, uid, gid)
}
