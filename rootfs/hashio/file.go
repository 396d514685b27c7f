package hashio

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"syscall"
)

// File returns the SHA-256 of the content of the file at p, in lowercase
// hex, and its size. With noFollow a symlink at p is an error rather than
// followed: a scan of a root must hash what the root holds at p.
func File(p string, noFollow bool) (string, int64, error) {
	flags := os.O_RDONLY
	if noFollow {
		flags |= syscall.O_NOFOLLOW
	}
	f, err := os.OpenFile(p, flags, 0)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	h := sha256.New()
	// A read error from an *os.File already names p.
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}
