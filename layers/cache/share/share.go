// Package share keeps cache records in an OCI registry, so that CI runners
// that start with an empty disk can take each other's build results
// (stamp build --cache-to/--cache-from), in the spirit of BuildKit's
// registry cache.
//
// An entry is one OCI artifact tagged Tag(kind, key): an image manifest whose
// config is the record's JSON and whose layers are the record's blobs, in
// record order and uncompressed, so a layer's digest is the blob's cache
// digest. Nothing a registry serves is trusted: a pulled entry becomes a
// record only once it names what was asked for and every blob has been
// re-hashed into the cache.
//
// That proves an entry whole, not who made it. With Options.Signer, Push
// signs each entry: the signed payload is the record's canonical JSON
// (Payload), which names its kind, key, parts, subject, blobs (name,
// digest, size) and data, signed as RecordType with package sign (ed25519
// over DSSE's PAE) and carried in the manifest's SignaturesAnnotation as a
// JSON list of DSSE signature objects. With Options.Trust, Pull takes only
// an entry that a trusted key signed, checked over the record as stamp
// decoded it, before any blob is fetched.
package share

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/cache/sign"
	"github.com/stamp-dev/stamp/layers/ociremote"
)

// Media types of an entry. The config's type doubles as the artifactType,
// so a registry that lists artifacts shows what they are.
const (
	RecordType types.MediaType = "application/vnd.stamp.cache.record.v1+json"
	BlobType   types.MediaType = "application/vnd.stamp.cache.blob.v1"
)

// SignaturesAnnotation is the manifest annotation holding an entry's
// signatures: a JSON list of DSSE signature objects ({"keyid", "sig"}) over
// Payload of its record, as RecordType.
const SignaturesAnnotation = "dev.stamp.cache.signatures"

// A record is a few parts and blob names; anything much bigger is not one of
// ours and is not read into memory.
const maxRecord = 16 << 20

// ErrUnavailable marks a registry that failed a request of its own after
// every attempt (unreachable, refusing, answering 5xx), rather than an
// entry that is not what it should be: asking it again in the same build
// would cost the same wait.
var ErrUnavailable = errors.New("shared cache unavailable")

// ErrUnvouched is a record Push will not sign: it was pulled from a shared
// cache without a trusted signature, and a signature vouches for what the
// signer made or checked.
var ErrUnvouched = errors.New("pulled without a trusted signature; not signing it")

// Options configure Pull and Push.
type Options struct {
	// Insecure allows plain HTTP, and TLS without certificate checks, to a
	// registry that is not on the loopback interface. localhost and
	// 127.0.0.1 are spoken to in plain HTTP without it.
	Insecure bool
	// Keychain supplies credentials; nil means the docker config chain
	// (authn.DefaultKeychain), as for stamp push.
	Keychain authn.Keychain
	// Log is told what was pulled, pushed or skipped; nil discards it.
	Log logrus.FieldLogger
	// Signer, when set, signs every entry Push writes, and Push replaces an
	// entry under the same tag that is not the one it would write.
	Signer *sign.Signer
	// Trust, when it holds keys, makes Pull take only entries one of them
	// signed; anything else is an error wrapping sign.ErrUntrusted.
	Trust *sign.Trust
}

func (o Options) log() logrus.FieldLogger {
	if o.Log != nil {
		return o.Log
	}
	l := logrus.New()
	l.Out = io.Discard
	return l
}

func (o Options) remote(ctx context.Context) []remote.Option {
	return ociremote.WriteOptions(ctx, o.Keychain, o.Insecure)
}

// client is the registry client pulls go through: every request tried
// again as the cache's Retry says, blobs resumed and verified into c.
func (o Options) client(c *cache.Cache) *ociremote.Client {
	var tr http.RoundTripper
	if o.Insecure {
		tr = ociremote.InsecureTransport()
	}
	return ociremote.New(c, ociremote.Options{Keychain: o.Keychain, Transport: tr, UserAgent: "stamp", Log: o.Log})
}

// Tag is the tag an entry lives under: kind, "-" and the key's hex, which
// fits the OCI tag grammar for any kind of up to 63 letters, digits, "_"
// and "-". A key that is not a digest is used as it is, and the reference
// made of it is then refused.
func Tag(kind, key string) string {
	if h, err := cache.ParseDigest(key); err == nil {
		key = h
	}
	return kind + "-" + key
}

