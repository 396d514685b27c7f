package formats

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"path"
	"sort"

	"github.com/stamp-dev/stamp/rootfs"
)

// multiarch is the Debian library directory name of an ELF machine.
var multiarch = map[elf.Machine]string{
	elf.EM_X86_64:  "x86_64-linux-gnu",
	elf.EM_AARCH64: "aarch64-linux-gnu",
}

// elfFile is a file of the tree a program needs, and where an initramfs
// puts it.
type elfFile struct {
	at    string // path in the initramfs
	entry *rootfs.Entry
}

// elfClosure finds the program at prog in the tree and everything it
// loads: its dynamic loader (PT_INTERP) and, transitively, each DT_NEEDED
// library, looked up in the directories Debian's loader searches without a
// cache. The loader goes where PT_INTERP names it and the libraries into
// /lib/MULTIARCH, which that loader searches by default; prog goes to at.
func elfClosure(t *rootfs.Sealed, prog, at string) ([]elfFile, error) {
	e, err := treeFile(t, prog)
	if err != nil {
		return nil, err
	}
	f, err := openELF(t, e)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prog, err)
	}
	arch, ok := multiarch[f.Machine]
	if !ok {
		return nil, fmt.Errorf("%s: ELF machine %s has no library directory stamp knows", prog, f.Machine)
	}
	dirs := []string{"/lib/" + arch, "/usr/lib/" + arch, "/lib", "/usr/lib", "/lib64", "/usr/lib64"}
	out := []elfFile{{at: at, entry: e}}
	seen := map[string]bool{}
	queue := []*elf.File{f}
	names := []string{prog}
	for len(queue) > 0 {
		cur, curName := queue[0], names[0]
		queue, names = queue[1:], names[1:]
		if interp := interpOf(cur); interp != "" && !seen[interp] {
			seen[interp] = true
			ie, err := treeFile(t, interp)
			if err != nil {
				return nil, fmt.Errorf("%s needs the loader %s: %w", curName, interp, err)
			}
			out = append(out, elfFile{at: interp, entry: ie})
		}
		needed, err := cur.DynString(elf.DT_NEEDED)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", curName, err)
		}
		cur.Close()
		for _, lib := range needed {
			if seen[lib] {
				continue
			}
			seen[lib] = true
			var le *rootfs.Entry
			for _, d := range dirs {
				if x, err := treeFile(t, path.Join(d, lib)); err == nil {
					le = x
					break
				}
			}
			if le == nil {
				return nil, fmt.Errorf("%s needs %s, which is in none of %v", curName, lib, dirs)
			}
			lf, err := openELF(t, le)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", le.Path, err)
			}
			out = append(out, elfFile{at: "/lib/" + arch + "/" + lib, entry: le})
			queue, names = append(queue, lf), append(names, le.Path)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out, nil
}

// openELF reads a program or library of the tree (at most 256 MiB) and
// parses it.
func openELF(t *rootfs.Sealed, e *rootfs.Entry) (*elf.File, error) {
	if e.Size > 256<<20 {
		return nil, fmt.Errorf("%d bytes, more than a program or library should have", e.Size)
	}
	r, err := t.Open(e.Path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, err
	}
	return elf.NewFile(bytes.NewReader(b))
}

// interpOf is f's PT_INTERP, "" for a static program.
func interpOf(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return ""
			}
			for i, c := range b {
				if c == 0 {
					return string(b[:i])
				}
			}
			return string(b)
		}
	}
	return ""
}
