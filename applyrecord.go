package stamp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// Where apply keeps, inside the root, what undo needs.
const (
	appliedPath = "/var/lib/stamp/applied.json"
	backupDir   = "/var/lib/stamp/backup"
	// tmpName is the name each change is staged under in its own directory
	// before a rename puts it in place.
	tmpName = ".stamp-apply.tmp"
)

// appliedRecord is /var/lib/stamp/applied.json.
type appliedRecord struct {
	Version      int    `json:"version"`
	Recipe       string `json:"recipe"`
	RecipeDigest string `json:"recipeDigest,omitempty"`
	Epoch        int64  `json:"epoch"`
	// Changes say what each path was before (content of files in
	// backup/<sha256>) and what apply made of it.
	Changes []ApplyChange `json:"changes"`
	// Dirs are the directories whose mtime the changes move as a side
	// effect, with the mtime each had before.
	Dirs []dirTime `json:"dirs"`
	// Created are the directories apply made to hold this record.
	Created []string `json:"created,omitempty"`
}

type dirTime struct {
	Path      string `json:"path"`
	MTime     int64  `json:"mtime"`
	MTimeNsec int64  `json:"mtimeNsec,omitempty"`
}

const recordVersion = 1

// nodeOf turns a recorded state back into a node for the path p.
func nodeOf(p string, s *EntryState) (*node, error) {
	typ, err := rootfs.ParseType(s.Type)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	perm, err := strconv.ParseUint(s.Mode, 8, 32)
	if err != nil {
		return nil, fmt.Errorf("%s: mode %q: %w", p, s.Mode, err)
	}
	return &node{path: p, typ: typ, perm: uint32(perm), EntryState: *s}, nil
}

// isUnder reports whether p is anc or lies below it.
func isUnder(p, anc string) bool {
	return p == anc || anc == "/" || strings.HasPrefix(p, anc+"/")
}