func reference(repo, kind, key string, o Options) (name.Tag, error) {
	if _, err := cache.ParseDigest(key); err != nil {
		return name.Tag{}, fmt.Errorf("cache entry %s %s in %s: %w", kind, key, repo, err)
	}
	var nameOpts []name.Option
	if o.Insecure {
		nameOpts = append(nameOpts, name.Insecure)
	}
	r, err := name.NewRepository(repo, nameOpts...)
	if err != nil {
		return name.Tag{}, fmt.Errorf("cache repository %q: %w", repo, err)
	}
	t, err := name.NewTag(r.Name()+":"+Tag(kind, key), nameOpts...)
	if err != nil {
		return name.Tag{}, fmt.Errorf("cache entry %s %s in %s: %w", kind, key, repo, err)
	}
	return t, nil
}

func notFound(err error) bool {
	var te *transport.Error
	// A repository nobody pushed to yet is NAME_UNKNOWN, also a 404: a miss
	// all the same.
	return errors.As(err, &te) && te.StatusCode == http.StatusNotFound
}

// Pull fetches the record kind/key from repo into c. It reports found=false
// and no error when the registry has no entry for the key. Anything else
// that goes wrong, including an entry that is not the record asked for or a
// blob that does not hash to its name, is an error naming the reference;
// the caller builds instead. Blobs are verified into c as they stream in,
// and the record is filed only once all of them are there, so a failed pull
// leaves no record behind.
func Pull(ctx context.Context, c *cache.Cache, repo, kind, key string, o Options) (found bool, err error) {
	ref, err := reference(repo, kind, key, o)
	if err != nil {
		return false, err
	}
	cl := o.client(c)
	raw, mt, err := cl.FetchManifest(ctx, ref)
	if notFound(err) {
		o.log().WithField("ref", ref.Name()).Debug("no shared cache entry")
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("pull %s: %w (%w)", ref.Name(), err, ErrUnavailable)
	}
	r, m, err := readEntry(ctx, cl, raw, mt, ref, kind, key, c)
	if err != nil {
		return false, fmt.Errorf("pull %s: %w", ref.Name(), err)
	}
	signer := ""
	if o.Trust.Len() > 0 {
		if signer, err = verifyEntry(m, r, o.Trust); err != nil {
			return false, fmt.Errorf("pull %s: %w", ref.Name(), err)
		}
	}
	// Whatever the entry said of its origin, this is where it came from.
	r.Pulled = &cache.Pulled{From: ref.Name(), Signer: signer}
	for i, b := range r.Blobs {
		if c.Has(b.Digest) {
			// Re-hashed whenever it is read, like any blob; not worth fetching.
			continue
		}
		if err := cl.FetchBlob(ctx, ref.Context(), m.Layers[i]); err != nil {
			return false, fmt.Errorf("pull %s: blob %s (%s): %w", ref.Name(), b.Digest, b.Name, err)
		}
	}
	if err := c.PutRecord(r); err != nil {
		return false, fmt.Errorf("pull %s: %w", ref.Name(), err)
	}
	log := o.log().WithField("ref", ref.Name()).WithField("blobs", len(r.Blobs))
	if signer != "" {
		log = log.WithField("signer", signer)
	}
	log.Info("pulled shared cache entry")
	return true, nil
}

// Payload is what an entry's signature covers: the record's JSON as the
// entry's config holds it, compact, in the field order of cache.Record,
// without the local note of where it was pulled from.
func Payload(r *cache.Record) ([]byte, error) {
	shared := *r
	shared.Pulled = nil
	return json.Marshal(&shared)
}

// verifyEntry checks the signatures on m against trust, over the record as
// it was decoded: what is verified is what the build will believe, whatever
// else the config's bytes held.
func verifyEntry(m *v1.Manifest, r *cache.Record, trust *sign.Trust) (string, error) {
	var sigs []sign.Signature
	if a, ok := m.Annotations[SignaturesAnnotation]; ok {
		if err := json.Unmarshal([]byte(a), &sigs); err != nil {
			return "", fmt.Errorf("%w: annotation %s: %v", sign.ErrUntrusted, SignaturesAnnotation, err)
		}
	}
	payload, err := Payload(r)
	if err != nil {
		return "", err
	}
	return trust.Verify(string(RecordType), payload, sigs)
}

