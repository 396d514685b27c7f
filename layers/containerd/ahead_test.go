package containerd

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-containerregistry/pkg/v1/mutate"

	"github.com/stamp-dev/stamp/test/harness"
)

func TestAheadReaderPassesEveryByteInOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, aheadChunk - 1, aheadChunk, aheadChunk + 1, (aheadChunks+3)*aheadChunk + 17} {
		src := make([]byte, size)
		for i := range src {
			src[i] = byte(rng.Uint32())
		}
		var sink bytes.Buffer
		// One byte at a time from the source and odd sizes to the reader:
		// chunks are filled across short reads and handed out across them.
		a := newAheadReader(iotest.HalfReader(bytes.NewReader(src)), &sink)
		var got bytes.Buffer
		buf := make([]byte, 4093)
		for {
			n, err := a.Read(buf[:1+rng.IntN(len(buf))])
			got.Write(buf[:n])
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%d bytes: %v", size, err)
			}
		}
		a.Close()
		if !bytes.Equal(got.Bytes(), src) {
			t.Errorf("%d bytes: read %d bytes, not the source's", size, got.Len())
		}
		if !bytes.Equal(sink.Bytes(), src) {
			t.Errorf("%d bytes: the sink got %d bytes, not the source's", size, sink.Len())
		}
	}
}

func TestAheadReaderEndsWithTheSourcesError(t *testing.T) {
	broken := errors.New("inflate: corrupt input")
	src := bytes.Repeat([]byte("x"), 3*aheadChunk+5)
	a := newAheadReader(io.MultiReader(bytes.NewReader(src), iotest.ErrReader(broken)), io.Discard)
	defer a.Close()
	got, err := io.ReadAll(a)
	if !errors.Is(err, broken) {
		t.Fatalf("read ended with %v, not the source's error", err)
	}
	if len(got) != len(src) {
		t.Errorf("read %d bytes before the error, not %d", len(got), len(src))
	}
	if _, err := a.Read(make([]byte, 1)); !errors.Is(err, broken) {
		t.Errorf("a read after the error gave %v", err)
	}
}

// Close must return while the goroutine is blocked on a full window, and
// leave the source where it stopped, for the caller to use.
func TestAheadReaderCloseEarly(t *testing.T) {
	src := bytes.NewReader(make([]byte, 64*aheadChunk))
	a := newAheadReader(src, io.Discard)
	if _, err := io.ReadFull(a, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	a.Close()
	a.Close()
	if left := src.Len(); left < (64-aheadChunks-2)*aheadChunk || left == 0 {
		t.Errorf("%d bytes left in the source: the reader read past its window", left)
	}
	if _, err := a.Read(make([]byte, 1)); err == nil {
		t.Error("a read after Close succeeded")
	}
}

// A layer is inflated and hashed ahead of its unpack; a layer whose bytes
// are not the ones its image's config names must still fail the write, and
// its error name both digests.
func TestWriteRefusesALayerThatIsNotItsDiffID(t *testing.T) {
	f := newFixtureOf(t, "1.7.24-1", "", harness.GzipLayer)
	other := harness.GzipLayer(t, harness.TarFile{Name: "big", Body: strings.Repeat("fedcba9876543210", 300000)})
	wrong, err := other.DiffID()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := f.app.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	want := cf.RootFS.DiffIDs[0]
	cf.RootFS.DiffIDs[0] = wrong
	bad, err := mutate.ConfigFile(f.app, cf)
	if err != nil {
		t.Fatal(err)
	}
	f.imgs = []Image{{Name: "registry.example:5000/k8s/app:v1", Digest: put(t, f.cache, bad)}}
	_, err = f.write(t, Options{})
	if err == nil {
		t.Fatal("a layer unpacked though its bytes are not the config's diff ID")
	}
	if !strings.Contains(err.Error(), "unpacks to "+want.String()) || !strings.Contains(err.Error(), "config says "+wrong.String()) {
		t.Errorf("the error does not name the layer's digest and the config's: %v", err)
	}
}
