package stamp

import (
	"context"

	"github.com/stamp-dev/stamp/layers/cache"
)

// PruneOptions and PruneReport are the cache's own.
type (
	PruneOptions = cache.PruneOptions
	PruneReport  = cache.PruneReport
)

// PruneCache removes from the cache in o.CacheDir (or the default one) what
// no build used lately, as po says. It waits for the builds using the cache
// to finish, and holds it alone while it prunes.
func PruneCache(ctx context.Context, o Options, po PruneOptions) (*PruneReport, error) {
	c, err := o.openCache()
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rep, err := c.Prune(ctx, po)
	if err != nil {
		return nil, err
	}
	o.log().WithField("cache", c.Dir()).Debugf("pruned %d records and %d blobs", rep.Records, rep.Blobs)
	return rep, nil
}
