package stamp

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/cache/share"
)

// sharedCache is the build cache kept in a registry, for runners that start
// with an empty disk: records are read from --cache-from and written to
// --cache-to, as OCI artifacts.
type sharedCache struct {
	c        *cache.Cache
	from, to string
	opts     share.Options
	log      logrus.FieldLogger
}

func newSharedCache(o *Options, c *cache.Cache) (*sharedCache, error) {
	for _, f := range []struct{ flag, ref string }{{"--cache-from", o.CacheFrom}, {"--cache-to", o.CacheTo}} {
		if f.ref == "" {
			continue
		}
		if _, err := name.NewRepository(f.ref); err != nil {
			return nil, &UsageError{Msg: fmt.Sprintf("%s %q: a registry repository (HOST/NAME) without tag or digest: %v", f.flag, f.ref, err)}
		}
	}
	return &sharedCache{c: c, from: o.CacheFrom, to: o.CacheTo, log: o.log(),
		opts: share.Options{Insecure: o.insecureRegistry(o.CacheFrom) || o.insecureRegistry(o.CacheTo), Log: o.log()}}, nil
}

// pull brings the record into the local cache. Anything wrong with the
// shared entry is a warning and a miss: it is built again, never trusted.
func (s *sharedCache) pull(ctx context.Context, kind, subject, key string) *cache.Record {
	if s.from == "" {
		return nil
	}
	found, err := share.Pull(ctx, s.c, s.from, kind, key, s.opts)
	if err != nil {
		s.log.WithError(err).Warnf("cache: ignoring the shared %s record of %s in %s; building it again", kind, subject, s.from)
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
	if s.to == "" || holdsArchive(r) {
		return
	}
	if err := share.Push(ctx, s.c, s.to, r, s.opts); err != nil {
		s.log.WithError(err).Warnf("cache: cannot share the %s record of %s in %s", r.Kind, r.Subject, s.to)
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