// parents lists the parent directories of changed paths, plus those of the
// record, deepest first.
func parents(changes []ApplyChange, extra []string) []string {
	set := map[string]bool{}
	for _, ch := range changes {
		if ch.Kind != "changed" && ch.Path != "/" {
			set[path.Dir(ch.Path)] = true
		}
	}
	for _, p := range extra {
		set[path.Dir(p)] = true
	}
	out := make([]string, 0, len(set))
	for p := range set {
		out = append(out, p)
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out
}

// recordConflicts names the changes that would leave the record nowhere
// to live: it needs /var/lib/stamp/backup to be a directory, and its own
// names left alone.
func recordConflicts(changes []ApplyChange) []string {
	var out []string
	for _, ch := range changes {
		holds := isUnder(backupDir, ch.Path) && (ch.After == nil || ch.After.Type != "dir")
		if holds || isUnder(ch.Path, backupDir) || ch.Path == appliedPath {
			out = append(out, ch.Path)
		}
	}
	return out
}

// carryOver makes the live root what the scratch copy became: it first
// saves what will be replaced or removed and writes the record, then
// removes, creates, sets metadata, and puts back the mtimes of the
// directories it touched.
func carryOver(ctx context.Context, live *dirTree, scratch string, before, after []*node, p *ApplyPlan, ep time.Time, log logrus.FieldLogger) error {
	bm, am := byPath(before), byPath(after)
	relock, err := live.unlock(append(parents(p.Changes, nil), live.existingAncestor(backupDir)))
	if err != nil {
		return err
	}
	created, err := live.mkdirs(backupDir, ep)
	if err != nil {
		return fmt.Errorf("%s: %w", backupDir, err)
	}
	// Until the record is written, a failure takes the backups away again,
	// so the next apply does not find a backup directory nothing explains.
	recorded := false
	defer func() {
		if recorded {
			return
		}
		rec := appliedRecord{Created: created}
		if err := removeRecord(live, rec, nil, log); err != nil {
			log.Warnf("removing the backups of a failed apply: %v", err)
			return
		}
		if len(created) > 0 {
			if b := bm[path.Dir(created[0])]; b != nil {
				live.setMTime(b.path, b.mtimeNs())
			}
		}
	}()
	start := time.Now()
	saved := map[string]bool{}
	for _, ch := range p.Changes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if b := ch.Before; ch.Kind != "added" && ch.Kind != "changed" && b.Type == "file" && !saved[b.SHA256] {
			if err := live.backup(ch.Path, b.SHA256, ep); err != nil {
				return fmt.Errorf("backing up %s: %w", ch.Path, err)
			}
			saved[b.SHA256] = true
		}
	}
	if err := live.setMTime(backupDir, ep.UnixNano()); err != nil {
		return fmt.Errorf("%s: %w", backupDir, err)
	}
	rec := appliedRecord{Version: recordVersion, Recipe: p.Recipe, RecipeDigest: p.RecipeDigest, Epoch: ep.Unix(),
		Changes: p.Changes, Created: created}
	extra := append([]string{appliedPath, backupDir}, created...)
	dirs := parents(p.Changes, extra)
	for _, d := range dirs {
		if b := bm[d]; b != nil {
			rec.Dirs = append(rec.Dirs, dirTime{Path: d, MTime: b.MTime, MTimeNsec: b.MTimeNsec})
		}
	}
	if rec.Changes == nil {
		rec.Changes = []ApplyChange{}
	}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return err
	}
	if err := live.writeFile(appliedPath, append(data, '\n'), 0o644, ep); err != nil {
		return fmt.Errorf("%s: %w", appliedPath, err)
	}
	recorded = true
	log.Infof("saved %d backups and the record in %s", len(saved), time.Since(start).Round(time.Millisecond))
	start = time.Now()
	src, err := openDirTree(scratch)
	if err != nil {
		return err
	}
	defer src.Close()
	hint := fmt.Sprintf(" (stamp apply --undo --force --root %s puts back what was changed)", p.Root)
	// Removals deepest first; a path whose type changes to or from a
	// directory cannot be renamed over.
	for i := len(p.Changes) - 1; i >= 0; i-- {
		ch := p.Changes[i]
		if ch.Kind == "removed" || ch.Kind == "replaced" && (ch.Before.Type == "dir" || ch.After.Type == "dir") {
			if err := live.remove(ch.Path); err != nil {
				return fmt.Errorf("removing %s: %w%s", ch.Path, err, hint)
			}
		}
	}
	// A new name of an inode that is already in place becomes a hard link.
	present := map[string]bool{}
	for _, a := range after {
		present[a.path] = a.typ == rootfs.TypeRegular
	}
	for _, ch := range p.Changes {
		if ch.Kind == "added" || ch.Kind == "replaced" {
			present[ch.Path] = false
		}
	}
	// From here on the root changes; an interrupt would leave it half
	// applied, so it is not looked at: what follows takes a second or so.
	for _, ch := range p.Changes {
		if ch.Kind != "added" && ch.Kind != "replaced" {
			continue
		}
		a := am[ch.Path]
		err := live.put(a, present, func(fd int, name string) error {
			return src.at(a.path, func(sfd int, sname string) error { return copyFileAt(fd, name, procPath(sfd, sname)) })
		})
		if err != nil {
			return fmt.Errorf("%s: %w%s", ch.Path, err, hint)
		}
		present[ch.Path] = a.typ == rootfs.TypeRegular
	}
	for i := len(p.Changes) - 1; i >= 0; i-- {
		ch := p.Changes[i]
		if ch.Kind == "removed" {
			continue
		}
		l := &lost{}
		if err := live.setMeta(am[ch.Path], l); err != nil {
			return fmt.Errorf("%s: %w%s", ch.Path, err, hint)
		}
		if l.owner || l.xattrs {
			log.Warnf("%s: owner or xattrs not set (needs root)", ch.Path)
		}
	}
	if err := relock(func(d string) *node { return am[d] }); err != nil {
		return err
	}
	log.Infof("changed %s in %s", p.Root, time.Since(start).Round(time.Millisecond))
	for _, d := range dirs {
		m := ep.UnixNano()
		if a := am[d]; a != nil {
			m = a.mtimeNs()
		}
		if err := live.setMTime(d, m); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%s: %w", d, err)
		}
	}
	return nil
}

