package cache

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// fetcher brings the content named by a URI into the cache. wantHex is "" when
// the input is not pinned.
type fetcher struct {
	// network fetchers are refused offline; local ones are not.
	network bool
	fetch   func(ctx context.Context, c *Cache, u *url.URL, wantHex string) (digest string, err error)
}

// fetchers maps a URI scheme to its fetcher. Adding a source is one function
// and one line here.
var fetchers = map[string]fetcher{
	"file":  {fetch: fetchFile},
	"http":  {network: true, fetch: fetchHTTP},
	"https": {network: true, fetch: fetchHTTP},
}

// Fetch makes the content at uri present and returns its digest. uri is an
// absolute host path, a file:// URL or an http(s):// URL. When want is set and
// the blob is present, nothing but a stat happens; otherwise the content is
// read, checked against want (a *MismatchError stores nothing) and stored.
// Offline, content that would need the network is a *MissingError. A local
// file with want "" is hashed and stored, so the lock can record its digest.
func (c *Cache) Fetch(ctx context.Context, uri string, want string) (string, error) {
	var wantHex string
	if want != "" {
		h, err := ParseDigest(want)
		if err != nil {
			return "", fmt.Errorf("fetch %s: %w", uri, err)
		}
		if c.Has(h) {
			return digestOf(h), nil
		}
		wantHex = h
	}
	u, err := parseURI(uri)
	if err != nil {
		return "", err
	}
	f, ok := fetchers[u.Scheme]
	if !ok {
		return "", fmt.Errorf("fetch %s: unsupported scheme %q (want file, http or https)", uri, u.Scheme)
	}
	if f.network && c.opts.Offline {
		d := ""
		if wantHex != "" {
			d = digestOf(wantHex)
		}
		return "", &MissingError{URI: u.Redacted(), Digest: d}
	}
	return f.fetch(ctx, c, u, wantHex)
}

func parseURI(uri string) (*url.URL, error) {
	if strings.HasPrefix(uri, "/") {
		return &url.URL{Scheme: "file", Path: filepath.Clean(uri)}, nil
	}
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("fetch %q: %w", uri, err)
	}
	if u.Scheme == "" {
		return nil, fmt.Errorf("fetch %q: not an absolute path or a URL", uri)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	return u, nil
}

func fetchFile(ctx context.Context, c *Cache, u *url.URL, wantHex string) (string, error) {
	if u.Host != "" && u.Host != "localhost" {
		return "", fmt.Errorf("fetch %s: file URL names host %q; only local files can be read", u.Redacted(), u.Host)
	}
	if u.Opaque != "" || !filepath.IsAbs(u.Path) {
		return "", fmt.Errorf("fetch %s: file URL needs an absolute path (file:///path)", u.Redacted())
	}
	return c.importFile(ctx, filepath.Clean(u.Path), wantHex)
}

func fetchHTTP(ctx context.Context, c *Cache, u *url.URL, wantHex string) (string, error) {
	want := ""
	if wantHex != "" {
		want = digestOf(wantHex)
	}
	return c.Download(ctx, Request{URL: u.String(), Want: want, Size: -1})
}
