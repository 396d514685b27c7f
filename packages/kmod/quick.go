package kmod

import (
	"io/fs"
	"strings"
)

// UpToDate is depmod -A's test: modules.dep exists and no module under
// lib/modules/version of the image fsys is newer than it, to the second.
func UpToDate(fsys fs.FS, version string) (bool, error) {
	dir := fsPath("/lib/modules/" + version)
	dep, err := fs.Stat(fsys, dir+"/modules.dep")
	if err != nil {
		return false, err
	}
	return upToDate(fsys, dir, dep.ModTime().Unix(), 0)
}

func upToDate(fsys fs.FS, dir string, mtime int64, depth int) (bool, error) {
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return false, err
	}
	for _, de := range ents {
		name := de.Name()
		if name == "build" || name == "source" {
			continue
		}
		fi, err := fs.Stat(fsys, dir+"/"+name)
		if err != nil {
			continue
		}
		switch {
		case fi.IsDir():
			// A symlink loop would have kmod walk until it runs out of
			// file descriptors; this stops at a depth no real tree has.
			if depth >= maxDepth {
				continue
			}
			if fresh, err := upToDate(fsys, dir+"/"+name, mtime, depth+1); err == nil && !fresh {
				return false, nil
			}
		case fi.Mode().IsRegular() && isModuleName(name):
			if fi.ModTime().Unix() > mtime {
				return false, nil
			}
		}
	}
	return true, nil
}

// maxDepth bounds how deep UpToDate walks.
const maxDepth = 64

// isModuleName is path_ends_with_kmod_ext.
func isModuleName(name string) bool {
	for _, ext := range moduleExts {
		if len(name) > len(ext) && strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}
