package recipes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Load reads and parses the recipe at file. Recipe.Path is file as given;
// Recipe.Dir is the absolute directory holding it.
func Load(file string) (*Recipe, error) { return LoadWith(file, Options{}) }

// LoadWith is Load with parameter values and the host's apt sources.
func LoadWith(file string, o Options) (*Recipe, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read recipe: %w", err)
	}
	r, err := ParseWith(data, file, o)
	if err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(file)
	if err != nil {
		return nil, fmt.Errorf("recipe %s: %w", file, err)
	}
	r.Dir = filepath.Dir(abs)
	return r, nil
}

// Parse decodes, defaults and validates a recipe. filename is used in errors
// and becomes Recipe.Path; Recipe.Dir stays empty. On any problem it returns
// nil and every *Error found, in document order.
func Parse(data []byte, filename string) (*Recipe, error) {
	return ParseWith(data, filename, Options{})
}

// ParseWith is Parse with parameter values and the host's apt sources:
// ${name} in every string value is replaced before anything is decoded, so
// every check sees the value the build will use.
func ParseWith(data []byte, filename string, o Options) (r *Recipe, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: filename, Line: 1, Msg: "the recipe is empty"}
		}
		return nil, syntaxError(filename, err)
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		return nil, &Error{File: filename, Line: extra.Line, Msg: "a recipe is one YAML document; found a second one"}
	case !errors.Is(err, io.EOF):
		return nil, syntaxError(filename, err)
	}
	d := &decoder{file: filename, budget: nodeBudget}
	var root *yaml.Node
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	} else {
		root = &doc
	}
	ps := d.declareParams(root, o)
	if len(d.errs) == 0 {
		d.conditions(root, ps)
	}
	if len(d.errs) == 0 {
		d.substitute(root, "", ps, map[*yaml.Node]bool{})
		d.checkSet(ps)
	}
	// A value that failed to substitute would only fail again as a path or
	// a mode; the parameter errors say what to fix.
	if len(d.errs) == 0 {
		r = d.recipe(root)
	}
	if len(d.errs) > 0 {
		sort.SliceStable(d.errs, func(i, j int) bool {
			a, b := d.errs[i], d.errs[j]
			if a.Line != b.Line {
				return a.Line < b.Line
			}
			return a.Column < b.Column
		})
		if len(d.errs) > maxErrors {
			d.errs = append(d.errs[:maxErrors], &Error{File: filename, Msg: fmt.Sprintf("and %d more errors", len(d.errs)-maxErrors)})
		}
		return nil, join(d.errs)
	}
	r.Path = filename
	r.HostPaths = d.hostPaths
	if r.TreeDigest, err = treeDigest(root, d.skipped); err != nil {
		return nil, &Error{File: filename, Line: 1, Msg: err.Error()}
	}
	for _, p := range ps.list {
		r.Params = append(r.Params, *p)
	}
	return r, nil
}

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// maxEpoch is the end of year 9999, where tar, cpio and ext4 times give out long before.
const maxEpoch = 253402300799

func (d *decoder) recipe(n *yaml.Node) *Recipe {
	r := &Recipe{Arch: "amd64", Seal: Seal{Cleanup: Cleanup{Default: true}}}
	var outputs []outputNode
	seen := d.mapping(n, "", map[string]handler{
		"apiVersion": func(v *yaml.Node, f string) {
			r.APIVersion = d.str(v, f)
			if r.APIVersion != APIVersion && !d.failed(v) {
				d.fail(v, f, "must be %q, got %q", APIVersion, r.APIVersion)
			}
		},
		"kind": func(v *yaml.Node, f string) {
			r.Kind = d.str(v, f)
			if r.Kind != Kind && !d.failed(v) {
				d.fail(v, f, "must be %q, got %q", Kind, r.Kind)
			}
		},
		"name": func(v *yaml.Node, f string) {
			r.Name = d.str(v, f)
			if !nameRE.MatchString(r.Name) && !d.failed(v) {
				d.fail(v, f, "name %q must match [a-z0-9][a-z0-9._-]*", r.Name)
			}
		},
		"arch": func(v *yaml.Node, f string) {
			r.Arch = d.str(v, f)
			if r.Arch != "amd64" && r.Arch != "arm64" && !d.failed(v) {
				d.fail(v, f, "arch %q must be amd64 or arm64", r.Arch)
			}
		},
		"epoch": func(v *yaml.Node, f string) { r.Epoch, _ = d.integer(v, f, 0, maxEpoch) },
		"seed": func(v *yaml.Node, f string) {
			r.Seed = d.str(v, f)
			if r.Seed == "" && !d.failed(v) {
				d.fail(v, f, "seed must not be empty; leave it out to derive IDs from the name")
			}
		},
		"params":    func(*yaml.Node, string) {}, // declared and substituted before the rest
		"base":      func(v *yaml.Node, f string) { r.Base = d.base(v, f) },
		"customize": func(v *yaml.Node, f string) { r.Customize = d.phase(v, f) },
		"provision": func(v *yaml.Node, f string) { r.Provision = d.phase(v, f) },
		"seal":      func(v *yaml.Node, f string) { r.Seal = d.seal(v, f) },
		"outputs": func(v *yaml.Node, f string) {
			d.list(v, f, func(item *yaml.Node, f string) {
				if !d.skipped[d.resolveQuiet(item)] {
					outputs = append(outputs, d.output(item, f))
				}
			})
		},
		"offline-only": func(v *yaml.Node, f string) { r.OfflineOnly = d.boolean(v, f) },
		"release":      func(v *yaml.Node, f string) { r.Release = d.treePath(v, f) },
	})
	if seen == nil {
		return r
	}
	for _, k := range []string{"apiVersion", "kind", "name", "base"} {
		if seen[k] == nil {
			d.fail(n, k, "%s is required", k)
		}
	}
	r.Outputs = d.linkOutputs(outputs)
	d.offlineOnly(r)
	return r
}

