package stamp

import (
	"context"
	"errors"

	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hostroot"
)

// ApplyOptions configure Apply.
type ApplyOptions struct {
	Options
	// DryRun works out the changes and leaves the root as it is.
	DryRun bool
}

// Apply runs the recipe's customize and provision phases on an existing root
// directory, through rootfs/hostroot: the layers run on a scratch copy of
// the root, and the difference is the plan, which (without DryRun) is then
// carried over to the root with a record that stamp apply --undo
// (hostroot.Undo) reads. The base phase, sealing and outputs are skipped;
// the base tarball is not resolved either.
func Apply(ctx context.Context, rec *recipes.Recipe, root string, ao ApplyOptions) (*hostroot.Plan, error) {
	o := ao.Options
	phases, inputs, err := plan(rec)
	if err != nil {
		return nil, err
	}
	if err := precheck(phases, rec.Arch); err != nil {
		return nil, err
	}
	var needed []plannedInput
	for _, pi := range inputs {
		if pi.field != "base.tarball" {
			needed = append(needed, pi)
		}
	}
	c, lk, err := o.openStores(rec)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := resolveInputs(ctx, c, lk, needed, &o); err != nil {
		return nil, err
	}
	pinDebs(phases, lk)
	rd, err := recipeDigest(rec)
	if err != nil {
		return nil, err
	}
	ep := epoch(rec, &o)
	p, err := hostroot.Apply(ctx, root, hostroot.Options{Recipe: rec.Name, RecipeDigest: rd, Epoch: ep, DryRun: ao.DryRun,
		WorkDir: o.WorkDir, KeepWork: o.KeepWork, ReverseReaddir: o.ReverseReaddir, Log: o.log(), Progress: o.Progress,
		Run: func(ctx context.Context, tree *rootfs.Tree) error {
			// The base is the root that is there.
			return runPhases(ctx, rec, phases[1:], 0, tree, c, ep, &o, nil)
		}})
	if errors.Is(err, hostroot.ErrPending) {
		return nil, &UsageError{Msg: err.Error()}
	}
	return p, err
}
