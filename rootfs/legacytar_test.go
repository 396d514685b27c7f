package rootfs

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
)

// TestExtractLegacyRegularType feeds the extractor members whose type flag is
// NUL, as tar writers before POSIX.1-1988 wrote regular files. The extractor
// relies on archive/tar reporting them as TypeReg (or TypeDir for a name with
// a trailing slash) instead of naming the deprecated TypeRegA itself.
func TestExtractLegacyRegularType(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range []*tar.Header{
		{Name: "./old/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch, Format: tar.FormatUSTAR},
		{Name: "./old/motd", Typeflag: tar.TypeReg, Mode: 0o644, Size: 6, ModTime: epoch, Format: tar.FormatUSTAR},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte("hello\n"))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()
	// The directory's header is block 0 and the file's block 1; set both
	// type flags to NUL and the checksums to match.
	for _, off := range []int{0, 512} {
		hdr := b[off : off+512]
		hdr[156] = 0
		copy(hdr[148:156], "        ")
		var sum int
		for _, c := range hdr {
			sum += int(c)
		}
		copy(hdr[148:156], fmt.Sprintf("%06o\x00 ", sum))
	}

	tr, _ := sandbox(t)
	if _, err := Extract(context.Background(), tr, bytes.NewReader(b), ExtractOptions{}); err != nil {
		t.Fatal(err)
	}
	if e := tr.Get("/old"); e == nil || e.Type != TypeDir || e.Perm != 0o755 {
		t.Fatalf("/old: %+v, want a directory", e)
	}
	e := tr.Get("/old/motd")
	if e == nil || e.Type != TypeRegular || e.Perm != 0o644 || e.Size != 6 {
		t.Fatalf("/old/motd: %+v, want a 6-byte regular file", e)
	}
	f, err := tr.Open("/old/motd")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got, err := io.ReadAll(f); err != nil || string(got) != "hello\n" {
		t.Errorf("/old/motd holds %q (%v)", got, err)
	}
}
