package stamp

import (
	"context"
	"fmt"
	"time"

	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

// Apply runs the recipe's customize and provision phases on an existing root
// directory in place, then writes the index's modes, mtimes and (as root)
// owners and device nodes back to it. The base phase, sealing and outputs
// are skipped: the directory is the result.
func Apply(ctx context.Context, rec *recipes.Recipe, root string, o Options) error {
	log := o.log()
	phases, inputs, err := plan(rec)
	if err != nil {
		return err
	}
	if err := precheck(phases); err != nil {
		return err
	}
	// The base tarball is not applied, so it is not resolved either.
	var needed []plannedInput
	for _, pi := range inputs {
		if pi.field != "base.tarball" {
			needed = append(needed, pi)
		}
	}
	c, lk, err := o.openStores(rec)
	if err != nil {
		return err
	}
	if err := resolveInputs(ctx, c, lk, needed, &o); err != nil {
		return err
	}
	ep := epoch(rec, &o)
	tree, err := rootfs.Adopt(ctx, root, rootfs.Options{DefaultMTime: ep})
	if err != nil {
		return fmt.Errorf("apply: %w", err)
	}
	defer tree.Close()
	log.Infof("indexed %d entries of %s", tree.Len(), root)
	for _, ph := range phases[1:] {
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
			log.Debugf("%s done in %s", st.label, time.Since(start).Round(time.Millisecond))
		}
	}
	rep, err := tree.WriteBack(ctx)
	if err != nil {
		return fmt.Errorf("apply: writing metadata back: %w", err)
	}
	for _, p := range rep.NotApplied {
		log.Warnf("%s: owner or device node kept in the index only (needs root)", p)
	}
	return nil
}
