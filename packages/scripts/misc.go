package scripts

import (
	"fmt"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/packages/ldcache"
	"github.com/stamp-dev/stamp/rootfs"
)

// cmdStat answers stat -c FORMAT for paths in the tree. %d and %i are the
// same made-up device and inode numbers whatever the build, so a script
// comparing / with /proc/1/root concludes, rightly, that it runs in a
// chroot: /proc is not there.
func cmdStat(r *run, hc interp.HandlerContext, args []string) error {
	follow := false
	format := ""
	var files []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-L" || a == "--dereference":
			follow = true
		case a == "-c" || a == "--format":
			if i+1 < len(args) {
				format = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "--format="):
			format = strings.TrimPrefix(a, "--format=")
		case strings.HasPrefix(a, "-") && strings.HasSuffix(a, "c") && len(a) > 2:
			// Combined short flags, as in -Lc.
			for _, c := range a[1 : len(a)-1] {
				if c != 'L' {
					return r.unhandled(fmt.Sprintf("stat option %q", a))
				}
				follow = true
			}
			if i+1 < len(args) {
				format = args[i+1]
				i++
			}
		case strings.HasPrefix(a, "-"):
			return r.unhandled(fmt.Sprintf("stat option %q", a))
		default:
			files = append(files, a)
		}
	}
	if format == "" || len(files) == 0 {
		return r.unhandledCommand(args)
	}
	status := 0
	for _, f := range files {
		e, err := r.env.Tree.Lookup(r.treePath(f), follow)
		if err != nil {
			fmt.Fprintf(hc.Stderr, "stat: cannot statx '%s': No such file or directory\n", f)
			status = 1
			continue
		}
		out, err := statFormat(format, f, e)
		if err != nil {
			return r.unhandled(fmt.Sprintf("stat format %q", format))
		}
		fmt.Fprintln(hc.Stdout, out)
	}
	if status != 0 {
		return exit(status)
	}
	return nil
}

func statFormat(format, name string, e *rootfs.Entry) (string, error) {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' || i+1 == len(format) {
			b.WriteByte(c)
			continue
		}
		i++
		switch format[i] {
		case 'd':
			b.WriteString("2049")
		case 'i':
			b.WriteString(strconv.FormatUint(uint64(inodeNumber(e.Path)), 10))
		case 'a':
			b.WriteString(strconv.FormatUint(uint64(e.Perm), 8))
		case 'u':
			b.WriteString(strconv.FormatUint(uint64(e.UID), 10))
		case 'g':
			b.WriteString(strconv.FormatUint(uint64(e.GID), 10))
		case 's':
			b.WriteString(strconv.FormatInt(e.Size, 10))
		case 'n':
			b.WriteString(name)
		case '%':
			b.WriteByte('%')
		default:
			return "", fmt.Errorf("unknown directive %%%c", format[i])
		}
	}
	return b.String(), nil
}

// inodeNumber is a stable stand-in for a path's inode number.
func inodeNumber(p string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(p); i++ {
		h = (h ^ uint32(p[i])) * 16777619
	}
	return h | 1
}

// cmdLdconfig writes /etc/ld.so.cache as the image's ldconfig would, without
// running it. -r / (libc-bin's postinst passes "$DPKG_ROOT/") is the tree
// itself; -p, another root, cache or configuration ask for something else.
func cmdLdconfig(r *run, hc interp.HandlerContext, args []string) error {
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-r" && i+1 < len(args) && (args[i+1] == "/" || args[i+1] == ""):
			i++
		case a == "-p" || a == "--print-cache" || strings.HasPrefix(a, "-r") || strings.HasPrefix(a, "-C") || strings.HasPrefix(a, "-f"):
			return r.unhandledCommand(args)
		}
	}
	if _, found := r.lookPath("ldconfig"); !found {
		return r.notFound(hc, "ldconfig")
	}
	b, err := ldcache.Build(r.env.Tree, r.env.Arch)
	if err != nil {
		return fmt.Errorf("ldconfig: %w", err)
	}
	return r.writeFile(ldcache.CachePath, b, 0o644)
}

// cmdChronydConfig is chronyd -p: the directives of chrony.conf and of
// the confdir and sourcedir files it names, without comments, as chronyd
// prints its configuration. Running the daemon any other way is
// unhandled.
func cmdChronydConfig(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) != 2 || args[1] != "-p" {
		return r.unhandledCommand(args)
	}
	var print func(p string)
	print = func(p string) {
		b, err := r.readFile(p)
		if err != nil {
			return
		}
		for _, l := range lines(b) {
			l = strings.TrimSpace(l)
			if l == "" || strings.IndexByte("#;%!", l[0]) >= 0 {
				continue
			}
			f := strings.Fields(l)
			if (f[0] == "confdir" || f[0] == "sourcedir") && len(f) > 1 {
				suffix := ".conf"
				if f[0] == "sourcedir" {
					suffix = ".sources"
				}
				for _, d := range f[1:] {
					rd, err := r.env.Tree.Resolve(d, true)
					if err != nil {
						continue
					}
					for _, c := range r.env.Tree.Children(rd) {
						if strings.HasSuffix(c, suffix) {
							print(rd + "/" + c)
						}
					}
				}
			}
			fmt.Fprintln(hc.Stdout, strings.Join(f, " "))
		}
	}
	print("/etc/chrony/chrony.conf")
	return nil
}
