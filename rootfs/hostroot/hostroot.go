// Package hostroot changes a root file system that already exists on the
// host, in place, as `stamp apply` does, and puts it back (`stamp apply
// --undo`). Apply copies the root to a scratch directory, has the caller's
// Run change the copy as a rootfs.Tree, scans both and carries the
// difference over to the root, after saving what it replaces or removes,
// with a record of every change, under /var/lib/stamp in the root. Undo
// reads that record, checks it and the saved contents, and reverses it.
//
// The package knows no recipe and no layer: the conductor hands it the
// work to do on the tree, as it hands verify a build function. Every path
// it changes is resolved inside the root one directory at a time, without
// following a symlink.
package hostroot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/rootfs"
)

// Options configure Apply.
type Options struct {
	// Recipe and RecipeDigest name what is applied, in the plan and the
	// record.
	Recipe, RecipeDigest string
	// Epoch is the time every entry the run makes or changes gets.
	Epoch time.Time
	// DryRun works out the changes and leaves the root as it is.
	DryRun bool
	// WorkDir holds the scratch copy ("" for the system's temp dir);
	// KeepWork keeps it afterwards.
	WorkDir  string
	KeepWork bool
	// ReverseReaddir is the scratch tree's rootfs.Options.ReverseReaddir.
	ReverseReaddir bool
	Log            logrus.FieldLogger
	Progress       rootfs.Progress
	// Run makes the changes, on the tree of the scratch copy. Its error
	// is returned as it is.
	Run func(ctx context.Context, tree *rootfs.Tree) error
}

// ErrPending is what Apply's error is when the root holds the record or
// the backups of an earlier apply that was not undone.
var ErrPending = errors.New("an earlier apply is not undone")

type pendingError struct{ msg string }

func (e *pendingError) Error() string        { return e.msg }
func (e *pendingError) Is(target error) bool { return target == ErrPending }

func logger(l logrus.FieldLogger) logrus.FieldLogger {
	if l == nil {
		d := logrus.New()
		d.SetOutput(io.Discard)
		return d
	}
	return l
}

// Apply runs o.Run on a scratch copy of the root directory (reflinked
// where the file system can), so the root never sees a half-applied recipe
// and a dry run never writes to it; the difference between the two is then
// the plan. Without DryRun the plan is carried over to the root after what
// it replaces or removes is saved under /var/lib/stamp, where Undo finds
// it.
func Apply(ctx context.Context, root string, o Options) (*Plan, error) {
	log := logger(o.Log)
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	live, err := openDirTree(root)
	if err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	defer live.Close()
	if err := checkPending(live, root, o.DryRun, log); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp(o.WorkDir, "stamp-apply-")
	if err != nil {
		return nil, fmt.Errorf("apply: work dir: %w", err)
	}
	if work, err = filepath.Abs(work); err != nil {
		return nil, err
	}
	if o.KeepWork {
		log.Infof("keeping work directory %s", work)
	} else {
		defer removeScratch(work)
	}
	before, after, err := runOnCopy(ctx, root, work, &o, log)
	if err != nil {
		return nil, err
	}
	p := &Plan{Recipe: o.Recipe, RecipeDigest: o.RecipeDigest, Root: root, DryRun: o.DryRun, Changes: Diff(before, after)}
	scratch := filepath.Join(work, "root")
	if p.Accounts, err = accountChanges(root, scratch, p.Changes); err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	p.Units = unitChanges(p.Changes)
	log.Info(p.Summary())
	for _, b := range blockers(live, p, byPath(before)) {
		if !o.DryRun {
			return nil, errors.New("apply: " + b)
		}
		log.Warn("apply would fail: " + b)
	}
	// Nothing to change leaves no record either: the record would be the
	// only change.
	if o.DryRun || len(p.Changes) == 0 {
		return p, nil
	}
	if err := carryOver(ctx, live, scratch, before, after, p, o.Epoch, log); err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	return p, nil
}

// checkPending refuses (or in a dry run, warns about) a root that holds an
// earlier apply's record or backups.
func checkPending(live *dirTree, root string, dryRun bool, log logrus.FieldLogger) error {
	for _, p := range []string{appliedPath, backupDir} {
		if _, err := live.lstat(p); err == nil {
			msg := fmt.Sprintf("apply: %s already holds %s from an earlier apply; run stamp apply --undo --root %s first "+
				"(or, if no %s is left, remove it)", root, p, root, appliedPath)
			if !dryRun {
				return &pendingError{msg}
			}
			log.Warn(msg)
		}
	}
	return nil
}

