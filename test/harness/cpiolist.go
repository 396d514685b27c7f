package harness

import (
	"fmt"
	"path"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
)

// CpioListing is what GNU cpio -itv --numeric-uid-gid must print for
// entries, dates left out: one "mode nlink uid gid size name" line per
// entry, size being "major,minor" for a device and the name of a symlink
// followed by " -> target". Of hard links only the last carries the size,
// as cpio's newc format stores the data once, with the last link.
func CpioListing(entries []*rootfs.Entry) []string {
	subdirs := map[string]int{}
	for _, e := range entries {
		if e.Type == rootfs.TypeDir && e.Path != "/" {
			subdirs[path.Dir(e.Path)]++
		}
	}
	rootfs.SetNlink(entries)
	last := map[*rootfs.Inode]string{}
	for _, e := range entries {
		last[e.Inode] = e.Path
	}
	var out []string
	for _, e := range entries {
		nlink := e.Nlink()
		size := "0"
		switch e.Type {
		case rootfs.TypeDir:
			nlink = 2 + subdirs[e.Path]
		case rootfs.TypeRegular:
			if last[e.Inode] == e.Path {
				size = fmt.Sprint(e.Size)
			}
		case rootfs.TypeSymlink:
			size = fmt.Sprint(len(e.Target))
		case rootfs.TypeChar, rootfs.TypeBlock:
			size = fmt.Sprintf("%d,%d", e.Major, e.Minor)
		}
		name := "."
		if e.Path != "/" {
			name = e.Path[1:]
		}
		if e.Type == rootfs.TypeSymlink {
			name += " -> " + e.Target
		}
		out = append(out, fmt.Sprintf("%s %d %d %d %s %s", cpioMode(e), nlink, e.UID, e.GID, size, name))
	}
	return out
}

// ParseCpioListing turns the output of cpio -itv --numeric-uid-gid into
// CpioListing's lines, dropping the dates.
func ParseCpioListing(out string) ([]string, error) {
	var lines []string
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		f := strings.Fields(l)
		if len(f) < 8 {
			return nil, fmt.Errorf("odd cpio listing line %q", l)
		}
		size, rest := f[4], f[5:]
		if strings.HasSuffix(size, ",") {
			size, rest = size+f[5], f[6:]
		}
		// rest: month, day, year or time, then the name.
		lines = append(lines, strings.Join(append(f[:4:4], size, strings.Join(rest[3:], " ")), " "))
	}
	return lines, nil
}

// CpioListingName is the path of a CpioListing line, without a symlink's
// " -> target".
func CpioListingName(line string) string {
	name, _, _ := strings.Cut(strings.SplitN(line, " ", 6)[5], " -> ")
	return name
}

// cpioMode is an entry's mode as ls -l and cpio -tv print it.
func cpioMode(e *rootfs.Entry) string {
	kind := map[rootfs.Type]byte{rootfs.TypeRegular: '-', rootfs.TypeDir: 'd', rootfs.TypeSymlink: 'l',
		rootfs.TypeChar: 'c', rootfs.TypeBlock: 'b', rootfs.TypeFifo: 'p', rootfs.TypeSocket: 's'}[e.Type]
	b := []byte{kind}
	for i, c := range "rwxrwxrwx" {
		if e.Perm&(1<<(8-i)) != 0 {
			b = append(b, byte(c))
		} else {
			b = append(b, '-')
		}
	}
	special := func(bit uint32, at int, set, unset byte) {
		if e.Perm&bit == 0 {
			return
		}
		if b[at] == 'x' {
			b[at] = set
		} else {
			b[at] = unset
		}
	}
	special(0o4000, 3, 's', 'S')
	special(0o2000, 6, 's', 'S')
	special(0o1000, 9, 't', 'T')
	return string(b)
}
