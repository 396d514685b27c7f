package formats

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// cpioImageReader reads a newc cpio archive (an initramfs) back with
// ReadCpio, and walks it once more to place each member and keep the record.
type cpioImageReader struct{}

func (cpioImageReader) Format() string { return "cpio" }

func (cpioImageReader) Match(h *Head) bool {
	return !h.IsDir && len(h.Plain) >= 6 && (string(h.Plain[:6]) == "070701" || string(h.Plain[:6]) == "070702")
}

func (cpioImageReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tree, list, err := ReadCpio(ctx, f)
	if err != nil {
		return nil, err
	}
	im := &Image{Path: h.Path, Format: "cpio", Compression: h.Compression, Size: h.Size, Complete: true, Tree: tree}
	files := tree.Len()
	if list != nil {
		im.Extra = append(im.Extra, list)
		files++
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	rc, err := compress.NewReader(h.Compression, f)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if err := scanNewc(ctx, rc, im); err != nil {
		return nil, fmt.Errorf("cpio: %w", err)
	}
	im.Filesystems = []Filesystem{{Type: "cpio newc", Files: files, Size: im.regionEnd()}}
	if h.Compression != compress.None {
		im.Plain = PlainDecompressed
	}
	return im, nil
}

// scanNewc walks a decompressed newc stream, archive after archive, noting
// where each member's header and data lie and keeping the record's bytes.
// ReadCpio has already checked the stream; this only measures it.
func scanNewc(ctx context.Context, r io.Reader, im *Image) error {
	br := bufio.NewReaderSize(r, 1<<20)
	var off int64
	hdr := make([]byte, 110)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		// Archives may follow one another with zero padding in between.
		for {
			b, err := br.Peek(1)
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			if b[0] != 0 {
				break
			}
			br.Discard(1)
			off++
		}
		start := off
		if _, err := io.ReadFull(br, hdr); err != nil {
			return fmt.Errorf("header at %d: %w", start, err)
		}
		off += int64(len(hdr))
		field := func(i int) (int64, error) {
			return strconv.ParseInt(string(hdr[6+8*i:6+8*i+8]), 16, 64)
		}
		size, err1 := field(6)
		nameSize, err2 := field(11)
		if err1 != nil || err2 != nil || nameSize < 1 || nameSize > 4096 {
			return fmt.Errorf("bad header at %d", start)
		}
		name := make([]byte, nameSize)
		if _, err := io.ReadFull(br, name); err != nil {
			return fmt.Errorf("name at %d: %w", off, err)
		}
		off += nameSize
		pad := (4 - off%4) % 4
		if _, err := br.Discard(int(pad)); err != nil {
			return err
		}
		off += pad
		n := strings.TrimRight(string(name), "\x00")
		im.Regions = append(im.Regions, Region{Name: fmt.Sprintf("cpio member %s (header)", n), Offset: start, Size: off - start})
		if n == "TRAILER!!!" {
			continue
		}
		dataStart := off
		var body io.Writer = io.Discard
		var rec bytes.Buffer
		if p, err := tarPath(n); err == nil && p == rootfs.RecordPath && size <= maxRecord {
			body = &rec
		}
		if _, err := io.CopyN(body, br, size); err != nil {
			return fmt.Errorf("%s: data: %w", n, err)
		}
		off += size
		if size > 0 {
			im.Regions = append(im.Regions, Region{Name: fmt.Sprintf("cpio member %s (data)", n), Offset: dataStart, Size: size})
			if body == &rec {
				im.Record = rec.Bytes()
			}
		}
		pad = (4 - off%4) % 4
		if _, err := br.Discard(int(pad)); err != nil {
			return err
		}
		off += pad
	}
}
