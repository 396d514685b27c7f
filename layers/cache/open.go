package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// OpenFile opens the blob named digest to be read in place (an archive a
// tree points into, an image a server hands to sendfile), hashing it first
// unless it is unchanged since it last hashed to its name. A corrupt one is
// removed and reported as a *CorruptError. The file stays the blob's
// content whatever happens to its name afterwards: a prune that removes it
// frees the disk when the file is closed.
func (c *Cache) OpenFile(digest string) (*os.File, error) {
	h, err := ParseDigest(digest)
	if err != nil {
		return nil, err
	}
	if !c.blobVerified(h) {
		if err := c.Verify(digest); err != nil {
			return nil, err
		}
		c.rememberBlob(h)
	}
	f, err := os.Open(c.blobPath(h))
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", digestOf(h), err)
	}
	return f, nil
}

// HashTree is the digest ("sha256:<hex>") of a host file, or of a
// directory's names, types, modes, link targets and contents, in byte order
// of the path. Each file's sum comes from the stat cache when the file is
// unchanged since it was last hashed (HashFile).
func (c *Cache) HashTree(root string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(h, "%q %o", rel, fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, " -> %q", t)
		case fi.Mode().IsRegular():
			sum, err := c.HashFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, " %s", sum)
		}
		h.Write([]byte{'\n'})
		return nil
	})
	if err != nil {
		return "", err
	}
	return digestOf(hex.EncodeToString(h.Sum(nil))), nil
}
