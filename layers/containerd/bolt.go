package containerd

import (
	"encoding/binary"
	"fmt"
	"os"
	"sort"
	"time"

	bolt "go.etcd.io/bbolt"
)

// boltPut is what one write transaction does: it makes the bucket at path
// (and its parents) and puts pairs into it.
type boltPut struct {
	path  []string
	pairs []boltPair
	// seq, when set, is the bucket's sequence (what NextSequence counted
	// to), so the next object containerd makes gets a fresh number.
	seq uint64
}

type boltPair struct {
	key   string
	value []byte
}

// boltPageSize is fixed: bbolt otherwise takes the host's page size, and
// the file's layout with it.
const boltPageSize = 4096

// writeBolt writes a bbolt database at file from puts, one transaction
// each, in their order.
//
// One transaction per bucket is what makes the bytes the same every time:
// at commit bbolt writes a bucket's modified child buckets in the order it
// iterates a Go map of them (Bucket.spill), and each is given the next free
// pages, so two children changed in one transaction land on pages in a
// random order. A transaction that changes one bucket changes one child
// of each bucket above it. The array freelist hands out pages the same way
// each time, the page size is fixed, and nothing else in the file depends
// on the clock or the host. Syncs are off: the file is a temporary one
// that is read back whole once closed.
func writeBolt(file string, puts []boltPut) error {
	db, err := bolt.Open(file, 0o600, &bolt.Options{
		PageSize:     boltPageSize,
		FreelistType: bolt.FreelistArrayType,
		NoSync:       true,
		NoGrowSync:   true,
		Timeout:      time.Second,
	})
	if err != nil {
		return err
	}
	for _, p := range puts {
		err := db.Update(func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte(p.path[0]))
			if err != nil {
				return err
			}
			for _, name := range p.path[1:] {
				if b, err = b.CreateBucketIfNotExists([]byte(name)); err != nil {
					return err
				}
			}
			for _, kv := range p.pairs {
				if err := b.Put([]byte(kv.key), kv.value); err != nil {
					return fmt.Errorf("%q: %w", kv.key, err)
				}
			}
			if p.seq > 0 {
				return b.SetSequence(p.seq)
			}
			return nil
		})
		if err != nil {
			db.Close()
			return fmt.Errorf("bucket %q: %w", p.path, err)
		}
	}
	return db.Close()
}

// writeFileBolt writes puts to a new file in dir and returns its path.
func writeFileBolt(dir, name string, puts []boltPut) (string, error) {
	f, err := os.CreateTemp(dir, name+"-")
	if err != nil {
		return "", err
	}
	p := f.Name()
	f.Close()
	os.Remove(p) // bbolt makes it, with its first pages
	if err := writeBolt(p, puts); err != nil {
		os.Remove(p)
		return "", fmt.Errorf("%s: %w", name, err)
	}
	return p, nil
}

// Encodings containerd uses in its buckets.

// varint is a signed varint, as containerd's encodeInt (sizes, versions).
func varint(i int64) []byte {
	var b [binary.MaxVarintLen64]byte
	return b[:binary.PutVarint(b[:], i)]
}

// uvarint is an unsigned varint, as the snapshotter's encodeID.
func uvarint(i uint64) []byte {
	var b [binary.MaxVarintLen64]byte
	return b[:binary.PutUvarint(b[:], i)]
}

// binaryTime is time.Time's MarshalBinary of t in UTC, as boltutil writes
// createdat and updatedat.
func binaryTime(t time.Time) []byte {
	b, err := t.UTC().MarshalBinary()
	if err != nil {
		// Only a zone offset that is not whole minutes fails; UTC has none.
		panic(err)
	}
	return b
}

// timestamps are the createdat and updatedat pairs of an object.
func timestamps(t time.Time) []boltPair {
	b := binaryTime(t)
	return []boltPair{{"createdat", b}, {"updatedat", b}}
}

// labelsPut is the labels bucket under path, or nothing when there are no
// labels (containerd makes none then).
func labelsPut(path []string, labels map[string]string) []boltPut {
	if len(labels) == 0 {
		return nil
	}
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	p := boltPut{path: append(append([]string(nil), path...), "labels")}
	for _, k := range keys {
		p.pairs = append(p.pairs, boltPair{k, []byte(labels[k])})
	}
	return []boltPut{p}
}
