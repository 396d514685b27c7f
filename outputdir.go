package stamp

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// An output may be a directory (an OCI layout). SHA256SUMS then lists every
// file inside it by its path below the output directory ("node.oci/index.json",
// "node.oci/blobs/sha256/…"), so `sha256sum -c SHA256SUMS` checks each blob;
// the directories themselves have no sum.

// sumNames lists the files SHA256SUMS covers: every name that is a file,
// and every file inside a name that is a directory, in byte order.
func sumNames(staging string, names []string) ([]string, error) {
	var out []string
	for _, name := range names {
		root := filepath.Join(staging, name)
		fi, err := os.Lstat(root)
		if err != nil {
			return nil, err
		}
		if !fi.IsDir() {
			out = append(out, name)
			continue
		}
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			if !d.Type().IsRegular() {
				return fmt.Errorf("output %s: %s is not a regular file", name, p)
			}
			rel, err := filepath.Rel(staging, p)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	// WalkDir's order is not byte order of the whole path ("a/b/x" comes
	// before "a/b.c" there).
	sort.Strings(out)
	return out, nil
}

// chmodOutput sets an output's modes explicitly so the umask of whoever
// builds does not show: files 0644, directories 0755.
func chmodOutput(p string) error {
	return filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(q, 0o755)
		}
		return os.Chmod(q, 0o644)
	})
}

// renameOutput moves an output from staging to its final name. A rename
// cannot replace a directory, nor put one over a file, so an earlier
// build's output in the way is first moved into staging, which is removed
// with it.
func renameOutput(staging, name, dst string) error {
	src := filepath.Join(staging, name)
	if old, err := os.Lstat(dst); err == nil {
		if neu, err := os.Lstat(src); err == nil && (old.IsDir() || neu.IsDir()) {
			if err := os.Rename(dst, filepath.Join(staging, ".replaced-"+name)); err != nil {
				return err
			}
		}
	}
	return os.Rename(src, dst)
}
