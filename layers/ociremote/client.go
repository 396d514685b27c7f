package ociremote

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"

	"github.com/stamp-dev/stamp/layers/cache"
)

// acceptManifests is every manifest kind stamp can read, for the Accept header.
var acceptManifests = strings.Join([]string{
	string(types.OCIImageIndex), string(types.OCIManifestSchema1),
	string(types.DockerManifestList), string(types.DockerManifestSchema2),
}, ", ")

// Options configure a Client. The zero value reaches registries anonymously
// or with the docker config.json credentials, over HTTPS except for
// localhost and loopback addresses.
type Options struct {
	// Offline forbids the network: what is not in the cache is a
	// *cache.MissingError.
	Offline bool
	// Insecure lists registries ("host" or "host:port") reached over plain
	// HTTP.
	Insecure []string
	// Keychain finds credentials; nil means authn.DefaultKeychain, the docker
	// config.json chain ($DOCKER_CONFIG, ~/.docker/config.json, credential
	// helpers).
	Keychain authn.Keychain
	// Transport carries the requests; nil means remote.DefaultTransport.
	Transport http.RoundTripper
	// Jobs is how many blobs download at once; 0 means 4.
	Jobs      int
	UserAgent string
	Log       logrus.FieldLogger
}

// Client pulls from registries into a cache. It is safe for concurrent use.
type Client struct {
	cache *cache.Cache
	opts  Options
	log   logrus.FieldLogger

	mu      sync.Mutex
	clients map[string]*http.Client // by repository

	// jobs bounds the blobs fetched or verified at once, across every Pull
	// running on this client.
	jobs chan struct{}
	// flights makes concurrent Pulls that share a blob (two layers of one
	// reference) wait for one fetch of it.
	fmu     sync.Mutex
	flights map[string]*flight
}

type flight struct {
	done chan struct{}
	err  error
}

// New returns a client that stores what it pulls in c.
func New(c *cache.Cache, o Options) *Client {
	if o.Keychain == nil {
		o.Keychain = authn.DefaultKeychain
	}
	if o.Transport == nil {
		o.Transport = remote.DefaultTransport
	}
	if o.Jobs <= 0 {
		o.Jobs = 4
	}
	log := o.Log
	if log == nil {
		l := logrus.New()
		l.Out = io.Discard
		log = l
	}
	return &Client{cache: c, opts: o, log: log, clients: map[string]*http.Client{},
		jobs: make(chan struct{}, o.Jobs), flights: map[string]*flight{}}
}

// Cache is the cache the client fills.
func (c *Client) Cache() *cache.Cache { return c.cache }

// ParseReference parses ref, marking its registry insecure when it is in
// Options.Insecure (as host or host:port).
func (c *Client) ParseReference(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("reference %q: %w", ref, err)
	}
	reg := r.Context().Registry
	host := reg.RegistryStr()
	hostOnly := host
	if h, _, ok := strings.Cut(host, ":"); ok && !strings.HasPrefix(host, "[") {
		hostOnly = h
	}
	for _, in := range c.opts.Insecure {
		if in == host || in == hostOnly {
			return name.ParseReference(ref, name.Insecure)
		}
	}
	return r, nil
}

// MovedError is a tag that names another manifest than the lock pins.
type MovedError struct {
	Ref, Locked, Now string
}

func (e *MovedError) Error() string {
	return fmt.Sprintf("%s has moved: it now names %s but stamp.lock pins %s; run with --update-lock to accept the new digest",
		e.Ref, e.Now, e.Locked)
}