// mkdirs makes p and its missing parents (mode 0755, 0700 for p itself,
// mtime ep) and returns the ones it made, parents first.
func (d *dirTree) mkdirs(p string, ep time.Time) ([]string, error) {
	var made []string
	for cur := p; cur != "/"; cur = path.Dir(cur) {
		fi, err := d.lstat(cur)
		if err == nil {
			if !fi.IsDir() {
				return nil, fmt.Errorf("%s is a %s, not a directory", cur, rootfs.TypeOf(fi.Mode()))
			}
			break
		}
		made = append([]string{cur}, made...)
	}
	for _, m := range made {
		perm := uint32(0o755)
		if m == p {
			perm = 0o700
		}
		err := d.at(m, func(fd int, name string) error {
			if err := unix.Mkdirat(fd, name, perm); err != nil {
				return err
			}
			return unix.Fchmodat(fd, name, perm, 0)
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m, err)
		}
	}
	for i := len(made) - 1; i >= 0; i-- {
		if err := d.setMTime(made[i], ep.UnixNano()); err != nil {
			return nil, err
		}
	}
	return made, nil
}

func (d *dirTree) setMTime(p string, ns int64) error {
	return d.at(p, func(fd int, name string) error {
		ts := []unix.Timespec{unix.NsecToTimespec(ns), unix.NsecToTimespec(ns)}
		return unix.UtimesNanoAt(fd, name, ts, unix.AT_SYMLINK_NOFOLLOW)
	})
}

// backup copies the file at p into backupDir under its sha256, checking the
// digest while it copies: a file changed since the scan is not saved as
// something it is not.
func (d *dirTree) backup(p, digest string, ep time.Time) error {
	name := path.Join(backupDir, digest)
	if _, err := d.lstat(name); err == nil {
		return nil
	}
	// A second name keeps the old content at the cost of a link: apply
	// replaces by rename and removes by unlink, so it never writes into
	// the inode itself.
	err := d.at(p, func(fd int, n string) error {
		return d.at(name, func(bfd int, bn string) error {
			unix.Unlinkat(bfd, tmpName, 0)
			if err := unix.Linkat(fd, n, bfd, tmpName, 0); err != nil {
				return err
			}
			got, _, err := hashio.File(procPath(bfd, tmpName), true)
			if err == nil && got != digest {
				err = fmt.Errorf("changed while apply ran (sha256 %s, scanned as %s)", got, digest)
			}
			if err == nil {
				err = unix.Renameat(bfd, tmpName, bfd, bn)
			}
			if err != nil {
				unix.Unlinkat(bfd, tmpName, 0)
			}
			return err
		})
	})
	if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EMLINK) {
		return err
	}
	return d.at(p, func(fd int, n string) error {
		src, err := os.OpenFile(procPath(fd, n), os.O_RDONLY|syscall.O_NOFOLLOW, 0)
		if err != nil {
			return err
		}
		defer src.Close()
		return d.writeStream(name, 0o600, ep, func(w io.Writer) error {
			h := sha256.New()
			if _, err := io.Copy(io.MultiWriter(w, h), src); err != nil {
				return err
			}
			if got := hex.EncodeToString(h.Sum(nil)); got != digest {
				return fmt.Errorf("changed while apply ran (sha256 %s, scanned as %s)", got, digest)
			}
			return nil
		})
	})
}