// failed reports whether the last error is about node n, so a value that
// already failed to decode is not reported twice.
func (d *decoder) failed(n *yaml.Node) bool {
	if len(d.errs) == 0 {
		return false
	}
	e := d.errs[len(d.errs)-1]
	n = d.resolveQuiet(n)
	return n != nil && e.Line == n.Line && e.Column == n.Column
}

func (d *decoder) resolveQuiet(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 64; i++ {
		n = n.Alias
	}
	return n
}

// hostPath reads a path on the build host: relative to the recipe or absolute.
func (d *decoder) hostPath(n *yaml.Node, field string) string {
	s := d.str(n, field)
	if s == "" && !d.failed(n) {
		d.fail(d.resolveQuiet(n), field, "must not be empty")
	}
	if strings.ContainsRune(s, 0) {
		d.fail(d.resolveQuiet(n), field, "contains a NUL byte")
	}
	if s != "" && !strings.Contains(s, "://") {
		d.hostPaths = append(d.hostPaths, HostPath{Field: field, Path: s, Params: d.substituted[d.resolveQuiet(n)]})
	}
	return s
}

// treePath reads an absolute path inside the image. Trailing slashes are
// kept: for files they mean "copy a directory".
func (d *decoder) treePath(n *yaml.Node, field string) string {
	s := d.str(n, field)
	if d.failed(n) {
		return s
	}
	at := d.resolveQuiet(n)
	switch {
	case !strings.HasPrefix(s, "/"):
		d.fail(at, field, "path %q must be absolute (start with /)", s)
	case strings.ContainsRune(s, 0):
		d.fail(at, field, "path %q contains a NUL byte", s)
	case slices.Contains(strings.Split(s, "/"), ".."):
		d.fail(at, field, "path %q must not contain .. components", s)
	}
	return s
}

// glob reads an absolute path pattern ("*", "?", "[...]", and "**" across directories).
func (d *decoder) glob(n *yaml.Node, field string) string {
	s := d.treePath(n, field)
	if d.failed(n) {
		return s
	}
	if _, err := path.Match(strings.ReplaceAll(s, "**", "*"), ""); err != nil {
		d.fail(d.resolveQuiet(n), field, "pattern %q is malformed", s)
	}
	return s
}

func (d *decoder) sha(n *yaml.Node, field string) string {
	s := d.str(n, field)
	if d.failed(n) {
		return ""
	}
	h, err := NormalizeSHA256(s)
	if err != nil {
		d.fail(d.resolveQuiet(n), field, "%s", err.Error())
	}
	return h
}

// source checks a tarball location: a host path or an http(s) URL, which
// needs a digest since the recipe would otherwise not pin what it builds.
func (d *decoder) source(m *yaml.Node, field, src, shaField string, shaGiven bool) {
	scheme, _, isURL := strings.Cut(src, "://")
	if !isURL {
		return
	}
	if scheme != "https" && scheme != "http" {
		d.fail(m, field, "URL scheme %q is not supported; use https:// or a path relative to the recipe", scheme)
		return
	}
	if !shaGiven {
		d.fail(m, shaField, "sha256 is required when the tarball is a URL")
	}
}

