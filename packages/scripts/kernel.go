package scripts

import (
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/packages/kmod"
	"github.com/stamp-dev/stamp/rootfs"
)

// The kernel's maintainer scripts run depmod, linux-update-symlinks and
// run-parts of /etc/kernel/postinst.d. These are their handlers.

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
			return r.unhandled(fmt.Sprintf("command %q", strings.Join(args, " ")))
		}
	}
	if version == "" {
		version = r.kernelRelease()
	}
	if strings.Contains(version, "/") || version == "." || version == ".." {
		fmt.Fprintf(hc.Stderr, "depmod: invalid version %q\n", version)
		return exit(1)
	}
	return r.depmod(r.ctx, hc, version, flags)
}

// multiarch is Debian's library directory name per architecture.
var multiarch = map[string]string{
	"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "i386": "i386-linux-gnu",
	"armhf": "arm-linux-gnueabihf", "ppc64el": "powerpc64le-linux-gnu", "s390x": "s390x-linux-gnu",
	"riscv64": "riscv64-linux-gnu",
}

// hostMachine is the ELF machine this process runs on; the image's depmod
// runs only where it could run natively.
var hostMachine = map[string]elf.Machine{
	"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "386": elf.EM_386, "arm": elf.EM_ARM,
	"ppc64le": elf.EM_PPC64, "s390x": elf.EM_S390, "riscv64": elf.EM_RISCV,
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
	if _, found := r.lookPath("depmod"); !found {
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

// scratchDir makes a scratch directory beside the tree, by an absolute
// path: the staged loader runs with the scratch directory as its working
// directory, where a relative path (a relative --work-dir) would no
// longer lead to it.
func (r *run) scratchDir(prefix string) (string, error) {
	base, err := filepath.Abs(filepath.Dir(r.env.Tree.Dir()))
	if err != nil {
		return "", err
	}
	return os.MkdirTemp(base, prefix)
}

type stagedProgram struct {
	ldso, libDir, prog string
}

// stageProgram hard-links the program at tree path p, its ELF interpreter and
// every library it needs (resolved inside the tree, by soname) into dir. A
// program of another architecture than the host's cannot be staged.
func (r *run) stageProgram(p, dir string) (*stagedProgram, error) {
	t := r.env.Tree
	rp, err := t.Resolve(p, true)
	if err != nil {
		return nil, err
	}
	want, ok := hostMachine[runtime.GOARCH]
	if !ok {
		return nil, fmt.Errorf("unknown host architecture %s", runtime.GOARCH)
	}
	libDir := filepath.Join(dir, "lib")
	if err := os.MkdirAll(libDir, 0o700); err != nil {
		return nil, err
	}
	sp := &stagedProgram{libDir: libDir, prog: filepath.Join(dir, "program")}
	if err := stageFile(t, rp, sp.prog); err != nil {
		return nil, err
	}
	f, err := elf.Open(sp.prog)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rp, err)
	}
	defer f.Close()
	if f.Machine != want {
		return nil, fmt.Errorf("%s is built for %s, this machine is %s", rp, f.Machine, want)
	}
	interp := ""
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b, err := io.ReadAll(prog.Open())
			if err != nil {
				return nil, fmt.Errorf("%s: %w", rp, err)
			}
			interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if interp == "" {
		return nil, fmt.Errorf("%s names no ELF interpreter", rp)
	}
	sp.ldso = filepath.Join(dir, "ld.so")
	if err := r.stageResolved(interp, sp.ldso); err != nil {
		return nil, fmt.Errorf("interpreter %s: %w", interp, err)
	}
	dirs := []string{"/lib", "/usr/lib"}
	if ma := multiarch[r.env.Arch]; ma != "" {
		dirs = []string{"/lib/" + ma, "/usr/lib/" + ma, "/lib", "/usr/lib"}
	}
	// RUNPATH and RPATH (systemd's private library) come first, as ld.so
	// searches them first; $ORIGIN is not expanded, Debian does not use it.
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		if rps, err := f.DynString(tag); err == nil {
			for _, rpath := range rps {
				for _, d := range strings.Split(rpath, ":") {
					if path.IsAbs(d) {
						dirs = append([]string{d}, dirs...)
					}
				}
			}
		}
	}
	seen := map[string]bool{}
	queue, err := f.ImportedLibraries()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rp, err)
	}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		if seen[name] || strings.Contains(name, "/") {
			continue
		}
		seen[name] = true
		dst := filepath.Join(libDir, name)
		staged := false
		for _, d := range dirs {
			if err := r.stageResolved(d+"/"+name, dst); err == nil {
				staged = true
				break
			}
		}
		if !staged {
			return nil, fmt.Errorf("library %s is not in the image", name)
		}
		lf, err := elf.Open(dst)
		if err != nil {
			return nil, fmt.Errorf("library %s: %w", name, err)
		}
		more, err := lf.ImportedLibraries()
		lf.Close()
		if err != nil {
			return nil, fmt.Errorf("library %s: %w", name, err)
		}
		queue = append(queue, more...)
	}
	return sp, nil
}

