package formats

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/hashio"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

// A split initramfs reads back as the tree, is a series of archives none
// of which splits a hard-link group, and is the same bytes whatever the
// number of workers compressing its parts.
func TestCpioSplit(t *testing.T) {
	tree := tarTestTree(t)
	items := cpioItemsOf(tree)
	plan, err := planCpio(items)
	if err != nil {
		t.Fatal(err)
	}
	const partSize = 64 // bytes: a part every few entries
	parts := cpioParts(items, plan, partSize)
	if len(parts) < 5 {
		t.Fatalf("%d parts of %d entries, want several", len(parts), len(items))
	}
	partOf := map[*rootfs.Inode]int{}
	for k, p := range parts {
		for i := p.start; i < p.end; i++ {
			if prev, ok := partOf[items[i].in]; ok && prev != k {
				t.Errorf("%s is in part %d, another path of its inode in part %d", items[i].path, k, prev)
			}
			partOf[items[i].in] = k
		}
	}
	for _, a := range []compress.Algorithm{compress.Zstd, compress.Gzip} {
		t.Run(string(a), func(t *testing.T) {
			var adds []string
			one := writeCpioBytes(t, tree, CpioOptions{Compression: a, MTime: tarEpoch, Split: true, Adds: &adds, partSize: partSize, workers: 1})
			for _, w := range []int{2, 3, 16} {
				if got := writeCpioBytes(t, tree, CpioOptions{Compression: a, MTime: tarEpoch, Split: true, partSize: partSize, workers: w}); !bytes.Equal(got, one) {
					t.Errorf("%d workers write other bytes than one (%d and %d bytes)", w, len(got), len(one))
				}
			}
			// Each part is what a fresh encoder makes of it: the one a
			// worker uses again for its next part carries nothing over.
			var split, fresh bytes.Buffer
			if err := writeCpioSplit(context.Background(), &split, a, items, 1, partSize, nil, nil); err != nil {
				t.Fatal(err)
			}
			for _, p := range cpioParts(items, plan, partSize) {
				p.out = &partBuf{pool: &chunkPool{}}
				pw := &cpioPartWriter{alg: a, items: items, plan: plan, probe: make([]byte, 1)}
				if err := pw.write(context.Background(), p); err != nil {
					t.Fatal(err)
				}
				fresh.Write(p.out.bytes())
			}
			if !bytes.Equal(split.Bytes(), fresh.Bytes()) {
				t.Errorf("the parts written by one worker differ from each written by a fresh encoder")
			}
			whole := writeCpioBytes(t, tree, CpioOptions{Compression: a, MTime: tarEpoch})
			if bytes.Equal(whole, one) {
				t.Fatalf("the split archive is the same as the whole one")
			}
			// One archive per part (the xattr list makes one more entry),
			// each ending in its trailer.
			r, err := compress.NewReader(a, bytes.NewReader(one))
			if err != nil {
				t.Fatal(err)
			}
			raw, err := io.ReadAll(r)
			if err != nil {
				t.Fatal(err)
			}
			if n := bytes.Count(raw, []byte("TRAILER!!!\x00")); n < len(parts) {
				t.Errorf("%d archives, want at least the %d parts", n, len(parts))
			}
			got, list, err := ReadCpio(context.Background(), bytes.NewReader(one))
			if err != nil {
				t.Fatal(err)
			}
			tarCompareEntries(t, got.Entries(), tree.Entries())
			if list == nil || len(adds) != 1 {
				t.Errorf("xattr list %v, adds %q", list, adds)
			}
		})
	}
}

