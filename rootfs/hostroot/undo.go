package hostroot

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/rootfs"
)

// UndoOptions configure Undo.
type UndoOptions struct {
	// Force undoes even paths changed since apply, losing those changes.
	// It never undoes from a backup or a record that does not hold what
	// apply saved.
	Force bool
	Log   logrus.FieldLogger
}

// UndoResult says what Undo put back.
type UndoResult struct {
	Recipe                     string
	Removed, Restored, Changed int
}

// undo is one Undo: the root, its record, and what the checks found.
type undo struct {
	live  *dirTree
	rec   *record
	force bool
	log   logrus.FieldLogger
	// changes are the record's changes by path; before the states before
	// apply, where there was one.
	changes map[string]Change
	before  map[string]*Entry
	// linkable are the paths undo does not restore that a restored file
	// may be linked to: checked to hold the content the record says they
	// shared with it.
	linkable map[string]bool
	restored map[string]bool
}

// Undo puts the root back as it was before the apply recorded in
// /var/lib/stamp/applied.json: it removes what apply added, restores what
// it replaced or removed (content, mode, owner, mtime, xattrs) and then
// removes the record and its backups.
//
// The record and the backups live in the root, where whoever can write to
// the root can change them, so Undo checks everything before it changes
// anything: every path of the record must be a clean path reached through
// directories alone, and every backup a regular file with the size and
// sha256 the record gives it; else it refuses, names the path and keeps
// the record, whatever o.Force says. A path changed since apply is not
// overwritten unless o.Force is set.
func Undo(ctx context.Context, root string, o UndoOptions) (*UndoResult, error) {
	live, err := openDirTree(root)
	if err != nil {
		return nil, fmt.Errorf("undo: %w", err)
	}
	defer live.Close()
	rec, err := readRecord(live, root)
	if err != nil {
		return nil, fmt.Errorf("undo: %w", err)
	}
	u := newUndo(live, rec, o)
	if err := u.check(ctx); err != nil {
		return nil, fmt.Errorf("undo: %w", err)
	}
	res, err := u.run()
	if err != nil {
		return nil, fmt.Errorf("undo: %w", err)
	}
	return res, nil
}

func newUndo(live *dirTree, rec *record, o UndoOptions) *undo {
	u := &undo{live: live, rec: rec, force: o.Force, log: logger(o.Log), changes: map[string]Change{},
		before: map[string]*Entry{}, linkable: map[string]bool{}, restored: map[string]bool{}}
	for _, ch := range rec.Changes {
		u.changes[ch.Path] = ch
		if ch.Before != nil {
			u.before[ch.Path] = ch.Before
		}
	}
	return u
}

// restores says whether undo puts ch's path back from its before state.
func restores(ch Change) bool { return ch.Kind == "removed" || ch.Kind == "replaced" }

// check finds every reason not to undo before anything changes: what undo
// cannot do, a path it would have to reach through a symlink, a backup or a
// hard link that does not hold what the record says, and (unless forced)
// paths changed since apply.
func (u *undo) check(ctx context.Context) error {
	for _, ch := range u.rec.Changes {
		if b := ch.Before; b != nil && b.Type.IsDevice() && ch.Kind != "changed" && os.Geteuid() != 0 {
			return fmt.Errorf("%s: restoring a %s device needs root", ch.Path, b.Type)
		}
	}
	if err := u.checkReach(); err != nil {
		return err
	}
	if err := u.checkBackups(); err != nil {
		return err
	}
	problems, err := u.problems(ctx)
	if err != nil {
		return err
	}
	problems = append(problems, u.checkLinks()...)
	if len(problems) > 0 {
		if !u.force {
			return fmt.Errorf("%d paths changed since apply; undo would lose those changes (--force undoes anyway):\n  %s",
				len(problems), strings.Join(problems, "\n  "))
		}
		for _, p := range problems {
			u.log.Warnf("changed since apply, undone anyway: %s", p)
		}
	}
	return nil
}

