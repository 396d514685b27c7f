package formats

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// ociStore reads the files of a layout directory or an oci-archive.
type ociStore struct {
	path string
	// archive is the open oci-archive, nil for a directory.
	archive *os.File
	members map[string]ociMember // archive member name -> data location
}

type ociMember struct{ off, size int64 }

func openOCIStore(p string) (*ociStore, error) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	s := &ociStore{path: p}
	if fi.IsDir() {
		return s, nil
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	s.archive = f
	if err := s.scanArchive(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return s, nil
}

func (s *ociStore) Close() error {
	if s.archive != nil {
		return s.archive.Close()
	}
	return nil
}

// scanArchive records where each member's data lies, reading headers only.
func (s *ociStore) scanArchive() error {
	var magic [6]byte
	n, _ := io.ReadFull(s.archive, magic[:])
	switch {
	case n >= 2 && magic[0] == 0x1f && magic[1] == 0x8b,
		n >= 4 && bytes.Equal(magic[:4], []byte{0x28, 0xb5, 0x2f, 0xfd}),
		n >= 6 && bytes.Equal(magic[:6], []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		return errors.New("a compressed oci-archive; decompress it first")
	}
	if _, err := s.archive.Seek(0, io.SeekStart); err != nil {
		return err
	}
	s.members = map[string]ociMember{}
	tr := tar.NewReader(s.archive)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("oci-archive: %w", err)
		}
		p, err := tarPath(hdr.Name)
		if err != nil {
			return fmt.Errorf("oci-archive: member %q: %w", hdr.Name, err)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return fmt.Errorf("oci-archive: member %q is not a file or directory", hdr.Name)
		}
		name := strings.TrimPrefix(p, "/")
		if _, dup := s.members[name]; dup {
			return fmt.Errorf("oci-archive: member %q appears twice", hdr.Name)
		}
		off, err := s.archive.Seek(0, io.SeekCurrent)
		if err != nil {
			return err
		}
		s.members[name] = ociMember{off: off, size: hdr.Size}
	}
	return nil
}

// open returns a reader over the layout file name ("index.json",
// "blobs/sha256/<hex>") and a function that releases it.
func (s *ociStore) open(name string) (*io.SectionReader, func() error, error) {
	if s.archive != nil {
		m, ok := s.members[name]
		if !ok {
			return nil, nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
		}
		return io.NewSectionReader(s.archive, m.off, m.size), func() error { return nil }, nil
	}
	full := filepath.Join(s.path, filepath.FromSlash(name))
	fi, err := os.Lstat(full)
	if err != nil {
		return nil, nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, nil, fmt.Errorf("%s is not a regular file", name)
	}
	f, err := os.Open(full)
	if err != nil {
		return nil, nil, err
	}
	return io.NewSectionReader(f, 0, fi.Size()), f.Close, nil
}

// blob opens the blob with the given digest.
func (s *ociStore) blob(digest string) (*io.SectionReader, func() error, error) {
	hx, err := ociHex(digest)
	if err != nil {
		return nil, nil, err
	}
	return s.open("blobs/sha256/" + hx)
}

// blobNames lists every blob file, sorted.
func (s *ociStore) blobNames() []string {
	var names []string
	if s.archive != nil {
		for name := range s.members {
			if strings.HasPrefix(name, "blobs/") {
				names = append(names, name)
			}
		}
	} else {
		ents, _ := os.ReadDir(filepath.Join(s.path, "blobs", "sha256"))
		for _, e := range ents {
			names = append(names, "blobs/sha256/"+e.Name())
		}
	}
	sort.Strings(names)
	return names
}

func (s *ociStore) readSmall(name string, limit int64) ([]byte, error) {
	sr, closeFn, err := s.open(name)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	if sr.Size() > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a layout document may have", name, sr.Size(), limit)
	}
	return io.ReadAll(sr)
}