func (d *decoder) base(n *yaml.Node, field string) Base {
	b := Base{Line: line(n)}
	seen := d.mapping(n, field, map[string]handler{
		"tarball": func(v *yaml.Node, f string) { b.Tarball = d.hostPath(v, f) },
		"sha256":  func(v *yaml.Node, f string) { b.SHA256 = d.sha(v, f) },
		"debs":    func(v *yaml.Node, f string) { x := d.debs(v, f, true); b.Debs = &x },
		"pre":     func(v *yaml.Node, f string) { b.Pre = d.hooks(v, f) },
		"post":    func(v *yaml.Node, f string) { b.Post = d.hooks(v, f) },
	})
	if seen == nil {
		return b
	}
	switch {
	case seen["tarball"] != nil && seen["debs"] != nil:
		d.fail(seen["debs"], child(field, "debs"), "give tarball or debs, not both: the base is one or the other")
		return b
	case seen["debs"] != nil:
		if seen["sha256"] != nil {
			d.fail(seen["sha256"], child(field, "sha256"), "sha256 belongs to base.tarball; base.debs is pinned by stamp.lock")
		}
		return b
	case seen["tarball"] == nil:
		d.fail(d.resolveQuiet(n), child(field, "tarball"), "base.tarball or base.debs is required: every build starts from a base tarball or a Debian archive")
		return b
	}
	d.source(d.resolveQuiet(n), child(field, "tarball"), b.Tarball, child(field, "sha256"), seen["sha256"] != nil)
	return b
}

// hooks reads a phase's pre/post list of host programs.
func (d *decoder) hooks(n *yaml.Node, field string) []string {
	var out []string
	d.oneOrList(n, field, func(v *yaml.Node, f string) { out = append(out, d.hostPath(v, f)) })
	return out
}

func (d *decoder) phase(n *yaml.Node, field string) Phase {
	var p Phase
	d.mapping(n, field, map[string]handler{
		"pre":  func(v *yaml.Node, f string) { p.Pre = d.hooks(v, f) },
		"post": func(v *yaml.Node, f string) { p.Post = d.hooks(v, f) },
		"layers": func(v *yaml.Node, f string) {
			d.list(v, f, func(item *yaml.Node, f string) {
				if d.skipped[d.resolveQuiet(item)] {
					return
				}
				if l, ok := d.layer(item, f); ok {
					p.Layers = append(p.Layers, l)
				}
			})
		},
	})
	return p
}

func (d *decoder) seal(n *yaml.Node, field string) Seal {
	s := Seal{Cleanup: Cleanup{Default: true}}
	d.mapping(n, field, map[string]handler{
		"cleanup": func(v *yaml.Node, f string) {
			r := d.resolve(v)
			switch {
			case r == nil:
			case r.Kind == yaml.SequenceNode:
				s.Cleanup.Globs = []string{}
				d.list(r, f, func(item *yaml.Node, f string) {
					s.Cleanup.Globs = append(s.Cleanup.Globs, d.glob(item, f))
				})
			case r.Kind == yaml.ScalarNode && r.ShortTag() == "!!str" && r.Value == "default":
			case r.Kind == yaml.ScalarNode && r.ShortTag() == "!!str" && r.Value == "none":
				s.Cleanup.Default = false
			default:
				d.fail(r, f, "cleanup must be default, none, or a list of globs added to the default set; got %s", describe(r))
			}
		},
	})
	return s
}

// treeDigest is the sha256 of the recipe as decoded, parameters
// substituted, without its outputs, the layers its when: left out, its
// comments or its layout: what decides the tree. An image records it, so
// asking for another output, or rewording a comment or a layer that does
// not apply, leaves every image's bytes as they were.
func treeDigest(root *yaml.Node, skipped map[*yaml.Node]bool) (string, error) {
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(canonical(root, true, skipped)); err != nil {
		return "", fmt.Errorf("recipe digest: %w", err)
	}
	if err := enc.Close(); err != nil {
		return "", fmt.Errorf("recipe digest: %w", err)
	}
	sum := sha256.Sum256(b.Bytes())
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// canonical copies n without comments or styles, without the skipped
// layers, and, at the top, without the outputs.
func canonical(n *yaml.Node, top bool, skipped map[*yaml.Node]bool) *yaml.Node {
	c := &yaml.Node{Kind: n.Kind, Tag: n.ShortTag(), Value: n.Value}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return canonical(n.Alias, false, skipped)
	}
	for i := 0; i < len(n.Content); i++ {
		if top && n.Kind == yaml.MappingNode && i%2 == 0 && n.Content[i].Value == "outputs" {
			i++
			continue
		}
		item := n.Content[i]
		for j := 0; item.Kind == yaml.AliasNode && item.Alias != nil && j < 64; j++ {
			item = item.Alias
		}
		if n.Kind == yaml.SequenceNode && skipped[item] {
			continue
		}
		c.Content = append(c.Content, canonical(n.Content[i], false, skipped))
	}
	return c
}