// checkReach refuses a record any of whose paths undo would reach through
// a symlink or a file: each is resolved in the root one directory at a
// time, following nothing. A path that is not there is for problems to
// judge.
func (u *undo) checkReach() error {
	var paths []string
	for _, ch := range u.rec.Changes {
		paths = append(paths, ch.Path)
		for _, e := range []*Entry{ch.Before, ch.After} {
			if e != nil {
				paths = append(paths, e.Links...)
			}
		}
	}
	for _, d := range u.rec.Dirs {
		paths = append(paths, d.Path)
	}
	paths = append(paths, u.rec.Created...)
	var bad []string
	for _, p := range paths {
		if _, err := u.live.lstat(p); !u.absent(err) {
			bad = append(bad, fmt.Sprintf("%s: %v", p, err))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%d paths of the record cannot be reached through directories alone; nothing was undone and the record is kept:\n  %s",
			len(bad), strings.Join(bad, "\n  "))
	}
	return nil
}

// absent says whether err, from looking a recorded path up, is no error
// or says only that the path is not there: it does not exist, or lies
// below a path apply made a file or symlink of, which undo removes before
// it restores anything below it.
func (u *undo) absent(err error) bool {
	var b *blockedError
	if errors.As(err, &b) {
		ch, ok := u.changes[b.Path]
		return ok && removedFirst(ch)
	}
	return err == nil || errors.Is(err, fs.ErrNotExist)
}

// removedFirst says whether undo removes ch's path before it restores
// anything: what apply added, and what it replaced with or by a directory.
func removedFirst(ch Change) bool {
	return ch.Kind == "added" || ch.Kind == "replaced" && (ch.Before.Type == rootfs.TypeDir || ch.After.Type == rootfs.TypeDir)
}

// checkBackups refuses to undo from backups that are not what apply saved:
// each restore's backup must be a regular file, reached through
// directories alone, with the size and sha256 recorded for the path, and
// the backup directory must hold nothing undo could not remove after.
// --force does not change that: a backup that does not match is not the
// root's old content, whatever it is.
func (u *undo) checkBackups() error {
	var bad []string
	seen := map[string]error{}
	for _, ch := range u.rec.Changes {
		b := ch.Before
		if !restores(ch) || b.Type != rootfs.TypeRegular {
			continue
		}
		err, done := seen[b.Digest]
		if !done {
			err = u.live.checkBackup(b)
			seen[b.Digest] = err
		}
		if err != nil {
			bad = append(bad, fmt.Sprintf("the backup of %s (%s): %v", ch.Path, backupPath(b.Digest), err))
		}
	}
	names, err := u.live.list(backupDir)
	if err != nil {
		bad = append(bad, fmt.Sprintf("%s: %v", backupDir, err))
	}
	for _, n := range names {
		if st, err := u.live.lstat(path.Join(backupDir, n)); err != nil || typeOf(st.Mode) == rootfs.TypeDir {
			bad = append(bad, fmt.Sprintf("%s: a directory apply did not make", path.Join(backupDir, n)))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("the backups are not what apply saved; nothing was undone and the record is kept (--force does not undo from them):\n  %s",
			strings.Join(bad, "\n  "))
	}
	return nil
}

// checkLinks finds the paths undo leaves alone that a restored file is to
// be a hard link of again, and checks that each still holds the content
// the two shared; the ones that do may be linked to, the others are
// changed since apply.
func (u *undo) checkLinks() []string {
	var problems []string
	for _, ch := range u.rec.Changes {
		b := ch.Before
		if !restores(ch) || b.Type != rootfs.TypeRegular {
			continue
		}
		for _, l := range b.Links {
			if k := u.changes[l].Kind; (k != "" && k != "changed") || u.linkable[l] {
				continue
			}
			err := u.live.at(l, func(fd int, name string) error { return checkContent(fd, name, b.Digest, b.Size) })
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: no longer the hard link of %s it was: %v", l, ch.Path, err))
				continue
			}
			u.linkable[l] = true
		}
	}
	return problems
}

