package stamp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sys/unix"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

// ApplyOptions configure Apply.
type ApplyOptions struct {
	Options
	// DryRun works out the changes and leaves the root as it is.
	DryRun bool
}

// ApplyChange is one path that apply changes in a root.
type ApplyChange struct {
	Path string `json:"path"`
	// Kind is added, replaced (type, content, symlink target, device
	// numbers or hard links differ), removed, or changed (metadata only).
	Kind string `json:"kind"`
	// Fields name what differs for replaced and changed paths: type,
	// content, target, device, links, mode, owner, mtime, xattrs.
	Fields []string    `json:"fields,omitempty"`
	Before *EntryState `json:"before,omitempty"`
	After  *EntryState `json:"after,omitempty"`
}

// AccountChange is a user or group that apply adds, removes or changes, as
// /etc/passwd and /etc/group show it.
type AccountChange struct {
	Kind   string `json:"kind"` // user or group
	Name   string `json:"name"`
	Action string `json:"action"` // added, removed or changed
	ID     string `json:"id"`
}

// UnitChange is a systemd symlink apply makes or removes.
type UnitChange struct {
	Unit   string `json:"unit"`
	Action string `json:"action"` // enabled, disabled, masked, unmasked or default
	Path   string `json:"path"`
	Target string `json:"target,omitempty"`
}

// ApplyPlan is what apply changes in a root, or in a dry run would change.
type ApplyPlan struct {
	Recipe       string          `json:"recipe"`
	RecipeDigest string          `json:"recipeDigest,omitempty"`
	Root         string          `json:"root"`
	DryRun       bool            `json:"dryRun"`
	Changes      []ApplyChange   `json:"changes"`
	Accounts     []AccountChange `json:"accounts,omitempty"`
	Units        []UnitChange    `json:"units,omitempty"`
}