// readEntry checks that the manifest is one of our artifacts holding the
// record kind/key and that its layers are that record's blobs, before any
// blob is fetched: a foreign entry costs one small download, not gigabytes.
func readEntry(ctx context.Context, cl *ociremote.Client, raw []byte, mt types.MediaType, ref name.Tag, kind, key string, c *cache.Cache) (*cache.Record, *v1.Manifest, error) {
	if mt != types.OCIManifestSchema1 {
		return nil, nil, fmt.Errorf("%w: manifest is %s, not %s", cache.ErrBadRecord, mt, types.OCIManifestSchema1)
	}
	m, err := v1.ParseManifest(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: manifest: %v", cache.ErrBadRecord, err)
	}
	if m.Config.MediaType != RecordType || (m.ArtifactType != "" && m.ArtifactType != string(RecordType)) {
		return nil, nil, fmt.Errorf("%w: config is %s (artifact type %q), not %s", cache.ErrBadRecord, m.Config.MediaType, m.ArtifactType, RecordType)
	}
	if m.Config.Size < 0 || m.Config.Size > maxRecord {
		return nil, nil, fmt.Errorf("%w: record of %d bytes", cache.ErrBadRecord, m.Config.Size)
	}
	// Read into memory and checked against its digest; not filed.
	b, err := cl.ReadBlob(ctx, ref.Context(), m.Config, maxRecord)
	if err != nil {
		return nil, nil, fmt.Errorf("record: %w", err)
	}
	var r cache.Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, nil, fmt.Errorf("%w: record %s: %v", cache.ErrBadRecord, m.Config.Digest, err)
	}
	// Kind, key and parts, as Check sees them; the blobs are not here yet.
	head := r
	head.Blobs = nil
	if err := c.Check(&head, kind, key); err != nil {
		return nil, nil, err
	}
	if len(m.Layers) != len(r.Blobs) {
		return nil, nil, fmt.Errorf("%w: %d layers for %d blobs", cache.ErrBadRecord, len(m.Layers), len(r.Blobs))
	}
	for i, b := range r.Blobs {
		d := m.Layers[i]
		h, err := cache.ParseDigest(b.Digest)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: blob %s: %v", cache.ErrBadRecord, b.Name, err)
		}
		if d.Digest.String() != "sha256:"+h || d.Size != b.Size || d.MediaType != BlobType {
			return nil, nil, fmt.Errorf("%w: layer %d is %s %s (%d bytes), but blob %s is %s (%d bytes)",
				cache.ErrBadRecord, i, d.MediaType, d.Digest, d.Size, b.Name, b.Digest, b.Size)
		}
	}
	return &r, m, nil
}

// Push uploads r and its blobs to repo as the entry for r's kind and key,
// unless the registry has that entry already: the key names the inputs, so
// an entry under it is as good as ours. Blobs are streamed from c and
// re-hashed on the way; blobs the registry has already are not sent again.
func Push(ctx context.Context, c *cache.Cache, repo string, r *cache.Record, o Options) error {
	if r == nil {
		return errors.New("push: no record")
	}
	ref, err := reference(repo, r.Kind, r.Key, o)
	if err != nil {
		return err
	}
	if err := c.Check(r, r.Kind, r.Key); err != nil {
		return fmt.Errorf("push %s: %w", ref.Name(), err)
	}
	if o.Signer != nil && r.Pulled != nil && r.Pulled.Signer == "" {
		return fmt.Errorf("push %s: %w", ref.Name(), ErrUnvouched)
	}
	a, err := newArtifact(c, r, o.Signer)
	if err != nil {
		return fmt.Errorf("push %s: %w", ref.Name(), err)
	}
	ropts := o.remote(ctx)
	desc, err := remote.Head(ref, ropts...)
	switch {
	case err == nil && (o.Signer == nil || desc.Digest == a.digest):
		// ed25519 signs deterministically: the same record and key make
		// the same manifest.
		o.log().WithField("ref", ref.Name()).Info("shared cache already has this entry")
		return nil
	case err == nil:
		// Unsigned, or signed by another key, or another record: whoever
		// trusts this key would miss it, so it is replaced.
		o.log().WithField("ref", ref.Name()).WithField("was", desc.Digest.String()).
			Info("replacing a shared cache entry this key did not sign")
	case !notFound(err):
		return fmt.Errorf("push %s: %w (%w)", ref.Name(), err, ErrUnavailable)
	}
	img, err := partial.CompressedToImage(a)
	if err != nil {
		return fmt.Errorf("push %s: %w", ref.Name(), err)
	}
	if err := remote.Write(ref, img, ropts...); err != nil {
		var ce *cache.CorruptError
		if errors.As(err, &ce) {
			return fmt.Errorf("push %s: %w", ref.Name(), err)
		}
		return fmt.Errorf("push %s: %w (%w)", ref.Name(), err, ErrUnavailable)
	}
	log := o.log().WithField("ref", ref.Name()).WithField("blobs", len(r.Blobs))
	if o.Signer != nil {
		log = log.WithField("signer", o.Signer.KeyID())
	}
	log.Info("pushed shared cache entry")
	return nil
}

