package formats

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// OCILayout is an OCI layout opened for publishing: stamp push hands its
// image to a registry client.
type OCILayout struct {
	store    *ociStore
	manifest ociDescriptor
}

// OpenOCILayout opens the layout directory or oci-archive at p, which must
// hold one image. Close it when done.
func OpenOCILayout(p string) (*OCILayout, error) {
	s, err := openOCIStore(p)
	if err != nil {
		return nil, err
	}
	l := &OCILayout{store: s}
	if err := s.checkLayoutVersion(); err != nil {
		s.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if l.manifest, _, err = s.single(); err != nil {
		s.Close()
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return l, nil
}

// Close releases the layout.
func (l *OCILayout) Close() error { return l.store.Close() }

// Digest is the image's manifest digest.
func (l *OCILayout) Digest() string { return l.manifest.Digest }

// Image returns the layout's image for go-containerregistry. Its manifest
// and blobs are served byte for byte, so a registry stores it under the
// same digest; every blob is checked against its digest as it is read.
func (l *OCILayout) Image() (v1.Image, error) {
	raw, err := l.store.readBlob(l.manifest, 4<<20)
	if err != nil {
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", l.manifest.Digest, err)
	}
	cfg, err := l.store.readBlob(ociDescriptor{Digest: m.Config.Digest.String(), Size: m.Config.Size}, 4<<20)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return partial.CompressedToImage(&ociPushImage{l: l, raw: raw, m: m, cfg: cfg})
}

// ociPushImage is the layout's image as go-containerregistry's partial
// package wants it: the raw documents and each layer's blob as is.
type ociPushImage struct {
	l   *OCILayout
	raw []byte
	m   *v1.Manifest
	cfg []byte
}

func (i *ociPushImage) RawConfigFile() ([]byte, error) { return i.cfg, nil }
func (i *ociPushImage) RawManifest() ([]byte, error)   { return i.raw, nil }
func (i *ociPushImage) MediaType() (types.MediaType, error) {
	if i.m.MediaType != "" {
		return i.m.MediaType, nil
	}
	return types.OCIManifestSchema1, nil
}

func (i *ociPushImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, d := range i.m.Layers {
		if d.Digest == h {
			return &ociPushLayer{store: i.l.store, desc: d}, nil
		}
	}
	if i.m.Config.Digest == h {
		return &ociPushLayer{store: i.l.store, desc: i.m.Config}, nil
	}
	return nil, fmt.Errorf("blob %s is not in manifest %s", h, i.l.manifest.Digest)
}

type ociPushLayer struct {
	store *ociStore
	desc  v1.Descriptor
}

func (l *ociPushLayer) Digest() (v1.Hash, error)            { return l.desc.Digest, nil }
func (l *ociPushLayer) Size() (int64, error)                { return l.desc.Size, nil }
func (l *ociPushLayer) MediaType() (types.MediaType, error) { return l.desc.MediaType, nil }

// Compressed streams the blob and fails at its end if it does not hash to
// its digest, so a corrupt layout is never published as sound.
func (l *ociPushLayer) Compressed() (io.ReadCloser, error) {
	sr, closeFn, err := l.store.blob(l.desc.Digest.String())
	if err != nil {
		return nil, err
	}
	hx, _ := ociHex(l.desc.Digest.String())
	return &ociVerifyReader{r: sr, h: sha256.New(), name: "blobs/sha256/" + hx, want: l.desc.Size, close: closeFn}, nil
}

type ociVerifyReader struct {
	r     io.Reader
	h     hash.Hash
	n     int64
	name  string
	want  int64
	close func() error
}

func (v *ociVerifyReader) Read(p []byte) (int, error) {
	n, err := v.r.Read(p)
	v.h.Write(p[:n])
	v.n += int64(n)
	if err == io.EOF {
		if cerr := ociCheck(v.name, v.h, v.n, v.want); cerr != nil {
			return n, cerr
		}
	}
	return n, err
}

func (v *ociVerifyReader) Close() error { return v.close() }
