package stamp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/cache/share"
	"github.com/stamp-dev/stamp/layers/cache/sign"
)

// sharedCache is the build cache kept in a registry, for runners that start
// with an empty disk: records are read from --cache-from and written to
// --cache-to, as OCI artifacts.
type sharedCache struct {
	c        *cache.Cache
	from, to string
	opts     share.Options
	log      logrus.FieldLogger
	// fromDown and toDown are set once a registry failed after every
	// attempt: the rest of the build does without it rather than wait on
	// it for every record.
	mu               sync.Mutex
	fromDown, toDown bool
}

// down tells whether the registry behind *flag failed earlier in this
// build, and marks it so when err says it failed now.
func (s *sharedCache) down(flag *bool, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil && errors.Is(err, share.ErrUnavailable) {
		*flag = true
	}
	return *flag
}

func newSharedCache(o *Options, c *cache.Cache) (*sharedCache, error) {
	if err := o.checkSharedCache(); err != nil {
		return nil, err
	}
	s := &sharedCache{c: c, from: o.CacheFrom, to: o.CacheTo, log: o.log(),
		opts: share.Options{Insecure: o.insecureRegistry(o.CacheFrom) || o.insecureRegistry(o.CacheTo), Log: o.log()}}
	if o.CacheSign != "" {
		signer, err := sign.LoadSigner(o.CacheSign)
		if err != nil {
			return nil, &UsageError{Msg: "--cache-sign: " + err.Error()}
		}
		s.opts.Signer = signer
		s.log.WithField("key", signer.KeyID()).Debug("cache: signing the records pushed to " + o.CacheTo)
	}
	if len(o.CacheTrust) > 0 {
		trust, err := sign.LoadTrust(o.CacheTrust...)
		if err != nil {
			return nil, &UsageError{Msg: "--cache-trust: " + err.Error()}
		}
		s.opts.Trust = trust
	}
	return s, nil
}

// checkSharedCache refuses flags of the shared cache that cannot work as
// given, before anything is read.
func (o *Options) checkSharedCache() error {
	for _, f := range []struct{ flag, ref string }{{"--cache-from", o.CacheFrom}, {"--cache-to", o.CacheTo}} {
		if f.ref == "" {
			continue
		}
		if _, err := name.NewRepository(f.ref); err != nil {
			return &UsageError{Msg: fmt.Sprintf("%s %q: a registry repository (HOST/NAME) without tag or digest: %v", f.flag, f.ref, err)}
		}
	}
	switch {
	case o.CacheSign != "" && o.CacheTo == "":
		return &UsageError{Msg: "--cache-sign signs what --cache-to pushes; give --cache-to too"}
	case len(o.CacheTrust) > 0 && o.CacheFrom == "":
		return &UsageError{Msg: "--cache-trust checks what --cache-from pulls; give --cache-from too"}
	}
	return nil
}

// believe tells whether a record found in the local cache may be used. One
// this machine made is; one pulled from a shared cache is, under
// --cache-trust, only if a trusted key's signature was checked when it was
// pulled: an earlier build without --cache-trust may have filed a forgery.
func (s *sharedCache) believe(r *cache.Record) bool {
	if s.opts.Trust.Len() == 0 || r.Pulled == nil || s.opts.Trust.Trusts(r.Pulled.Signer) {
		return true
	}
	why := "without a signature"
	if r.Pulled.Signer != "" {
		why = "signed by " + r.Pulled.Signer + ", which --cache-trust does not name"
	}
	s.log.Warnf("cache: ignoring the %s record of %s pulled from %s %s; looking in the shared cache", r.Kind, r.Subject, r.Pulled.From, why)
	return false
}

// pull brings the record into the local cache. Anything wrong with the
// shared entry is a warning and a miss: it is built again, never trusted.
func (s *sharedCache) pull(ctx context.Context, kind, subject, key string) *cache.Record {
	if s.from == "" || s.down(&s.fromDown, nil) {
		return nil
	}
	found, err := share.Pull(ctx, s.c, s.from, kind, key, s.opts)
	if err != nil {
		s.log.WithError(err).Warnf("cache: ignoring the shared %s record of %s in %s; building it again", kind, subject, s.from)
		if s.down(&s.fromDown, err) {
			s.log.Warnf("cache: %s failed after every attempt; this build asks it for nothing more", s.from)
		}
		return nil
	}
	if !found {
		return nil
	}
	r, err := s.c.Record(kind, key)
	if err != nil || r == nil {
		s.log.WithError(err).Warnf("cache: the shared %s record of %s did not arrive whole", kind, subject)
		return nil
	}
	s.log.Infof("cache: %s record of %s from %s", kind, subject, s.from)
	return r
}

// push shares a record; a registry that refuses it costs the next runner a
// build, not this one. A phase kept as references into an archive is not
// shared: the archive is the phase's input uncompressed, and a runner
// without it unpacks the input faster than it would pull the archive.
func (s *sharedCache) push(ctx context.Context, r *cache.Record) {
	if s.to == "" || holdsArchive(r) || s.down(&s.toDown, nil) {
		return
	}
	err := share.Push(ctx, s.c, s.to, r, s.opts)
	switch {
	case errors.Is(err, share.ErrUnvouched):
		s.log.Infof("cache: not sharing the %s record of %s in %s: it was pulled from %s without a trusted signature, and --cache-sign vouches only for what this runner made or checked",
			r.Kind, r.Subject, s.to, r.Pulled.From)
	case err != nil:
		s.log.WithError(err).Warnf("cache: cannot share the %s record of %s in %s", r.Kind, r.Subject, s.to)
		if s.down(&s.toDown, err) {
			s.log.Warnf("cache: %s failed after every attempt; this build shares nothing more there", s.to)
		}
	}
}

// insecureRegistry tells whether ref's registry was named by
// --insecure-registry.
func (o *Options) insecureRegistry(ref string) bool {
	host, _, _ := strings.Cut(ref, "/")
	for _, r := range o.InsecureRegistries {
		if r == host {
			return true
		}
	}
	return false
}
