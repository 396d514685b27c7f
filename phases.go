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
func runPhases(ctx context.Context, rec *recipes.Recipe, phases []phase, tree *rootfs.Tree, c *cache.Cache, ep time.Time, o *Options) error {
	log := o.log()
	for _, ph := range phases {
		log.Infof("phase %s", ph.name)
		for _, st := range ph.steps {
			if err := ctx.Err(); err != nil {
				return err
			}
			env := &layers.Env{Tree: tree, Cache: c, Log: log.WithField("layer", st.label), Epoch: ep,
				Arch: rec.Arch, Label: st.label, RecipeDir: rec.Dir, Progress: o.Progress}
			start := time.Now()
			if err := st.layer.Apply(ctx, env); err != nil {
				return err
			}
			log.WithField("entries", tree.Len()).Debugf("%s done in %s", st.label, time.Since(start).Round(time.Millisecond))
		}
	}
	return nil
}