func (s *ociStore) checkLayoutVersion() error {
	b, err := s.readSmall("oci-layout", 1<<16)
	if err != nil {
		return fmt.Errorf("not an OCI layout: %w", err)
	}
	var v struct {
		Version string `json:"imageLayoutVersion"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("oci-layout: %w", err)
	}
	if v.Version != ociLayoutVersion {
		return fmt.Errorf("oci-layout: imageLayoutVersion %q, want %q", v.Version, ociLayoutVersion)
	}
	return nil
}

// single returns the descriptor of the one image manifest index.json lists.
func (s *ociStore) single() (ociDescriptor, string, error) {
	b, err := s.readSmall("index.json", 4<<20)
	if err != nil {
		return ociDescriptor{}, "", err
	}
	var idx ociIndexJSON
	if err := json.Unmarshal(b, &idx); err != nil {
		return ociDescriptor{}, "", fmt.Errorf("index.json: %w", err)
	}
	if idx.SchemaVersion != 2 {
		return ociDescriptor{}, "", fmt.Errorf("index.json: schemaVersion %d, want 2", idx.SchemaVersion)
	}
	if len(idx.Manifests) != 1 {
		return ociDescriptor{}, "", fmt.Errorf("index.json lists %d manifests; stamp reads layouts holding one image", len(idx.Manifests))
	}
	d := idx.Manifests[0]
	switch d.MediaType {
	case OCIManifestMediaType, string(types.DockerManifestSchema2):
	default:
		return ociDescriptor{}, "", fmt.Errorf("index.json: manifest %s has media type %q, not an image manifest", d.Digest, d.MediaType)
	}
	return d, d.Annotations[ociRefNameAnnotation], nil
}

// readBlob reads a small blob and checks its size and digest.
func (s *ociStore) readBlob(d ociDescriptor, limit int64) ([]byte, error) {
	hx, err := ociHex(d.Digest)
	if err != nil {
		return nil, err
	}
	if d.Size > limit || d.Size < 0 {
		return nil, fmt.Errorf("blob %s: size %d out of range", d.Digest, d.Size)
	}
	b, err := s.readSmall("blobs/sha256/"+hx, limit)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != d.Size {
		return nil, fmt.Errorf("blob %s has %d bytes, its descriptor says %d", d.Digest, len(b), d.Size)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hx {
		return nil, fmt.Errorf("blob %s: content does not match its digest", d.Digest)
	}
	return b, nil
}

// verify hashes the blob file name and compares it with its name (and with
// size unless it is negative).
func (s *ociStore) verify(ctx context.Context, name string, size int64) error {
	sr, closeFn, err := s.open(name)
	if err != nil {
		return err
	}
	defer closeFn()
	h := sha256.New()
	if _, err := io.CopyBuffer(h, &tarCtxReader{ctx: ctx, r: sr}, make([]byte, 1<<20)); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return ociCheck(name, h, sr.Size(), size)
}

func ociCheck(name string, h hash.Hash, got, want int64) error {
	if want >= 0 && got != want {
		return fmt.Errorf("%s has %d bytes, its descriptor says %d", name, got, want)
	}
	if hex.EncodeToString(h.Sum(nil)) != path.Base(name) {
		return fmt.Errorf("%s: content does not match its digest", name)
	}
	return nil
}

// readLayer reads the layer with ReadTar through its decompressor, and
// checks its digest and diff_id on the same pass.
func (s *ociStore) readLayer(ctx context.Context, d ociDescriptor, diffID string) (*rootfs.Sealed, error) {
	alg, _ := ociLayerCompression(d.MediaType)
	sr, closeFn, err := s.blob(d.Digest)
	if err != nil {
		return nil, fmt.Errorf("layer: %w", err)
	}
	defer closeFn()
	h, dh := sha256.New(), sha256.New()
	tee := io.TeeReader(sr, h)
	tree, terr := ociReadLayerTar(ctx, alg, tee, dh)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	// The decompressor may stop short of the blob's end; the rest still
	// counts for the digest. A blob that does not match its digest is
	// reported as such even when the damage also broke the tar or the
	// compression, since that is the cause.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return nil, fmt.Errorf("layer %s: %w", d.Digest, err)
	}
	hx, _ := ociHex(d.Digest)
	if err := ociCheck("blobs/sha256/"+hx, h, sr.Size(), d.Size); err != nil {
		if terr != nil {
			return nil, fmt.Errorf("%w (and the layer no longer reads as a %s tar: %v)", err, alg, terr)
		}
		return nil, err
	}
	if terr != nil {
		return nil, fmt.Errorf("layer %s: %w", d.Digest, terr)
	}
	if alg != compress.None {
		if got := "sha256:" + hex.EncodeToString(dh.Sum(nil)); got != diffID {
			return nil, fmt.Errorf("layer %s: its uncompressed tar hashes to %s, the config's diff_id is %s", d.Digest, got, diffID)
		}
	}
	return tree, nil
}

// ociReadLayerTar decompresses r with alg and reads the tar in it, hashing
// the whole decompressed stream (the end-of-archive padding included) into
// dh when the layer is compressed.
func ociReadLayerTar(ctx context.Context, alg compress.Algorithm, r io.Reader, dh hash.Hash) (*rootfs.Sealed, error) {
	if alg == compress.None {
		return ReadTar(ctx, r)
	}
	zr, err := compress.NewReader(alg, r)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	ut := io.TeeReader(zr, dh)
	tree, err := ReadTar(ctx, ut)
	if err != nil {
		return nil, err
	}
	// Reading to the end also makes gzip and zstd check their own
	// checksums.
	if _, err := io.Copy(io.Discard, ut); err != nil {
		return nil, fmt.Errorf("%s: %w", alg, err)
	}
	return tree, nil
}

// ociHex checks a digest string and returns its hex part. Only sha256
// digests are read; the hex part becomes a file name, so it is checked
// strictly.
func ociHex(digest string) (string, error) {
	hx, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || len(hx) != 64 {
		return "", fmt.Errorf("digest %q is not sha256:<64 hex digits>", digest)
	}
	for _, c := range hx {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return "", fmt.Errorf("digest %q is not sha256:<64 lowercase hex digits>", digest)
		}
	}
	return hx, nil
}
