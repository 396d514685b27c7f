// Package verity writes the dm-verity hash device of a data device: the
// superblock and the hash tree that `veritysetup format` writes (hash type
// 1, SHA-256), byte for byte, given the same salt and UUID. The kernel's
// dm-verity target checks every block read from the data device against
// the tree, and the tree against its root hash, which the caller puts
// where the kernel is told it (a UKI's command line, usrhash=).
//
// The bottom level, one digest per data block, is where the time goes: its
// hash blocks are computed on every core, each from its own range of the
// data, and written in place, so the result does not depend on the number
// of workers. Data blocks the caller knows to be holes are not read: a
// block of zeros has one digest, computed once.
package verity

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"sync"

	"github.com/stamp-dev/stamp/disk"
)

const (
	// BlockSize is the data and hash block size veritysetup chooses by
	// default, and the page size the kernel needs blocks no larger than.
	BlockSize = 4096
	// SuperblockSize is the on-disk superblock; the hash tree starts at the
	// next hash block.
	SuperblockSize = 512
	digestSize     = sha256.Size
	maxSalt        = 256
	maxLevels      = 63
	signature      = "verity\x00\x00"
	sbVersion      = 1
	hashType       = 1 // the normal (not Chrome OS) format: salt first
	algorithm      = "sha256"
)

// Options are the parameters veritysetup format takes that stamp fixes.
type Options struct {
	// Salt goes before every block hashed (at most 256 bytes).
	Salt []byte
	// UUID is the hash device's, in the superblock (printed byte order).
	UUID [16]byte
	// Extents are where the data device may hold other than zeros,
	// relative to it; nil means anywhere. Blocks outside them are not read.
	Extents []disk.Extent
	// Workers hash the bottom level; 0 means one per core.
	Workers int
}

// Result is what the caller needs of a formatted hash device.
type Result struct {
	RootHash   []byte
	DataBlocks uint64
	// Size is the bytes of the hash device used: the superblock's block
	// and the tree.
	Size int64
}

// RootHashHex is the root hash as veritysetup prints it and the kernel's
// command line takes it.
func (r *Result) RootHashHex() string { return hex.EncodeToString(r.RootHash) }

// levels is the tree's shape for n data blocks: how many blocks each level
// holds, the bottom first, and where each starts on the hash device, in
// blocks. The top level comes first on the device, after the superblock.
func levels(n uint64) (size, start []uint64, total uint64) {
	const perBlockBits = 7 // BlockSize / digestSize = 128 digests per hash block
	var count int
	for count < maxLevels && (n-1)>>(perBlockBits*uint(count)) != 0 {
		count++
	}
	size = make([]uint64, count)
	start = make([]uint64, count)
	pos := uint64(1) // after the superblock's block
	for i := count - 1; i >= 0; i-- {
		shift := uint(i+1) * perBlockBits
		size[i] = (n + 1<<shift - 1) >> shift
		start[i] = pos
		pos += size[i]
	}
	return size, start, pos
}

// HashSize is the size in bytes of the hash device for dataSize bytes of
// data: the superblock's block and the tree.
func HashSize(dataSize int64) int64 {
	n := uint64(dataSize / BlockSize)
	if n == 0 {
		return 0
	}
	_, _, total := levels(n)
	return int64(total) * BlockSize
}

// Format hashes the data device (dataSize bytes, a whole number of blocks)
// and writes the superblock and hash tree to hash.
func Format(ctx context.Context, data io.ReaderAt, dataSize int64, hash io.WriterAt, o Options) (*Result, error) {
	if dataSize <= 0 || dataSize%BlockSize != 0 {
		return nil, fmt.Errorf("the data device's %d bytes are not a whole, non-zero number of %d-byte blocks", dataSize, BlockSize)
	}
	if len(o.Salt) > maxSalt {
		return nil, fmt.Errorf("a salt of %d bytes; at most %d", len(o.Salt), maxSalt)
	}
	n := uint64(dataSize / BlockSize)
	size, start, total := levels(n)
	r := &Result{DataBlocks: n, Size: int64(total) * BlockSize}
	sb := superblock(n, o)
	if _, err := hash.WriteAt(sb, 0); err != nil {
		return nil, err
	}
	if len(size) == 0 {
		// One data block: its digest is the root, and there is no tree.
		b := make([]byte, BlockSize)
		if _, err := data.ReadAt(b, 0); err != nil {
			return nil, err
		}
		r.RootHash = digest(sha256.New(), o.Salt, b, nil)
		return r, nil
	}
	bottom, err := hashData(ctx, data, n, size[0], o)
	if err != nil {
		return nil, err
	}
	level := bottom
	for i := 0; i < len(size); i++ {
		if _, err := hash.WriteAt(level, int64(start[i])*BlockSize); err != nil {
			return nil, err
		}
		if i+1 < len(size) {
			level = hashBlocks(level, size[i+1], o.Salt)
		}
	}
	r.RootHash = digest(sha256.New(), o.Salt, level[:BlockSize], nil)
	return r, nil
}