// run undoes, once check has found nothing against it. Once the root
// changes, undo runs to the end whatever the context says: half an undo
// helps nobody.
func (u *undo) run() (*UndoResult, error) {
	var touched []string
	for _, d := range u.rec.Dirs {
		touched = append(touched, d.Path)
	}
	relock, err := u.live.unlock(touched)
	if err != nil {
		return nil, err
	}
	res := &UndoResult{Recipe: u.rec.Recipe}
	deferred, err := u.removeAdded(res)
	if err != nil {
		return nil, err
	}
	if err := u.restore(res); err != nil {
		return nil, err
	}
	if err := u.resetMeta(res); err != nil {
		return nil, err
	}
	if err := removeRecord(u.live, u.rec, deferred, u.log); err != nil {
		return nil, err
	}
	if err := relock(func(d string) *Entry { return u.before[d] }); err != nil {
		return nil, err
	}
	res.Removed += len(deferred)
	for _, d := range u.rec.Dirs {
		if err := u.live.setMTime(d.Path, d.MTime*1e9+d.MTimeNsec); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", d.Path, err)
		}
	}
	return res, nil
}

// removeAdded removes, deepest first, what apply added and what it
// replaced with or by a directory. Directories that hold the record are
// returned, to go last, with the record.
func (u *undo) removeAdded(res *UndoResult) ([]string, error) {
	var deferred []string
	changes := u.rec.Changes
	for i := len(changes) - 1; i >= 0; i-- {
		ch := changes[i]
		if !removedFirst(ch) {
			continue
		}
		if isUnder(backupDir, ch.Path) || isUnder(appliedPath, ch.Path) {
			deferred = append(deferred, ch.Path)
			continue
		}
		if err := u.live.removeForUndo(ch.Path, u.force); err != nil {
			return nil, fmt.Errorf("removing %s: %w", ch.Path, err)
		}
		if ch.Kind == "added" {
			res.Removed++
		}
	}
	return deferred, nil
}

// restore puts back every path apply replaced or removed. The last restore
// of each backup may take the backup's inode itself; the others copy it,
// so paths that only had the same content do not become hard links of
// each other.
func (u *undo) restore(res *UndoResult) error {
	uses := map[string]int{}
	for _, ch := range u.rec.Changes {
		if restores(ch) && ch.Before.Type == rootfs.TypeRegular {
			uses[ch.Before.Digest]++
		}
	}
	for _, ch := range u.rec.Changes {
		if !restores(ch) {
			continue
		}
		b := ch.Before
		if b.Type == rootfs.TypeRegular {
			uses[b.Digest]--
		}
		last := uses[b.Digest] == 0
		if err := u.live.put(b, func(fd int, name string) error { return u.fill(b, last, fd, name) }); err != nil {
			return fmt.Errorf("restoring %s: %w", ch.Path, err)
		}
		u.restored[ch.Path] = true
		res.Restored++
	}
	return nil
}

// fill makes the content of the regular file b under name in the
// directory fd: a hard link to one of b's links already back in place,
// else its backup. Every byte put there is checked against the record
// before it takes b's name.
func (u *undo) fill(b *Entry, last bool, fd int, name string) error {
	linked := false
	for _, l := range b.Links {
		if u.restored[l] || u.linkable[l] {
			if err := u.live.linkAt(l, fd, name); err != nil {
				return err
			}
			linked = true
			break
		}
	}
	if !linked {
		if err := u.live.restoreContent(b, last, fd, name); err != nil {
			return err
		}
	}
	if err := checkContent(fd, name, b.Digest, b.Size); err != nil {
		return fmt.Errorf("what undo put in place is not what apply recorded (changed during undo?): %w", err)
	}
	return nil
}

// resetMeta gives every path apply did not add its metadata from before.
func (u *undo) resetMeta(res *UndoResult) error {
	changes := u.rec.Changes
	for i := len(changes) - 1; i >= 0; i-- {
		ch := changes[i]
		if ch.Kind == "added" {
			continue
		}
		l := &lost{}
		if err := u.live.setMeta(ch.Before, l); err != nil {
			if u.force && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return fmt.Errorf("%s: %w", ch.Path, err)
		}
		if l.owner || l.xattrs {
			u.log.Warnf("%s: owner or xattrs not restored (needs root)", ch.Path)
		}
		if ch.Kind == "changed" {
			res.Changed++
		}
	}
	return nil
}

