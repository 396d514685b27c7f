package stamp

import (
	"encoding/json"
	"path"
	"path/filepath"
	"time"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/formats/attest"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

// recordJSON is the record (attest.Record) that rootfs.Seal embeds at
// rootfs.RecordPath: entries are the sealed tree's, named by treeDigest.
func recordJSON(rec *recipes.Recipe, ep time.Time, treeDigest string, entries []*rootfs.Entry, inputs []plannedInput) ([]byte, error) {
	r := attest.Record{APIVersion: "stamp.dev/v1alpha1", Name: rec.Name, Arch: rec.Arch, Epoch: ep.Unix(), TreeDigest: treeDigest,
		Inputs: []attest.RecordInput{}, Entries: []attest.RecordEntry{}}
	if rec.Path != "" {
		r.Recipe = &attest.RecordRecipe{File: path.Base(filepath.ToSlash(rec.Path)), PhasesDigest: rec.TreeDigest}
	}
	if pv := rec.ParamValues(); len(pv) > 0 {
		r.Params = pv
	}
	for _, pi := range inputs {
		r.Inputs = append(r.Inputs, attest.RecordInput{Field: pi.field, Kind: string(pi.in.Kind), URI: lockKey(rec.Dir, pi.in.URI), Digest: pi.in.Digest})
	}
	r.Views = formats.ViewAdditions()
	for _, e := range entries {
		r.Entries = append(r.Entries, attest.RecordEntry{Path: e.Path, Type: e.Type.String(), SHA256: e.Digest, Layer: e.Origin.Layer, Input: e.Origin.Input, Member: e.Origin.Member})
	}
	data, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

// relativeOrigins names host files in origins (a files layer's source, a
// hook) relative to the recipe, as the lock does, so that the record and
// manifest.txt, and with them the image's bytes, do not depend on where the
// recipe's checkout lies.
func relativeOrigins(t *rootfs.Tree, recipeDir string) {
	if recipeDir == "" {
		return
	}
	for _, e := range t.Entries() {
		if filepath.IsAbs(e.Origin.Member) {
			e.Origin.Member = lockKey(recipeDir, e.Origin.Member)
		}
	}
}

// withRelativeOrigins is relativeOrigins on copies of entries (sharing
// their inodes, so hard links stay links), leaving the tree as it is.
func withRelativeOrigins(entries []*rootfs.Entry, recipeDir string) []*rootfs.Entry {
	out := make([]*rootfs.Entry, len(entries))
	for i, e := range entries {
		c := *e
		if recipeDir != "" && filepath.IsAbs(c.Origin.Member) {
			c.Origin.Member = lockKey(recipeDir, c.Origin.Member)
		}
		out[i] = &c
	}
	return out
}
