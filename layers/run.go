package layers

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/stamp-dev/stamp/rootfs/sandbox"
)

// Run runs a program of the image with the tree as its root, in the same
// sandbox as the debs layer's scripts: chroot (root, or root of a user
// namespace; /proc, a minimal /dev, a fresh /tmp; no network unless
// Network), then folds what it did into the index with the owners it gave.
type Run struct {
	Command []string
	Env     map[string]string
	Network bool
}

// Kind implements Layer.
func (*Run) Kind() string { return "run" }

// Precheck implements Prechecker: a run step runs the image's programs.
func (l *Run) Precheck(arch string) error {
	if err := sandbox.Check(l.Network); err != nil {
		return err
	}
	return sandbox.CheckArch(arch)
}

// PhaseKeeping implements PhaseKeeper: the program sees the tree written
// out.
func (*Run) PhaseKeeping() Keeping { return KeepingMaterialized }

// Apply implements Layer.
func (l *Run) Apply(ctx context.Context, env *Env) error {
	sb := &sandbox.Sandbox{Tree: env.Tree, Epoch: env.Epoch, Network: l.Network,
		// A build starts no service, whatever the program installs.
		DenyServices: true,
		Logf:         func(format string, args ...any) { env.Log.Infof(format, args...) }}
	if err := sb.Run(ctx, l.Command[0], l.environ(), l.Command...); err != nil {
		return fmt.Errorf("%s: %w", env.Label, err)
	}
	ch, err := sb.FoldBack(ctx, env.Origin("", strings.Join(l.Command, " ")))
	if err != nil {
		return fmt.Errorf("%s: after %s: %w", env.Label, l.Command[0], err)
	}
	env.Log.Debugf("%s: added %d, changed %d, removed %d entries", env.Label, len(ch.Added), len(ch.Modified), len(ch.Removed))
	return nil
}

// environ is Env as KEY=value, sorted.
func (l *Run) environ() []string {
	keys := make([]string, 0, len(l.Env))
	for k := range l.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, k+"="+l.Env[k])
	}
	return out
}
