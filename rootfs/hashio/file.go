package hashio

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// File returns the SHA-256 of the content of the file at p, in lowercase
// hex, and its size. With noFollow a symlink at p is an error rather than
// followed: a scan of a root must hash what the root holds at p.
//
// The file is read in large pieces, and the holes of a sparse file (a raw
// disk is mostly holes) are hashed as the zeros they read as, without
// reading them.
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
	n, err := hashFile(h, f)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// FileUncached is File (following a symlink) for a file written past the
// page cache, as DirectWriter writes: it reads the file past the page
// cache too (O_DIRECT), into one buffer used again and again, rather than
// filling the cache with gigabytes of pages nothing reads again. Where the
// file system refuses that, it reads as File does.
func FileUncached(p string) (string, int64, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		return File(p, false)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	h := sha256.New()
	n, err := hashFileWith(h, f, AlignedBuffer(readSize), directAlign)
	if errors.Is(err, syscall.EINVAL) {
		return File(p, false)
	}
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// readSize is the size of File's reads: with io.Copy's 32 KiB, the system
// calls cost about as much as the copying.
const readSize = 1 << 20

// hashFile hashes f from its start to its end, its holes as zeros.
func hashFile(h hash.Hash, f *os.File) (int64, error) {
	return hashFileWith(h, f, make([]byte, readSize), 1)
}

// hashFileWith is hashFile reading into buf, each read's offset and length
// a multiple of align (the file's end excepted: a read there asks for
// whole units and gets what is left).
func hashFileWith(h hash.Hash, f *os.File, buf []byte, align int64) (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() {
		// A read error from an *os.File already names it.
		return io.CopyBuffer(h, f, buf)
	}
	size := fi.Size()
	var off int64
	for off < size {
		data, err := f.Seek(off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, syscall.ENXIO):
			data = size // only a hole from off on
		case err != nil:
			data = off // no SEEK_DATA here: read on
		}
		data = min(data, size)
		hashZeros(h, buf, data-off)
		off = data
		if off == size {
			break
		}
		end, err := f.Seek(off, unix.SEEK_HOLE)
		if err != nil || end <= off {
			end = size
		}
		end = min(end, size)
		for off < end {
			want := min(int64(len(buf)), end-off)
			n, err := f.ReadAt(buf[:min(int64(len(buf)), (want+align-1)/align*align)], off)
			n = min(n, int(want))
			if int64(n) == want && errors.Is(err, io.EOF) {
				err = nil
			}
			h.Write(buf[:n])
			off += int64(n)
			if err != nil && !(errors.Is(err, io.EOF) && n > 0) {
				if errors.Is(err, io.EOF) {
					return off, fmt.Errorf("%s: ends at %d, before the %d bytes it had", f.Name(), off, size)
				}
				return off, err
			}
		}
	}
	if align > 1 {
		// FileUncached's files are outputs this process finished
		// writing: none grows.
		return off, nil
	}
	// A file that grew while it was read: hash the rest too, as io.Copy
	// would have.
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return off, err
	}
	n, err := io.CopyBuffer(h, f, buf)
	return off + n, err
}

// hashZeros hashes n zero bytes, buf as scratch.
func hashZeros(h hash.Hash, buf []byte, n int64) {
	clear(buf)
	for n > 0 {
		k := min(n, int64(len(buf)))
		h.Write(buf[:k])
		n -= k
	}
}
