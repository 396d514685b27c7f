package compress

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

var algorithms = []Algorithm{None, Gzip, Zstd, XZ}

// semiCompressible returns n bytes that compress to roughly a third, like a
// mix of text and binaries: runs of words from a small vocabulary broken by
// runs of random bytes. The same n always gives the same bytes.
func semiCompressible(n int) []byte {
	rng := rand.New(rand.NewPCG(1, 2))
	words := strings.Fields("the quick brown fox jumps over a lazy dog kubelet containerd " +
		"systemd etc usr lib x86_64-linux-gnu libc.so.6 ELF \x00\x00\x00\x00 node image")
	var b bytes.Buffer
	b.Grow(n)
	for b.Len() < n {
		if rng.IntN(4) == 0 {
			for range 16 + rng.IntN(240) {
				b.WriteByte(byte(rng.Uint32()))
			}
			continue
		}
		for range 8 + rng.IntN(64) {
			b.WriteString(words[rng.IntN(len(words))])
			b.WriteByte(' ')
		}
	}
	return b.Bytes()[:n]
}

func compressBytes(t testing.TB, a Algorithm, data []byte, o WriterOptions) []byte {
	t.Helper()
	var out bytes.Buffer
	w, err := NewWriter(a, &out, o)
	if err != nil {
		t.Fatal(err)
	}
	// Several writes of odd sizes, as a tar writer would make them.
	for rest := data; len(rest) > 0; {
		n := min(len(rest), 512+len(rest)%7919)
		if _, err := w.Write(rest[:n]); err != nil {
			t.Fatalf("%s: write: %v", a, err)
		}
		rest = rest[n:]
	}
	if err := w.Close(); err != nil {
		t.Fatalf("%s: close: %v", a, err)
	}
	return out.Bytes()
}

func TestParse(t *testing.T) {
	for in, want := range map[string]Algorithm{"": None, "none": None, "gzip": Gzip, "zstd": Zstd, "xz": XZ} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"bzip2", "gz", "ZSTD", " xz"} {
		_, err := Parse(bad)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("Parse(%q) error = %v; want one naming the value", bad, err)
		}
	}
}

func TestExt(t *testing.T) {
	want := map[Algorithm]string{None: "", Gzip: ".gz", Zstd: ".zst", XZ: ".xz"}
	for _, a := range algorithms {
		if got := a.Ext(); got != want[a] {
			t.Errorf("%s.Ext() = %q, want %q", a, got, want[a])
		}
	}
}

func TestRoundTrip(t *testing.T) {
	inputs := map[string][]byte{
		"empty": nil,
		"small": []byte("hello, node\n"),
		"3MiB":  semiCompressible(3 << 20),
	}
	for _, a := range algorithms {
		for name, data := range inputs {
			t.Run(string(a)+"/"+name, func(t *testing.T) {
				z := compressBytes(t, a, data, WriterOptions{})
				if a != None && len(data) > 1<<20 && len(z) > len(data)/2 {
					t.Errorf("compressed %d bytes to %d: not compressing", len(data), len(z))
				}
				rc, got, err := NewReaderAuto(bytes.NewReader(z))
				if err != nil {
					t.Fatal(err)
				}
				defer rc.Close()
				if got != a {
					t.Errorf("detected %q, want %q", got, a)
				}
				back, err := io.ReadAll(rc)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(back, data) {
					t.Fatalf("round trip changed the data: %d bytes in, %d out", len(data), len(back))
				}
			})
		}
	}
}