// superblock is veritysetup's superblock, padded to a whole hash block.
func superblock(n uint64, o Options) []byte {
	b := make([]byte, BlockSize)
	copy(b, signature)
	binary.LittleEndian.PutUint32(b[8:], sbVersion)
	binary.LittleEndian.PutUint32(b[12:], hashType)
	copy(b[16:32], o.UUID[:])
	copy(b[32:64], algorithm)
	binary.LittleEndian.PutUint32(b[64:], BlockSize)
	binary.LittleEndian.PutUint32(b[68:], BlockSize)
	binary.LittleEndian.PutUint64(b[72:], n)
	binary.LittleEndian.PutUint16(b[80:], uint16(len(o.Salt)))
	copy(b[88:88+maxSalt], o.Salt)
	return b
}

// digest appends SHA-256(salt || block) to out.
func digest(h interface {
	io.Writer
	Reset()
	Sum([]byte) []byte
}, salt, block, out []byte) []byte {
	h.Reset()
	h.Write(salt)
	h.Write(block)
	return h.Sum(out)
}

// hashBlocks is the level above the hash blocks of level: one digest per
// block, 128 to a block, the last block padded with zeros.
func hashBlocks(level []byte, blocks uint64, salt []byte) []byte {
	out := make([]byte, blocks*BlockSize)
	h := sha256.New()
	for i := uint64(0); i < uint64(len(level))/BlockSize; i++ {
		digest(h, salt, level[i*BlockSize:(i+1)*BlockSize], out[i*digestSize:i*digestSize])
	}
	return out
}

// hashData computes the bottom level: hash block k holds the digests of
// data blocks 128k to 128k+127, and is computed by whichever worker takes
// k.
func hashData(ctx context.Context, data io.ReaderAt, n, blocks uint64, o Options) ([]byte, error) {
	const per = BlockSize / digestSize
	out := make([]byte, blocks*BlockSize)
	zero := digest(sha256.New(), o.Salt, make([]byte, BlockSize), nil)
	ext := o.Extents
	if ext == nil {
		ext = []disk.Extent{{Off: 0, Len: int64(n) * BlockSize}}
	}
	workers := o.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var next uint64
	var mu sync.Mutex
	var firstErr error
	take := func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr != nil || next >= blocks {
			return 0, false
		}
		k := next
		next++
		return k, true
	}
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := sha256.New()
			buf := make([]byte, per*BlockSize)
			for {
				k, ok := take()
				if !ok {
					return
				}
				if k%64 == 0 && ctx.Err() != nil {
					fail(ctx.Err())
					return
				}
				first := k * per
				count := min(uint64(per), n-first)
				off, length := int64(first)*BlockSize, int64(count)*BlockSize
				dst := out[k*BlockSize : k*BlockSize]
				spans := within(ext, off, length)
				if len(spans) == 0 {
					for i := uint64(0); i < count; i++ {
						dst = append(dst, zero...)
					}
					continue
				}
				b := buf[:length]
				if _, err := data.ReadAt(b, off); err != nil {
					fail(fmt.Errorf("reading the data device at %d: %w", off, err))
					return
				}
				for i := uint64(0); i < count; i++ {
					bo := int64(i) * BlockSize
					if !overlaps(spans, off+bo, BlockSize) {
						dst = append(dst, zero...)
						continue
					}
					dst = digest(h, o.Salt, b[bo:bo+BlockSize], dst)
				}
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return out, nil
}

// within is the part of the sorted extents ext that overlaps [off,
// off+length).
func within(ext []disk.Extent, off, length int64) []disk.Extent {
	i := sort.Search(len(ext), func(i int) bool { return ext[i].Off+ext[i].Len > off })
	j := i
	for j < len(ext) && ext[j].Off < off+length {
		j++
	}
	return ext[i:j]
}

func overlaps(ext []disk.Extent, off, length int64) bool {
	for _, e := range ext {
		if e.Off < off+length && off < e.Off+e.Len {
			return true
		}
	}
	return false
}

// Superblock is a hash device's superblock read back.
type Superblock struct {
	UUID       [16]byte
	Algorithm  string
	DataBlocks uint64
	BlockSize  uint32 // data and hash, which stamp keeps equal
	Salt       []byte
}

// ReadSuperblock reads the superblock at the start of a hash device.
func ReadSuperblock(r io.ReaderAt) (*Superblock, error) {
	b := make([]byte, SuperblockSize)
	if _, err := r.ReadAt(b, 0); err != nil {
		return nil, err
	}
	if string(b[:8]) != signature {
		return nil, errors.New("no dm-verity superblock (no \"verity\" signature)")
	}
	if v, t := binary.LittleEndian.Uint32(b[8:]), binary.LittleEndian.Uint32(b[12:]); v != sbVersion || t != hashType {
		return nil, fmt.Errorf("dm-verity superblock version %d, hash type %d; stamp reads version 1, type 1", v, t)
	}
	s := &Superblock{Algorithm: string(trimNUL(b[32:64])), BlockSize: binary.LittleEndian.Uint32(b[64:]),
		DataBlocks: binary.LittleEndian.Uint64(b[72:])}
	copy(s.UUID[:], b[16:32])
	if hb := binary.LittleEndian.Uint32(b[68:]); hb != s.BlockSize {
		return nil, fmt.Errorf("data blocks of %d bytes, hash blocks of %d", s.BlockSize, hb)
	}
	n := binary.LittleEndian.Uint16(b[80:])
	if n > maxSalt {
		return nil, fmt.Errorf("a salt of %d bytes", n)
	}
	s.Salt = append([]byte(nil), b[88:88+int(n)]...)
	return s, nil
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}
