package cache

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Every process that opens the cache holds its lock file shared until it
// closes the cache; Prune holds it alone. A build finds a record and uses
// its blobs later, and files blobs before the record that names them: a
// prune between the two would take what the build is about to use. Builds
// never wait on each other.

const lockName = "lock"

// openLock opens the lock file, making it in a cache this user can write.
// A read-only cache without one is not locked: whoever owns it can prune
// it under a reader's feet, as they could delete it.
func (c *Cache) openLock() error {
	p := filepath.Join(c.dir, lockName)
	flags := os.O_RDONLY
	if c.writable {
		flags = os.O_RDWR | os.O_CREATE
	}
	f, err := os.OpenFile(p, flags|unix.O_CLOEXEC, blobMode)
	if errors.Is(err, fs.ErrPermission) {
		// Another user's lock file in a cache both may write: flock(2)
		// needs only a descriptor.
		f, err = os.OpenFile(p, os.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err != nil {
		if !c.writable && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("open cache %s: %w", c.dir, err)
	}
	if c.writable {
		// Readers of a cache filled by root open it read-only.
		if fi, err := f.Stat(); err == nil && fi.Mode().Perm()&blobMode != blobMode {
			f.Chmod(blobMode)
		}
	}
	c.lockFile = f
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); err == nil {
		return nil
	}
	c.log.WithField("cache", c.dir).Info("waiting for a prune of the cache to finish")
	if err := flockRetry(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		c.lockFile = nil
		return fmt.Errorf("lock cache %s: %w", c.dir, err)
	}
	return nil
}

func flockRetry(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// lockAlone trades the shared lock for one held alone, waiting while other
// processes use the cache. The shared lock is let go first: two prunes that
// each waited to be alone while holding it would wait for ever.
func (c *Cache) lockAlone(ctx context.Context) error {
	if c.lockFile == nil {
		return fmt.Errorf("cache %s has no lock file", c.dir)
	}
	fd := int(c.lockFile.Fd())
	if err := unix.Flock(fd, unix.LOCK_UN); err != nil {
		return err
	}
	waited := false
	for {
		err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return err
		}
		if !waited {
			c.log.WithField("cache", c.dir).Info("waiting for the builds using the cache to finish")
			waited = true
		}
		select {
		case <-ctx.Done():
			flockRetry(fd, unix.LOCK_SH)
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// unlockAlone goes back to sharing the cache.
func (c *Cache) unlockAlone() {
	if c.lockFile != nil {
		flockRetry(int(c.lockFile.Fd()), unix.LOCK_SH)
	}
}

// Close lets go of the cache's lock. The Cache must not be used after.
func (c *Cache) Close() error {
	if c.lockFile == nil {
		return nil
	}
	err := c.lockFile.Close()
	c.lockFile = nil
	return err
}
