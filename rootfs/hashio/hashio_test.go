package hashio

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"testing/iotest"
)

// sizes straddle the inline limit and the chunk size, where off-by-one
// mistakes in hand-over would show.
var sizes = []int{0, 1, inlineMax, inlineMax + 1, chunkSize - 1, chunkSize, chunkSize + 1, 3*chunkSize + 17, 5 << 20}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestHasherMatchesSHA256(t *testing.T) {
	h := NewHasher()
	defer h.Close()
	for i, n := range sizes {
		data := randomBytes(n, uint64(i))
		// Pieces of varied sizes through two alternating buffers, as the
		// tree feeds it; the data must be copied before a buffer is reused.
		bufs := [2][]byte{make([]byte, 300<<10), make([]byte, 300<<10)}
		rest, k := data, 0
		for len(rest) > 0 {
			h.Settle(1)
			m := min(len(rest), 1+int(rand.Uint32N(300<<10)))
			copy(bufs[k], rest[:m])
			h.Write(bufs[k][:m])
			rest, k = rest[m:], k^1
		}
		if got, want := h.Sum(), sha256.Sum256(data); got != want {
			t.Fatalf("size %d: sum %x, want %x", n, got, want)
		}
	}
}

func TestReaderReadsAndHashes(t *testing.T) {
	for i, n := range sizes {
		data := randomBytes(n, uint64(i))
		// OneByteReader and HalfReader make short reads the reader must
		// gather into whole chunks.
		for _, src := range []io.Reader{bytes.NewReader(data), iotest.HalfReader(bytes.NewReader(data))} {
			r := NewReader(src)
			got, err := io.ReadAll(iotest.OneByteReader(io.LimitReader(r, int64(n))))
			if err != nil {
				t.Fatal(err)
			}
			// LimitReader stops at n without seeing EOF; read it.
			if m, err := r.Read(make([]byte, 1)); m != 0 || err != io.EOF {
				t.Fatalf("size %d: after the data Read gave %d, %v; want 0, EOF", n, m, err)
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("size %d: content differs", n)
			}
			if r.Sum() != sha256.Sum256(data) {
				t.Fatalf("size %d: wrong sum", n)
			}
			r.Close()
		}
	}
}

func TestReaderPassesErrorsOn(t *testing.T) {
	boom := errors.New("boom")
	data := randomBytes(2*chunkSize, 9)
	r := NewReader(io.MultiReader(bytes.NewReader(data), iotest.ErrReader(boom)))
	defer r.Close()
	got, err := io.ReadAll(r)
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("the data before the error was not all delivered")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Sum after a failed read did not panic")
		}
	}()
	r.Sum()
}

func TestReaderCloseEarly(t *testing.T) {
	r := NewReader(bytes.NewReader(randomBytes(10*chunkSize, 3)))
	if _, err := r.Read(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	// The goroutine is blocked on a full channel; Close must still return.
	r.Close()
	r.Close()
}

func TestWriterWritesAndHashes(t *testing.T) {
	for i, n := range sizes {
		data := randomBytes(n, uint64(i))
		var out bytes.Buffer
		w := NewWriter(&out)
		for rest := data; len(rest) > 0; {
			m := min(len(rest), 1+int(rand.Uint32N(100<<10)))
			if k, err := w.Write(rest[:m]); err != nil || k != m {
				t.Fatalf("Write: %d, %v", k, err)
			}
			rest = rest[m:]
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("size %d: written content differs", n)
		}
		if w.Sum() != sha256.Sum256(data) {
			t.Fatalf("size %d: wrong sum", n)
		}
		if _, err := w.Write([]byte{1}); err != ErrClosed {
			t.Fatalf("Write after Close: %v", err)
		}
	}
}

type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n < len(p) {
		return 0, f.err
	}
	f.n -= len(p)
	return len(p), nil
}

func TestWriterReportsUnderlyingError(t *testing.T) {
	full := errors.New("disk full")
	w := NewWriter(&failAfter{n: chunkSize, err: full})
	data := randomBytes(chunkSize, 1)
	var err error
	// Keep writing well past the failure: the writer must neither block nor
	// swallow the error.
	for i := 0; i < 20 && err == nil; i++ {
		_, err = w.Write(data)
	}
	if cerr := w.Close(); !errors.Is(cerr, full) {
		t.Fatalf("Close: %v, want the writer's error", cerr)
	}
	if err != nil && !errors.Is(err, full) {
		t.Fatalf("Write: %v, want the writer's error", err)
	}
}

func BenchmarkWriter(b *testing.B) {
	data := randomBytes(256<<10, 1)
	b.SetBytes(int64(len(data)) * 64)
	for b.Loop() {
		w := NewWriter(io.Discard)
		for range 64 {
			w.Write(data)
		}
		w.Close()
	}
}