// Head asks the registry which manifest ref (a tag) names now and returns
// its digest. Offline it is a *cache.MissingError: a tag cannot be resolved
// without the network.
func (c *Client) Head(ctx context.Context, ref string) (string, error) {
	r, err := c.ParseReference(ref)
	if err != nil {
		return "", err
	}
	if d, ok := r.(name.Digest); ok {
		return d.DigestStr(), nil
	}
	if c.opts.Offline {
		return "", &cache.MissingError{URI: ref}
	}
	hc, err := c.client(ctx, r.Context())
	if err != nil {
		return "", err
	}
	u := blobURL(r.Context(), "manifests", r.Identifier())
	var dh string
	err = c.retry().Do(ctx, "HEAD "+u, func(a *cache.Attempt) error {
		req, err := http.NewRequestWithContext(a.Context(), http.MethodHead, u, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Accept", acceptManifests)
		resp, err := hc.Do(req)
		if err != nil {
			return cache.RoundTripError(err)
		}
		resp.Body.Close()
		if err := checkStatus(resp, r.Context()); err != nil {
			return err
		}
		dh = resp.Header.Get("Docker-Content-Digest")
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("resolve %s: %w", ref, err)
	}
	if dh != "" {
		if _, err := cache.ParseDigest(dh); err == nil {
			return dh, nil
		}
	}
	// Not every registry answers HEAD with a digest: fetch the manifest and
	// hash it.
	raw, mt, err := c.getManifest(ctx, hc, r, "")
	if err != nil {
		return "", err
	}
	d, err := c.cache.Put(ctx, bytes.NewReader(raw), "")
	if err != nil {
		return "", err
	}
	c.log.WithField("ref", ref).WithField("mediaType", mt).Debug("resolved tag by GET")
	return d, nil
}

// Manifest makes the manifest or index with the given digest present in the
// cache, verified, and returns it decoded.
func (c *Client) Manifest(ctx context.Context, ref, digest string) (*Manifest, error) {
	if _, err := cache.ParseDigest(digest); err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	if c.cache.Has(digest) {
		m, err := LoadManifest(c.cache, digest)
		var ce *cache.CorruptError
		if !errors.As(err, &ce) || c.opts.Offline {
			return m, err
		}
		c.log.WithField("digest", digest).Warn("cached manifest was corrupt; fetching it again")
	}
	if c.opts.Offline {
		return nil, &cache.MissingError{URI: ref, Digest: digest}
	}
	r, err := c.ParseReference(ref)
	if err != nil {
		return nil, err
	}
	hc, err := c.client(ctx, r.Context())
	if err != nil {
		return nil, err
	}
	raw, mt, err := c.getManifest(ctx, hc, r.Context().Digest(digest), digest)
	if err != nil {
		return nil, err
	}
	// The cache checks the bytes against the digest before storing them.
	if _, err := c.cache.Put(ctx, bytes.NewReader(raw), digest); err != nil {
		return nil, fmt.Errorf("manifest %s of %s: %w", digest, ref, err)
	}
	return ParseManifest(raw, digest, mt)
}

func (c *Client) getManifest(ctx context.Context, hc *http.Client, r name.Reference, digest string) ([]byte, types.MediaType, error) {
	h := http.Header{"Accept": {acceptManifests}}
	raw, resp, err := c.getSmall(ctx, hc, blobURL(r.Context(), "manifests", r.Identifier()), h, r.Context(), maxManifest)
	if err != nil {
		return nil, "", fmt.Errorf("manifest %s: %w", r, err)
	}
	mt := types.MediaType(strings.TrimSpace(strings.Split(resp.Header.Get("Content-Type"), ";")[0]))
	return raw, mt, nil
}

// getSmall reads a small answer (a manifest, a record) whole into memory,
// at most max bytes, trying again as the cache's Retry says.
func (c *Client) getSmall(ctx context.Context, hc *http.Client, u string, h http.Header, repo name.Repository, max int64) ([]byte, *http.Response, error) {
	var raw []byte
	var last *http.Response
	err := c.retry().Do(ctx, "GET "+u, func(a *cache.Attempt) error {
		req, err := http.NewRequestWithContext(a.Context(), http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := hc.Do(req)
		if err != nil {
			return cache.RoundTripError(err)
		}
		defer resp.Body.Close()
		if err := checkStatus(resp, repo); err != nil {
			return err
		}
		raw, err = io.ReadAll(io.LimitReader(a.Reader(resp.Body), max+1))
		if err != nil {
			return cache.Retryable(err, 0)
		}
		if int64(len(raw)) > max {
			return fmt.Errorf("larger than %d bytes", max)
		}
		if resp.ContentLength >= 0 && int64(len(raw)) != resp.ContentLength {
			return cache.Retryable(fmt.Errorf("%d bytes of the %d its Content-Length says", len(raw), resp.ContentLength), 0)
		}
		last = resp
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return raw, last, nil
}

// checkStatus turns an answer other than 200 into the registry's error,
// marked for another attempt when the status is a passing one (5xx, 429).
func checkStatus(resp *http.Response, repo name.Repository) error {
	err := transport.CheckError(resp, http.StatusOK)
	switch {
	case err == nil:
		return nil
	case cache.RetryableStatus(resp.StatusCode):
		return cache.Retryable(err, cache.RetryAfter(resp.Header))
	}
	return authHint(err, repo)
}

// Resolved is what a reference names for one platform.
type Resolved struct {
	// Manifest is the image or artifact manifest to apply.
	Manifest string
	// Index is the index the reference named, "" when it named Manifest
	// directly.
	Index string
	// Platform is the platform of the index entry chosen, e.g. linux/arm64/v8.
	Platform string
}

// Resolve fetches the manifest digest names and, when it is an index, the
// manifest for platform. Only manifests are fetched; Pull brings the blobs.
func (c *Client) Resolve(ctx context.Context, ref, digest, platform string) (Resolved, error) {
	m, err := c.Manifest(ctx, ref, digest)
	if err != nil {
		return Resolved{}, err
	}
	if m.Image != nil {
		return Resolved{Manifest: digest}, nil
	}
	d, err := SelectPlatform(ref, m, platform)
	if err != nil {
		return Resolved{}, err
	}
	child, err := c.Manifest(ctx, ref, d.Digest.String())
	if err != nil {
		return Resolved{}, err
	}
	if child.Image == nil {
		return Resolved{}, fmt.Errorf("%s: index %s names %s for %s, which is %w", ref, digest, child.Digest, platform, ErrNotImage)
	}
	return Resolved{Manifest: child.Digest, Index: digest, Platform: d.Platform.String()}, nil
}

// Pull makes the config and every layer of an image manifest present in the
// cache and verified: a blob already there is hashed again (and fetched anew
// if it was damaged), a new one is checked while it is stored. Offline, a
// missing blob is a *cache.MissingError naming ref and the blob.
func (c *Client) Pull(ctx context.Context, ref, manifest string) error {
	m, err := c.Manifest(ctx, ref, manifest)
	if err != nil {
		return err
	}
	if m.Image == nil {
		return fmt.Errorf("%s: %s is an index; resolve a platform first", ref, manifest)
	}
	var repo name.Repository
	if !c.opts.Offline {
		r, err := c.ParseReference(ref)
		if err != nil {
			return err
		}
		repo = r.Context()
	}
	g, gctx := errgroup.WithContext(ctx)
	seen := map[string]bool{}
	for _, d := range m.Blobs() {
		digest := d.Digest.String()
		if seen[digest] {
			continue
		}
		seen[digest] = true
		if len(d.URLs) > 0 && !d.MediaType.IsDistributable() {
			return fmt.Errorf("%s: layer %s is a foreign layer (fetched from %s); not supported", ref, digest, d.URLs[0])
		}
		g.Go(func() error { return c.blobOnce(gctx, ref, repo, d) })
	}
	return g.Wait()
}

// blobOnce runs blob for a digest once however many Pulls ask for it at the
// same time, within the client's limit of concurrent jobs.
func (c *Client) blobOnce(ctx context.Context, ref string, repo name.Repository, d v1.Descriptor) error {
	digest := d.Digest.String()
	c.fmu.Lock()
	if f := c.flights[digest]; f != nil {
		c.fmu.Unlock()
		select {
		case <-f.done:
			return f.err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f := &flight{done: make(chan struct{})}
	c.flights[digest] = f
	c.fmu.Unlock()
	defer close(f.done)
	select {
	case c.jobs <- struct{}{}:
		f.err = c.blob(ctx, ref, repo, d)
		<-c.jobs
	case <-ctx.Done():
		f.err = ctx.Err()
	}
	// Only concurrent callers share the result; a later Pull checks again.
	c.fmu.Lock()
	delete(c.flights, digest)
	c.fmu.Unlock()
	return f.err
}

// blob makes one blob present and verified.
func (c *Client) blob(ctx context.Context, ref string, repo name.Repository, d v1.Descriptor) error {
	digest := d.Digest.String()
	if c.cache.Has(digest) {
		err := c.cache.Verify(digest)
		var ce *cache.CorruptError
		if err == nil || !errors.As(err, &ce) || c.opts.Offline {
			if err != nil {
				return fmt.Errorf("%s: %w", ref, err)
			}
			return nil
		}
		c.log.WithField("digest", digest).Warn("cached blob was corrupt; fetching it again")
	}
	if c.opts.Offline {
		return &cache.MissingError{URI: ref, Digest: digest}
	}
	hc, err := c.client(ctx, repo)
	if err != nil {
		return err
	}
	c.log.WithField("ref", ref).WithField("digest", digest).WithField("size", d.Size).Debug("downloading blob")
	size := d.Size
	if size <= 0 {
		size = -1 // a descriptor without a size says nothing of it
	}
	// The cache checks every byte against the digest, resumes what a fault
	// cut short, and files nothing until it is whole.
	if _, err := c.cache.Download(ctx, cache.Request{URL: blobURL(repo, "blobs", digest), Client: hc, Want: digest, Size: size}); err != nil {
		return fmt.Errorf("blob %s: %w", digest, authHint(err, repo))
	}
	return nil
}

// client returns an authenticated HTTP client for one repository, made once:
// the token handshake pings the registry.
func (c *Client) client(ctx context.Context, repo name.Repository) (*http.Client, error) {
	key := repo.Scheme() + "://" + repo.String()
	c.mu.Lock()
	defer c.mu.Unlock()
	if hc := c.clients[key]; hc != nil {
		return hc, nil
	}
	auth, err := authn.Resolve(ctx, c.opts.Keychain, repo)
	if err != nil {
		return nil, fmt.Errorf("credentials for %s: %w", repo, err)
	}
	// No retrying transport: every request is tried again by the cache's
	// Retry, body included, and retries stacked would multiply.
	base := c.opts.Transport
	if c.opts.UserAgent != "" {
		base = transport.NewUserAgent(base, c.opts.UserAgent)
	}
	// Making the transport pings the registry (and fetches a token): a
	// fault there is tried again like any other.
	var tr http.RoundTripper
	err = c.retry().Do(ctx, "GET "+repo.Scheme()+"://"+repo.RegistryStr()+"/v2/", func(a *cache.Attempt) error {
		var err error
		tr, err = transport.NewWithContext(a.Context(), repo.Registry, auth, base, []string{repo.Scope(transport.PullScope)})
		return pingError(err)
	})
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", repo.RegistryStr(), authHint(err, repo))
	}
	hc := &http.Client{Transport: tr, CheckRedirect: cache.CheckRedirect}
	c.clients[key] = hc
	return hc, nil
}

// pingError marks what is worth another ping: a passing status, or a
// fault of the connection.
func pingError(err error) error {
	var te *transport.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te):
		if cache.RetryableStatus(te.StatusCode) {
			return cache.Retryable(err, 0)
		}
		return err
	}
	return cache.RoundTripError(err)
}

func (c *Client) retry() cache.Retry { return c.cache.Retry() }

func blobURL(repo name.Repository, kind, id string) string {
	u := url.URL{Scheme: repo.Scheme(), Host: repo.RegistryStr(), Path: fmt.Sprintf("/v2/%s/%s/%s", repo.RepositoryStr(), kind, id)}
	return u.String()
}

// authHint says where credentials come from when the registry refused them.
func authHint(err error, repo name.Repository) error {
	var te *transport.Error
	if errors.As(err, &te) && (te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden) {
		return fmt.Errorf("%w; no or wrong credentials for %s (stamp reads the docker config.json chain: "+
			"$DOCKER_CONFIG/config.json, ~/.docker/config.json and its credential helpers)", err, repo.RegistryStr())
	}
	return err
}

// FetchManifest reads the manifest r names (a tag or a digest) from its
// registry, without filing it: for callers that judge it first, as the
// shared cache does an entry.
func (c *Client) FetchManifest(ctx context.Context, r name.Reference) ([]byte, types.MediaType, error) {
	hc, err := c.client(ctx, r.Context())
	if err != nil {
		return nil, "", err
	}
	return c.getManifest(ctx, hc, r, "")
}

// ReadBlob reads a small blob of repo (at most max bytes) into memory,
// checked against d's digest and size, without filing it.
func (c *Client) ReadBlob(ctx context.Context, repo name.Repository, d v1.Descriptor, max int64) ([]byte, error) {
	if d.Size < 0 || d.Size > max {
		return nil, fmt.Errorf("blob %s: %d bytes, more than the %d expected", d.Digest, d.Size, max)
	}
	hc, err := c.client(ctx, repo)
	if err != nil {
		return nil, err
	}
	b, _, err := c.getSmall(ctx, hc, blobURL(repo, "blobs", d.Digest.String()), nil, repo, d.Size)
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", d.Digest, err)
	}
	if h, n, err := v1.SHA256(bytes.NewReader(b)); err != nil || h != d.Digest || n != d.Size {
		return nil, fmt.Errorf("blob %s: the registry sent %d bytes hashing to %s", d.Digest, n, h)
	}
	return b, nil
}

// FetchBlob makes blob d of repo present in the cache and verified, as Pull
// does each blob of an image.
func (c *Client) FetchBlob(ctx context.Context, repo name.Repository, d v1.Descriptor) error {
	return c.blobOnce(ctx, repo.String(), repo, d)
}
