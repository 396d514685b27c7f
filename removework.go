package stamp

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// removeWorkers is how many directories removeTree empties at once. Its
// time goes to waiting on the disk, not the CPU: on a file system mounted
// with `discard`, as many virtual machines' are, each file freed waits for
// its blocks to be discarded. Measured on a two-core build machine, on
// copies of the node's Debian tree (18,400 files, 897 MB): os.RemoveAll
// took 3.4 s and 4.8 s, removeTree 2.3 s and 1.8 s.
const removeWorkers = 8

// removeTree deletes dir and everything under it, as os.RemoveAll does,
// emptying several directories at once. It follows no symbolic link: an
// entry that is not a directory is unlinked from the directory it was read
// from, and a directory is opened with O_NOFOLLOW. Whatever it leaves,
// os.RemoveAll removes or reports; a dir that is not there is no error.
func removeTree(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var levels [][]string // the directories found, by depth
	for next := []string{dir}; len(next) > 0; {
		levels = append(levels, next)
		var (
			mu    sync.Mutex
			found []string
			g     errgroup.Group
		)
		g.SetLimit(removeWorkers)
		for _, d := range next {
			g.Go(func() error {
				sub, err := emptyFiles(d)
				mu.Lock()
				found = append(found, sub...)
				mu.Unlock()
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return removeRest(dir, err)
		}
		next = found
	}
	// Deepest first, so each directory is empty when its turn comes.
	for _, level := range slices.Backward(levels) {
		var g errgroup.Group
		g.SetLimit(removeWorkers)
		for _, d := range level {
			g.Go(func() error {
				if err := unix.Rmdir(d); err != nil {
					return &os.PathError{Op: "rmdir", Path: d, Err: err}
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			return removeRest(dir, err)
		}
	}
	return nil
}

// removeRest hands what removeTree left to os.RemoveAll, and reports err
// only if that fails too.
func removeRest(dir string, err error) error {
	if rerr := os.RemoveAll(dir); rerr != nil {
		return errors.Join(err, rerr)
	}
	return nil
}

// emptyFiles unlinks every entry of directory d that is not a directory,
// and returns the paths of those that are.
func emptyFiles(d string) ([]string, error) {
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: d, Err: err}
	}
	f := os.NewFile(uintptr(fd), d)
	defer f.Close()
	// Read whole before anything is unlinked, so no entry is skipped.
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, e := range ents {
		if e.IsDir() {
			dirs = append(dirs, filepath.Join(d, e.Name()))
			continue
		}
		if err := unix.Unlinkat(fd, e.Name(), 0); err != nil && err != unix.ENOENT {
			return dirs, &os.PathError{Op: "unlink", Path: filepath.Join(d, e.Name()), Err: err}
		}
	}
	return dirs, nil
}
