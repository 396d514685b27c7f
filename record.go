package stamp

import (
	"bytes"
	"encoding/json"
	"path"
	"path/filepath"
	"time"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

// record is the build's own record embedded at rootfs.RecordPath: what went
// in and where every path came from. It never holds output digests, and the
// tree digest leaves it out, so it can name that digest.
type record struct {
	APIVersion string        `json:"apiVersion"`
	Name       string        `json:"name"`
	Arch       string        `json:"arch"`
	Epoch      int64         `json:"epoch"`
	Recipe     *recordRecipe `json:"recipe,omitempty"`
	// Params are the values of the recipe's parameters the build used.
	Params     map[string]string `json:"params,omitempty"`
	TreeDigest string            `json:"treeDigest"`
	Inputs     []recordInput     `json:"inputs"`
	// Views say what each format may add to its own view of the tree: an
	// output holds those entries beyond Entries. The list is stamp's, not
	// the recipe's, so that no output depends on which others were asked
	// for.
	Views   []formats.ViewAddition `json:"views"`
	Entries []recordEntry          `json:"entries"`
}

// recordRecipe names the recipe file and the digest of what in it decides
// the tree (recipes.Recipe.TreeDigest: no outputs, comments or layout), so
// an image says which recipe made it, and asking for another output does
// not change it. provenance.json has the digest of the file itself.
type recordRecipe struct {
	File         string `json:"file"`
	PhasesDigest string `json:"phasesDigest"`
}

type recordInput struct {
	Field  string `json:"field"`
	Kind   string `json:"kind"`
	URI    string `json:"uri"`
	Digest string `json:"digest"`
}

type recordEntry struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	SHA256 string `json:"sha256,omitempty"`
	Layer  string `json:"layer,omitempty"`
	Input  string `json:"input,omitempty"`
	Member string `json:"member,omitempty"`
}

func writeRecord(t *rootfs.Tree, rec *recipes.Recipe, ep time.Time, treeDigest string, inputs []plannedInput) error {
	r := record{APIVersion: "stamp.dev/v1alpha1", Name: rec.Name, Arch: rec.Arch, Epoch: ep.Unix(), TreeDigest: treeDigest,
		Inputs: []recordInput{}, Entries: []recordEntry{}}
	if rec.Path != "" {
		r.Recipe = &recordRecipe{File: path.Base(filepath.ToSlash(rec.Path)), PhasesDigest: rec.TreeDigest}
	}
	if pv := rec.ParamValues(); len(pv) > 0 {
		r.Params = pv
	}
	for _, pi := range inputs {
		r.Inputs = append(r.Inputs, recordInput{Field: pi.field, Kind: string(pi.in.Kind), URI: lockKey(rec.Dir, pi.in.URI), Digest: pi.in.Digest})
	}
	r.Views = formats.ViewAdditions()
	for _, e := range t.Entries() {
		r.Entries = append(r.Entries, recordEntry{Path: e.Path, Type: e.Type.String(), SHA256: e.Digest, Layer: e.Origin.Layer, Input: e.Origin.Input, Member: e.Origin.Member})
	}
	data, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	dir := path.Dir(rootfs.RecordPath)
	if _, err := t.MkdirAll(dir, rootfs.Header{Perm: 0o755, MTime: ep, Origin: rootfs.Origin{Layer: "stamp"}}); err != nil {
		return err
	}
	_, err = t.Create(rootfs.RecordPath, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: ep,
		Origin: rootfs.Origin{Layer: "stamp"}}, bytes.NewReader(data))
	return err
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
