package cache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// A local input is hashed on every build so an edit is caught. The stat
// cache remembers, per absolute path, the file's identity (device, inode,
// size, mtime and ctime) with the digest it had: when all of them are the
// same the content is too, because no write or rename leaves ctime alone and
// ctime cannot be set by a user. It saves reading a large base tarball twice.

func (c *Cache) statKey(path string) string {
	sum := sha256.Sum256([]byte(path))
	return filepath.Join(c.dir, "stat", hex.EncodeToString(sum[:]))
}

func statIdentity(fi os.FileInfo) (string, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("%d %d %d %d %d", st.Dev, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano()), true
}

// statLookup returns the digest recorded for path if the file is unchanged
// and its blob is still present.
func (c *Cache) statLookup(path string, fi os.FileInfo) (string, bool) {
	id, ok := statIdentity(fi)
	if !ok {
		return "", false
	}
	b, err := os.ReadFile(c.statKey(path))
	if err != nil {
		return "", false
	}
	rec, hexSum, ok := strings.Cut(strings.TrimSpace(string(b)), "\t")
	if !ok || rec != id || !c.Has(hexSum) {
		return "", false
	}
	return hexSum, true
}

// racyWindow: file timestamps tick coarsely (a few ms), so two writes close
// together can leave identical stat data. A file changed this recently is
// not remembered, as git does for its index.
const racyWindow = 2 * time.Second

// statRemember records the digest of an unchanged file; failures only cost
// a hash next time.
func (c *Cache) statRemember(path string, fi os.FileInfo, hexSum string) {
	if id, ok := statIdentity(fi); ok {
		c.remember(c.statKey(path), fi, id, hexSum, true)
	}
}

// rememberUnchanged records that the host file at abs, as fi found it
// before it was read, hashed to hexSum, unless it changed while it was
// read.
func (c *Cache) rememberUnchanged(abs string, fi os.FileInfo, hexSum string) {
	now, err := os.Stat(abs)
	if err != nil {
		return
	}
	a, ok1 := statIdentity(now)
	b, ok2 := statIdentity(fi)
	if ok1 && ok2 && a == b {
		c.statRemember(abs, fi, hexSum)
	}
}

// HashFile is the hex sha256 of a local file, taken from the stat cache when
// the file is unchanged since it was last hashed: a recipe's host files (a
// Kubernetes binary of 80 MB) are part of every build's cache key.
func (c *Cache) HashFile(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return "", err
	}
	if sum, ok := c.hashedLookup(abs, fi); ok {
		return sum, nil
	}
	key := c.statKey("hash\x00" + abs)
	sum, _, err := hashio.File(abs, false)
	if err != nil {
		return "", err
	}
	if now, err := os.Stat(abs); err == nil {
		if a, ok1 := statIdentity(now); ok1 {
			if b, ok2 := statIdentity(fi); ok2 && a == b {
				c.remember(key, now, a, sum, true)
			}
		}
	}
	return sum, nil
}

// hashedLookup is the sha256 HashFile found for the file at abs when it is
// unchanged since.
func (c *Cache) hashedLookup(abs string, fi os.FileInfo) (string, bool) {
	id, ok := statIdentity(fi)
	if !ok {
		return "", false
	}
	b, err := os.ReadFile(c.statKey("hash\x00" + abs))
	if err != nil {
		return "", false
	}
	rec, sum, ok := strings.Cut(strings.TrimSpace(string(b)), "\t")
	return sum, ok && rec == id && len(sum) == hexLen
}

// blobIdentity is what says a blob is unchanged since it was last hashed:
// device, inode, size and mtime. Unlike a host file's, it leaves ctime out,
// because the blob is hard-linked into output directories, which changes
// ctime and nothing else; a write into it through any name changes mtime.
func blobIdentity(fi os.FileInfo) (string, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("blob %d %d %d %d", st.Dev, st.Ino, st.Size, st.Mtim.Nano()), true
}

// blobVerified tells whether the blob is unchanged since it last hashed to
// its name.
func (c *Cache) blobVerified(hexSum string) bool {
	fi, err := os.Stat(c.blobPath(hexSum))
	if err != nil {
		return false
	}
	id, ok := blobIdentity(fi)
	if !ok {
		return false
	}
	b, err := os.ReadFile(c.statKey(c.blobPath(hexSum)))
	if err != nil {
		return false
	}
	rec, sum, ok := strings.Cut(strings.TrimSpace(string(b)), "\t")
	return ok && rec == id && sum == hexSum
}

// rememberBlob records that the blob hashed to its name just now.
func (c *Cache) rememberBlob(hexSum string) {
	p := c.blobPath(hexSum)
	if fi, err := os.Stat(p); err == nil {
		if id, ok := blobIdentity(fi); ok {
			// A blob's identity leaves ctime out, so its age does not
			// count: every restore's hard link makes it new.
			c.remember(c.statKey(p), fi, id, hexSum, false)
		}
	}
}

// remember writes a stat cache record; failures only cost a hash next time.
// A file whose mtime (and, when the identity holds it, ctime) is within the
// racy window is not remembered.
func (c *Cache) remember(key string, fi os.FileInfo, id, hexSum string, withCtime bool) {
	if !c.writable {
		return
	}
	st := fi.Sys().(*syscall.Stat_t)
	if (withCtime && time.Since(time.Unix(0, st.Ctim.Nano())) < racyWindow) || time.Since(time.Unix(0, st.Mtim.Nano())) < racyWindow {
		return
	}
	dir := filepath.Dir(key)
	if err := mkdirAll(dir); err != nil {
		return
	}
	f, err := os.CreateTemp(dir, ".rec-*")
	if err != nil {
		return
	}
	_, err = f.WriteString(id + "\t" + hexSum + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err == nil {
		err = os.Rename(f.Name(), key)
	}
	if err != nil {
		os.Remove(f.Name())
	}
}
