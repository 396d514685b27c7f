package layers

import (
	"context"
	"fmt"
	"strings"
)

// Remove deletes paths and globs ("**" spans directories) from the tree.
type Remove struct {
	Patterns []string
}

func (l *Remove) Kind() string { return "remove" }

func (l *Remove) Apply(ctx context.Context, env *Env) error {
	for i, pat := range l.Patterns {
		if err := ctx.Err(); err != nil {
			return err
		}
		if !strings.ContainsAny(pat, "*?[") {
			rp, err := env.Tree.Resolve(pat, false)
			if err != nil {
				return fmt.Errorf("%s[%d] %s: %w", env.Label, i, pat, err)
			}
			if env.Tree.Get(rp) == nil {
				env.Log.Warnf("%s: %s is not in the tree", env.Label, pat)
				continue
			}
			if err := env.Tree.Remove(rp); err != nil {
				return fmt.Errorf("%s[%d] %s: %w", env.Label, i, pat, err)
			}
			continue
		}
		removed, err := env.Tree.RemoveGlob(pat)
		if err != nil {
			return fmt.Errorf("%s[%d] %s: %w", env.Label, i, pat, err)
		}
		if len(removed) == 0 {
			env.Log.Warnf("%s: %s matches nothing", env.Label, pat)
		}
		env.Log.Debugf("%s: %s removed %d entries", env.Label, pat, len(removed))
	}
	return nil
}
