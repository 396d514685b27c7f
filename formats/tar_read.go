package formats

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// tarReader reads the canonical tar (and any other tar) back.
type tarReader struct{}

func (tarReader) Format() string { return "tar" }

func (tarReader) Match(h *Head) bool {
	// "ustar" at 257 is in POSIX, PAX and GNU headers alike.
	return !h.IsDir && len(h.Plain) >= 262 && string(h.Plain[257:262]) == "ustar"
}

func (tarReader) Read(ctx context.Context, h *Head) (*Image, error) {
	f, err := os.Open(h.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	im := &Image{Path: h.Path, Format: "tar", Compression: h.Compression, Size: h.Size, Complete: true,
		Cannot: []rootfs.Type{rootfs.TypeSocket}}
	rc, err := compress.NewReader(h.Compression, f)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	if im.Tree, err = readTarRegions(ctx, rc, im); err != nil {
		return nil, err
	}
	im.Filesystems = []Filesystem{{Type: "tar", Files: im.Tree.Len(), Size: im.regionEnd()}}
	if h.Compression != compress.None {
		im.Plain = PlainDecompressed
	}
	return im, nil
}

// readTarRegions is ReadTar over an already decompressed stream that also
// notes where each member's header and data lie and keeps the embedded
// record's bytes. It shares tarEntry with ReadTar, so both read members the
// same way.
func readTarRegions(ctx context.Context, r io.Reader, im *Image) (*rootfs.Sealed, error) {
	var consumed int64
	cr := rootfs.CountReader(r, func(n int64) { consumed += n })
	tr := tar.NewReader(cr)
	byPath := map[string]*rootfs.Entry{}
	buf := make([]byte, 256<<10)
	last := "start of archive"
	var dataEnd int64
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hdrStart := (dataEnd + 511) &^ 511
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("tar: after %s: %w", last, err)
		}
		last = fmt.Sprintf("%q", hdr.Name)
		dataStart := consumed
		im.Regions = append(im.Regions, Region{Name: fmt.Sprintf("tar member %s (header)", hdr.Name), Offset: hdrStart, Size: dataStart - hdrStart})
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			dataEnd = dataStart
			continue
		}
		var rec bytes.Buffer
		var body io.Reader = tr
		if p, err := tarPath(hdr.Name); err == nil && p == rootfs.RecordPath && hdr.Typeflag != tar.TypeLink && hdr.Size <= maxRecord {
			body = io.TeeReader(tr, &rec)
		}
		e, err := tarEntry(ctx, hdr, body, byPath, buf)
		if err != nil {
			return nil, fmt.Errorf("tar: member %q: %w", hdr.Name, err)
		}
		dataEnd = consumed
		if dataEnd > dataStart {
			im.Regions = append(im.Regions, Region{Name: fmt.Sprintf("tar member %s (data)", hdr.Name), Offset: dataStart, Size: dataEnd - dataStart})
		}
		if e != nil {
			byPath[e.Path] = e
			if e.Path == rootfs.RecordPath {
				im.Record = nil
				if e.Type == rootfs.TypeRegular {
					im.Record = bytes.Clone(rec.Bytes())
				}
			}
		}
	}
	// The end-of-archive blocks and tar's padding to a record size.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return nil, fmt.Errorf("tar: after end of archive: %w", err)
	}
	if end := (dataEnd + 511) &^ 511; consumed > end {
		im.Regions = append(im.Regions, Region{Name: "tar end of archive", Offset: end, Size: consumed - end})
	}
	tree, err := sealedEntries(byPath)
	if err != nil {
		return nil, fmt.Errorf("tar: %w", err)
	}
	return tree, nil
}

// tarMemberRegions lists where the members of an uncompressed tar file
// lie, seeking over their data.
func tarMemberRegions(p string) ([]Region, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// archive/tar reads exactly the header blocks and seeks over data it
	// skips, so the file offset after Next is the member's data.
	tr := tar.NewReader(f)
	var out []Region
	var dataEnd int64
	for {
		hdrStart := (dataEnd + 511) &^ 511
		hdr, err := tr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		pos, err := f.Seek(0, io.SeekCurrent)
		if err != nil {
			return nil, err
		}
		out = append(out, Region{Name: "oci-archive member " + hdr.Name + " (header)", Offset: hdrStart, Size: pos - hdrStart})
		if hdr.Size > 0 {
			out = append(out, Region{Name: "oci-archive member " + hdr.Name + " (data)", Offset: pos, Size: hdr.Size})
		}
		dataEnd = pos + hdr.Size
	}
}

// ReadTreeFile implements TreeFileReader: one member of a tar output.
func (tarReader) ReadTreeFile(ctx context.Context, im *Image, p string, max int64) ([]byte, error) {
	f, err := os.Open(im.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := compress.NewReader(im.Compression, f)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil, fmt.Errorf("%s: no member %s", im.Path, p)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", im.Path, err)
		}
		if tp, err := tarPath(hdr.Name); err == nil && tp == p && hdr.Typeflag == tar.TypeReg {
			return io.ReadAll(io.LimitReader(tr, max))
		}
	}
}
