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
	id, ok := statIdentity(fi)
	if !ok || !c.writable {
		return
	}
	if st := fi.Sys().(*syscall.Stat_t); time.Since(time.Unix(0, st.Ctim.Nano())) < racyWindow {
		return
	}
	dir := filepath.Join(c.dir, "stat")
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
		err = os.Rename(f.Name(), c.statKey(path))
	}
	if err != nil {
		os.Remove(f.Name())
	}
}
