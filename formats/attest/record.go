package attest

import "github.com/stamp-dev/stamp/formats"

// Record is the build's own record embedded at rootfs.RecordPath: what went
// in and where every path came from. It never holds output digests, and the
// tree digest leaves it out, so it can name that digest.
type Record struct {
	APIVersion string        `json:"apiVersion"`
	Name       string        `json:"name"`
	Arch       string        `json:"arch"`
	Epoch      int64         `json:"epoch"`
	Recipe     *RecordRecipe `json:"recipe,omitempty"`
	// Params are the values of the recipe's parameters the build used.
	Params     map[string]string `json:"params,omitempty"`
	TreeDigest string            `json:"treeDigest"`
	Inputs     []RecordInput     `json:"inputs"`
	// Views say what each format may add to its own view of the tree: an
	// output holds those entries beyond Entries. The list is stamp's, not
	// the recipe's, so that no output depends on which others were asked
	// for.
	Views   []formats.ViewAddition `json:"views"`
	Entries []RecordEntry          `json:"entries"`
}

// RecordRecipe names the recipe file and the digest of what in it decides
// the tree (recipes.Recipe.TreeDigest: no outputs, comments or layout), so
// an image says which recipe made it, and asking for another output does
// not change it. provenance.json has the digest of the file itself.
type RecordRecipe struct {
	File         string `json:"file"`
	PhasesDigest string `json:"phasesDigest"`
}

// RecordInput is one input of the build.
type RecordInput struct {
	Field  string `json:"field"`
	Kind   string `json:"kind"`
	URI    string `json:"uri"`
	Digest string `json:"digest"`
}

// RecordEntry is one path of the sealed tree and where it came from.
type RecordEntry struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	SHA256 string `json:"sha256,omitempty"`
	Layer  string `json:"layer,omitempty"`
	Input  string `json:"input,omitempty"`
	Member string `json:"member,omitempty"`
}
