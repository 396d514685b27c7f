package compress

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// xzDecoders are the two ways an xz stream is decoded: the host's xz and
// the pure-Go decoder, which runs where there is no xz on PATH.
func xzDecoders(t *testing.T) map[string]string {
	t.Helper()
	host := lookHostXZ()
	if host == "" {
		t.Fatal("xz not found; run test/scripts/deps.sh")
	}
	return map[string]string{"host": host, "go": ""}
}

// countingReader counts what was read from it, to see a decoder read its
// input to the end before it reports the end of its output.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Both decoders give the same bytes for what the reference xz writes: one
// block, many blocks (as dpkg-deb writes a large package), concatenated
// streams with padding
// between them. Each has read its input to the end by the time it reports
// the end of its output, as decodeDeb relies on to check the whole .deb.
func TestXZDecodersAgree(t *testing.T) {
	data := semiCompressible(3 << 20)
	dir := t.TempDir()
	raw := filepath.Join(dir, "data")
	if err := os.WriteFile(raw, data, 0o644); err != nil {
		t.Fatal(err)
	}
	streams := map[string][]byte{}
	for name, cmd := range map[string]string{
		"one block":    "xz -c -6 %q",
		"many blocks":  "xz -c -T2 --block-size=256KiB %q",
		"sha256 check": "xz -c --check=sha256 %q",
	} {
		streams[name] = []byte(runTool(t, "sh", "-c", fmt.Sprintf(cmd, raw)))
	}
	one := streams["one block"]
	streams["two streams, padded"] = append(append(append([]byte{}, one...), 0, 0, 0, 0), one...)
	for dec, host := range xzDecoders(t) {
		for name, s := range streams {
			t.Run(dec+"/"+name, func(t *testing.T) {
				src := &countingReader{r: bytes.NewReader(s)}
				rc, err := newXZReader(src, host)
				if err != nil {
					t.Fatal(err)
				}
				defer rc.Close()
				back, err := io.ReadAll(rc)
				if err != nil {
					t.Fatal(err)
				}
				want := data
				if strings.HasPrefix(name, "two") {
					want = append(append([]byte{}, data...), data...)
				}
				if !bytes.Equal(back, want) {
					t.Fatalf("decoded %d bytes, want %d", len(back), len(want))
				}
				if src.n != int64(len(s)) {
					t.Errorf("reported the end after reading %d of %d input bytes", src.n, len(s))
				}
				if err := rc.Close(); err != nil {
					t.Errorf("close after the end: %v", err)
				}
			})
		}
	}
}

// A damaged stream fails the read with an error that says what is wrong,
// from either decoder, never a short read that looks complete.
func TestXZDamageFailsTheRead(t *testing.T) {
	data := semiCompressible(1 << 20)
	good := compressBytes(t, XZ, data, WriterOptions{})
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x55
	cases := map[string]struct {
		in   []byte
		want string // in the host's message
	}{
		"corrupt":   {flipped, "corrupt"},
		"truncated": {good[:len(good)-100], "nexpected end of input"},
		"not xz":    {append(bytes.Clone(magicXZ), bytes.Repeat([]byte{7}, 100)...), "xz"},
		"trailing":  {append(bytes.Clone(good), "garbage!"...), "xz"},
	}
	for dec, host := range xzDecoders(t) {
		for name, c := range cases {
			t.Run(dec+"/"+name, func(t *testing.T) {
				rc, err := newXZReader(bytes.NewReader(c.in), host)
				if err == nil {
					defer rc.Close()
					_, err = io.ReadAll(rc)
				}
				if err == nil {
					t.Fatal("read a damaged stream without an error")
				}
				if !strings.HasPrefix(err.Error(), "xz: ") {
					t.Errorf("error %q does not say it is xz's", err)
				}
				if host != "" && !strings.Contains(err.Error(), c.want) {
					t.Errorf("error %q does not say %q", err, c.want)
				}
			})
		}
	}
}

// Closing before the end stops the host's xz and reaps it; Close reports
// no error for that, and a read after it reports the stop, not a clean end.
func TestXZCloseStopsTheHostProcess(t *testing.T) {
	host := xzDecoders(t)["host"]
	s := compressBytes(t, XZ, semiCompressible(8<<20), WriterOptions{})
	rc, err := newXZReader(bytes.NewReader(s), host)
	if err != nil {
		t.Fatal(err)
	}
	h := rc.(*hostXZReader)
	if _, err := io.ReadFull(rc, make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	if err := rc.Close(); err != nil {
		t.Fatalf("close before the end: %v", err)
	}
	if h.cmd.ProcessState == nil {
		t.Fatal("xz was not reaped")
	}
	if _, err := rc.Read(make([]byte, 10)); err == nil || err == io.EOF {
		t.Errorf("read after close gave %v, want the stop", err)
	}
}