// stageResolved links the regular file tree path p names, following
// symlinks inside the tree, to dst.
func (r *run) stageResolved(p, dst string) error {
	rp, err := r.env.Tree.Resolve(p, true)
	if err != nil {
		return err
	}
	return stageFile(r.env.Tree, rp, dst)
}

// stageFile hard-links the regular file at the resolved tree path rp to dst,
// or copies it where a link cannot be made.
func stageFile(t *rootfs.Tree, rp, dst string) error {
	e := t.Get(rp)
	if e == nil || e.Type != rootfs.TypeRegular {
		return fmt.Errorf("%s: %w", rp, os.ErrNotExist)
	}
	if err := os.Link(t.DiskPath(rp), dst); err == nil {
		return nil
	}
	in, err := t.Open(rp)
	if err != nil {
		return err
	}
	defer in.Close()
	return rootfs.CopyToNewFile(dst, 0o700, in)
}

// stageTree mirrors the directory at the resolved tree path dir into host:
// directories made, regular files hard-linked, symlinks that stay inside dir
// kept. It returns the tree path of every file it linked, by host path.
func (r *run) stageTree(dir, host string) (map[string]string, error) {
	t := r.env.Tree
	staged := map[string]string{}
	if err := os.MkdirAll(host, 0o700); err != nil {
		return nil, err
	}
	prefix := dir + "/"
	for _, p := range t.Paths() {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		e := t.Get(p)
		dst := filepath.Join(host, filepath.FromSlash(p[len(prefix):]))
		switch e.Type {
		case rootfs.TypeDir:
			if err := os.MkdirAll(dst, 0o700); err != nil {
				return nil, err
			}
		case rootfs.TypeRegular:
			if err := stageFile(t, p, dst); err != nil {
				return nil, err
			}
			staged[dst] = p
		case rootfs.TypeSymlink:
			target := path.Clean(path.Join(path.Dir(p), e.Target))
			if !path.IsAbs(e.Target) && strings.HasPrefix(target, prefix) {
				if err := os.Symlink(e.Target, dst); err != nil {
					return nil, err
				}
			}
		}
	}
	return staged, nil
}

