package ociremote

import (
	"context"
	"crypto/tls"
	"net/http"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// WriteOptions are the go-containerregistry options for writing to a
// registry, as stamp push and the shared build cache do: credentials from
// kc (nil is the docker config chain), and with insecure, TLS without
// certificate checks (plain HTTP is the reference's own name.Insecure).
func WriteOptions(ctx context.Context, kc authn.Keychain, insecure bool) []remote.Option {
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc), remote.WithUserAgent("stamp")}
	if insecure {
		opts = append(opts, remote.WithTransport(InsecureTransport()))
	}
	return opts
}

// InsecureTransport is remote.DefaultTransport without certificate checks,
// for a registry named by --insecure-registry.
func InsecureTransport() http.RoundTripper {
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{InsecureSkipVerify: true}
	return tr
}
