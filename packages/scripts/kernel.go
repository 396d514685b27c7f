package scripts

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/kmod"
	"github.com/stamp-dev/stamp/rootfs"
)

// The kernel's maintainer scripts run depmod and linux-update-symlinks
// (and run-parts of /etc/kernel/postinst.d, imagescripts.go), and ask
// uname for the kernel. These are their handlers.

// cmdDepmod makes the module indexes of a kernel version, byte for byte as
// the image's depmod (Debian's kmod 30) would: packages/kmod writes them in
// Go from the tree, so no program of the image runs, on any architecture.
func cmdDepmod(r *run, hc interp.HandlerContext, args []string) error {
	var flags []string
	var version string
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-a" || a == "--all" || a == "-A" || a == "--quick" || a == "-q" || a == "--quiet" ||
			a == "-e" || a == "--errsyms" || a == "-w" || a == "-v" || a == "--verbose":
			flags = append(flags, a)
		case strings.HasPrefix(a, "-"):
			// -b, -C, -F and -E name host paths or replace the image's
			// configuration; no Debian script passes them.
			return r.unhandled(fmt.Sprintf("depmod option %q", a))
		case version == "":
			version = a
		default:
			return r.unhandledCommand(args)
		}
	}
	if version == "" {
		version = r.kernelRelease()
	}
	if strings.Contains(version, "/") || version == "." || version == ".." {
		fmt.Fprintf(hc.Stderr, "depmod: invalid version %q\n", version)
		return exit(1)
	}
	if r.env.NoPrograms {
		// Until packages/kmod writes the indexes in Go, depmod is the
		// image's kmod, which an offline-only build does not run.
		return r.unhandled("depmod runs the image's kmod, and this build runs no program of the image (offline-only)")
	}
	return r.depmod(r.ctx, hc, version, flags)
}

func (r *run) depmod(ctx context.Context, hc interp.HandlerContext, version string, flags []string) error {
	t := r.env.Tree
	modDir, err := t.Resolve("/lib/modules/"+version, true)
	if err != nil {
		return err
	}
	if e := t.Get(modDir); e == nil || e.Type != rootfs.TypeDir {
		fmt.Fprintf(hc.Stderr, "depmod: ERROR: could not open directory /lib/modules/%s: No such file or directory\n", version)
		return exit(1)
	}
	if _, found := r.lookPath("/", "depmod"); !found {
		return r.unhandled("depmod: the image has no depmod (kmod) to build the module indexes with")
	}
	if !kmod.ValidVersion(version) {
		fmt.Fprintf(hc.Stderr, "depmod: ERROR: Bad version passed %s\n", version)
		return exit(1)
	}
	warnf := func(format string, args ...any) {
		fmt.Fprintf(hc.Stderr, "depmod: WARNING: "+format+"\n", args...)
	}
	opts := kmod.Options{Warnf: warnf}
	quick := false
	for _, f := range flags {
		switch f {
		case "-A", "--quick":
			quick = true
		case "-v", "--verbose":
			opts.Verbosef = func(format string, args ...any) { fmt.Fprintf(hc.Stdout, format+"\n", args...) }
		case "-w":
			opts.WarnDups = true
		case "-q", "--quiet":
			warnf("Ignored deprecated option %s", f)
		case "-e", "--errsyms":
			// Without -E or -F (no Debian script passes them) kmod has no
			// kernel symbols to report missing ones against.
			warnf("-e needs -E or -F")
		}
	}
	fsys := t.View().FS()
	if quick {
		if fresh, err := kmod.UpToDate(fsys, version); err == nil && fresh {
			return nil
		}
	}
	indexes, err := kmod.Depmod(ctx, fsys, version, opts)
	var cycle *kmod.CycleError
	if errors.As(err, &cycle) {
		for _, l := range strings.Split(cycle.Error(), "\n") {
			fmt.Fprintf(hc.Stderr, "depmod: ERROR: %s\n", l)
		}
		return exit(1)
	}
	if err != nil {
		return err
	}
	for _, ix := range indexes {
		if err := r.writeFile(modDir+"/"+ix.Name, ix.Data, 0o644); err != nil {
			return fmt.Errorf("depmod: %s: %w", ix.Name, err)
		}
	}
	r.logf("depmod: wrote the module indexes of %s", version)
	return nil
}