func (d *dirTree) writeFile(p string, data []byte, perm uint32, ep time.Time) error {
	return d.writeStream(p, perm, ep, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeStream writes p through a temporary name and renames it in place.
func (d *dirTree) writeStream(p string, perm uint32, ep time.Time, fill func(io.Writer) error) error {
	return d.at(p, func(fd int, name string) error {
		unix.Unlinkat(fd, tmpName, 0)
		nfd, err := unix.Openat(fd, tmpName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(nfd), tmpName)
		err = fill(f)
		if err == nil {
			err = f.Chmod(os.FileMode(perm))
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			ts := []unix.Timespec{unix.NsecToTimespec(ep.UnixNano()), unix.NsecToTimespec(ep.UnixNano())}
			err = unix.UtimesNanoAt(fd, tmpName, ts, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err == nil {
			err = unix.Renameat(fd, tmpName, fd, name)
		}
		if err != nil {
			unix.Unlinkat(fd, tmpName, 0)
		}
		return err
	})
}

// remove deletes the entry at p; a directory must be empty by then.
func (d *dirTree) remove(p string) error {
	return d.at(p, func(fd int, name string) error {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return nil
			}
			return err
		}
		flags := 0
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			flags = unix.AT_REMOVEDIR
		}
		return unix.Unlinkat(fd, name, flags)
	})
}

// put creates n at its path: a directory (kept if there is one), or any
// other type staged under tmpName and renamed over what is there. A regular
// file becomes a hard link to one of its Links that present says is in
// place, else its content comes from fill.
func (d *dirTree) put(n *node, present map[string]bool, fill func(fd int, name string) error) error {
	if n.typ == rootfs.TypeDir {
		return d.at(n.path, func(fd int, name string) error {
			err := unix.Mkdirat(fd, name, 0o700)
			if errors.Is(err, unix.EEXIST) {
				var st unix.Stat_t
				if serr := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); serr == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
					return nil
				}
			}
			return err
		})
	}
	return d.at(n.path, func(fd int, name string) error {
		if err := unix.Unlinkat(fd, tmpName, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return err
		}
		var err error
		switch n.typ {
		case rootfs.TypeRegular:
			linked := false
			for _, l := range n.Links {
				if present[l] {
					err, linked = d.linkAt(l, fd, tmpName), true
					break
				}
			}
			if !linked {
				err = fill(fd, tmpName)
			}
		case rootfs.TypeSymlink:
			err = unix.Symlinkat(n.Target, fd, tmpName)
		default:
			err = unix.Mknodat(fd, tmpName, nodeMode(n.typ)|0o600, int(unix.Mkdev(n.Major, n.Minor)))
		}
		if err == nil {
			err = unix.Renameat(fd, tmpName, fd, name)
		}
		if err != nil {
			unix.Unlinkat(fd, tmpName, 0)
		}
		return err
	})
}

// UndoOptions configure Undo.
type UndoOptions struct {
	// Force undoes even paths changed since apply, losing those changes.
	Force bool
	Log   logrus.FieldLogger
}

// UndoResult says what Undo put back.
type UndoResult struct {
	Recipe                     string
	Removed, Restored, Changed int
}