// Apply runs the recipe's customize and provision phases on an existing root
// directory. The layers run on a scratch copy of the root (reflinked where
// the file system can), so the root never sees a half-applied recipe and a
// dry run never writes to it; the difference between the two is then the
// plan. Without DryRun the plan is carried over to the root after what it
// replaces or removes is saved under /var/lib/stamp, where Undo finds it.
// The base phase, sealing and outputs are skipped.
func Apply(ctx context.Context, rec *recipes.Recipe, root string, ao ApplyOptions) (*ApplyPlan, error) {
	o := ao.Options
	log := o.log()
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	phases, inputs, err := plan(rec)
	if err != nil {
		return nil, err
	}
	if err := precheck(phases, rec.Arch); err != nil {
		return nil, err
	}
	// The base tarball is not applied, so it is not resolved either.
	var needed []plannedInput
	for _, pi := range inputs {
		if pi.field != "base.tarball" {
			needed = append(needed, pi)
		}
	}
	c, lk, err := o.openStores(rec)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := resolveInputs(ctx, c, lk, needed, &o); err != nil {
		return nil, err
	}
	pinDebs(phases, lk)
	rd, err := recipeDigest(rec)
	if err != nil {
		return nil, err
	}
	ep := epoch(rec, &o)
	live, err := openDirTree(root)
	if err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	defer live.Close()
	for _, p := range []string{appliedPath, backupDir} {
		if _, err := live.lstat(p); err == nil {
			msg := fmt.Sprintf("apply: %s already holds %s from an earlier apply; run stamp apply --undo --root %s first "+
				"(or, if no %s is left, remove it)", root, p, root, appliedPath)
			if !ao.DryRun {
				return nil, &UsageError{Msg: msg}
			}
			log.Warn(msg)
		}
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
	// With --root / the work directory is inside the root; it is no part
	// of it.
	start := time.Now()
	before, err := scanRoot(ctx, root, nil, work)
	if err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	log.Infof("indexed %d entries of %s in %s", len(before), root, time.Since(start).Round(time.Millisecond))
	scratch := filepath.Join(work, "root")
	start = time.Now()
	var total int64
	for _, n := range before {
		total += n.Size
	}
	add, done := func(int64) {}, func() {}
	if o.Progress != nil {
		add, done = o.Progress("copying "+root, total)
	}
	losses, err := copyRoot(ctx, before, root, scratch, add)
	done()
	if err != nil {
		return nil, fmt.Errorf("apply: scratch copy of %s: %w", root, err)
	}
	log.Infof("copied %s to %s in %s", root, scratch, time.Since(start).Round(time.Millisecond))
	start = time.Now()
	after, err := applyOnScratch(ctx, rec, phases, c, scratch, ep, &o)
	if err != nil {
		return nil, err
	}
	log.Infof("applied the recipe to the copy and scanned it in %s", time.Since(start).Round(time.Millisecond))
	keepLost(before, after, losses)
	clampNew(before, after, ep)
	p := &ApplyPlan{Recipe: rec.Name, RecipeDigest: rd, Root: root, DryRun: ao.DryRun, Changes: diffNodes(before, after)}
	if p.Accounts, err = accountChanges(root, scratch, p.Changes); err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	p.Units = unitChanges(p.Changes)
	log.Info(p.summary())
	bm := byPath(before)
	var mounts []string
	for _, ch := range p.Changes {
		if b := bm[ch.Path]; b != nil && b.mount && ch.Kind != "changed" {
			mounts = append(mounts, ch.Path)
		}
	}
	var blockers []string
	if len(mounts) > 0 {
		blockers = append(blockers, "the recipe removes or replaces mount points, which apply leaves alone: "+strings.Join(mounts, ", "))
	}
	if rc := recordConflicts(p.Changes); len(rc) > 0 {
		blockers = append(blockers, "the recipe changes where the apply record must live ("+appliedPath+"): "+strings.Join(rc, ", "))
	}
	for _, b := range blockers {
		if !ao.DryRun {
			return nil, errors.New("apply: " + b)
		}
		log.Warn("apply would fail: " + b)
	}
	// Nothing to change leaves no record either: the record would be the
	// only change.
	if ao.DryRun || len(p.Changes) == 0 {
		return p, nil
	}
	if err := carryOver(ctx, live, scratch, before, after, p, ep, log); err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	return p, nil
}

// applyOnScratch runs the customize and provision layers on the scratch
// copy, puts the index's metadata on its disk as an in-place apply would,
// and scans the result.
func applyOnScratch(ctx context.Context, rec *recipes.Recipe, phases []phase, c *cache.Cache, scratch string, ep time.Time, o *Options) ([]*node, error) {
	log := o.log()
	tree, err := rootfs.Adopt(ctx, scratch, rootfs.Options{DefaultMTime: ep, ReverseReaddir: o.ReverseReaddir})
	if err != nil {
		return nil, fmt.Errorf("apply: %w", err)
	}
	defer tree.Close()
	// The base is the root that is there.
	if err := runPhases(ctx, rec, phases[1:], tree, c, ep, o, nil); err != nil {
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
	after, err := scanRoot(ctx, scratch, known, "")
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

// keepLost gives entries the scratch copy could not reproduce faithfully,
// and which the recipe left on the same inode, the original's properties.
func keepLost(before, after []*node, losses map[string]*lost) {
	if len(losses) == 0 {
		return
	}
	bm := byPath(before)
	for _, a := range after {
		l, b := losses[a.path], bm[a.path]
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
			a.typ, a.Type, a.Major, a.Minor, a.Size, a.SHA256 = b.typ, b.Type, b.Major, b.Minor, 0, ""
		}
	}
}

// clampNew brings the mtime of every entry the recipe made or changed down
// to the epoch, as Seal does in a build: a hook's edit otherwise carries the
// wall clock. Entries the recipe left alone keep theirs.
func clampNew(before, after []*node, ep time.Time) {
	bm := byPath(before)
	limit := ep.UnixNano()
	for _, a := range after {
		if a.mtimeNs() <= limit {
			continue
		}
		if b := bm[a.path]; b == nil || len(differences(b, a)) > 0 {
			a.MTime, a.MTimeNsec = ep.Unix(), int64(ep.Nanosecond())
		}
	}
}

func byPath(nodes []*node) map[string]*node {
	m := make(map[string]*node, len(nodes))
	for _, n := range nodes {
		m[n.path] = n
	}
	return m
}

// diffNodes compares two sorted scans path by path.
func diffNodes(before, after []*node) []ApplyChange {
	var out []ApplyChange
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		switch {
		case j == len(after) || (i < len(before) && before[i].path < after[j].path):
			out = append(out, ApplyChange{Path: before[i].path, Kind: "removed", Before: state(before[i])})
			i++
		case i == len(before) || after[j].path < before[i].path:
			out = append(out, ApplyChange{Path: after[j].path, Kind: "added", After: state(after[j])})
			j++
		default:
			b, a := before[i], after[j]
			i, j = i+1, j+1
			fields := differences(b, a)
			if len(fields) == 0 {
				continue
			}
			kind := "changed"
			switch fields[0] {
			case "type", "content", "target", "device", "links":
				kind = "replaced"
			}
			out = append(out, ApplyChange{Path: b.path, Kind: kind, Fields: fields, Before: state(b), After: state(a)})
		}
	}
	return out
}

func state(n *node) *EntryState {
	s := n.EntryState
	return &s
}

// differences lists what differs between two nodes of one path, the fields
// that make it a replacement first.
func differences(b, a *node) []string {
	if b.typ != a.typ {
		return []string{"type"}
	}
	var f []string
	switch {
	case b.typ == rootfs.TypeRegular && (b.Size != a.Size || b.SHA256 != a.SHA256):
		f = append(f, "content")
	case b.typ == rootfs.TypeSymlink && b.Target != a.Target:
		f = append(f, "target")
	case b.typ.IsDevice() && (b.Major != a.Major || b.Minor != a.Minor):
		f = append(f, "device")
	}
	if strings.Join(b.Links, "\x00") != strings.Join(a.Links, "\x00") {
		f = append(f, "links")
	}
	if b.perm != a.perm {
		f = append(f, "mode")
	}
	if b.UID != a.UID || b.GID != a.GID {
		f = append(f, "owner")
	}
	if b.mtimeNs() != a.mtimeNs() {
		f = append(f, "mtime")
	}
	if !sameXattrs(b.Xattrs, a.Xattrs) {
		f = append(f, "xattrs")
	}
	return f
}

func sameXattrs(x, y map[string][]byte) bool {
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		w, ok := y[k]
		if !ok || !bytes.Equal(v, w) {
			return false
		}
	}
	return true
}

