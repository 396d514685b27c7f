// Package attest writes and reads what a build says about itself beside and
// inside its outputs: provenance.json (an in-toto statement with SLSA
// provenance), sbom.spdx.json and the record embedded in the image. It is
// handed plain values (the inputs, the installed packages) by the conductor,
// so that it knows no recipe and parses no package database: formats may
// import neither recipes nor packages.
package attest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// Names of the files every build writes beside its outputs.
const (
	SumsFile       = "SHA256SUMS"
	ManifestFile   = "manifest.txt"
	ProvenanceFile = "provenance.json"
	SBOMFile       = "sbom.spdx.json"
)

// The identifiers provenance.json carries.
const (
	StatementType  = "https://in-toto.io/Statement/v1"
	ProvenanceType = "https://slsa.dev/provenance/v1"
	// BuildType names what externalParameters mean: a stamp recipe.
	BuildType = "https://stamp.dev/buildtypes/recipe/v1alpha1"
	// BuilderID names the builder; its version map says which build of it.
	BuilderID = "https://github.com/stamp-dev/stamp/cmd/stamp"
)

// Statement is an in-toto Statement v1 carrying SLSA Provenance v1.
type Statement struct {
	Type          string               `json:"_type"`
	Subject       []ResourceDescriptor `json:"subject"`
	PredicateType string               `json:"predicateType"`
	Predicate     Provenance           `json:"predicate"`
}

