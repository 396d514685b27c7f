package layers

import (
	"context"
	"fmt"

	"github.com/stamp-dev/stamp/rootfs"
)

// Mkdir makes directories and their missing parents.
type Mkdir struct {
	Dirs []Dir
}

// Dir is one directory to make; Mode nil means 0755 for a new directory and
// no change for an existing one.
type Dir struct {
	Path  string
	Mode  *uint32
	Owner Owner
}

func (l *Mkdir) Kind() string { return "mkdir" }

func (l *Mkdir) Apply(ctx context.Context, env *Env) error {
	for i, d := range l.Dirs {
		if err := l.mkdir(env, d); err != nil {
			return fmt.Errorf("%s[%d] %s: %w", env.Label, i, d.Path, err)
		}
	}
	return nil
}

func (l *Mkdir) mkdir(env *Env, d Dir) error {
	uid, gid, err := ResolveOwner(env.Tree, d.Owner)
	if err != nil {
		return err
	}
	h := rootfs.Header{Perm: 0o755, MTime: env.Epoch, Origin: env.Origin("", "")}
	e, err := env.Tree.MkdirAll(d.Path, h)
	if err != nil {
		return err
	}
	return env.Tree.Update(e.Path, func(in *rootfs.Inode) {
		if d.Mode != nil {
			in.Perm = *d.Mode
		}
		if d.Owner != (Owner{}) {
			in.UID, in.GID = uid, gid
		}
	})
}
