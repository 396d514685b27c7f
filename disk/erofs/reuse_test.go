package erofs

import (
	"bytes"
	"io"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hashio"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
)

// memSegments is a SegmentStore over the bytes of an image written before.
type memSegments struct {
	data []byte
	segs map[string]FiledSegment
	// taken counts the segments written from the store, and missed the
	// keys asked for that it did not give; the writer's workers ask at
	// once.
	mu            sync.Mutex
	taken, missed int
}

func newMemSegments(data []byte, filed []FiledSegment) *memSegments {
	m := &memSegments{data: data, segs: map[string]FiledSegment{}}
	for _, s := range filed {
		m.segs[s.Key] = s
	}
	return m
}

func (m *memSegments) Part(key string, w io.Writer) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.segs[key]
	if !ok {
		m.missed++
		return "", false
	}
	b := m.data[s.Offset : s.Offset+s.Size]
	if hashio.PartSum(b) != s.Sum {
		m.missed++
		return "", false
	}
	w.Write(b)
	m.taken++
	return s.Meta, true
}

// An image takes from a segment store the segments of files whose content
// it holds, and its bytes are those of an image written without one:
// unchanged, after one file changed, with a segment spoiled in the store.
func TestSegmentStore(t *testing.T) {
	tr := mixedTree(t)
	write := func(tr *rootfs.Tree, store SegmentStore) ([]byte, []FiledSegment) {
		t.Helper()
		var filed []FiledSegment
		o := testOptions()
		o.Segments, o.Filed = store, &filed
		img, _ := writeImage(t, tr, o)
		data, err := os.ReadFile(img)
		if err != nil {
			t.Fatal(err)
		}
		return data, filed
	}
	first, filed := write(tr, nil)
	plain, compressed, super := 0, 0, 0
	for _, s := range filed {
		switch s.Meta {
		case metaPlain:
			plain++
		case metaSuperblock:
			super++
		default:
			compressed++
		}
	}
	if super != 1 {
		t.Fatalf("%d superblocks filed, want 1", super)
	}
	// Every segment of a file with content is filed, once for each
	// content: su, wall, big (three segments), noise-big (two), zeros
	// (two) and the text files of more than two blocks are compressed;
	// noise and the rest are kept plain, the 300 files of "x" filed once.
	if compressed != 11 || plain != 29 {
		t.Fatalf("%d compressed and %d plain segments filed, want 11 and 29: %+v", compressed, plain, filed)
	}
	keys := map[string]bool{}
	for _, s := range filed {
		if keys[s.Key] {
			t.Fatalf("segment %s filed twice", s.Key)
		}
		keys[s.Key] = true
	}

	t.Run("unchanged", func(t *testing.T) {
		store := newMemSegments(first, filed)
		got, again := write(tr, store)
		if !bytes.Equal(got, first) || !slices.Equal(again, filed) {
			t.Fatal("an image taken from the store differs from the one it was filed from")
		}
		if store.missed != 0 || store.taken == 0 {
			t.Errorf("%d segments taken from the store, %d not", store.taken, store.missed)
		}
	})
	t.Run("one file changed", func(t *testing.T) {
		changed := mixedTree(t)
		if err := changed.Remove("/usr/bin/su"); err != nil {
			t.Fatal(err)
		}
		rootfstest.Add(t, changed, "/usr/bin/su", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o4755, MTime: testEpoch}, content(11, 80000))
		sealTree(t, changed)
		want, wantFiled := write(changed, nil)
		if bytes.Equal(want, first) {
			t.Fatal("the changed tree writes the same image")
		}
		store := newMemSegments(first, filed)
		got, _ := write(changed, store)
		if !bytes.Equal(got, want) {
			t.Fatal("an image partly taken from the store differs from one written whole")
		}
		// su-link keeps su's old content, so only the new su's segment
		// is not in the store.
		if store.missed != 1 || len(wantFiled) != len(filed)+1 {
			t.Errorf("%d segments not in the store after one file changed (%d filed, %d before), want its one", store.missed, len(wantFiled), len(filed))
		}
	})
	t.Run("spoiled", func(t *testing.T) {
		spoiled := slices.Clone(first)
		i := slices.IndexFunc(filed, func(s FiledSegment) bool { return s.Size > 100 })
		spoiled[filed[i].Offset+100] ^= 0xff
		store := newMemSegments(spoiled, filed)
		if got, _ := write(tr, store); !bytes.Equal(got, first) {
			t.Fatal("a spoiled segment in the store reached the image")
		}
		if store.missed != 1 {
			t.Errorf("%d segments refused with one spoiled", store.missed)
		}
	})
}

// A file whose clusters would take more room than its blocks is kept plain
// and filed as such, and an image taken from the store keeps it plain
// without compressing it.
func TestSegmentStorePlain(t *testing.T) {
	tr := rootfstest.New(t, testEpoch)
	rootfstest.Add(t, tr, "/noise", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: testEpoch}, noise(7, 300000))
	sealTree(t, tr)
	var filed []FiledSegment
	o := testOptions()
	o.Filed = &filed
	img, _ := writeImage(t, tr, o)
	first, _ := os.ReadFile(img)
	if len(filed) != 2 || filed[0].Meta != metaPlain || filed[0].Size != 0 || filed[1].Meta != metaSuperblock {
		t.Fatalf("filed %+v, want one plain segment and the superblock", filed)
	}
	store := newMemSegments(first, filed)
	o.Filed, o.Segments = nil, store
	img, _ = writeImage(t, tr, o)
	// The superblock is taken too, as the guess the image is hashed by.
	if got, _ := os.ReadFile(img); !bytes.Equal(got, first) || store.taken != 2 {
		t.Fatalf("taken %d; same bytes: %v", store.taken, bytes.Equal(got, first))
	}
}
