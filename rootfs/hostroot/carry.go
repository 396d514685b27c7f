package hostroot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/rootfs"
)

// carry makes the live root what the scratch copy became.
type carry struct {
	live    *dirTree
	scratch string
	plan    *Plan
	before  map[string]*Entry
	after   map[string]*Entry
	ep      time.Time
	log     logrus.FieldLogger
	// hint tells what to do when the root is left half changed.
	hint string
}

// carryOver makes the live root what the scratch copy became: it first
// saves what will be replaced or removed and writes the record, then
// removes, creates, sets metadata, and puts back the mtimes of the
// directories it touched.
func carryOver(ctx context.Context, live *dirTree, scratch string, before, after []*Entry, p *Plan, ep time.Time, log logrus.FieldLogger) error {
	c := &carry{live: live, scratch: scratch, plan: p, before: byPath(before), after: byPath(after), ep: ep, log: log,
		hint: fmt.Sprintf(" (stamp apply --undo --force --root %s puts back what was changed)", p.Root)}
	relock, err := live.unlock(append(parents(p.Changes, nil), live.existingAncestor(backupDir)))
	if err != nil {
		return err
	}
	created, err := live.mkdirs(backupDir, ep)
	if err != nil {
		return fmt.Errorf("%s: %w", backupDir, err)
	}
	dirs, err := c.saveRecord(ctx, created)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := c.change(after); err != nil {
		return err
	}
	if err := relock(func(d string) *Entry { return c.after[d] }); err != nil {
		return err
	}
	log.Infof("changed %s in %s", p.Root, time.Since(start).Round(time.Millisecond))
	for _, d := range dirs {
		m := ep.UnixNano()
		if a := c.after[d]; a != nil {
			m = a.mtimeNs()
		}
		if err := live.setMTime(d, m); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", d, err)
		}
	}
	return nil
}

func byPath(entries []*Entry) map[string]*Entry {
	m := make(map[string]*Entry, len(entries))
	for _, e := range entries {
		m[e.Path] = e
	}
	return m
}

// saveRecord saves the content of every file the plan replaces or removes
// and then writes the record, which names the directories whose mtimes the
// changes move (returned). Until the record is written, a failure takes
// the backups away again, so the next apply does not find a backup
// directory nothing explains.
func (c *carry) saveRecord(ctx context.Context, created []string) (dirs []string, err error) {
	defer func() {
		if err != nil {
			c.dropBackups(created)
		}
	}()
	start := time.Now()
	saved := map[string]bool{}
	for _, ch := range c.plan.Changes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if b := ch.Before; ch.Kind != "added" && ch.Kind != "changed" && b.Type == rootfs.TypeRegular && !saved[b.Digest] {
			if err := c.live.backup(ch.Path, b.Digest, c.ep); err != nil {
				return nil, fmt.Errorf("backing up %s: %w", ch.Path, err)
			}
			saved[b.Digest] = true
		}
	}
	if err := c.live.setMTime(backupDir, c.ep.UnixNano()); err != nil {
		return nil, fmt.Errorf("%s: %w", backupDir, err)
	}
	p := c.plan
	rec := record{Version: recordVersion, Recipe: p.Recipe, RecipeDigest: p.RecipeDigest, Epoch: c.ep.Unix(),
		Changes: p.Changes, Created: created}
	dirs = parents(p.Changes, append([]string{appliedPath, backupDir}, created...))
	for _, d := range dirs {
		if b := c.before[d]; b != nil {
			rec.Dirs = append(rec.Dirs, dirTime{Path: d, MTime: b.MTime.Unix(), MTimeNsec: int64(b.MTime.Nanosecond())})
		}
	}
	if rec.Changes == nil {
		rec.Changes = []Change{}
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := c.live.writeFile(appliedPath, append(data, '\n'), 0o644, c.ep); err != nil {
		return nil, fmt.Errorf("%s: %w", appliedPath, err)
	}
	c.log.Infof("saved %d backups and the record in %s", len(saved), time.Since(start).Round(time.Millisecond))
	return dirs, nil
}

// dropBackups removes the backups of an apply that failed before its
// record was written, with the directories made for them.
func (c *carry) dropBackups(created []string) {
	if err := removeRecord(c.live, &record{Created: created}, nil, c.log); err != nil {
		c.log.Warnf("removing the backups of a failed apply: %v", err)
		return
	}
	if len(created) > 0 {
		if b := c.before[path.Dir(created[0])]; b != nil {
			c.live.setMTime(b.Path, b.mtimeNs())
		}
	}
}

// change removes, creates and sets the metadata of every changed path.
// From here on the root changes; an interrupt would leave it half applied,
// so it is not looked at: what follows takes a second or so.
func (c *carry) change(after []*Entry) error {
	changes := c.plan.Changes
	// Removals deepest first; a path whose type changes to or from a
	// directory cannot be renamed over.
	for i := len(changes) - 1; i >= 0; i-- {
		ch := changes[i]
		if ch.Kind == "removed" || ch.Kind == "replaced" && (ch.Before.Type == rootfs.TypeDir || ch.After.Type == rootfs.TypeDir) {
			if err := c.live.remove(ch.Path); err != nil {
				return fmt.Errorf("removing %s: %w%s", ch.Path, err, c.hint)
			}
		}
	}
	if err := c.create(after); err != nil {
		return err
	}
	for i := len(changes) - 1; i >= 0; i-- {
		ch := changes[i]
		if ch.Kind == "removed" {
			continue
		}
		l := &lost{}
		if err := c.live.setMeta(c.after[ch.Path], l); err != nil {
			return fmt.Errorf("%s: %w%s", ch.Path, err, c.hint)
		}
		if l.owner || l.xattrs {
			c.log.Warnf("%s: owner or xattrs not set (needs root)", ch.Path)
		}
	}
	return nil
}

// create puts every added and replaced path in place, its content copied
// from the scratch copy; a new name of an inode that is already in place
// becomes a hard link.
func (c *carry) create(after []*Entry) error {
	src, err := openDirTree(c.scratch)
	if err != nil {
		return err
	}
	defer src.Close()
	present := map[string]bool{}
	for _, a := range after {
		present[a.Path] = a.Type == rootfs.TypeRegular
	}
	for _, ch := range c.plan.Changes {
		if ch.Kind == "added" || ch.Kind == "replaced" {
			present[ch.Path] = false
		}
	}
	for _, ch := range c.plan.Changes {
		if ch.Kind != "added" && ch.Kind != "replaced" {
			continue
		}
		a := c.after[ch.Path]
		err := c.live.put(a, func(fd int, name string) error {
			for _, l := range a.Links {
				if present[l] {
					return c.live.linkAt(l, fd, name)
				}
			}
			return src.at(a.Path, func(sfd int, sname string) error { return copyFileAt(fd, name, sfd, sname) })
		})
		if err != nil {
			return fmt.Errorf("%s: %w%s", ch.Path, err, c.hint)
		}
		present[ch.Path] = a.Type == rootfs.TypeRegular
	}
	return nil
}
