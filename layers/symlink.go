package layers

import (
	"context"
	"fmt"

	"github.com/stamp-dev/stamp/rootfs"
)

// Symlink makes symbolic links. The target is stored as given; it is only
// ever resolved inside the tree.
type Symlink struct {
	Links []Link
}

// Link is one symlink to make.
type Link struct {
	Path, Target string
	Owner        Owner
}

func (l *Symlink) Kind() string { return "symlink" }

func (l *Symlink) Apply(ctx context.Context, env *Env) error {
	for i, s := range l.Links {
		uid, gid, err := ResolveOwner(env.Tree, s.Owner)
		if err != nil {
			return fmt.Errorf("%s[%d] %s: %w", env.Label, i, s.Path, err)
		}
		h := rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, UID: uid, GID: gid, MTime: env.Epoch,
			Target: s.Target, Origin: env.Origin("", "")}
		if _, err := env.Tree.Create(s.Path, h, nil); err != nil {
			return fmt.Errorf("%s[%d] %s: %w", env.Label, i, s.Path, err)
		}
	}
	return nil
}