// cmdLinuxUpdateSymlinks is linux-base's linux-update-symlinks: it points
// vmlinuz, vmlinuz.old, initrd.img and initrd.img.old at the newest and
// previous kernel images, as /etc/kernel-img.conf says.
func cmdLinuxUpdateSymlinks(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) != 4 || (args[1] != "install" && args[1] != "upgrade" && args[1] != "remove") {
		return r.unhandledCommand(args)
	}
	change, version, image := args[1], args[2], args[3]
	doSymlinks, dest := r.kernelImgConf()
	if !doSymlinks {
		return nil
	}
	dest = strings.TrimRight(dest, "/") + "/"
	initrd := "/boot/initrd.img-" + version
	if env, ok := hc.Env.Get("INITRD").String(), hc.Env.Get("INITRD").IsSet(); ok && env == "No" {
		initrd = ""
	}
	k := kimage{version, image, initrd}
	images := placeKernel(r.bootImages(), change, k)
	images = r.promoteLinked(images, dest+kernelStem+".old")
	images = r.promoteLinked(images, dest+kernelStem)
	if change == "install" {
		images = append(images, k)
	}
	if len(images) == 0 {
		fmt.Fprintln(hc.Stderr, "W: Last kernel image has been removed, so removing the default symlinks")
		for _, n := range []string{kernelStem + ".old", "initrd.img.old", kernelStem, "initrd.img"} {
			if err := r.unlinkNonDir(dest + n); err != nil {
				return err
			}
		}
		return nil
	}
	cur := images[len(images)-1]
	old := cur
	if len(images) >= 2 {
		old = images[len(images)-2]
	}
	steps := []struct{ src, link string }{
		{old.image, dest + kernelStem + ".old"}, {old.initrd, dest + "initrd.img.old"},
		{cur.image, dest + kernelStem}, {cur.initrd, dest + "initrd.img"},
	}
	for _, s := range steps {
		var err error
		if s.src == "" {
			err = r.unlinkNonDir(s.link)
		} else {
			err = r.pointKernelLink(hc, s.src, s.link)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// kernelStem is the name of the kernel image links.
const kernelStem = "vmlinuz"

// kimage is a kernel image in /boot, with its initrd if it has one.
type kimage struct{ version, image, initrd string }

// bootImages lists the kernel images in /boot, oldest first.
func (r *run) bootImages() []kimage {
	var images []kimage
	if bootDir, err := r.env.Tree.Resolve("/boot", true); err == nil {
		for _, name := range r.env.Tree.Children(bootDir) {
			v, ok := strings.CutPrefix(name, kernelStem+"-")
			if !ok {
				if v, ok = strings.CutPrefix(name, "vmlinux-"); !ok {
					continue
				}
			}
			if strings.HasSuffix(name, ".sig") {
				continue
			}
			k := kimage{version: v, image: "/boot/" + name}
			if e, err := r.env.Tree.Lookup("/boot/initrd.img-"+v, true); err == nil && e.Type == rootfs.TypeRegular {
				k.initrd = "/boot/initrd.img-" + v
			}
			images = append(images, k)
		}
	}
	sort.SliceStable(images, func(i, j int) bool { return kernelVersionCmp(images[i].version, images[j].version) < 0 })
	return images
}

// placeKernel puts k in its place among images for an upgrade, or takes
// its version out for an install or a removal.
func placeKernel(images []kimage, change string, k kimage) []kimage {
	for i := 0; i <= len(images); i++ {
		diff := -1
		if i < len(images) {
			diff = kernelVersionCmp(k.version, images[i].version)
		}
		if diff == 0 {
			if change == "upgrade" {
				images[i] = k
			} else {
				images = append(images[:i], images[i+1:]...)
			}
			break
		}
		if diff < 0 {
			if change == "upgrade" {
				images = append(images[:i], append([]kimage{k}, images[i:]...)...)
			}
			break
		}
	}
	return images
}

// promoteLinked moves the image link points at to the end of images.
func (r *run) promoteLinked(images []kimage, link string) []kimage {
	e, err := r.env.Tree.Lookup(link, false)
	if err != nil || e.Type != rootfs.TypeSymlink {
		return images
	}
	target := e.Target
	if !path.IsAbs(target) {
		target = path.Join(path.Dir(link), target)
	}
	for i, k := range images {
		if k.image == target {
			images = append(append(images[:i:i], images[i+1:]...), k)
			break
		}
	}
	return images
}

// unlinkNonDir removes what is at p unless it is a directory.
func (r *run) unlinkNonDir(p string) error {
	if e, err := r.env.Tree.Lookup(p, false); err == nil && e.Type != rootfs.TypeDir {
		return r.env.Tree.Remove(p)
	}
	return nil
}

// pointKernelLink makes link a relative symlink to src, saying so, unless
// it is one already.
func (r *run) pointKernelLink(hc interp.HandlerContext, src, link string) error {
	rel, err := filepath.Rel(path.Dir(link), src)
	if err != nil {
		return err
	}
	if e, err := r.env.Tree.Lookup(link, false); err == nil && e.Type == rootfs.TypeSymlink && e.Target == rel {
		return nil
	}
	if err := r.unlinkNonDir(link); err != nil {
		return err
	}
	if err := r.symlink(rel, link); err != nil {
		return err
	}
	fmt.Fprintf(hc.Stdout, "I: %s is now a symlink to %s\n", link, rel)
	return nil
}

// kernelImgConf reads do_symlinks and image_dest from /etc/kernel-img.conf
// as linux-base does; link_in_boot moves the links to /boot.
func (r *run) kernelImgConf() (bool, string) {
	doSymlinks, dest, inBoot := true, "/", false
	b, err := r.readFile("/etc/kernel-img.conf")
	if err != nil {
		return doSymlinks, dest
	}
	line := regexp.MustCompile(`^\s*(\w+)\s*=\s*(.*)`)
	for _, l := range strings.Split(string(b), "\n") {
		l, _, _ = strings.Cut(l, "#")
		m := line.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		name, value := strings.ToLower(m[1]), strings.TrimSpace(m[2])
		var bval, isBool bool
		switch strings.ToLower(value) {
		case "no", "false", "0":
			isBool = true
		case "yes", "true", "1":
			bval, isBool = true, true
		}
		switch name {
		case "do_symlinks":
			if isBool {
				doSymlinks = bval
			}
		case "link_in_boot":
			if isBool {
				inBoot = bval
			}
		case "image_dest":
			if f := strings.Fields(value); len(f) > 0 {
				dest = f[0]
			} else {
				dest = ""
			}
		}
	}
	if inBoot {
		dest = "/boot"
	}
	return doSymlinks, dest
}

var kernelVersionPart = regexp.MustCompile(`\d+|-?[^-\d]*`)

// kernelVersionCmp is linux-base's version_cmp: numbers compare as numbers,
// other runs as strings, and -rc or -trunk sorts before everything.
func kernelVersionCmp(a, b string) int {
	split := func(v string) []string {
		var out []string
		for _, m := range kernelVersionPart.FindAllString(v, -1) {
			if m != "" {
				out = append(out, m)
			}
		}
		return out
	}
	l, rr := split(a), split(b)
	for i := 0; ; i++ {
		var left, right string
		lok, rok := i < len(l), i < len(rr)
		if lok {
			left = l[i]
		}
		if rok {
			right = rr[i]
		}
		lpre := lok && (left == "-rc" || left == "-trunk")
		rpre := rok && (right == "-rc" || right == "-trunk")
		if lpre || rpre {
			if !rpre {
				return -1
			}
			if !lpre {
				return 1
			}
		}
		if !lok || !rok {
			switch {
			case rok:
				return -1
			case lok:
				return 1
			}
			return 0
		}
		lnum, rnum := isDigits(left), isDigits(right)
		if lnum && rnum {
			if c := compareNumeric(left, right); c != 0 {
				return c
			}
			continue
		}
		if c := strings.Compare(left, right); c != 0 {
			return c
		}
	}
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func compareNumeric(a, b string) int {
	a, b = strings.TrimLeft(a, "0"), strings.TrimLeft(b, "0")
	if len(a) != len(b) {
		if len(a) < len(b) {
			return -1
		}
		return 1
	}
	return strings.Compare(a, b)
}

func cmdUname(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) == 1 || len(args) == 2 && (args[1] == "-s" || args[1] == "--kernel-name") {
		fmt.Fprintln(hc.Stdout, "Linux")
		return nil
	}
	if len(args) == 2 && (args[1] == "-m" || args[1] == "--machine") {
		m := map[string]string{"amd64": "x86_64", "arm64": "aarch64"}[r.env.Arch]
		if m == "" {
			m = r.env.Arch
		}
		fmt.Fprintln(hc.Stdout, m)
		return nil
	}
	if len(args) == 2 && (args[1] == "-r" || args[1] == "--kernel-release") {
		// The build host's kernel says nothing about the image's: answer
		// with the newest kernel the tree has modules for, or bookworm's.
		fmt.Fprintln(hc.Stdout, r.kernelRelease())
		return nil
	}
	return r.unhandledCommand(args)
}

// defaultKernel is what uname -r says when the tree has no kernel modules.
const defaultKernel = "6.1.0"

func (r *run) kernelRelease() string {
	best := ""
	for _, d := range []string{"/lib/modules", "/usr/lib/modules"} {
		e, err := r.env.Tree.Lookup(d, true)
		if err != nil || e.Type != rootfs.TypeDir {
			continue
		}
		for _, c := range r.env.Tree.Children(e.Path) {
			if best == "" || deb.CompareVersions(c, best) > 0 {
				best = c
			}
		}
	}
	if best == "" {
		return defaultKernel
	}
	return best
}
