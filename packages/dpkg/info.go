package dpkg

import (
	"bufio"
	"bytes"
	"fmt"
	"path"
	"strings"
)

// InfoFile is the path of one of a package's files in the info directory:
// PKG.TYPE, or PKG:ARCH.TYPE for a Multi-Arch: same package (dpkg's
// multiarch database layout, info/format 1).
func InfoFile(name, arch, multiArch, typ string) string {
	n := name
	if multiArch == "same" {
		n += ":" + arch
	}
	return InfoDir + "/" + n + "." + typ
}

// InfoFormat is the content of info/format that the layout above needs.
const InfoFormat = "1\n"

// CopiedControl reports whether dpkg copies a control member into the info
// directory: everything but "control" and names with a dot.
func CopiedControl(name string) bool {
	return name != "control" && name != "list" && !strings.Contains(name, ".")
}

// ListFile formats a .list file: every path the package's data.tar holds,
// in archive order, the root as "/.".
func ListFile(paths []string) []byte {
	var b bytes.Buffer
	for _, p := range paths {
		if p == "/" {
			p = "/."
		}
		b.WriteString(p)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// FilterMD5Sums drops the lines of an md5sums file whose path keep rejects.
// Paths in md5sums have no leading slash; keep gets them with one.
func FilterMD5Sums(data []byte, keep func(p string) bool) ([]byte, error) {
	var b bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		l := sc.Text()
		if l == "" {
			continue
		}
		if len(l) < 34 || l[32] != ' ' {
			return nil, fmt.Errorf("md5sums line %d: %q is not \"md5  path\"", n, l)
		}
		p := strings.TrimLeft(l[33:], " *")
		if keep(path.Clean("/" + p)) {
			b.WriteString(l)
			b.WriteByte('\n')
		}
	}
	return b.Bytes(), sc.Err()
}

// ParseConffiles reads a control conffiles member: one absolute path per
// line, optionally flagged "remove-on-upgrade", which dpkg does not list.
func ParseConffiles(data []byte) []string {
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if len(f) > 1 && f[0] == "remove-on-upgrade" {
			continue
		}
		out = append(out, f[len(f)-1])
	}
	return out
}