// removeRecord deletes the backups, the record, the directories apply made
// for them and the added directories that held them.
func removeRecord(live *dirTree, rec *record, deferred []string, log logrus.FieldLogger) error {
	names, err := live.list(backupDir)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := live.remove(path.Join(backupDir, n)); err != nil {
			return err
		}
	}
	if err := live.remove(appliedPath); err != nil {
		return err
	}
	// A directory made for the record that something else has moved into
	// since stays, with that something.
	dirs := append(append([]string(nil), rec.Created...), deferred...)
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	gone := map[string]bool{}
	for _, p := range dirs {
		if gone[p] {
			continue
		}
		gone[p] = true
		if err := live.remove(p); errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST) {
			log.Warnf("%s: kept, it holds entries apply did not make", p)
		} else if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	return nil
}

// removeForUndo removes an entry apply made; a directory that still holds
// something is removed whole only when forced.
func (d *dirTree) removeForUndo(p string, force bool) error {
	err := d.remove(p)
	if err != nil && force && (errors.Is(err, unix.ENOTEMPTY) || errors.Is(err, unix.EEXIST)) {
		return d.removeAll(p)
	}
	return err
}

// problems names every path whose state is no longer what apply left,
// with what differs.
func (u *undo) problems(ctx context.Context) ([]string, error) {
	var out []string
	for _, ch := range u.rec.Changes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		cur, err := u.live.entry(ch.Path)
		if !u.absent(err) {
			return nil, fmt.Errorf("%s: %w", ch.Path, err)
		}
		switch {
		case ch.Kind == "removed":
			if cur != nil {
				out = append(out, ch.Path+": exists again (apply removed it)")
			}
			continue
		case cur == nil:
			out = append(out, ch.Path+": missing (apply left a "+ch.After.Type.String()+")")
			continue
		}
		what := stateProblems(ch, cur)
		if ch.Kind == "added" && ch.After.Type == rootfs.TypeDir {
			extra, err := u.unrecorded(ch.Path)
			if err != nil {
				return nil, err
			}
			for _, e := range extra {
				what = append(what, "holds "+e+", added since")
			}
		}
		if len(what) > 0 {
			out = append(out, ch.Path+": "+strings.Join(what, ", "))
		}
	}
	return out, nil
}

// stateProblems says how cur, what the root holds at ch's path, differs
// from what apply left there.
func stateProblems(ch Change, cur *Entry) []string {
	a := ch.After
	var what []string
	switch {
	case cur.Type != a.Type:
		what = append(what, "type "+cur.Type.String())
	case ch.Kind == "changed":
	case a.Type == rootfs.TypeRegular && (cur.Digest != a.Digest || cur.Size != a.Size):
		what = append(what, "content")
	case a.Type == rootfs.TypeSymlink && cur.Target != a.Target:
		what = append(what, "target")
	}
	if ch.Kind != "changed" && cur.Type == a.Type {
		if cur.Perm != a.Perm {
			what = append(what, "mode "+a.mode()+"->"+cur.mode())
		}
		if cur.UID != a.UID || cur.GID != a.GID {
			what = append(what, fmt.Sprintf("owner %d:%d->%d:%d", a.UID, a.GID, cur.UID, cur.GID))
		}
	}
	return what
}

// unrecorded lists the names in the directory p that apply did not add and
// that are not the record's own.
func (u *undo) unrecorded(p string) ([]string, error) {
	names, err := u.live.list(p)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		c := path.Join(p, n)
		if _, ok := u.changes[c]; !ok && !isUnder(appliedPath, c) && !isUnder(backupDir, c) && !isUnder(c, backupDir) {
			out = append(out, n)
		}
	}
	return out, nil
}
