package scripts

import (
	"fmt"
	"os"
	"path"
	"path/filepath"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs"
)

// udevLibexec is where Debian's systemd-hwdb --usr writes hwdb.bin (its
// UDEVLIBEXECDIR), and, with hwdb.d under it, one of the two places it
// reads; /etc/udev is the other, and where it writes without --usr.
const udevLibexec = "/lib/udev"

// cmdSystemdHwdb is systemd-hwdb update (udev's postinst runs it with
// --usr): the image's own systemd-hwdb compiles the hardware database at
// build time, so nothing waits for first boot and a read-only /usr needs
// no write. It runs in the sandbox, where the tree is read-only; the
// directory it writes hwdb.bin into is the output directory, bound over
// the tree's, holding a copy of that directory's hwdb.d. It reads its
// sources by the paths a running system has, so the database names them
// as one compiled on the machine would. Where no program may run the
// command is unhandled, and deferScripts puts it off to first boot.
func cmdSystemdHwdb(r *run, hc interp.HandlerContext, args []string) error {
	prog, ok := r.lookPath("/", "systemd-hwdb")
	if !ok {
		return r.notFound(hc, "systemd-hwdb")
	}
	usr, update := false, false
	for _, a := range args[1:] {
		switch a {
		case "--usr":
			usr = true
		case "update":
			update = true
		default:
			return r.unhandledCommand(args)
		}
	}
	if !update {
		return r.unhandledCommand(args)
	}
	dir := "/etc/udev"
	if usr {
		dir = udevLibexec
	}
	t := r.env.Tree
	real, err := t.Resolve(dir, true)
	if err != nil {
		return r.unhandledCommand(args, fmt.Sprintf("%s: %v", dir, err))
	}
	if e := t.Get(real); e == nil || e.Type != rootfs.TypeDir {
		return r.unhandledCommand(args, dir+" is not a directory of the tree")
	}
	prepare := func(ir *imageRun) error {
		src := path.Join(real, "hwdb.d")
		if e := t.Get(src); e == nil || e.Type != rootfs.TypeDir {
			return nil
		}
		if err := os.Mkdir(filepath.Join(ir.out, "hwdb.d"), 0o755); err != nil {
			return err
		}
		for _, name := range t.Children(src) {
			p := path.Join(src, name)
			e := t.Get(p)
			dst := filepath.Join(ir.out, "hwdb.d", name)
			switch e.Type {
			case rootfs.TypeRegular:
				b, err := r.readFile(p)
				if err != nil {
					return err
				}
				if err := os.WriteFile(dst, b, 0o644); err != nil {
					return err
				}
			case rootfs.TypeSymlink: // a mask, to /dev/null
				if err := os.Symlink(e.Target, dst); err != nil {
					return err
				}
			}
		}
		return nil
	}
	argv := []string{prog, "update"}
	if usr {
		argv = append(argv, "--usr")
	}
	ir, runErr := r.runImageProgramAt(hc, "systemd-hwdb", real, nil, prepare, argv...)
	if ir == nil {
		return runErr
	}
	defer ir.done()
	if runErr != nil {
		return runErr
	}
	bin := path.Join(real, "hwdb.bin")
	b, err := ir.read("hwdb.bin")
	if os.IsNotExist(err) {
		// No sources: systemd-hwdb removes the database.
		if e := t.Get(bin); e != nil {
			return t.Remove(bin)
		}
		return nil
	}
	if err != nil {
		return err
	}
	// As systemd-hwdb leaves it: a new file, read-only for all.
	if err := r.createFile(bin, b, 0o444); err != nil {
		return err
	}
	r.logf("systemd-hwdb: compiled %s (%d bytes) with the image's systemd-hwdb, in the sandbox", bin, len(b))
	return nil
}
