package layers

import (
	"context"
	"fmt"
)

// Group is one group to create, as `groupadd --root` would.
type Group struct {
	Name string
	// GID is fixed when set; otherwise the next free id is chosen as
	// groupadd does.
	GID *uint32
	// Members are users to add to the group; they must exist.
	Members []string
	// System picks the id from SYS_GID_MIN..SYS_GID_MAX, downward.
	System bool
}

// Groups edits /etc/group and /etc/gshadow in the tree. A group that already
// exists with the same name (and gid, when one is given) is kept, and only
// missing members are added, so applying the layer twice changes nothing.
type Groups struct {
	Groups []Group
}

// Kind implements Layer.
func (*Groups) Kind() string { return "groups" }

// Apply implements Layer.
func (l *Groups) Apply(ctx context.Context, env *Env) error {
	a, err := loadAccounts(env.Tree)
	if err != nil {
		return fmt.Errorf("%s: %w", env.Label, err)
	}
	for _, g := range l.Groups {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := a.applyGroup(g); err != nil {
			return fmt.Errorf("%s: group %q: %w", env.Label, g.Name, err)
		}
	}
	if err := a.save(env); err != nil {
		return fmt.Errorf("%s: %w", env.Label, err)
	}
	return nil
}

func (a *accounts) applyGroup(g Group) error {
	if err := validAccountName(g.Name); err != nil {
		return err
	}
	if _, err := a.ensureGroup(g.Name, g.GID, nil, g.System); err != nil {
		return err
	}
	for _, m := range g.Members {
		// groupadd -U refuses unknown users; a typo here would otherwise
		// grant nothing and pass silently.
		if i, _ := a.passwd.find(m); i < 0 {
			return fmt.Errorf("member %q: no such user", m)
		}
		if err := a.addMember(g.Name, m); err != nil {
			return err
		}
	}
	return nil
}
