package lz4

import (
	"bytes"
	"math/rand/v2"
	"os"
	"testing"

	pierrec "github.com/pierrec/lz4/v4"
)

// samples are inputs of the kinds a root file system holds: text, code,
// zeros, noise, and runs that make overlapping matches.
func samples(t testing.TB) map[string][]byte {
	t.Helper()
	r := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 300<<10)
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	var text bytes.Buffer
	words := []string{"kubelet", "containerd", "the", "node", "image", "root", "erofs", "cluster", "\n", " ", "=", "/usr/lib/"}
	for text.Len() < 300<<10 {
		text.WriteString(words[r.IntN(len(words))])
	}
	mixed := append(append(append([]byte{}, text.Bytes()[:50<<10]...), noise[:40<<10]...), make([]byte, 70<<10)...)
	mixed = append(mixed, bytes.Repeat([]byte("abc"), 20<<10)...)
	out := map[string][]byte{
		"text":  text.Bytes(),
		"noise": noise,
		"zeros": make([]byte, 1<<20),
		"mixed": mixed,
		"tiny":  []byte("hello, world"),
		"empty": nil,
	}
	// A real executable, where the host has one.
	if b, err := os.ReadFile("/bin/sh"); err == nil {
		out["binary"] = b
	}
	return out
}

// settings are the encoder's modes: LZ4's fast one, a plain hash table
// walked at every position, and a deep hash chain.
var settings = map[string]Settings{
	"depth1": {Depth: 1},
	"fast":   {Fast: true},
	"hc":     {Depth: 64, Lazy: true},
}

// TestDestSizeRoundTrips fills blocks of several sizes from each sample in
// turn, as EROFS fills its clusters, and decodes every block with this
// package's strict decoder and with pierrec/lz4's.
func TestDestSizeRoundTrips(t *testing.T) {
	for sname, s := range settings {
		for name, data := range samples(t) {
			for _, room := range []int{16, 100, 4096, 65536} {
				e := NewEncoder(s)
				dst := make([]byte, room)
				for at := 0; at < len(data); {
					n, w := e.CompressDestSize(data[at:], dst)
					if w > room {
						t.Fatalf("%s/%s/%d: wrote %d bytes into %d", sname, name, room, w, room)
					}
					if n == 0 {
						t.Fatalf("%s/%s/%d at %d: took nothing", sname, name, room, at)
					}
					got := make([]byte, n)
					if err := Decompress(dst[:w], got); err != nil {
						t.Fatalf("%s/%s/%d at %d: %v", sname, name, room, at, err)
					}
					if !bytes.Equal(got, data[at:at+n]) {
						t.Fatalf("%s/%s/%d at %d: decodes to other bytes", sname, name, room, at)
					}
					ref := make([]byte, n+64)
					m, err := pierrec.UncompressBlock(dst[:w], ref)
					if err != nil || m != n || !bytes.Equal(ref[:m], got) {
						t.Fatalf("%s/%s/%d at %d: pierrec/lz4 reads %d bytes, %v", sname, name, room, at, m, err)
					}
					at += n
				}
			}
		}
	}
}

// TestDestSizeFillsTheRoom checks the encoder uses the room it is given:
// compressible input leaves at most a few bytes of a block unused, and
// incompressible input still fills it with literals.
func TestDestSizeFillsTheRoom(t *testing.T) {
	s := samples(t)
	for sname, set := range settings {
		for _, name := range []string{"text", "noise", "mixed"} {
			e := NewEncoder(set)
			dst := make([]byte, 4096)
			n, w := e.CompressDestSize(s[name], dst)
			if w < 4096-16 {
				t.Errorf("%s/%s: %d bytes of 4096 used (took %d)", sname, name, w, n)
			}
			if name == "text" && n < 2*4096 {
				t.Errorf("%s/text: only %d bytes fit in 4096", sname, n)
			}
		}
		// Zeros run out of input before room.
		e := NewEncoder(set)
		n, w := e.CompressDestSize(make([]byte, 100000), make([]byte, 4096))
		if n != 100000 || w > 600 {
			t.Errorf("%s/zeros: took %d of 100000 into %d bytes", sname, n, w)
		}
	}
}