// Undo puts the root back as it was before the apply recorded in
// /var/lib/stamp/applied.json: it removes what apply added, restores what
// it replaced or removed (content, mode, owner, mtime, xattrs) and then
// removes the record and its backups. A path changed since apply is not
// overwritten unless o.Force is set.
func Undo(ctx context.Context, root string, o UndoOptions) (*UndoResult, error) {
	log := (&Options{Log: o.Log}).log()
	live, err := openDirTree(root)
	if err != nil {
		return nil, fmt.Errorf("undo: %w", err)
	}
	defer live.Close()
	data, err := live.root.ReadFile(rootRel(appliedPath))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("undo: %s has no %s: nothing to undo", root, appliedPath)
	}
	if err != nil {
		return nil, fmt.Errorf("undo: %s: %w", appliedPath, err)
	}
	var rec appliedRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("undo: %s: %w", appliedPath, err)
	}
	if rec.Version != recordVersion {
		return nil, fmt.Errorf("undo: %s: record version %d, this stamp reads %d", appliedPath, rec.Version, recordVersion)
	}
	before := map[string]*node{}
	kinds := map[string]string{}
	for _, ch := range rec.Changes {
		kinds[ch.Path] = ch.Kind
		if ch.Before != nil {
			n, err := nodeOf(ch.Path, ch.Before)
			if err != nil {
				return nil, fmt.Errorf("undo: %s: %w", appliedPath, err)
			}
			before[ch.Path] = n
		}
		if b := ch.Before; b != nil && (b.Type == "char" || b.Type == "block") && ch.Kind != "changed" && os.Geteuid() != 0 {
			return nil, fmt.Errorf("undo: %s: restoring a %s device needs root", ch.Path, b.Type)
		}
		if b := ch.Before; b != nil && b.Type == "file" && ch.Kind != "added" && ch.Kind != "changed" {
			if _, err := live.lstat(path.Join(backupDir, b.SHA256)); err != nil {
				return nil, fmt.Errorf("undo: the backup of %s: %w", ch.Path, err)
			}
		}
	}
	problems, err := undoProblems(ctx, live, rec.Changes, kinds)
	if err != nil {
		return nil, fmt.Errorf("undo: %w", err)
	}
	if len(problems) > 0 {
		if !o.Force {
			return nil, fmt.Errorf("undo: %d paths changed since apply; undo would lose those changes (--force undoes anyway):\n  %s",
				len(problems), strings.Join(problems, "\n  "))
		}
		for _, p := range problems {
			log.Warnf("changed since apply, undone anyway: %s", p)
		}
	}
	var touched []string
	for _, d := range rec.Dirs {
		touched = append(touched, d.Path)
	}
	relock, err := live.unlock(touched)
	if err != nil {
		return nil, fmt.Errorf("undo: %w", err)
	}
	res := &UndoResult{Recipe: rec.Recipe}
	// Directories that hold the record go last, with the record.
	holdsRecord := func(p string) bool { return isUnder(backupDir, p) || isUnder(appliedPath, p) }
	var deferred []string
	for i := len(rec.Changes) - 1; i >= 0; i-- {
		ch := rec.Changes[i]
		if ch.Kind != "added" && !(ch.Kind == "replaced" && (ch.Before.Type == "dir" || ch.After.Type == "dir")) {
			continue
		}
		if holdsRecord(ch.Path) {
			deferred = append(deferred, ch.Path)
			continue
		}
		if err := live.removeForUndo(ch.Path, o.Force); err != nil {
			return nil, fmt.Errorf("undo: removing %s: %w", ch.Path, err)
		}
		if ch.Kind == "added" {
			res.Removed++
		}
	}
	// The last restore of each backup takes the backup's inode itself;
	// the others copy it, so paths that only had the same content do not
	// become hard links of each other.
	uses := map[string]int{}
	for _, ch := range rec.Changes {
		if b := before[ch.Path]; b != nil && b.typ == rootfs.TypeRegular && (ch.Kind == "removed" || ch.Kind == "replaced") {
			uses[b.SHA256]++
		}
	}
	restored := map[string]bool{}
	intact := func(l string) bool {
		k := kinds[l]
		return restored[l] || k == "" || k == "changed"
	}
	// Once the root changes, undo runs to the end whatever the context
	// says: half an undo helps nobody.
	for _, ch := range rec.Changes {
		if ch.Kind != "removed" && ch.Kind != "replaced" {
			continue
		}
		b := before[ch.Path]
		if b.typ == rootfs.TypeRegular {
			uses[b.SHA256]--
		}
		last := uses[b.SHA256] == 0
		err := live.put(b, presentFunc(b.Links, intact), func(fd int, name string) error {
			return live.at(path.Join(backupDir, b.SHA256), func(bfd int, bname string) error {
				if last {
					err := unix.Linkat(bfd, bname, fd, name, 0)
					if !errors.Is(err, unix.EXDEV) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EMLINK) {
						return err
					}
				}
				return copyFileAt(fd, name, procPath(bfd, bname))
			})
		})
		if err != nil {
			return nil, fmt.Errorf("undo: restoring %s: %w", ch.Path, err)
		}
		restored[ch.Path] = true
		res.Restored++
	}
	for i := len(rec.Changes) - 1; i >= 0; i-- {
		ch := rec.Changes[i]
		if ch.Kind == "added" {
			continue
		}
		l := &lost{}
		if err := live.setMeta(before[ch.Path], l); err != nil {
			if o.Force && errors.Is(err, os.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("undo: %s: %w", ch.Path, err)
		}
		if l.owner || l.xattrs {
			log.Warnf("%s: owner or xattrs not restored (needs root)", ch.Path)
		}
		if ch.Kind == "changed" {
			res.Changed++
		}
	}
	if err := removeRecord(live, rec, deferred, log); err != nil {
		return nil, fmt.Errorf("undo: %w", err)
	}
	if err := relock(func(d string) *node { return before[d] }); err != nil {
		return nil, fmt.Errorf("undo: %w", err)
	}
	res.Removed += len(deferred)
	for _, d := range rec.Dirs {
		if err := live.setMTime(d.Path, d.MTime*1e9+d.MTimeNsec); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("undo: %s: %w", d.Path, err)
		}
	}
	return res, nil
}

// presentFunc adapts intact to the map put reads, for the links asked.
func presentFunc(links []string, intact func(string) bool) map[string]bool {
	m := map[string]bool{}
	for _, l := range links {
		m[l] = intact(l)
	}
	return m
}

