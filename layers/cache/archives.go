package cache

import (
	"fmt"
	"os"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
)

// Archives is the cache as the store of a tree's archives extracted by
// reference: the uncompressed archive is written into the cache once, filed
// under its sha256, and the tree's files point into it. A kept phase then
// costs only its index, and the build's work directory holds no copy of the
// base.
func (c *Cache) Archives() rootfs.ArchiveStore { return archiveStore{c} }

type archiveStore struct{ c *Cache }

func (s archiveStore) CreateTemp() (*os.File, error) {
	if !s.c.writable {
		return nil, fmt.Errorf("store an archive in %s: %w", s.c.dir, ErrReadOnly)
	}
	return os.CreateTemp(s.c.tmp, "archive-*")
}

// Keep renames the archive into place, over a blob of the same name if there
// is one: same content, and it heals a damaged copy. The archive is not
// synced, as an output adopted into the cache is not: the writer has just
// hashed it, and a later read checks it against what is remembered here.
func (s archiveStore) Keep(path, sum string) (string, error) {
	if len(sum) != hexLen {
		return "", fmt.Errorf("store archive %s: %w", path, ErrBadDigest)
	}
	if err := os.Chmod(path, blobMode); err != nil {
		return "", fmt.Errorf("store archive: %w", err)
	}
	if err := os.Rename(path, s.c.blobPath(sum)); err != nil {
		return "", fmt.Errorf("store archive: %w", err)
	}
	if err := syncDir(s.c.blobs); err != nil {
		s.c.log.WithError(err).Debug("cannot sync cache blob directory")
	}
	s.c.rememberWritten(sum)
	return s.c.blobPath(sum), nil
}

// Open opens the archive filed as sum, hashing it first unless it is
// unchanged since it last hashed to its name. A corrupt one is removed and
// reported as a *CorruptError.
func (s archiveStore) Open(sum string) (*os.File, error) {
	if !s.c.blobVerified(sum) {
		if err := s.c.Verify(digestOf(sum)); err != nil {
			return nil, err
		}
		s.c.rememberBlob(sum)
	}
	f, err := os.Open(s.c.blobPath(sum))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", digestOf(sum), err)
	}
	return f, nil
}

// rememberWritten remembers a blob its writer has just hashed as verified.
// An mtime just written is within the racy window; one set back past it is
// not, and any later write moves it forward, out of the identity remembered
// here.
func (c *Cache) rememberWritten(sum string) {
	back := time.Now().Add(-2 * racyWindow)
	if err := os.Chtimes(c.blobPath(sum), back, back); err == nil {
		c.rememberBlob(sum)
	}
}
