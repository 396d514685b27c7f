package stamp

import (
	"context"
	"time"

	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

// runPhases applies the layers of phases, in order, to tree. Build runs
// every phase on a new tree; Apply runs customize and provision on an
// adopted one.
// after, when set, is called with each phase's index once it is done.
func runPhases(ctx context.Context, rec *recipes.Recipe, phases []phase, tree *rootfs.Tree, c *cache.Cache, ep time.Time, o *Options, after func(int)) error {
	log := o.log()
	for i, ph := range phases {
		log.Infof("phase %s", ph.name)
		for _, st := range ph.steps {
			if err := ctx.Err(); err != nil {
				return err
			}
			env := &layers.Env{Tree: tree, Cache: c, Log: log.WithField("layer", st.label), Epoch: ep,
				Arch: rec.Arch, Label: st.label, RecipeDir: rec.Dir, Progress: o.Progress, Maker: o.maker}
			start := time.Now()
			if err := st.layer.Apply(ctx, env); err != nil {
				return err
			}
			log.WithField("entries", tree.Len()).Debugf("%s done in %s", st.label, time.Since(start).Round(time.Millisecond))
		}
		if after != nil {
			after(i)
		}
	}
	return nil
}
