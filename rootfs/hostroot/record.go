package hostroot

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
)

// Where apply keeps, inside the root, what undo needs.
const (
	appliedPath = "/var/lib/stamp/applied.json"
	backupDir   = "/var/lib/stamp/backup"
	// maxRecord bounds what undo reads as a record: a node's worth of
	// packages records a few MiB.
	maxRecord = 256 << 20
)

// record is /var/lib/stamp/applied.json.
type record struct {
	Version      int    `json:"version"`
	Recipe       string `json:"recipe"`
	RecipeDigest string `json:"recipeDigest,omitempty"`
	Epoch        int64  `json:"epoch"`
	// Changes say what each path was before (content of files in
	// backup/<sha256>) and what apply made of it.
	Changes []Change `json:"changes"`
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

// changeJSON is a Change as the record holds it, before it is checked.
type changeJSON struct {
	Path   string     `json:"path"`
	Kind   string     `json:"kind"`
	Fields []string   `json:"fields,omitempty"`
	Before *entryJSON `json:"before,omitempty"`
	After  *entryJSON `json:"after,omitempty"`
}

// backupPath is where apply saves the content whose sha256 is digest.
func backupPath(digest string) string { return path.Join(backupDir, digest) }

// isUnder reports whether p is anc or lies below it.
func isUnder(p, anc string) bool {
	return p == anc || anc == "/" || strings.HasPrefix(p, anc+"/")
}

// parents lists the parent directories of changed paths, plus those of the
// record, deepest first.
func parents(changes []Change, extra []string) []string {
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
func recordConflicts(changes []Change) []string {
	var out []string
	for _, ch := range changes {
		holds := isUnder(backupDir, ch.Path) && (ch.After == nil || ch.After.Type != rootfs.TypeDir)
		if holds || isUnder(ch.Path, backupDir) || ch.Path == appliedPath {
			out = append(out, ch.Path)
		}
	}
	return out
}

// readRecord reads and checks the record of live. Anyone who can write to
// the root can edit it, so nothing in it is taken on trust: every path must
// be a clean path in the root, every change must be one apply makes, and
// none may touch the record's own place.
func readRecord(live *dirTree, root string) (*record, error) {
	data, err := live.readFile(appliedPath, maxRecord)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s has no %s: nothing to undo", root, appliedPath)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", appliedPath, err)
	}
	// Version first: a record of another version may not decode as this
	// one does.
	var v struct{ Version int }
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", appliedPath, err)
	}
	if v.Version != recordVersion {
		return nil, fmt.Errorf("%s: record version %d, this stamp reads %d", appliedPath, v.Version, recordVersion)
	}
	var rec record
	if err := json.Unmarshal(data, &rec); err != nil {
		return nil, fmt.Errorf("%s: %w", appliedPath, err)
	}
	for i := 1; i < len(rec.Changes); i++ {
		if rec.Changes[i-1].Path >= rec.Changes[i].Path {
			return nil, fmt.Errorf("%s: changes: %q is not in byte order after %q", appliedPath, rec.Changes[i].Path, rec.Changes[i-1].Path)
		}
	}
	if err := checkRecordPaths(&rec); err != nil {
		return nil, fmt.Errorf("%s: %w", appliedPath, err)
	}
	return &rec, nil
}

// UnmarshalJSON reads a change as the record holds it, and checks it: a
// clean path, a kind apply makes with the states that kind has (before for
// all but added, after for all but removed), only the root's own metadata
// changed at /, and entries as entryOf checks them.
func (ch *Change) UnmarshalJSON(b []byte) error {
	var cj changeJSON
	if err := json.Unmarshal(b, &cj); err != nil {
		return err
	}
	c, err := changeOf(&cj)
	if err != nil {
		return fmt.Errorf("changes: %q: %w", cj.Path, err)
	}
	*ch = *c
	return nil
}

func changeOf(cj *changeJSON) (*Change, error) {
	if err := checkPath(cj.Path); err != nil {
		return nil, err
	}
	ch := &Change{Path: cj.Path, Kind: cj.Kind, Fields: cj.Fields}
	wantBefore, wantAfter := cj.Kind != "added", cj.Kind != "removed"
	switch {
	case cj.Kind != "added" && cj.Kind != "removed" && cj.Kind != "replaced" && cj.Kind != "changed":
		return nil, fmt.Errorf("kind %q is none apply records", cj.Kind)
	case (cj.Before != nil) != wantBefore || (cj.After != nil) != wantAfter:
		return nil, fmt.Errorf("a %s path with before %v and after %v", cj.Kind, cj.Before != nil, cj.After != nil)
	case cj.Path == "/" && cj.Kind != "changed":
		return nil, fmt.Errorf("the root itself %s", cj.Kind)
	}
	var err error
	if cj.Before != nil {
		if ch.Before, err = entryOf(cj.Path, cj.Before); err != nil {
			return nil, fmt.Errorf("before: %w", err)
		}
	}
	if cj.After != nil {
		if ch.After, err = entryOf(cj.Path, cj.After); err != nil {
			return nil, fmt.Errorf("after: %w", err)
		}
	}
	return ch, nil
}

// checkRecordPaths holds the record's other paths to what apply writes: the
// directories whose mtimes it keeps are clean paths, the ones it made are
// the record's own place, and no change touches that place.
func checkRecordPaths(rec *record) error {
	for _, d := range rec.Dirs {
		if err := checkPath(d.Path); err != nil {
			return fmt.Errorf("dirs: %w", err)
		}
		if d.MTimeNsec < 0 || d.MTimeNsec >= 1e9 {
			return fmt.Errorf("dirs: %q: mtimeNsec %d out of range", d.Path, d.MTimeNsec)
		}
	}
	for _, c := range rec.Created {
		if err := checkPath(c); err != nil || c == "/" || !isUnder(backupDir, c) {
			return fmt.Errorf("created: %q is not the record's place or a parent of it", c)
		}
	}
	if rc := recordConflicts(rec.Changes); len(rc) > 0 {
		return fmt.Errorf("changes name the record's own place: %s", strings.Join(rc, ", "))
	}
	return nil
}
