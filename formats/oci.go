package formats

import (
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/stamp-dev/stamp/rootfs/compress"
)

// Media types stamp writes. The layer is gzip-compressed unless the recipe
// says otherwise, because gzip is what every registry and client reads, and
// what go-containerregistry's validation and the docker tools assume. The
// diff_id stays the sha256 of the canonical tar whatever the compression, so
// it never moves; the layer digest moves with the encoder (Go's
// compress/gzip, klauspost's zstd), which provenance pins through stamp's
// build info. An uncompressed layer (compression: none) keeps the digest
// independent of any encoder, at its full size on the wire.
const (
	OCIIndexMediaType     = "application/vnd.oci.image.index.v1+json"
	OCIManifestMediaType  = "application/vnd.oci.image.manifest.v1+json"
	OCIConfigMediaType    = "application/vnd.oci.image.config.v1+json"
	OCILayerMediaType     = "application/vnd.oci.image.layer.v1.tar"
	OCILayerGzipMediaType = "application/vnd.oci.image.layer.v1.tar+gzip"
	OCILayerZstdMediaType = "application/vnd.oci.image.layer.v1.tar+zstd"

	// ORASConfigMediaType is the config of a file ORAS pushes ("{}");
	// OCITitleAnnotation names the file a layer holds.
	ORASConfigMediaType = "application/vnd.unknown.config.v1+json"
	OCITitleAnnotation  = "org.opencontainers.image.title"

	// OCIRefName is the org.opencontainers.image.ref.name stamp gives its
	// one image in index.json, so "oci:DIR:latest" names it as "oci:DIR"
	// does.
	OCIRefName = "latest"

	ociRefNameAnnotation = "org.opencontainers.image.ref.name"
	ociLayoutVersion     = "1.0.0"
)

// KubeVirt's containerDisk convention, as KubeVirt's own test images lay it
// out (pkg_tar with owner 107.107, mode 440, package_dir /disk): the disk
// is the only file under /disk, owned by the qemu user (uid and gid 107)
// that virt-launcher runs as, readable by it and by nobody else. /disk itself
// is 107:107 0555, as kubevirt/containerdisks writes it, so the directory
// is not writable by anyone.
const (
	containerDiskDir     = "/disk"
	containerDiskOwner   = 107
	containerDiskPerm    = 0o440
	containerDiskDirPerm = 0o555
)

// ociLayerMediaTypes names the layer media type of each compression stamp
// writes.
var ociLayerMediaTypes = map[compress.Algorithm]string{
	compress.Gzip: OCILayerGzipMediaType,
	compress.Zstd: OCILayerZstdMediaType,
	compress.None: OCILayerMediaType,
}

// ociLayerCompression is the compression a layer media type names, for the
// OCI types and Docker's; ok is false for a media type that is not a layer
// stamp can read.
func ociLayerCompression(mediaType string) (alg compress.Algorithm, ok bool) {
	switch mediaType {
	case OCILayerMediaType, string(types.DockerUncompressedLayer):
		return compress.None, true
	case OCILayerGzipMediaType, string(types.DockerLayer):
		return compress.Gzip, true
	case OCILayerZstdMediaType:
		return compress.Zstd, true
	}
	return "", false
}

// The JSON documents are stamp's own structs rather than a library's, so
// their bytes, and with them every digest, change only when this file does.
// Field order follows the image spec; encoding/json sorts map keys.

type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *ociPlatformJSON  `json:"platform,omitempty"`
}

type ociPlatformJSON struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
	Variant      string `json:"variant,omitempty"`
}

type ociIndexJSON struct {
	SchemaVersion int             `json:"schemaVersion"`
	MediaType     string          `json:"mediaType,omitempty"`
	Manifests     []ociDescriptor `json:"manifests"`
}

type ociManifestJSON struct {
	SchemaVersion int             `json:"schemaVersion"`
	MediaType     string          `json:"mediaType,omitempty"`
	Config        ociDescriptor   `json:"config"`
	Layers        []ociDescriptor `json:"layers"`
}

type ociConfigJSON struct {
	Created      string          `json:"created,omitempty"`
	Architecture string          `json:"architecture"`
	Variant      string          `json:"variant,omitempty"`
	OS           string          `json:"os"`
	Config       ociRunConfig    `json:"config"`
	RootFS       ociRootFSJSON   `json:"rootfs"`
	History      []ociHistoryRow `json:"history,omitempty"`
}

type ociRunConfig struct {
	Env        []string          `json:"Env,omitempty"`
	Entrypoint []string          `json:"Entrypoint,omitempty"`
	Labels     map[string]string `json:"Labels,omitempty"`
}

type ociRootFSJSON struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type ociHistoryRow struct {
	Created   string `json:"created,omitempty"`
	CreatedBy string `json:"created_by,omitempty"`
	Comment   string `json:"comment,omitempty"`
}
