// Package ociremote brings OCI manifests and blobs from a registry into the
// content-addressed cache, and reads them back from there. Every byte goes
// through layers/cache, which checks it against its digest before storing it;
// layers that apply OCI content read only the cache, never the network.
package ociremote

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/stamp-dev/stamp/layers/cache"
)

// maxManifest bounds what is read as a manifest or config: both are JSON
// documents of a few kilobytes, and a registry could serve anything.
const maxManifest = 8 << 20

// Manifest is a manifest or an index read from the cache.
type Manifest struct {
	Digest    string
	MediaType types.MediaType
	Raw       []byte
	// Exactly one of Index and Image is set.
	Index *v1.IndexManifest
	Image *v1.Manifest
}

// ParseManifest decodes raw, telling an index from an image manifest by its
// mediaType field or, when that is missing (OCI makes it optional), by its
// shape. fallback is the media type the registry announced, or "".
func ParseManifest(raw []byte, digest string, fallback types.MediaType) (*Manifest, error) {
	var probe struct {
		SchemaVersion int64             `json:"schemaVersion"`
		MediaType     types.MediaType   `json:"mediaType"`
		Manifests     json.RawMessage   `json:"manifests"`
		Layers        json.RawMessage   `json:"layers"`
		FSLayers      json.RawMessage   `json:"fsLayers"`
		Config        *v1.Descriptor    `json:"config"`
		Annotations   map[string]string `json:"annotations"`
	}
	if err := json.Unmarshal(raw, &probe); err != nil {
		return nil, fmt.Errorf("manifest %s: %w", digest, err)
	}
	mt := probe.MediaType
	if mt == "" {
		mt = fallback
	}
	if mt == "" || !mt.IsIndex() && !mt.IsImage() {
		switch {
		case probe.Manifests != nil:
			mt = types.OCIImageIndex
		case probe.Layers != nil || probe.Config != nil:
			mt = types.OCIManifestSchema1
		}
	}
	m := &Manifest{Digest: digest, MediaType: mt, Raw: raw}
	switch {
	case mt.IsSchema1() || probe.FSLayers != nil:
		return nil, fmt.Errorf("manifest %s: Docker schema 1 manifests are not supported; push the image again with a current client", digest)
	case mt.IsIndex():
		idx, err := v1.ParseIndexManifest(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("index %s: %w", digest, err)
		}
		m.Index = idx
	case mt.IsImage():
		im, err := v1.ParseManifest(bytes.NewReader(raw))
		if err != nil {
			return nil, fmt.Errorf("manifest %s: %w", digest, err)
		}
		if im.Config.Digest.Algorithm == "" {
			return nil, fmt.Errorf("manifest %s has no config descriptor", digest)
		}
		m.Image = im
	default:
		return nil, fmt.Errorf("manifest %s: media type %q is neither an image manifest nor an index", digest, mt)
	}
	return m, nil
}

// ReadBlob reads a small blob (manifest, config) from the cache in full,
// verified against its digest.
func ReadBlob(c *cache.Cache, digest string) ([]byte, error) {
	rc, err := c.Open(digest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxManifest+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxManifest {
		return nil, fmt.Errorf("blob %s is larger than %d bytes; not a manifest or config", digest, maxManifest)
	}
	return data, nil
}

// LoadManifest reads and decodes a manifest or index held in the cache.
func LoadManifest(c *cache.Cache, digest string) (*Manifest, error) {
	raw, err := ReadBlob(c, digest)
	if err != nil {
		return nil, err
	}
	return ParseManifest(raw, digest, "")
}

// Blobs are the config and layers of an image manifest, in manifest order.
func (m *Manifest) Blobs() []v1.Descriptor {
	if m.Image == nil {
		return nil
	}
	return append([]v1.Descriptor{m.Image.Config}, m.Image.Layers...)
}

// PlatformError is an index that holds no manifest for the platform asked for.
type PlatformError struct {
	Ref, Index, Want string
	Have             []string
}

func (e *PlatformError) Error() string {
	have := "none"
	if len(e.Have) > 0 {
		have = strings.Join(e.Have, ", ")
	}
	return fmt.Sprintf("%s (index %s) has no manifest for %s; available platforms: %s", e.Ref, e.Index, e.Want, have)
}

// DefaultPlatform is the platform a recipe's arch stands for.
func DefaultPlatform(arch string) string {
	if arch == "" {
		arch = "amd64"
	}
	return "linux/" + arch
}

// SelectPlatform picks the manifest for platform ("os/arch[/variant]") from
// an index. Without a variant, an entry without one is preferred, then arm64's
// usual v8, then the first in index order, so the choice never depends on
// anything but the index.
func SelectPlatform(ref string, m *Manifest, platform string) (v1.Descriptor, error) {
	parts := strings.Split(platform, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return v1.Descriptor{}, fmt.Errorf("platform %q: want os/arch[/variant]", platform)
	}
	wantOS, arch, variant := parts[0], parts[1], ""
	if len(parts) == 3 {
		variant = parts[2]
	}
	var have []string
	best, bestRank := -1, 0
	for i, d := range m.Index.Manifests {
		p := d.Platform
		if p == nil || p.OS == "" || p.OS == "unknown" {
			continue // attestations and the like
		}
		have = append(have, p.String())
		if p.OS != wantOS || p.Architecture != arch || !d.MediaType.IsImage() && d.MediaType != "" {
			continue
		}
		rank := 0
		switch {
		case variant != "" && p.Variant != variant:
			continue
		case variant != "" || p.Variant == "":
			rank = 3
		case arch == "arm64" && p.Variant == "v8":
			rank = 2
		default:
			rank = 1
		}
		if rank > bestRank {
			best, bestRank = i, rank
		}
	}
	if best < 0 {
		sort.Strings(have)
		return v1.Descriptor{}, &PlatformError{Ref: ref, Index: m.Digest, Want: platform, Have: dedup(have)}
	}
	return m.Index.Manifests[best], nil
}

func dedup(s []string) []string {
	var out []string
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// ErrNotImage is a manifest that names no image, e.g. an index nested in an
// index.
var ErrNotImage = errors.New("not an image or artifact manifest")

// TitleAnnotation names an artifact layer's file, as `oras push` writes it.
const TitleAnnotation = "org.opencontainers.image.title"
