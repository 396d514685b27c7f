package scripts

import (
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/interp"
)

// cmdUdevadm is udev's administration tool in an image build, where no
// udevd runs and no device is the image's. --version answers what the
// tree's udevadm prints: systemd's major version, from the udev package in
// the tree's database. control (reload a running udevd's rules) and
// trigger (replay device events) do nothing: run for real they would reach
// the build host's udevd and devices, and the image's udevd reads its
// rules and replays every device when the image boots, which is what the
// package asks for.
func cmdUdevadm(r *run, hc interp.HandlerContext, args []string) error {
	if _, ok := r.lookPath("/", "udevadm"); !ok {
		return r.notFound(hc, "udevadm")
	}
	if len(args) < 2 {
		return r.unhandledCommand(args)
	}
	switch args[1] {
	case "--version", "version", "-V":
		if len(args) != 2 {
			return r.unhandledCommand(args)
		}
		p := r.statusOf("udev")
		if p == nil {
			return r.unhandledCommand(args, "udevadm without the udev package in the database")
		}
		v := p.Get("Version")
		if _, rest, ok := strings.Cut(v, ":"); ok {
			v = rest
		}
		major := v
		if i := strings.IndexFunc(v, func(c rune) bool { return c < '0' || c > '9' }); i >= 0 {
			major = v[:i]
		}
		if major == "" {
			return r.unhandledCommand(args, fmt.Sprintf("udev's version %q", p.Get("Version")))
		}
		fmt.Fprintln(hc.Stdout, major)
		return nil
	case "control", "trigger":
		r.logf("%s %s: not running %s (no udevd runs in an image build; the image's reads its rules and replays its devices at boot)",
			r.s.Package, r.s.Name, strings.Join(args, " "))
		return nil
	}
	return r.unhandledCommand(args)
}