// cmdLinuxUpdateSymlinks is linux-base's linux-update-symlinks: it points
// vmlinuz, vmlinuz.old, initrd.img and initrd.img.old at the newest and
// previous kernel images, as /etc/kernel-img.conf says.
func cmdLinuxUpdateSymlinks(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) != 4 || (args[1] != "install" && args[1] != "upgrade" && args[1] != "remove") {
		return r.unhandled(fmt.Sprintf("command %q", strings.Join(args, " ")))
	}
	change, version, image := args[1], args[2], args[3]
	doSymlinks, dest := r.kernelImgConf()
	if !doSymlinks {
		return nil
	}
	dest = strings.TrimRight(dest, "/") + "/"
	const stem = "vmlinuz"
	type kimage struct{ version, image, initrd string }
	var images []kimage
	if bootDir, err := r.env.Tree.Resolve("/boot", true); err == nil {
		for _, name := range r.env.Tree.Children(bootDir) {
			v, ok := strings.CutPrefix(name, stem+"-")
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
	initrd := "/boot/initrd.img-" + version
	if env, ok := hc.Env.Get("INITRD").String(), hc.Env.Get("INITRD").IsSet(); ok && env == "No" {
		initrd = ""
	}
	for i := 0; i <= len(images); i++ {
		diff := -1
		if i < len(images) {
			diff = kernelVersionCmp(version, images[i].version)
		}
		if diff == 0 {
			if change == "upgrade" {
				images[i] = kimage{version, image, initrd}
			} else {
				images = append(images[:i], images[i+1:]...)
			}
			break
		}
		if diff < 0 {
			if change == "upgrade" {
				images = append(images[:i], append([]kimage{{version, image, initrd}}, images[i:]...)...)
			}
			break
		}
	}
	promote := func(link string) {
		e, err := r.env.Tree.Lookup(link, false)
		if err != nil || e.Type != rootfs.TypeSymlink {
			return
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
	}
	promote(dest + stem + ".old")
	promote(dest + stem)
	if change == "install" {
		images = append(images, kimage{version, image, initrd})
	}
	unlink := func(p string) error {
		if e, err := r.env.Tree.Lookup(p, false); err == nil && e.Type != rootfs.TypeDir {
			return r.env.Tree.Remove(p)
		}
		return nil
	}
	if len(images) == 0 {
		fmt.Fprintln(hc.Stderr, "W: Last kernel image has been removed, so removing the default symlinks")
		for _, n := range []string{stem + ".old", "initrd.img.old", stem, "initrd.img"} {
			if err := unlink(dest + n); err != nil {
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
	update := func(src, link string) error {
		rel, err := filepath.Rel(path.Dir(link), src)
		if err != nil {
			return err
		}
		if e, err := r.env.Tree.Lookup(link, false); err == nil && e.Type == rootfs.TypeSymlink && e.Target == rel {
			return nil
		}
		if err := unlink(link); err != nil {
			return err
		}
		if err := r.symlink(rel, link); err != nil {
			return err
		}
		fmt.Fprintf(hc.Stdout, "I: %s is now a symlink to %s\n", link, rel)
		return nil
	}
	steps := []struct{ src, link string }{
		{old.image, dest + stem + ".old"}, {old.initrd, dest + "initrd.img.old"},
		{cur.image, dest + stem}, {cur.initrd, dest + "initrd.img"},
	}
	for _, s := range steps {
		var err error
		if s.src == "" {
			err = unlink(s.link)
		} else {
			err = update(s.src, s.link)
		}
		if err != nil {
			return err
		}
	}
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

var runPartsName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// cmdRunParts is debianutils' run-parts: every executable in the directory
// whose name is made of letters, digits, _ and -, in name order, each
// interpreted like a maintainer script with the --arg arguments.
func cmdRunParts(r *run, hc interp.HandlerContext, args []string) error {
	var runArgs []string
	exitOnError, report, test := false, false, false
	var dir string
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--exit-on-error":
			exitOnError = true
		case a == "--report" || a == "-v" || a == "--verbose":
			report = true
		case a == "--test":
			test = true
		case strings.HasPrefix(a, "--arg="):
			runArgs = append(runArgs, strings.TrimPrefix(a, "--arg="))
		case (a == "-a" || a == "--arg") && i+1 < len(args):
			runArgs = append(runArgs, args[i+1])
			i++
		case a == "--":
			if i+1 < len(args) {
				dir = args[i+1]
			}
			i = len(args)
		case strings.HasPrefix(a, "-"):
			return r.unhandled(fmt.Sprintf("run-parts option %q", a))
		default:
			dir = a
		}
	}
	if dir == "" {
		fmt.Fprintln(hc.Stderr, "run-parts: missing operand")
		return exit(1)
	}
	t := r.env.Tree
	rd, err := t.Resolve(r.treePath(dir), true)
	if err != nil {
		return err
	}
	if e := t.Get(rd); e == nil || e.Type != rootfs.TypeDir {
		fmt.Fprintf(hc.Stderr, "run-parts: failed to open directory %s: No such file or directory\n", dir)
		return exit(1)
	}
	var failed uint8
	for _, name := range t.Children(rd) {
		if !runPartsName.MatchString(name) {
			continue
		}
		e, err := t.Lookup(rd+"/"+name, true)
		if err != nil || e.Type != rootfs.TypeRegular || e.Perm&0o111 == 0 {
			continue
		}
		if test {
			fmt.Fprintf(hc.Stdout, "%s/%s\n", strings.TrimRight(dir, "/"), name)
			continue
		}
		body, err := r.readFile(e.Path)
		if err != nil {
			return err
		}
		if report {
			fmt.Fprintf(hc.Stdout, "%s/%s:\n", strings.TrimRight(dir, "/"), name)
		}
		err = r.nested(r.ctx, hc, Script{Package: r.s.Package, Version: r.s.Version,
			Name: r.s.Name + ": " + rd + "/" + name, Body: body}, runArgs)
		var se *ScriptError
		switch {
		case err == nil:
		case errors.As(err, &se):
			fmt.Fprintf(hc.Stderr, "run-parts: %s/%s exited with return code %d\n", dir, name, se.Status)
			failed = se.Status
			if exitOnError {
				return exit(int(se.Status))
			}
		default:
			return err
		}
	}
	if failed != 0 {
		return exit(1)
	}
	return nil
}
