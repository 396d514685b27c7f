package cache

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hashio"
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
	if err := s.c.fileWritten(path, sum); err != nil {
		return "", fmt.Errorf("store archive: %w", err)
	}
	return s.c.blobPath(sum), nil
}

// Open opens the archive filed as sum, hashing it first unless it is
// unchanged since it last hashed to its name. A corrupt one is removed and
// reported as a *CorruptError.
func (s archiveStore) Open(sum string) (*os.File, error) {
	return s.c.OpenFile(digestOf(sum))
}

// fileWritten renames tmp, a file in the cache's file system whose sha256
// its writer has just computed as sum (hex), into place as that blob, and
// remembers it as verified.
//
// Nothing is synced. The data is not (the build goes on reading it from
// memory), so syncing the blob's name would not make the blob durable, and
// it is not free: a directory sync ends in a flush of the disk's cache,
// which waits for what the build has written so far (or, on ext4 with a
// journal, for the blocks just allocated). After a node rebuild's raw disk
// that was 1.25 s with nothing else running. What a crash leaves
// (no name, or a file cut short) no longer matches the identity remembered
// here, so the next reader hashes it and drops it.
func (c *Cache) fileWritten(tmp, sum string) error {
	if err := os.Chmod(tmp, blobMode); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.blobPath(sum)); err != nil {
		return err
	}
	c.rememberWritten(sum)
	return nil
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

// KeepFile stores a host file as a blob a tree's file can point at, and
// returns its sha256 (hex) and size. A file unchanged since it was last kept, whose
// blob is unchanged too, is not read at all. Like an archive, the copy is
// not synced: the build uses it at once, and a later reader hashes it again
// unless it is unchanged since it was hashed here.
func (c *Cache) KeepFile(ctx context.Context, path string) (string, int64, error) {
	if !c.writable {
		return "", 0, fmt.Errorf("store %s in %s: %w", path, c.dir, ErrReadOnly)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", 0, err
	}
	f, err := os.Open(abs)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	if !fi.Mode().IsRegular() {
		return "", 0, fmt.Errorf("store %s: not a regular file", path)
	}
	if sum, ok := c.statLookup(abs, fi); ok && c.blobVerified(sum) {
		return sum, fi.Size(), nil
	}
	if sum, ok := c.hashedLookup(abs, fi); ok {
		// The build's key already read this very file (HashFile): the
		// kernel copies it, and it is filed under the sum found then.
		if err := c.keepHashed(abs, f, fi, sum); err != nil {
			return "", 0, fmt.Errorf("store %s: %w", path, err)
		}
		return sum, fi.Size(), nil
	}
	sum, n, err := c.KeepWritten(ctx, path, func(w io.Writer) error {
		_, err := io.CopyBuffer(w, &ctxReader{ctx: ctx, r: f}, make([]byte, copyBuffer))
		return err
	})
	if err != nil {
		return "", 0, err
	}
	c.rememberUnchanged(abs, fi, sum)
	return sum, n, nil
}

// keepHashed files a copy of f, the host file at abs as fi found it, under
// sum, which HashFile found for the file with the same stat data. As
// everywhere the stat cache is trusted, an unchanged device, inode, size,
// mtime and ctime mean unchanged content; a file that changes while it is
// copied is an error.
func (c *Cache) keepHashed(abs string, f *os.File, fi os.FileInfo, sum string) error {
	tmp, err := os.CreateTemp(c.tmp, "file-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	// *os.File to *os.File: copy_file_range(2).
	n, err := io.Copy(tmp, f)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	now, err := os.Stat(abs)
	if err != nil {
		return err
	}
	a, ok1 := statIdentity(now)
	b, ok2 := statIdentity(fi)
	if !ok1 || !ok2 || a != b || n != fi.Size() {
		return fmt.Errorf("%s changed while it was copied into the cache", abs)
	}
	if err := c.fileWritten(tmp.Name(), sum); err != nil {
		return err
	}
	c.statRemember(abs, fi, sum)
	return nil
}

// KeepWritten stores what write writes as a blob a tree's file can point
// at, and returns its sha256 (hex) and size: a file a layer makes from
// blobs the cache holds (an image archive) is kept once, and later builds
// point at it instead of writing it again. It is hashed as it is written
// and, like an archive, not synced. name is for errors.
func (c *Cache) KeepWritten(ctx context.Context, name string, write func(io.Writer) error) (string, int64, error) {
	if !c.writable {
		return "", 0, fmt.Errorf("store %s in %s: %w", name, c.dir, ErrReadOnly)
	}
	tmp, err := os.CreateTemp(c.tmp, "file-*")
	if err != nil {
		return "", 0, fmt.Errorf("store %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	hw := hashio.NewWriter(tmp)
	err = write(hw)
	if cerr := hw.Close(); err == nil {
		err = cerr
	}
	var fi os.FileInfo
	if err == nil {
		fi, err = tmp.Stat()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return "", 0, fmt.Errorf("store %s: %w", name, err)
	}
	h := hw.Sum()
	sum := hex.EncodeToString(h[:])
	if err := c.fileWritten(tmp.Name(), sum); err != nil {
		return "", 0, fmt.Errorf("store %s: %w", name, err)
	}
	return sum, fi.Size(), nil
}