// removeRecord deletes the backups, the record, the directories apply made
// for them and the added directories that held them.
func removeRecord(live *dirTree, rec appliedRecord, deferred []string, log logrus.FieldLogger) error {
	dir, err := live.root.Open(rootRel(backupDir))
	if err != nil {
		return err
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return err
	}
	sort.Strings(names)
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
		return d.root.RemoveAll(rootRel(p))
	}
	return err
}

// undoProblems names every path whose state is no longer what apply left,
// with what differs.
func undoProblems(ctx context.Context, live *dirTree, changes []ApplyChange, kinds map[string]string) ([]string, error) {
	var out []string
	for _, ch := range changes {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var cur *node
		err := live.at(ch.Path, func(fd int, name string) error {
			n, err := statNode(procPath(fd, name), ch.Path, nil)
			cur = n
			return err
		})
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s: %w", ch.Path, err)
		}
		switch {
		case ch.Kind == "removed":
			if cur != nil {
				out = append(out, ch.Path+": exists again (apply removed it)")
			}
			continue
		case cur == nil:
			out = append(out, ch.Path+": missing (apply left a "+ch.After.Type+")")
			continue
		}
		a, err := nodeOf(ch.Path, ch.After)
		if err != nil {
			return nil, err
		}
		var what []string
		switch {
		case cur.typ != a.typ:
			what = append(what, "type "+cur.Type)
		case ch.Kind == "changed":
		case a.typ == rootfs.TypeRegular && (cur.SHA256 != a.SHA256 || cur.Size != a.Size):
			what = append(what, "content")
		case a.typ == rootfs.TypeSymlink && cur.Target != a.Target:
			what = append(what, "target")
		}
		if ch.Kind != "changed" && cur.typ == a.typ {
			if cur.perm != a.perm {
				what = append(what, "mode "+a.Mode+"->"+cur.Mode)
			}
			if cur.UID != a.UID || cur.GID != a.GID {
				what = append(what, fmt.Sprintf("owner %d:%d->%d:%d", a.UID, a.GID, cur.UID, cur.GID))
			}
		}
		if ch.Kind == "added" && a.typ == rootfs.TypeDir {
			extra, err := live.unrecorded(ch.Path, kinds)
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

// unrecorded lists the names in the directory p that apply did not add and
// that are not the record's own.
func (d *dirTree) unrecorded(p string, kinds map[string]string) ([]string, error) {
	f, err := d.root.Open(rootRel(p))
	if err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		c := path.Join(p, n)
		if kinds[c] == "" && !isUnder(appliedPath, c) && !isUnder(backupDir, c) && !isUnder(c, backupDir) {
			out = append(out, n)
		}
	}
	return out, nil
}

// existingAncestor is the deepest of p and its parents that exists.
func (d *dirTree) existingAncestor(p string) string {
	for ; p != "/"; p = path.Dir(p) {
		if _, err := d.lstat(p); err == nil {
			return p
		}
	}
	return "/"
}

// unlock lets an unprivileged owner change the directories dirs although
// their modes forbid it (root needs no such help), as rootfs keeps a tree's
// directories u+rwx. The function it returns puts each mode back: final's
// mode where final knows the directory, else the one it had.
func (d *dirTree) unlock(dirs []string) (func(final func(string) *node) error, error) {
	had := map[string]uint32{}
	var order []string
	if os.Geteuid() != 0 {
		for _, p := range dirs {
			fi, err := d.lstat(p)
			if err != nil || !fi.IsDir() || had[p] != 0 {
				continue
			}
			st := fi.Sys().(*syscall.Stat_t)
			if st.Uid != uint32(os.Geteuid()) || st.Mode&0o700 == 0o700 {
				continue
			}
			if err := d.root.Chmod(rootRel(p), os.FileMode(st.Mode&0o777|0o700)); err != nil {
				return nil, fmt.Errorf("%s: %w", p, err)
			}
			had[p] = st.Mode & 07777
			order = append(order, p)
		}
	}
	return func(final func(string) *node) error {
		for _, p := range order {
			mode := had[p]
			if n := final(p); n != nil {
				mode = n.perm
			}
			err := d.at(p, func(fd int, name string) error { return unix.Fchmodat(fd, name, mode, 0) })
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		return nil
	}, nil
}
