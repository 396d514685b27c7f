package harness

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// titleAnnotation names a file of an oras artifact; layers/ociremote reads
// it under the same name.
const titleAnnotation = "org.opencontainers.image.title"

// TitledFile is one file of an artifact.
type TitledFile struct {
	Title string
	Data  []byte
}

// Artifact is what `oras push REF file...` makes: an empty config and one
// layer per file, named by its title annotation, in the order given.
func Artifact(t testing.TB, files ...TitledFile) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, "application/vnd.oci.empty.v1+json")
	for _, f := range files {
		var err error
		img, err = mutate.Append(img, mutate.Addendum{
			Layer:       static.NewLayer(f.Data, "application/vnd.oci.image.layer.v1.tar"),
			Annotations: map[string]string{titleAnnotation: f.Title},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return img
}

// TarFile is one member of a layer made by TarLayer. A zero Type is a
// regular file holding Body; a zero Mode is 0644.
type TarFile struct {
	Name, Body, Link string
	Type             byte
	Mode             int64
	UID, GID         int
	// Xattrs go in the member's PAX records, as SCHILY.xattr.NAME.
	Xattrs map[string]string
}

// TarLayer is an uncompressed image layer holding files, in order, every
// mtime 1600000000.
func TarLayer(t testing.TB, files ...TarFile) v1.Layer {
	t.Helper()
	return static.NewLayer(tarBytes(t, files), types.OCIUncompressedLayer)
}

// GzipLayer is TarLayer gzip-compressed, with its diff ID the digest of
// the tar itself.
func GzipLayer(t testing.TB, files ...TarFile) v1.Layer {
	t.Helper()
	b := tarBytes(t, files)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithMediaType(types.OCILayer), tarball.WithCompressionLevel(gzip.BestSpeed))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func tarBytes(t testing.TB, files []TarFile) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.Name, Typeflag: f.Type, Linkname: f.Link, Mode: f.Mode, Uid: f.UID, Gid: f.GID,
			ModTime: time.Unix(1600000000, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag, h.Size = tar.TypeReg, int64(len(f.Body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		for k, v := range f.Xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(f.Body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Image is a container image of layers for linux/arch.
func Image(t testing.TB, arch string, ls ...v1.Layer) v1.Image {
	t.Helper()
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, ls...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// PlatformImage is one entry of an index made by Index.
type PlatformImage struct {
	Platform v1.Platform
	Image    v1.Image
}

// Index is an OCI image index of the images, in order.
func Index(images ...PlatformImage) v1.ImageIndex {
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	for _, pi := range images {
		p := pi.Platform
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{Add: pi.Image, Descriptor: v1.Descriptor{Platform: &p}})
	}
	return idx
}

// Push writes img to the registry as ref and returns its manifest digest.
func Push(t testing.TB, ref string, img v1.Image) string {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	return Digest(t, img)
}

// PushIndex writes idx, and every image in it, to the registry as ref and
// returns its digest.
func PushIndex(t testing.TB, ref string, idx v1.ImageIndex) string {
	t.Helper()
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(r, idx); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	d, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// Digest is the manifest digest of img, as "sha256:<hex>".
func Digest(t testing.TB, img v1.Image) string {
	t.Helper()
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d.String()
}

// ValidateLayout runs go-containerregistry's full validate.Image on the one
// image of an OCI layout directory or oci-archive (unpacked first with tar,
// as skopeo's oci-archive transport does), loaded with layout.FromPath. It
// fails the test when the layout cannot be read at all.
func ValidateLayout(t testing.TB, p string) error {
	t.Helper()
	if fi, err := os.Stat(p); err != nil {
		t.Fatal(err)
	} else if !fi.IsDir() {
		dir := t.TempDir()
		cmd := exec.Command(Tool(t, "tar"), "-xf", p, "-C", dir)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tar -xf %s: %v\n%s", p, err, out)
		}
		p = dir
	}
	lp, err := layout.FromPath(p)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := lp.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 1 {
		t.Fatalf("%s: index lists %d manifests", p, len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	return validate.Image(img)
}
