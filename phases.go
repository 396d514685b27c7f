package stamp

import (
	"context"
	"time"

	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

// runPhases applies the layers of phases, in order, to tree, the first
// phase from its step from (the steps before it are in the tree already).
// Build runs every phase on a new tree or one the cache restored; Apply
// runs customize and provision on an adopted one.
// after, when set, is called with the phase's and the step's index once
// each step is done.
func runPhases(ctx context.Context, rec *recipes.Recipe, phases []phase, from int, tree *rootfs.Tree, c *cache.Cache, ep time.Time, o *Options, after func(i, j int)) error {
	log := o.log()
	for i, ph := range phases {
		if i == 0 && from > 0 && from < len(ph.steps) {
			log.Infof("phase %s, from %s", ph.name, ph.steps[from].label)
		} else {
			log.Infof("phase %s", ph.name)
		}
		for j, st := range ph.steps {
			if i == 0 && j < from {
				continue
			}
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
			if after != nil {
				after(i, j)
			}
		}
	}
	return nil
}