// failingWriter refuses every write, as a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// A split archive whose output fails returns that error, with every
// worker and the feeder stopped, instead of waiting for parts nobody
// takes.
func TestCpioSplitWriteFails(t *testing.T) {
	items := cpioItemsOf(tarTestTree(t))
	done := make(chan error, 1)
	go func() {
		done <- writeCpioSplit(context.Background(), failingWriter{}, compress.Zstd, items, 2, 64, nil, nil)
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no space left") {
			t.Fatalf("err = %v, want the writer's", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("writeCpioSplit did not return after its writer failed")
	}
}

// cpioItemsOf is every entry of tree as a cpio writer takes them.
func cpioItemsOf(tree *rootfs.Tree) []cpioItem {
	var items []cpioItem
	view := tree.View()
	view.Walk(func(e *rootfs.Entry) error {
		items = append(items, cpioItem{path: e.Path, in: e.Inode, tree: view})
		return nil
	})
	return items
}

// memParts is a PartStore over the bytes of an archive written before.
type memParts struct {
	data  []byte
	parts map[string]FilePart
	taken int
}

func newMemParts(data []byte, filed []FilePart) *memParts {
	m := &memParts{data: data, parts: map[string]FilePart{}}
	for _, p := range filed {
		m.parts[p.Key] = p
	}
	return m
}

func (m *memParts) Part(key string, w io.Writer) (string, bool) {
	p, ok := m.parts[key]
	if !ok {
		return "", false
	}
	b := m.data[p.Offset : p.Offset+p.Size]
	if hashio.PartSum(b) != p.Sum {
		w.Write(b[:len(b)/2]) // what a store may have written before it knew
		return "", false
	}
	w.Write(b)
	m.taken++
	return p.Meta, true
}

// A split archive takes from a part store the parts whose content did not
// change, and its bytes are those of an archive written without one: after
// one file changed, with a part spoiled in the store, with another codec.
func TestCpioSplitPartStore(t *testing.T) {
	const partSize = 64
	write := func(tree *rootfs.Tree, a compress.Algorithm, store PartStore) ([]byte, []FilePart) {
		t.Helper()
		var filed []FilePart
		data := writeCpioBytes(t, tree, CpioOptions{Compression: a, MTime: tarEpoch, Split: true, partSize: partSize, workers: 2, Parts: store, Filed: &filed})
		return data, filed
	}
	tree := tarTestTree(t)
	first, filed := write(tree, compress.Zstd, nil)
	if len(filed) < 5 {
		t.Fatalf("%d parts filed, want several", len(filed))
	}
	var off int64
	for i, p := range filed {
		if p.Offset != off || p.Size <= 0 || p.Key == "" || p.Sum == "" {
			t.Fatalf("part %d: %+v, want it at offset %d with a key and a sum", i, p, off)
		}
		off += p.Size
	}
	if off != int64(len(first)) {
		t.Fatalf("the parts cover %d bytes of %d", off, len(first))
	}

	t.Run("unchanged", func(t *testing.T) {
		store := newMemParts(first, filed)
		got, again := write(tree, compress.Zstd, store)
		if !bytes.Equal(got, first) || !slices.Equal(again, filed) {
			t.Fatal("an archive taken from the store differs from the one it was filed from")
		}
		if store.taken != len(filed) {
			t.Errorf("%d of %d parts taken from the store", store.taken, len(filed))
		}
	})
	t.Run("one file changed", func(t *testing.T) {
		changed := tarTestTree(t)
		if err := changed.Remove("/home/capi/.profile"); err != nil {
			t.Fatal(err)
		}
		rootfstest.Add(t, changed, "/home/capi/.profile", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, UID: 1000, GID: 1000, MTime: tarEpoch}, "export PATH MANPATH\n")
		want, _ := write(changed, compress.Zstd, nil)
		store := newMemParts(first, filed)
		got, _ := write(changed, compress.Zstd, store)
		if !bytes.Equal(got, want) {
			t.Fatal("an archive partly taken from the store differs from one written whole")
		}
		if store.taken != len(filed)-1 {
			t.Errorf("%d of %d parts taken from the store after one file changed, want all but one", store.taken, len(filed))
		}
	})
	t.Run("spoiled", func(t *testing.T) {
		spoiled := slices.Clone(first)
		spoiled[filed[1].Offset] ^= 0xff
		store := newMemParts(spoiled, filed)
		got, _ := write(tree, compress.Zstd, store)
		if !bytes.Equal(got, first) {
			t.Fatal("a spoiled part in the store reached the archive")
		}
		if store.taken != len(filed)-1 {
			t.Errorf("%d of %d parts taken from the store with one spoiled", store.taken, len(filed))
		}
	})
	t.Run("other codec", func(t *testing.T) {
		store := newMemParts(first, filed)
		want, _ := write(tree, compress.Gzip, nil)
		if got, _ := write(tree, compress.Gzip, store); !bytes.Equal(got, want) || store.taken != 0 {
			t.Errorf("a gzip archive took %d zstd parts", store.taken)
		}
	})
}