// accountChanges says which users and groups the changed /etc/passwd and
// /etc/group add, remove or change.
func accountChanges(root, scratch string, changes []ApplyChange) ([]AccountChange, error) {
	var out []AccountChange
	for _, f := range []struct{ kind, path string }{{"user", "/etc/passwd"}, {"group", "/etc/group"}} {
		touched := false
		for _, ch := range changes {
			touched = touched || ch.Path == f.path
		}
		if !touched {
			continue
		}
		old, err := readAccounts(root, f.path, f.kind)
		if err != nil {
			return nil, err
		}
		cur, err := readAccounts(scratch, f.path, f.kind)
		if err != nil {
			return nil, err
		}
		names := map[string]bool{}
		for n := range old {
			names[n] = true
		}
		for n := range cur {
			names[n] = true
		}
		sorted := make([]string, 0, len(names))
		for n := range names {
			sorted = append(sorted, n)
		}
		sort.Strings(sorted)
		for _, n := range sorted {
			o, c := old[n], cur[n]
			switch {
			case o == nil:
				out = append(out, AccountChange{Kind: f.kind, Name: n, Action: "added", ID: c[2]})
			case c == nil:
				out = append(out, AccountChange{Kind: f.kind, Name: n, Action: "removed", ID: o[2]})
			case strings.Join(o, ":") != strings.Join(c, ":"):
				out = append(out, AccountChange{Kind: f.kind, Name: n, Action: "changed", ID: c[2]})
			}
		}
	}
	return out, nil
}

// readAccounts maps each name in a passwd or group file to its fields.
func readAccounts(dir, p, kind string) (map[string][]string, error) {
	d, err := openDirTree(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	out := map[string][]string{}
	b, err := d.root.ReadFile(rootRel(p))
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 || fields[0] == "" || strings.HasPrefix(fields[0], "#") {
			continue
		}
		out[fields[0]] = fields
	}
	return out, sc.Err()
}

// unitChanges reads the systemd symlinks among the changes as what
// systemctl enable, disable, mask and set-default make.
func unitChanges(changes []ApplyChange) []UnitChange {
	var out []UnitChange
	for _, ch := range changes {
		if !strings.Contains(ch.Path, "/systemd/") {
			continue
		}
		dir, name := path.Split(ch.Path)
		wants := strings.HasSuffix(dir, ".wants/") || strings.HasSuffix(dir, ".requires/") || strings.HasSuffix(dir, ".upholds/")
		if a := ch.After; a != nil && a.Type == "symlink" {
			u := UnitChange{Unit: name, Path: ch.Path, Target: a.Target}
			switch {
			case a.Target == "/dev/null":
				u.Action = "masked"
			case name == "default.target":
				u.Unit, u.Action = path.Base(a.Target), "default"
			default:
				u.Action = "enabled"
			}
			out = append(out, u)
			continue
		}
		if b := ch.Before; b != nil && b.Type == "symlink" {
			u := UnitChange{Unit: name, Path: ch.Path, Target: b.Target, Action: "disabled"}
			if b.Target == "/dev/null" {
				u.Action = "unmasked"
			} else if !wants && name == "default.target" {
				continue
			}
			out = append(out, u)
		}
	}
	return out
}