// TestEncoderIsDeterministic: the same input gives the same blocks from a
// fresh encoder and from one that has encoded other data before.
func TestEncoderIsDeterministic(t *testing.T) {
	s := samples(t)
	for sname, set := range settings {
		fresh := NewEncoder(set)
		used := NewEncoder(set)
		used.CompressDestSize(s["text"], make([]byte, 65536))
		used.CompressDestSize(s["mixed"], make([]byte, 4096))
		a, b := make([]byte, 4096), make([]byte, 4096)
		n1, w1 := fresh.CompressDestSize(s["binary"], a)
		n2, w2 := used.CompressDestSize(s["binary"], b)
		if n1 != n2 || w1 != w2 || !bytes.Equal(a[:w1], b[:w2]) {
			t.Errorf("%s: fresh encoder: %d -> %d bytes; used one: %d -> %d", sname, n1, w1, n2, w2)
		}
	}
}

// TestDecompressRefuses holds the decoder to the kernel's rules.
func TestDecompressRefuses(t *testing.T) {
	good := make([]byte, 4096)
	e := NewEncoder(settings["hc"])
	in := bytes.Repeat([]byte("0123456789abcdef"), 64)
	n, w := e.CompressDestSize(in, good)
	block := good[:w]
	if err := Decompress(block, make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		src []byte
		out int
	}{
		"short output":     {block, n - 1},
		"long output":      {block, n + 1},
		"truncated":        {block[:len(block)-1], n},
		"empty":            {nil, 0},
		"offset zero":      {[]byte{0x1f, 'a', 0, 0, 0x50, 'a', 'a', 'a', 'a', 'a'}, 1 + 19 + 5},
		"offset too far":   {[]byte{0x10, 'a', 2, 0, 0x50, 'a', 'a', 'a', 'a', 'a'}, 1 + 4 + 5},
		"match at the end": {[]byte{0x10, 'a', 1, 0}, 1 + 4},
	}
	for name, c := range cases {
		if err := Decompress(c.src, make([]byte, c.out)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// DecompressPrefix reads a block from a cluster's start: the zeros after
// it are ignored, and a block that decodes past the output stops there,
// inside a match too, as the kernel's partial decoding does.
func TestDecompressPrefix(t *testing.T) {
	in := bytes.Repeat([]byte("0123456789abcdef"), 64)
	block := make([]byte, 4096)
	n, w := NewEncoder(settings["hc"]).CompressDestSize(in, block)
	got := make([]byte, n)
	if err := DecompressPrefix(block, got); err != nil || !bytes.Equal(got, in[:n]) {
		t.Fatalf("a block and zeros after it: %v", err)
	}
	if err := Decompress(block, got); err == nil {
		t.Errorf("Decompress takes a block with zeros after it")
	}
	for _, short := range []int{n - 1, n - 3, n / 2, 17} {
		got := make([]byte, short)
		if err := DecompressPrefix(block[:w], got); err != nil || !bytes.Equal(got, in[:short]) {
			t.Errorf("the first %d of %d bytes: %v", short, n, err)
		}
	}
}

// maxLast's estimate and steps give what walking down from room-1 gives.
func TestMaxLast(t *testing.T) {
	walk := func(room int) int {
		if room <= 0 {
			return 0
		}
		n := room - 1
		for n > 0 && lastCost(n) > room {
			n--
		}
		return n
	}
	for room := -2; room <= 1<<17; room++ {
		if got, want := maxLast(room), walk(room); got != want {
			t.Fatalf("maxLast(%d) = %d, want %d", room, got, want)
		}
	}
}