func TestDetect(t *testing.T) {
	for _, in := range [][]byte{nil, {0x1f}, []byte("ab"), []byte("plain text, longer than any magic")} {
		a, r, err := Detect(bytes.NewReader(in))
		if err != nil || a != None {
			t.Fatalf("Detect(%q) = %q, %v; want none", in, a, err)
		}
		back, _ := io.ReadAll(r)
		if !bytes.Equal(back, in) {
			t.Errorf("Detect(%q) reader yields %q", in, back)
		}
	}
	_, _, err := Detect(strings.NewReader("BZh91AY&SY\x00\x00"))
	if !errors.Is(err, ErrBzip2) || !strings.Contains(err.Error(), "bzip2 is not supported") {
		t.Errorf("bzip2 input: err = %v", err)
	}
	if _, err := NewReader(Algorithm("lz4"), strings.NewReader("")); err == nil || !strings.Contains(err.Error(), "lz4") {
		t.Errorf("NewReader(lz4) err = %v", err)
	}
	if _, err := NewWriter(Algorithm("lz4"), io.Discard, WriterOptions{}); err == nil || !strings.Contains(err.Error(), "lz4") {
		t.Errorf("NewWriter(lz4) err = %v", err)
	}
	// A truncated stream must be an error, not a short success.
	z := compressBytes(t, Zstd, semiCompressible(1<<20), WriterOptions{})
	rc, _, err := NewReaderAuto(bytes.NewReader(z[:len(z)/2]))
	if err == nil {
		_, err = io.ReadAll(rc)
	}
	if err == nil {
		t.Error("truncated zstd stream read without error")
	}
}

// The same input gives the same bytes, however many cores the encoder could use.
func TestDeterministic(t *testing.T) {
	data := semiCompressible(6 << 20) // larger than one zstd block and the xz dictionary
	prev := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(prev)
	for _, a := range algorithms {
		for _, o := range []WriterOptions{{}, {XZCheckCRC32: true}} {
			if o.XZCheckCRC32 && a != XZ {
				continue
			}
			runtime.GOMAXPROCS(1)
			one := compressBytes(t, a, data, o)
			runtime.GOMAXPROCS(2)
			two := compressBytes(t, a, data, o)
			again := compressBytes(t, a, data, o)
			runtime.GOMAXPROCS(prev)
			if !bytes.Equal(one, two) || !bytes.Equal(two, again) {
				t.Errorf("%s %+v: output differs between runs (%d, %d, %d bytes)", a, o, len(one), len(two), len(again))
			}
		}
	}
}

func TestGzipHeaderIsFixed(t *testing.T) {
	z := compressBytes(t, Gzip, []byte("x"), WriterOptions{})
	// ID1 ID2 CM FLG MTIME(4) XFL OS
	want := []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255}
	if !bytes.Equal(z[:10], want) {
		t.Errorf("gzip header = % x, want % x", z[:10], want)
	}
}

func runTool(t *testing.T, name string, args ...string) string {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Fatalf("%s not found; run test/scripts/deps.sh", name)
	}
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// The reference tools accept what we write and decompress it to the same bytes.
func TestToolsAcceptOutput(t *testing.T) {
	data := semiCompressible(2 << 20)
	dir := t.TempDir()
	raw := filepath.Join(dir, "data")
	if err := os.WriteFile(raw, data, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		a     Algorithm
		o     WriterOptions
		tool  string
		check string // expected xz check name
	}{
		{Gzip, WriterOptions{}, "gzip", ""},
		{Zstd, WriterOptions{}, "zstd", ""},
		{XZ, WriterOptions{}, "xz", "CRC64"},
		{XZ, WriterOptions{XZCheckCRC32: true}, "xz", "CRC32"},
	}
	for _, c := range cases {
		for _, in := range [][]byte{data, nil} {
			name := fmt.Sprintf("%s-%s-%d%s", c.a, c.check, len(in), c.a.Ext())
			t.Run(name, func(t *testing.T) {
				f := filepath.Join(dir, name)
				if err := os.WriteFile(f, compressBytes(t, c.a, in, c.o), 0o644); err != nil {
					t.Fatal(err)
				}
				runTool(t, c.tool, "-t", f)
				out := filepath.Join(dir, name+".out")
				sh := fmt.Sprintf("%s -dc %q > %q", c.tool, f, out)
				runTool(t, "sh", "-c", sh)
				back, err := os.ReadFile(out)
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(back, in) {
					t.Fatalf("%s -d gave %d bytes, want %d", c.tool, len(back), len(in))
				}
				if c.check != "" {
					list := runTool(t, "xz", "-lvv", f)
					if !regexpCheck(list, c.check) {
						t.Errorf("xz -lvv does not report check %s:\n%s", c.check, list)
					}
					other := map[string]string{"CRC32": "CRC64", "CRC64": "CRC32"}[c.check]
					if regexpCheck(list, other) {
						t.Errorf("xz -lvv reports check %s, want only %s:\n%s", other, c.check, list)
					}
				}
			})
		}
	}
}