// ResourceDescriptor is the in-toto ResourceDescriptor.
type ResourceDescriptor struct {
	Name        string            `json:"name,omitempty"`
	URI         string            `json:"uri,omitempty"`
	Digest      map[string]string `json:"digest,omitempty"`
	MediaType   string            `json:"mediaType,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Provenance is the SLSA Provenance v1 predicate.
type Provenance struct {
	BuildDefinition BuildDefinition `json:"buildDefinition"`
	RunDetails      RunDetails      `json:"runDetails"`
}

type BuildDefinition struct {
	BuildType            string               `json:"buildType"`
	ExternalParameters   map[string]any       `json:"externalParameters"`
	InternalParameters   map[string]any       `json:"internalParameters,omitempty"`
	ResolvedDependencies []ResourceDescriptor `json:"resolvedDependencies,omitempty"`
}

type RunDetails struct {
	Builder    Builder              `json:"builder"`
	Byproducts []ResourceDescriptor `json:"byproducts,omitempty"`
}

// Builder identifies the stamp binary that built: its module version, the
// Go version and every dependency's version, since compressed bytes may
// legitimately differ across those.
type Builder struct {
	ID      string            `json:"id"`
	Version map[string]string `json:"version,omitempty"`
}

// ThisBuilder describes the running binary from debug.ReadBuildInfo.
func ThisBuilder() Builder {
	b := Builder{ID: BuilderID, Version: map[string]string{}}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		b.Version["stamp"] = "unknown"
		return b
	}
	b.Version["stamp"] = bi.Main.Version
	b.Version["go"] = bi.GoVersion
	for _, d := range bi.Deps {
		v := d.Version
		if d.Replace != nil {
			v += " => " + d.Replace.Path + " " + d.Replace.Version
		}
		b.Version["module:"+d.Path] = v
	}
	for _, s := range bi.Settings {
		// vcs.time is the commit's time, not the build's, but it says nothing
		// the revision does not.
		if s.Key == "vcs.time" {
			continue
		}
		b.Version["build:"+s.Key] = s.Value
	}
	return b
}

// DiffBuilders lists the version keys in which two builders differ, in
// byte order, as "key: a -> b".
func DiffBuilders(a, b Builder) []string {
	keys := map[string]bool{}
	for k := range a.Version {
		keys[k] = true
	}
	for k := range b.Version {
		keys[k] = true
	}
	sorted := slices.Sorted(maps.Keys(keys))
	var out []string
	if a.ID != b.ID {
		out = append(out, fmt.Sprintf("id: %s -> %s", a.ID, b.ID))
	}
	for _, k := range sorted {
		va, vb := a.Version[k], b.Version[k]
		if va != vb {
			out = append(out, fmt.Sprintf("%s: %s -> %s", k, orNone(va), orNone(vb)))
		}
	}
	return out
}

// ReadStatement reads a provenance.json.
func ReadStatement(p string) (*Statement, error) {
	data, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var st Statement
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	if st.Type != StatementType || st.PredicateType != ProvenanceType {
		return nil, fmt.Errorf("%s: not an in-toto statement with SLSA provenance v1 (_type %q, predicateType %q)", p, st.Type, st.PredicateType)
	}
	return &st, nil
}

// Dependency is one thing the build read besides the recipe: an input, or a
// host hook. Field is the recipe field that named it.
type Dependency struct {
	Field, Kind, URI, Digest string
}

// Sum is a file and its sha256, as a line of SHA256SUMS says, and what
// its output says of it (annotations of its subject).
type Sum struct {
	Name, SHA256 string
	Annotations  map[string]string
}

// Recipe is what provenance.json says of the recipe and the choices made
// for it.
type Recipe struct {
	Name string
	// File is the recipe file's base name, Digest its "sha256:…"; both ""
	// when the recipe did not come from a file.
	File, Digest string
	Arch, Seed   string
	// Params are the values the recipe's parameters took.
	Params map[string]string
}

func digestSet(d string) map[string]string {
	algo, hex, ok := strings.Cut(d, ":")
	if !ok {
		return map[string]string{"sha256": d}
	}
	return map[string]string{algo: hex}
}

// ProvenanceJSON makes provenance.json. It holds no wall-clock time, so the
// same build gives the same bytes.
func ProvenanceJSON(rec Recipe, ep time.Time, treeDigest string, deps []Dependency, subjects, byproducts []Sum) ([]byte, error) {
	st := Statement{Type: StatementType, PredicateType: ProvenanceType, Subject: []ResourceDescriptor{}}
	for _, s := range subjects {
		st.Subject = append(st.Subject, ResourceDescriptor{Name: s.Name, Digest: map[string]string{"sha256": s.SHA256}, Annotations: s.Annotations})
	}
	recipe := map[string]any{"name": rec.Name}
	if rec.File != "" {
		recipe["file"] = rec.File
	}
	if rec.Digest != "" {
		recipe["digest"] = digestSet(rec.Digest)
	}
	bd := BuildDefinition{
		BuildType:          BuildType,
		ExternalParameters: map[string]any{"recipe": recipe, "epoch": ep.Unix()},
		InternalParameters: map[string]any{"arch": rec.Arch, "seed": rec.Seed},
	}
	// The recipe's digest is of the file as written; the values its
	// ${name}s took are what else the caller chose.
	if len(rec.Params) > 0 {
		bd.ExternalParameters["parameters"] = rec.Params
	}
	for _, d := range deps {
		bd.ResolvedDependencies = append(bd.ResolvedDependencies, ResourceDescriptor{
			Name: d.Field, URI: d.URI, Digest: digestSet(d.Digest), Annotations: map[string]string{"kind": d.Kind}})
	}
	rd := RunDetails{Builder: ThisBuilder()}
	rd.Byproducts = append(rd.Byproducts, ResourceDescriptor{Name: "tree", Digest: digestSet(treeDigest),
		MediaType: "text/vnd.stamp.manifest", Annotations: map[string]string{"description": "sha256 of the sealed tree's manifest without origins"}})
	for _, b := range byproducts {
		rd.Byproducts = append(rd.Byproducts, ResourceDescriptor{Name: b.Name, Digest: map[string]string{"sha256": b.SHA256}})
	}
	st.Predicate = Provenance{BuildDefinition: bd, RunDetails: rd}
	return CanonicalJSON(st)
}

// CanonicalJSON marshals v with every object's keys in byte order, two-space
// indentation and a final newline, so equal values give equal bytes.
func CanonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	// encoding/json writes map keys sorted.
	if err := enc.Encode(generic); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
