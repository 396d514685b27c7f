package stamp

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/recipes"
)

// BuildPlan is what a build would do: every input with its digest, and for
// the tree and each output whether it comes from the cache, and why not.
type BuildPlan struct {
	Name   string
	Inputs []PlanInput
	Phases []string
	Tree   PlanStep
	// Kept are the phases whose tree the cache keeps (those that install
	// packages), from the last back to the first the cache holds, when the
	// tree is built.
	Kept    []PlanStep
	Outputs []PlanStep
}

// PlanInput is one input of the recipe, resolved.
type PlanInput struct {
	Field, Kind, URI, Digest string
}

// PlanStep is the sealed tree or one output.
type PlanStep struct {
	Name   string
	Key    string
	Cached bool
	// Why says why it is not cached.
	Why string
}

// DryRun resolves every input as Build would, without writing the lock, and
// tells what the cache holds of the build. It builds nothing.
func DryRun(ctx context.Context, rec *recipes.Recipe, o Options) (*BuildPlan, error) {
	p, err := prepare(ctx, rec, &o, false)
	if err != nil {
		return nil, err
	}
	defer p.c.Close()
	bp := &BuildPlan{Name: rec.Name}
	for _, d := range p.att.deps {
		bp.Inputs = append(bp.Inputs, PlanInput{Field: d.Field, Kind: d.Kind, URI: d.URI, Digest: d.Digest})
	}
	for _, ph := range p.phases {
		bp.Phases = append(bp.Phases, ph.name)
	}
	r, why := p.bc.lookup(ctx, recordSealed, rec.Name, p.sealedKey)
	bp.Tree = PlanStep{Name: "tree", Key: cache.KeyOf(p.sealedKey), Cached: r != nil, Why: why}
	if r != nil {
		view, err := p.bc.sealedFrom(r)
		if err != nil {
			bp.Tree.Cached, bp.Tree.Why = false, err.Error()
		} else {
			plans, err := p.bc.planOutputs(ctx, rec, p.ep, view.digest)
			if err != nil {
				return nil, err
			}
			for _, pl := range plans {
				bp.Outputs = append(bp.Outputs, PlanStep{Name: pl.out.Name, Key: cache.KeyOf(pl.parts), Cached: pl.hit != nil, Why: pl.why})
			}
			return bp, nil
		}
	}
	// The tree is built: from the last phase the cache keeps, if any.
	kept, err := p.bc.keptTrees(rec, p.phases, p.ep, p.att)
	if err != nil {
		return nil, err
	}
	// As restorePhases looks: each phase's kept tree, then the trees after
	// its earlier package installs, which are listed only when found.
phases:
	for i := len(p.phases) - 1; i >= 0; i-- {
		for j, k := range kept[i].candidates() {
			if k.n == 0 {
				continue
			}
			r, why := p.bc.lookup(ctx, recordPhase, k.subject, k.parts)
			if r != nil || j == 0 {
				bp.Kept = append(bp.Kept, PlanStep{Name: k.what, Key: cache.KeyOf(k.parts), Cached: r != nil, Why: why})
			}
			if r != nil {
				break phases
			}
		}
	}
	for i := range rec.Outputs {
		bp.Outputs = append(bp.Outputs, PlanStep{Name: rec.Outputs[i].Name, Why: "the tree is built"})
	}
	return bp, nil
}

// AllCached tells whether the build would run no phase.
func (p *BuildPlan) AllCached() bool {
	if !p.Tree.Cached {
		return false
	}
	for _, o := range p.Outputs {
		if !o.Cached {
			return false
		}
	}
	return true
}

func (p *BuildPlan) Write(w io.Writer) {
	fmt.Fprintf(w, "# plan of %s\n", p.Name)
	fmt.Fprintln(w, "inputs:")
	for _, in := range p.Inputs {
		fmt.Fprintf(w, "  %s (%s) %s %s\n", in.Field, in.Kind, in.URI, in.Digest)
	}
	step := func(s PlanStep) string {
		if s.Cached {
			return "from the cache"
		}
		return "built: " + s.Why
	}
	phases := strings.Join(append(append([]string{}, p.Phases...), "seal"), ", ")
	fmt.Fprintf(w, "tree (phases %s): %s\n", phases, step(p.Tree))
	if p.Tree.Key != "" {
		fmt.Fprintf(w, "  key %s\n", p.Tree.Key)
	}
	for _, k := range p.Kept {
		if k.Cached {
			fmt.Fprintf(w, "  the tree after %s: from the cache; the steps after it run\n", k.Name)
		} else {
			fmt.Fprintf(w, "  the tree after %s: built: %s\n", k.Name, k.Why)
		}
	}
	fmt.Fprintln(w, "outputs:")
	for _, o := range p.Outputs {
		fmt.Fprintf(w, "  %s: %s\n", o.Name, step(o))
	}
	if p.AllCached() {
		fmt.Fprintln(w, "# nothing to build: every output comes from the cache")
	}
}
