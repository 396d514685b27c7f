package hostroot

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/accountdb"
)

// Change is one path that apply changes in a root.
type Change struct {
	Path string `json:"path"`
	// Kind is added, replaced (type, content, symlink target, device
	// numbers or hard links differ), removed, or changed (metadata only).
	Kind string `json:"kind"`
	// Fields name what differs for replaced and changed paths: type,
	// content, target, device, links, mode, owner, mtime, xattrs.
	Fields []string `json:"fields,omitempty"`
	Before *Entry   `json:"before,omitempty"`
	After  *Entry   `json:"after,omitempty"`
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

// Plan is what apply changes in a root, or in a dry run would change.
type Plan struct {
	Recipe       string          `json:"recipe"`
	RecipeDigest string          `json:"recipeDigest,omitempty"`
	Root         string          `json:"root"`
	DryRun       bool            `json:"dryRun"`
	Changes      []Change        `json:"changes"`
	Accounts     []AccountChange `json:"accounts,omitempty"`
	Units        []UnitChange    `json:"units,omitempty"`
}

// Diff compares two sorted scans of a root path by path: what turns before
// into after.
func Diff(before, after []*Entry) []Change {
	var out []Change
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		switch {
		case j == len(after) || (i < len(before) && before[i].Path < after[j].Path):
			out = append(out, Change{Path: before[i].Path, Kind: "removed", Before: before[i]})
			i++
		case i == len(before) || after[j].Path < before[i].Path:
			out = append(out, Change{Path: after[j].Path, Kind: "added", After: after[j]})
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
			out = append(out, Change{Path: b.Path, Kind: kind, Fields: fields, Before: b, After: a})
		}
	}
	return out
}

