package stamp

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"time"

	"github.com/stamp-dev/stamp/formats/attest"
	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// Names of the attestation files every build writes beside SHA256SUMS.
const (
	ProvenanceFile = attest.ProvenanceFile
	SBOMFile       = attest.SBOMFile
)

// dependencies lists every input of the plan and every host file a layer
// runs or reads beside them (layers.WithHostFiles: a hook's program), in
// plan order. Local paths are named relative to the recipe, so the
// provenance does not depend on where the checkout is.
func dependencies(rec *recipes.Recipe, phases []phase, inputs []plannedInput) ([]attest.Dependency, error) {
	var out []attest.Dependency
	for _, pi := range inputs {
		out = append(out, attest.Dependency{Field: pi.field, Kind: string(pi.in.Kind), URI: lockKey(rec.Dir, pi.in.URI), Digest: pi.in.Digest})
	}
	for _, ph := range phases {
		for _, st := range ph.steps {
			hf, ok := st.layer.(layers.WithHostFiles)
			if !ok {
				continue
			}
			for _, f := range hf.HostFiles() {
				sum, _, err := hashio.File(f.Path, false)
				if err != nil {
					return nil, fmt.Errorf("%s: %s %s: %w", st.label, f.Kind, f.Path, err)
				}
				out = append(out, attest.Dependency{Field: st.label, Kind: f.Kind, URI: lockKey(rec.Dir, f.Path), Digest: "sha256:" + sum})
			}
		}
	}
	return out, nil
}

// recipeDigest is the sha256 of the recipe file as stamp read it, "" when
// the recipe did not come from a file.
func recipeDigest(rec *recipes.Recipe) (string, error) {
	if rec.Path == "" {
		return "", nil
	}
	sum, _, err := hashio.File(rec.Path, false)
	if err != nil {
		return "", fmt.Errorf("recipe: %w", err)
	}
	return "sha256:" + sum, nil
}

// provenanceJSON makes provenance.json from what the plan and the build
// found.
func provenanceJSON(rec *recipes.Recipe, ep time.Time, recipeSum, treeDigest string, deps []attest.Dependency, subjects, byproducts []attest.Sum) ([]byte, error) {
	r := attest.Recipe{Name: rec.Name, Digest: recipeSum, Arch: rec.Arch, Seed: seed(rec), Params: rec.ParamValues()}
	if rec.Path != "" {
		r.File = filepath.Base(rec.Path)
	}
	return attest.ProvenanceJSON(r, ep, treeDigest, deps, subjects, byproducts)
}

// attestation is what provenance.json and the record say beyond the tree.
type attestation struct {
	recipeDigest string
	inputs       []plannedInput
	deps         []attest.Dependency
}

func newAttestation(rec *recipes.Recipe, phases []phase, inputs []plannedInput) (*attestation, error) {
	rd, err := recipeDigest(rec)
	if err != nil {
		return nil, err
	}
	deps, err := dependencies(rec, phases, inputs)
	if err != nil {
		return nil, err
	}
	return &attestation{recipeDigest: rd, inputs: inputs, deps: deps}, nil
}

func bytesSHA256(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}
