package cache

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Outputs kept in the cache are reflinks or else hard links where the file
// system allows:
// a build's disk images are gigabytes, and copying them into the cache and
// back out would cost a warm build most of its time. A link shares the
// inode, so an output edited in place (a disk image booted read-write)
// changes the blob too; its mtime then no longer matches what was recorded
// when it was last hashed, and the next read re-hashes it, finds it
// corrupt, removes it and builds again.

// Adopt stores the file at path, whose hex sha256 the caller has just
// computed, by hard-linking it into the cache, or by a verified copy when
// it cannot (another file system, another user's file).
func (c *Cache) Adopt(ctx context.Context, path, sum string) (string, error) {
	if _, err := ParseDigest(sum); err != nil || len(sum) != hexLen {
		return c.ImportAs(ctx, path, "")
	}
	if c.Has(sum) {
		return digestOf(sum), nil
	}
	if !c.writable {
		return "", fmt.Errorf("store %s in %s: %w", path, c.dir, ErrReadOnly)
	}
	tmp := filepath.Join(c.tmp, "link-"+sum)
	os.Remove(tmp)
	if err := os.Link(path, tmp); err != nil {
		return c.ImportAs(ctx, path, sum)
	}
	defer os.Remove(tmp)
	// The caller has just hashed the file it wrote, so the blob is
	// remembered as verified now, or the next build would hash it again.
	if err := c.fileWritten(tmp, sum); err != nil {
		return "", fmt.Errorf("store %s: %w", path, err)
	}
	return digestOf(sum), nil
}

// Restore puts the blob at path: a reflink, or else a hard link, when the blob is unchanged
// since it last hashed to its name (else it is hashed again first, and a
// corrupt one is removed and reported), a copy that re-hashes it where a
// link cannot be made.
func (c *Cache) Restore(ctx context.Context, digest, path string) error {
	h, err := ParseDigest(digest)
	if err != nil {
		return err
	}
	if !c.blobVerified(h) {
		if err := c.Verify(digest); err != nil {
			return err
		}
		c.rememberBlob(h)
	}
	if reflink(c.blobPath(h), path) == nil {
		return nil
	}
	if err := os.Link(c.blobPath(h), path); err == nil {
		return nil
	}
	return c.Extract(ctx, digest, path)
}

// reflink makes dst a copy of src that shares its blocks (btrfs, XFS), which
// costs no more than a link and keeps the two apart when either is written.
func reflink(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, blobMode)
	if err != nil {
		return err
	}
	err = unix.IoctlFileClone(int(out.Fd()), int(in.Fd()))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dst)
	}
	return err
}