// differences lists what differs between two entries of one path, the
// fields that make it a replacement first.
func differences(b, a *Entry) []string {
	if b.Type != a.Type {
		return []string{"type"}
	}
	var f []string
	switch {
	case b.Type == rootfs.TypeRegular && (b.Size != a.Size || b.Digest != a.Digest):
		f = append(f, "content")
	case b.Type == rootfs.TypeSymlink && b.Target != a.Target:
		f = append(f, "target")
	case b.Type.IsDevice() && (b.Major != a.Major || b.Minor != a.Minor):
		f = append(f, "device")
	}
	if strings.Join(b.Links, "\x00") != strings.Join(a.Links, "\x00") {
		f = append(f, "links")
	}
	if b.Perm != a.Perm {
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

func sameXattrs(x, y map[string]string) bool {
	if len(x) != len(y) {
		return false
	}
	for k, v := range x {
		if w, ok := y[k]; !ok || v != w {
			return false
		}
	}
	return true
}

// accountChanges says which users and groups the changed /etc/passwd and
// /etc/group add, remove or change.
func accountChanges(root, scratch string, changes []Change) ([]AccountChange, error) {
	var out []AccountChange
	for _, f := range []struct{ kind, path string }{{"user", accountdb.Passwd}, {"group", accountdb.Group}} {
		touched := false
		for _, ch := range changes {
			touched = touched || ch.Path == f.path
		}
		if !touched {
			continue
		}
		old, err := readAccounts(root, f.path)
		if err != nil {
			return nil, err
		}
		cur, err := readAccounts(scratch, f.path)
		if err != nil {
			return nil, err
		}
		out = append(out, accountDiff(f.kind, old, cur)...)
	}
	return out, nil
}

// accountDiff compares two readings of one passwd or group file, by name.
func accountDiff(kind string, old, cur map[string][]string) []AccountChange {
	union := map[string][]string{}
	maps.Copy(union, old)
	maps.Copy(union, cur)
	var out []AccountChange
	for _, n := range slices.Sorted(maps.Keys(union)) {
		o, c := old[n], cur[n]
		switch {
		case o == nil:
			out = append(out, AccountChange{Kind: kind, Name: n, Action: "added", ID: c[2]})
		case c == nil:
			out = append(out, AccountChange{Kind: kind, Name: n, Action: "removed", ID: o[2]})
		case strings.Join(o, ":") != strings.Join(c, ":"):
			out = append(out, AccountChange{Kind: kind, Name: n, Action: "changed", ID: c[2]})
		}
	}
	return out
}

// readAccounts maps each name in a passwd or group file to its fields. The
// file is read as the root's own, through an os.Root, which follows a
// symlink only inside dir.
func readAccounts(dir, p string) (map[string][]string, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	out := map[string][]string{}
	b, err := r.ReadFile(p[1:])
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := accountdb.Fields(sc.Text())
		if len(fields) < 3 || fields[0] == "" {
			continue
		}
		out[fields[0]] = fields
	}
	return out, sc.Err()
}

// unitChanges reads the systemd symlinks among the changes as what
// systemctl enable, disable, mask and set-default make.
func unitChanges(changes []Change) []UnitChange {
	var out []UnitChange
	for _, ch := range changes {
		if !strings.Contains(ch.Path, "/systemd/") {
			continue
		}
		dir, name := path.Split(ch.Path)
		wants := strings.HasSuffix(dir, ".wants/") || strings.HasSuffix(dir, ".requires/") || strings.HasSuffix(dir, ".upholds/")
		if a := ch.After; a != nil && a.Type == rootfs.TypeSymlink {
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
		if b := ch.Before; b != nil && b.Type == rootfs.TypeSymlink {
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

func (p *Plan) count(kind string) int {
	n := 0
	for _, ch := range p.Changes {
		if ch.Kind == kind {
			n++
		}
	}
	return n
}

// Summary is the plan's one-line count of changes.
func (p *Plan) Summary() string {
	verb := "changed"
	if p.DryRun {
		verb = "would change"
	}
	return fmt.Sprintf("%s %s: %d added, %d replaced, %d removed, %d changed", p.Recipe, verb,
		p.count("added"), p.count("replaced"), p.count("removed"), p.count("changed"))
}

// WriteJSON writes the plan as one JSON document.
func (p *Plan) WriteJSON(w io.Writer) error {
	if p.Changes == nil {
		p.Changes = []Change{}
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
func (p *Plan) WriteText(w io.Writer) error {
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
	fmt.Fprintln(bw, p.Summary())
	return bw.Flush()
}

func describeChange(ch Change) string {
	switch ch.Kind {
	case "added":
		return describeEntry(ch.After)
	case "removed":
		return describeEntry(ch.Before)
	}
	b, a := ch.Before, ch.After
	var parts []string
	for _, f := range ch.Fields {
		switch f {
		case "type":
			parts = append(parts, "was "+describeEntry(b), "now "+describeEntry(a))
		case "content":
			parts = append(parts, fmt.Sprintf("sha256=%s->%s size=%d->%d", b.Digest, a.Digest, b.Size, a.Size))
		case "target":
			parts = append(parts, "target="+rootfs.Escape(b.Target)+"->"+rootfs.Escape(a.Target))
		case "device":
			parts = append(parts, fmt.Sprintf("dev=%d,%d->%d,%d", b.Major, b.Minor, a.Major, a.Minor))
		case "links":
			parts = append(parts, "links="+escapeList(b.Links)+"->"+escapeList(a.Links))
		case "mode":
			parts = append(parts, "mode="+b.mode()+"->"+a.mode())
		case "owner":
			parts = append(parts, fmt.Sprintf("owner=%d:%d->%d:%d", b.UID, b.GID, a.UID, a.GID))
		case "mtime":
			parts = append(parts, "mtime="+mtimeString(b)+"->"+mtimeString(a))
		case "xattrs":
			parts = append(parts, "xattrs="+strings.Join(b.XattrNames(), ",")+"->"+strings.Join(a.XattrNames(), ","))
		}
	}
	return strings.Join(parts, " ")
}

func describeEntry(e *Entry) string {
	d := fmt.Sprintf("%s mode=%s owner=%d:%d", e.Type, e.mode(), e.UID, e.GID)
	switch e.Type {
	case rootfs.TypeRegular:
		d += fmt.Sprintf(" size=%d sha256=%s", e.Size, e.Digest)
	case rootfs.TypeSymlink:
		d += " target=" + rootfs.Escape(e.Target)
	case rootfs.TypeChar, rootfs.TypeBlock:
		d += fmt.Sprintf(" dev=%d,%d", e.Major, e.Minor)
	}
	if len(e.Xattrs) > 0 {
		d += " xattrs=" + strings.Join(e.XattrNames(), ",")
	}
	return d
}

func mtimeString(e *Entry) string {
	if e.MTime.Nanosecond() == 0 {
		return fmt.Sprint(e.MTime.Unix())
	}
	return fmt.Sprintf("%d.%09d", e.MTime.Unix(), e.MTime.Nanosecond())
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