// regexpCheck reports whether xz -lvv lists check name on its "Check:" line.
func regexpCheck(list, name string) bool {
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "Check:" && f[1] == name {
			return true
		}
	}
	return false
}

// What the reference tools write, our readers read, including concatenated
// streams (pigz, pzstd and parallel xz write those).
func TestReadToolOutput(t *testing.T) {
	data := semiCompressible(1 << 20)
	dir := t.TempDir()
	raw := filepath.Join(dir, "data")
	if err := os.WriteFile(raw, data, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		a   Algorithm
		cmd string
	}{
		{Gzip, "gzip -c"},
		{Zstd, "zstd -q -c"},
		{XZ, "xz -c"},
		{XZ, "xz -c --check=crc32"},
		{XZ, "xz -c -T2 --block-size=300KiB"},
	} {
		t.Run(c.cmd, func(t *testing.T) {
			out := runTool(t, "sh", "-c", fmt.Sprintf("%s %q; %s %q", c.cmd, raw, c.cmd, raw))
			rc, got, err := NewReaderAuto(strings.NewReader(out))
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if got != c.a {
				t.Errorf("detected %q, want %q", got, c.a)
			}
			back, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			if want := append(append([]byte{}, data...), data...); !bytes.Equal(back, want) {
				t.Fatalf("read %d bytes, want %d", len(back), len(want))
			}
		})
	}
}

func BenchmarkWriter(b *testing.B) {
	data := semiCompressible(64 << 20)
	for _, a := range algorithms {
		b.Run(string(a), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				w, err := NewWriter(a, io.Discard, WriterOptions{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := w.Write(data); err != nil {
					b.Fatal(err)
				}
				if err := w.Close(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkReader(b *testing.B) {
	data := semiCompressible(64 << 20)
	for _, a := range algorithms {
		b.Run(string(a), func(b *testing.B) {
			z := compressBytes(b, a, data, WriterOptions{})
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				rc, err := NewReader(a, bytes.NewReader(z))
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, rc); err != nil {
					b.Fatal(err)
				}
				rc.Close()
			}
		})
	}
}

// A damaged gzip stream fails the read, never reads as complete: the
// decoder is klauspost's, not the standard library's, and this is what
// callers rely on (a layer's diff ID is checked only after the read).
func TestGzipDamageFailsTheRead(t *testing.T) {
	data := semiCompressible(1 << 20)
	good := compressBytes(t, Gzip, data, WriterOptions{})
	flip := func(i int) []byte {
		b := bytes.Clone(good)
		b[i] ^= 0x55
		return b
	}
	for name, in := range map[string][]byte{
		"corrupt":      flip(len(good) / 2),
		"checksum":     flip(len(good) - 6),
		"length":       flip(len(good) - 2),
		"truncated":    good[:len(good)-100],
		"no trailer":   good[:len(good)-8],
		"trailing":     append(bytes.Clone(good), "garbage!"...),
		"header magic": flip(1),
	} {
		t.Run(name, func(t *testing.T) {
			rc, err := NewReader(Gzip, bytes.NewReader(in))
			if err == nil {
				defer rc.Close()
				_, err = io.ReadAll(rc)
			}
			if err == nil {
				t.Fatal("read a damaged stream without an error")
			}
			if !strings.Contains(err.Error(), "gzip") && !strings.Contains(err.Error(), "flate") && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Errorf("error %q does not say what failed", err)
			}
		})
	}
}
