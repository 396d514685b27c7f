// Package qcow2 writes and reads qcow2 version 3 images (qemu's
// docs/interop/qcow2.txt) of a raw disk.
//
// The writer makes one pass over the raw disk, or two for an uncompressed
// image of a file: one to find the clusters that hold data, one to write
// the image header first, hashing it as it goes. Clusters that read as zeros
// are left out (unallocated); the rest follow the header in guest order,
// each as it is or, when asked, deflate-compressed as qemu's compression
// type 0 expects. The tables that map them come after the data: L2 tables,
// the L1 table, the refcount table and its blocks. The layout is a function
// of the raw bytes and the options alone, so the same disk always gives the
// same image.
package qcow2

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const (
	clusterBits  = 16
	clusterSize  = 1 << clusterBits
	l2Entries    = clusterSize / 8
	refcountBits = 16
	refcountOrd  = 4 // refcount_bits = 1 << refcount_order
	rbEntries    = clusterSize * 8 / refcountBits
	// headerLength is the version 3 header with the compression_type field
	// (zero: zlib) and its padding, as qemu writes it.
	headerLength = 112

	oflagCopied     = 1 << 63
	oflagCompressed = 1 << 62
	oflagZero       = 1
	offsetMask      = 0x00FFFFFFFFFFFE00

	// For compressed cluster descriptors: the host offset takes the low
	// csizeShift bits, the count of additional sectors the bits up to 61.
	csizeShift = 62 - (clusterBits - 8)
	csizeMask  = 1<<(clusterBits-8) - 1
	coffMask   = 1<<csizeShift - 1
	sector     = 512

	// deflateWindow is the window qemu's inflateInit2(-12) accepts: a
	// stream that refers further back than 4 KiB does not decompress there.
	deflateWindow = 1 << 12
)

var magic = []byte{'Q', 'F', 'I', 0xfb}

// header is the part of the version 3 header this package uses.
type header struct {
	size             uint64
	l1Size           uint32
	l1Offset         uint64
	refTableOffset   uint64
	refTableClusters uint32
}

func (h *header) marshal() []byte {
	b := make([]byte, headerLength)
	copy(b, magic)
	be := binary.BigEndian
	be.PutUint32(b[4:], 3)
	be.PutUint32(b[20:], clusterBits)
	be.PutUint64(b[24:], h.size)
	be.PutUint32(b[36:], h.l1Size)
	be.PutUint64(b[40:], h.l1Offset)
	be.PutUint64(b[48:], h.refTableOffset)
	be.PutUint32(b[56:], h.refTableClusters)
	be.PutUint32(b[96:], refcountOrd)
	be.PutUint32(b[100:], headerLength)
	// Byte 104, compression_type, stays 0: zlib. The header extension area
	// that follows is empty: its end marker is 8 zero bytes.
	return b
}

// parseHeader reads a header and refuses what this reader does not
// implement rather than return wrong data.
func parseHeader(b []byte) (*header, uint32, error) {
	be := binary.BigEndian
	if len(b) < 72 || string(b[:4]) != string(magic) {
		return nil, 0, errors.New("qcow2: not a qcow2 image")
	}
	version := be.Uint32(b[4:])
	if version != 2 && version != 3 {
		return nil, 0, fmt.Errorf("qcow2: version %d", version)
	}
	if be.Uint64(b[8:]) != 0 {
		return nil, 0, errors.New("qcow2: images with a backing file are not read")
	}
	bits := be.Uint32(b[20:])
	if bits < 9 || bits > 21 {
		return nil, 0, fmt.Errorf("qcow2: cluster_bits %d", bits)
	}
	if be.Uint32(b[32:]) != 0 {
		return nil, 0, errors.New("qcow2: encrypted images are not read")
	}
	h := &header{size: be.Uint64(b[24:]), l1Size: be.Uint32(b[36:]), l1Offset: be.Uint64(b[40:]),
		refTableOffset: be.Uint64(b[48:]), refTableClusters: be.Uint32(b[56:])}
	if version == 3 {
		if len(b) < 104 {
			return nil, 0, errors.New("qcow2: short header")
		}
		// Dirty (bit 0) only means refcounts may be stale, which reading
		// ignores; every other incompatible feature changes the layout.
		if inc := be.Uint64(b[72:]); inc&^1 != 0 {
			return nil, 0, fmt.Errorf("qcow2: incompatible features %#x are not read", inc)
		}
	}
	return h, bits, nil
}