// artifact is an entry as go-containerregistry uploads it. Its manifest is
// written here rather than by mutate, which has no way to set raw config
// bytes or artifactType.
type artifact struct {
	c        *cache.Cache
	config   []byte
	manifest []byte
	digest   v1.Hash // of manifest
	sizes    map[string]int64
}

func newArtifact(c *cache.Cache, r *cache.Record, signer *sign.Signer) (*artifact, error) {
	cfg, err := Payload(r)
	if err != nil {
		return nil, err
	}
	cfgDigest, cfgSize, err := v1.SHA256(bytes.NewReader(cfg))
	if err != nil {
		return nil, err
	}
	m := v1.Manifest{
		SchemaVersion: 2,
		MediaType:     types.OCIManifestSchema1,
		ArtifactType:  string(RecordType),
		Config:        v1.Descriptor{MediaType: RecordType, Size: cfgSize, Digest: cfgDigest},
		Layers:        []v1.Descriptor{},
	}
	a := &artifact{c: c, config: cfg, sizes: map[string]int64{}}
	for _, b := range r.Blobs {
		h, err := v1.NewHash(b.Digest)
		if err != nil {
			return nil, fmt.Errorf("blob %s: %w", b.Name, err)
		}
		// The size goes into the manifest and the upload's Content-Length; a
		// record that disagrees with its blob is not pushed.
		p, err := c.Path(b.Digest)
		if err != nil {
			return nil, err
		}
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if fi.Size() != b.Size {
			return nil, fmt.Errorf("%w: blob %s (%s) is %d bytes, the record says %d", cache.ErrBadRecord, b.Digest, b.Name, fi.Size(), b.Size)
		}
		a.sizes[h.String()] = b.Size
		m.Layers = append(m.Layers, v1.Descriptor{MediaType: BlobType, Size: b.Size, Digest: h})
	}
	if signer != nil {
		sigs, err := json.Marshal([]sign.Signature{signer.Sign(string(RecordType), cfg)})
		if err != nil {
			return nil, err
		}
		m.Annotations = map[string]string{SignaturesAnnotation: string(sigs)}
	}
	if a.manifest, err = json.Marshal(m); err != nil {
		return nil, err
	}
	if a.digest, _, err = v1.SHA256(bytes.NewReader(a.manifest)); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *artifact) RawConfigFile() ([]byte, error)      { return a.config, nil }
func (a *artifact) MediaType() (types.MediaType, error) { return types.OCIManifestSchema1, nil }
func (a *artifact) RawManifest() ([]byte, error)        { return a.manifest, nil }

func (a *artifact) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	size, ok := a.sizes[h.String()]
	if !ok {
		return nil, fmt.Errorf("blob %s is not in the record", h)
	}
	return &blobLayer{c: a.c, digest: h, size: size}, nil
}

// blobLayer streams a cache blob, so a multi-gigabyte output is never held in
// memory. Each Compressed re-reads and re-hashes it, so ggcr's retries get a
// fresh, checked stream, and a blob damaged on disk fails the upload.
type blobLayer struct {
	c      *cache.Cache
	digest v1.Hash
	size   int64
}

func (l *blobLayer) Digest() (v1.Hash, error)            { return l.digest, nil }
func (l *blobLayer) Size() (int64, error)                { return l.size, nil }
func (l *blobLayer) MediaType() (types.MediaType, error) { return BlobType, nil }
func (l *blobLayer) Compressed() (io.ReadCloser, error)  { return l.c.Open(l.digest.String()) }
