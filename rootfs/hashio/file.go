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
	sum, n, err := hashFile(f, func() []byte { return make([]byte, readSize) }, 1)
	if err != nil {
		return "", 0, err
	}
	return sum, n, nil
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
	sum, n, err := hashFile(f, func() []byte { return AlignedBuffer(readSize) }, directAlign)
	if errors.Is(err, syscall.EINVAL) {
		return File(p, false)
	}
	if err != nil {
		return "", 0, err
	}
	return sum, n, nil
}

// readSize is the size of File's reads: with io.Copy's 32 KiB, the system
// calls cost about as much as the copying.
const readSize = 1 << 20

// pipelineMin is the size from which a file's chunks are hashed on a
// Hasher's goroutine while the next one is read: reading a gigabyte past
// the page cache waits on the disk about as long as hashing it takes, and
// done in turn the two add up (the live root image's sum, at the end of a
// cold build). A smaller file is hashed in line, with no goroutine to
// start.
const pipelineMin = 4 * readSize

// hashFile returns the hex sha256 of f from its start to its end, its holes
// as zeros, and its size; newBuf makes a read buffer.
func hashFile(f *os.File, newBuf func() []byte, align int64) (string, int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return "", 0, err
	}
	s := &chunkSink{}
	if fi.Mode().IsRegular() && fi.Size() >= pipelineMin {
		s.async = NewHasher()
		defer s.async.Close()
		for range MaxPending + 1 {
			s.ring = append(s.ring, newBuf())
		}
	} else {
		s.h = sha256.New()
		s.ring = [][]byte{newBuf()}
	}
	n, err := hashFileWith(s, f, fi, align)
	if err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(s.sum()), n, nil
}

// chunkSink hashes a file's chunks in order, in line (h) or on a Hasher's
// goroutine (async). A chunk is read into buffer() and handed to write;
// with async, the ring holds MaxPending+1 buffers, so the one read into
// next was handed over MaxPending Writes ago or more, and is hashed.
type chunkSink struct {
	h     hash.Hash
	async *Hasher
	ring  [][]byte
	k     int
	zeros []byte // never written into: handed over again and again
}

func (s *chunkSink) buffer() []byte { return s.ring[s.k] }

func (s *chunkSink) write(p []byte) {
	if len(p) == 0 {
		// No Write, so no turn of the ring: the Hasher counts Writes.
		return
	}
	if s.async == nil {
		s.h.Write(p)
		return
	}
	s.async.Write(p)
	s.k = (s.k + 1) % len(s.ring)
}

// writeZeros hashes n zero bytes.
func (s *chunkSink) writeZeros(n int64) {
	if n <= 0 {
		return
	}
	if s.async == nil {
		buf := s.ring[0]
		clear(buf)
		for n > 0 {
			k := min(n, int64(len(buf)))
			s.h.Write(buf[:k])
			n -= k
		}
		return
	}
	if s.zeros == nil {
		s.zeros = make([]byte, readSize)
	}
	for n > 0 {
		k := min(n, int64(len(s.zeros)))
		s.async.Write(s.zeros[:k])
		n -= k
	}
}

func (s *chunkSink) sum() []byte {
	if s.async == nil {
		return s.h.Sum(nil)
	}
	sum := s.async.Sum()
	return sum[:]
}

// hashFileWith hashes f, whose Stat is fi, into s: each read's offset and
// length a multiple of align (the file's end excepted: a read there asks
// for whole units and gets what is left).
func hashFileWith(s *chunkSink, f *os.File, fi os.FileInfo, align int64) (int64, error) {
	if !fi.Mode().IsRegular() {
		// A read error from an *os.File already names it.
		return readRest(s, f, 0)
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
		s.writeZeros(data - off)
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
			buf := s.buffer()
			want := min(int64(len(buf)), end-off)
			n, err := f.ReadAt(buf[:min(int64(len(buf)), (want+align-1)/align*align)], off)
			n = min(n, int(want))
			if int64(n) == want && errors.Is(err, io.EOF) {
				err = nil
			}
			s.write(buf[:n])
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
	return readRest(s, f, off)
}

// readRest hashes what f reads from its offset on, which is at off, to its
// end.
func readRest(s *chunkSink, f *os.File, off int64) (int64, error) {
	for {
		buf := s.buffer()
		n, err := f.Read(buf)
		if n > 0 {
			s.write(buf[:n])
			off += int64(n)
		}
		if err == io.EOF {
			return off, nil
		}
		if err != nil {
			return off, err
		}
	}
}
