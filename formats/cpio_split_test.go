package formats

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
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
			if err := writeCpioSplit(context.Background(), &split, a, items, 1, partSize); err != nil {
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
	go func() { done <- writeCpioSplit(context.Background(), failingWriter{}, compress.Zstd, items, 2, 64) }()
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