// runOnCopy scans the root, copies it to work/root, runs o.Run on the copy
// and scans that: the root before and after.
func runOnCopy(ctx context.Context, root, work string, o *Options, log logrus.FieldLogger) (before, after []*Entry, err error) {
	// With --root / the work directory is inside the root; it is no part
	// of it.
	start := time.Now()
	before, err = Scan(ctx, root, nil, work)
	if err != nil {
		return nil, nil, fmt.Errorf("apply: %w", err)
	}
	log.Infof("indexed %d entries of %s in %s", len(before), root, time.Since(start).Round(time.Millisecond))
	scratch := filepath.Join(work, "root")
	start = time.Now()
	var total int64
	for _, e := range before {
		total += e.Size
	}
	add, done := func(int64) {}, func() {}
	if o.Progress != nil {
		add, done = o.Progress("copying "+root, total)
	}
	losses, err := copyRoot(ctx, before, root, scratch, add)
	done()
	if err != nil {
		return nil, nil, fmt.Errorf("apply: scratch copy of %s: %w", root, err)
	}
	log.Infof("copied %s to %s in %s", root, scratch, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	after, err = runOnScratch(ctx, scratch, o, log)
	if err != nil {
		return nil, nil, err
	}
	log.Infof("applied the recipe to the copy and scanned it in %s", time.Since(start).Round(time.Millisecond))
	keepLost(before, after, losses)
	clampNew(before, after, o.Epoch)
	return before, after, nil
}

// runOnScratch runs o.Run on the scratch copy, puts the index's metadata on
// its disk as an in-place apply would, and scans the result.
func runOnScratch(ctx context.Context, scratch string, o *Options, log logrus.FieldLogger) ([]*Entry, error) {
	tree, err := rootfs.Adopt(ctx, scratch, rootfs.Options{DefaultMTime: o.Epoch, ReverseReaddir: o.ReverseReaddir})
	if err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	defer tree.Close()
	if err := o.Run(ctx, tree); err != nil {
		return nil, err
	}
	rep, err := tree.WriteBack(ctx)
	if err != nil {
		return nil, fmt.Errorf("apply: writing metadata back: %w", err)
	}
	for _, p := range rep.NotApplied {
		log.Warnf("%s: owner or device node kept in the index only (needs root)", p)
	}
	if err := writeXattrs(tree, log); err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	// The index hashed every file the layers wrote; only what it does not
	// know is read again.
	known := func(p string, size int64) string {
		if e := tree.Get(p); e != nil && e.Type == rootfs.TypeRegular && e.Size == size {
			return e.Digest
		}
		return ""
	}
	after, err := Scan(ctx, scratch, known, "")
	if err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	return after, nil
}

// writeXattrs puts the xattrs the layers gave entries (a tarball's
// SCHILY.xattr records, say) on the scratch copy's disk, which WriteBack
// leaves alone, so they reach the plan and the root. Entries the tree
// adopted hold none in the index and keep what the disk has.
func writeXattrs(tree *rootfs.Tree, log logrus.FieldLogger) error {
	for _, e := range tree.Entries() {
		for _, name := range e.XattrNames() {
			err := unix.Lsetxattr(tree.DiskPath(e.Path), name, []byte(e.Xattrs[name]), 0)
			if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENOTSUP) {
				log.Warnf("%s: xattr %s kept in the index only: %v", e.Path, name, err)
			} else if err != nil {
				return fmt.Errorf("%s: xattr %s: %w", e.Path, name, err)
			}
		}
	}
	return nil
}

// blockers names what makes the plan impossible to carry over: removing or
// replacing a mount point, which apply leaves alone, and taking the place
// the record must live in.
func blockers(live *dirTree, p *Plan, before map[string]*Entry) []string {
	var mounts []string
	for _, ch := range p.Changes {
		if b := before[ch.Path]; b != nil && b.mount && ch.Kind != "changed" {
			mounts = append(mounts, ch.Path)
		}
	}
	var out []string
	if len(mounts) > 0 {
		out = append(out, "the recipe removes or replaces mount points, which apply leaves alone: "+strings.Join(mounts, ", "))
	}
	if rc := recordConflicts(p.Changes); len(rc) > 0 {
		out = append(out, "the recipe changes where the apply record must live ("+appliedPath+"): "+strings.Join(rc, ", "))
	}
	if err := recordPlace(live); err != nil {
		out = append(out, "the apply record cannot live in "+backupDir+": "+err.Error())
	}
	return out
}

// recordPlace says why the root cannot hold the record: a symlink or a file
// where one of the directories of backupDir must be. Undo follows no
// symlink to the record, so apply does not write it through one.
func recordPlace(live *dirTree) error {
	st, err := live.lstat(backupDir)
	var b *blockedError
	switch {
	case errors.As(err, &b):
		return b
	case err == nil && typeOf(st.Mode) != rootfs.TypeDir:
		return fmt.Errorf("%s is a %s, not a directory", backupDir, typeOf(st.Mode))
	}
	return nil
}

// keepLost gives entries the scratch copy could not reproduce faithfully,
// and which the recipe left on the same inode, the original's properties.
func keepLost(before, after []*Entry, losses map[string]*lost) {
	if len(losses) == 0 {
		return
	}
	bm := byPath(before)
	for _, a := range after {
		l, b := losses[a.Path], bm[a.Path]
		if l == nil || b == nil || a.ino != l.ino {
			continue
		}
		if l.owner {
			a.UID, a.GID = b.UID, b.GID
		}
		if l.xattrs {
			a.Xattrs = b.Xattrs
		}
		if l.device {
			a.Type, a.Major, a.Minor, a.Size, a.Digest = b.Type, b.Major, b.Minor, 0, ""
		}
	}
}

// clampNew brings the mtime of every entry the recipe made or changed down
// to the epoch, as Seal does in a build: a hook's edit otherwise carries the
// wall clock. Entries the recipe left alone keep theirs.
func clampNew(before, after []*Entry, ep time.Time) {
	bm := byPath(before)
	limit := ep.UnixNano()
	for _, a := range after {
		if a.mtimeNs() <= limit {
			continue
		}
		if b := bm[a.Path]; b == nil || len(differences(b, a)) > 0 {
			a.MTime = ep
		}
	}
}