func (p *ApplyPlan) count(kind string) int {
	n := 0
	for _, ch := range p.Changes {
		if ch.Kind == kind {
			n++
		}
	}
	return n
}

func (p *ApplyPlan) summary() string {
	verb := "changed"
	if p.DryRun {
		verb = "would change"
	}
	return fmt.Sprintf("%s %s: %d added, %d replaced, %d removed, %d changed", p.Recipe, verb,
		p.count("added"), p.count("replaced"), p.count("removed"), p.count("changed"))
}

// WriteJSON writes the plan as one JSON document.
func (p *ApplyPlan) WriteJSON(w io.Writer) error {
	if p.Changes == nil {
		p.Changes = []ApplyChange{}
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteText writes the plan one change a line, in byte order of the path,
// then the users, groups and units, then a count.
func (p *ApplyPlan) WriteText(w io.Writer) error {
	bw := bufio.NewWriter(w)
	for _, ch := range p.Changes {
		fmt.Fprintf(bw, "%-8s %s  %s\n", ch.Kind, rootfs.Escape(ch.Path), describeChange(ch))
	}
	for _, a := range p.Accounts {
		id := "uid"
		if a.Kind == "group" {
			id = "gid"
		}
		fmt.Fprintf(bw, "%-8s %s %s (%s %s)\n", a.Kind, a.Action, a.Name, id, a.ID)
	}
	for _, u := range p.Units {
		fmt.Fprintf(bw, "%-8s %s %s  %s -> %s\n", "unit", u.Action, rootfs.Escape(u.Unit), rootfs.Escape(u.Path), rootfs.Escape(u.Target))
	}
	fmt.Fprintln(bw, p.summary())
	return bw.Flush()
}

func describeChange(ch ApplyChange) string {
	switch ch.Kind {
	case "added":
		return describeState(ch.After)
	case "removed":
		return describeState(ch.Before)
	}
	b, a := ch.Before, ch.After
	var parts []string
	for _, f := range ch.Fields {
		switch f {
		case "type":
			parts = append(parts, "was "+describeState(b), "now "+describeState(a))
		case "content":
			parts = append(parts, fmt.Sprintf("sha256=%s->%s size=%d->%d", b.SHA256, a.SHA256, b.Size, a.Size))
		case "target":
			parts = append(parts, "target="+rootfs.Escape(b.Target)+"->"+rootfs.Escape(a.Target))
		case "device":
			parts = append(parts, fmt.Sprintf("dev=%d,%d->%d,%d", b.Major, b.Minor, a.Major, a.Minor))
		case "links":
			parts = append(parts, "links="+escapeList(b.Links)+"->"+escapeList(a.Links))
		case "mode":
			parts = append(parts, "mode="+b.Mode+"->"+a.Mode)
		case "owner":
			parts = append(parts, fmt.Sprintf("owner=%d:%d->%d:%d", b.UID, b.GID, a.UID, a.GID))
		case "mtime":
			parts = append(parts, "mtime="+mtimeString(b)+"->"+mtimeString(a))
		case "xattrs":
			parts = append(parts, "xattrs="+strings.Join(sortedXattrNames(b.Xattrs), ",")+"->"+strings.Join(sortedXattrNames(a.Xattrs), ","))
		}
	}
	return strings.Join(parts, " ")
}

func describeState(s *EntryState) string {
	d := fmt.Sprintf("%s mode=%s owner=%d:%d", s.Type, s.Mode, s.UID, s.GID)
	switch s.Type {
	case "file":
		d += fmt.Sprintf(" size=%d sha256=%s", s.Size, s.SHA256)
	case "symlink":
		d += " target=" + rootfs.Escape(s.Target)
	case "char", "block":
		d += fmt.Sprintf(" dev=%d,%d", s.Major, s.Minor)
	}
	if len(s.Xattrs) > 0 {
		d += " xattrs=" + strings.Join(sortedXattrNames(s.Xattrs), ",")
	}
	return d
}

func mtimeString(s *EntryState) string {
	if s.MTimeNsec == 0 {
		return fmt.Sprint(s.MTime)
	}
	return fmt.Sprintf("%d.%09d", s.MTime, s.MTimeNsec)
}

func escapeList(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	out := make([]string, len(l))
	for i, s := range l {
		out[i] = rootfs.Escape(s)
	}
	return strings.Join(out, ",")
}
