package recipes

import (
	"fmt"
	"io/fs"
	"regexp"
	"slices"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Options are what a recipe is loaded with besides its own bytes.
type Options struct {
	// Set overrides parameter defaults, as "stamp build --set name=value"
	// gives them. Naming an undeclared parameter, or one no field uses, is
	// an error.
	Set map[string]string
	// HostApt is the host's /etc/apt, read only when a used parameter
	// defaults to the host's Debian mirror ({fromHostApt: true}) and is not
	// set. Nil means there is no such directory: the parameter must be set.
	HostApt fs.FS
}

// Param is one declared parameter and the value this load gave it.
type Param struct {
	Name string
	Line int
	// Default is the declared default; nil when there is none.
	Default *string
	// FromHostApt makes the default the host's Debian mirror, the first
	// "deb" source for a Debian suite with component main.
	FromHostApt bool
	Description string
	// Choices, when declared, are the only values the parameter may take;
	// a layer's when: may compare it only with one of them.
	Choices []string

	// Used reports whether any field refers to the parameter. Only used
	// parameters get a value, so an unused one never needs one.
	Used bool
	// Value is what ${name} became; Source says where it came from.
	Value  string
	Source string
}

// Where a parameter's value came from.
const (
	SourceDefault = "default"
	SourceSet     = "set"
	SourceHostApt = "host-apt"
)

// ParamValues maps the name of every used parameter to its value: what the
// build depends on, for provenance, the record and the lock.
func (r *Recipe) ParamValues() map[string]string {
	out := map[string]string{}
	for _, p := range r.Params {
		if p.Used {
			out[p.Name] = p.Value
		}
	}
	return out
}

// SetArgs is ParamValues as "name=value" in name order: the --set flags
// that rebuild this recipe with the same values.
func (r *Recipe) SetArgs() []string {
	var out []string
	for _, p := range r.Params {
		if p.Used {
			out = append(out, p.Name+"="+p.Value)
		}
	}
	sort.Strings(out)
	return out
}

// ParseSet splits a --set argument, "name=value"; the value may be empty
// and may contain "=".
func ParseSet(arg string) (name, value string, err error) {
	name, value, ok := strings.Cut(arg, "=")
	if !ok || !paramNameRE.MatchString(name) {
		return "", "", fmt.Errorf("--set %q must be NAME=VALUE with NAME matching [A-Za-z_][A-Za-z0-9_]*", arg)
	}
	return name, value, nil
}

var paramNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// params holds the declared parameters while the document is substituted.
type params struct {
	byName map[string]*Param
	list   []*Param
	opts   Options
	// hostMirror caches the host's mirror: found once per load.
	hostMirror *string
}

// declareParams decodes the top-level params mapping, if any. It runs before
// the rest of the document is decoded, since every other field may refer
// to a parameter.
func (d *decoder) declareParams(root *yaml.Node, o Options) *params {
	ps := &params{byName: map[string]*Param{}, opts: o}
	root = d.resolveQuiet(root)
	if root == nil || root.Kind != yaml.MappingNode {
		return ps
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value != "params" {
			continue
		}
		n := d.resolve(root.Content[i+1])
		if n == nil || isNull(n) {
			return ps
		}
		if n.Kind != yaml.MappingNode {
			d.fail(n, "params", "expected a mapping of parameter names to defaults, got %s", describe(n))
			return ps
		}
		for j := 0; j+1 < len(n.Content); j += 2 {
			k := d.resolve(n.Content[j])
			if k == nil {
				return ps
			}
			f := child("params", k.Value)
			switch {
			case k.Kind != yaml.ScalarNode || !paramNameRE.MatchString(k.Value):
				d.fail(k, f, "a parameter name must match [A-Za-z_][A-Za-z0-9_]*")
				continue
			case ps.byName[k.Value] != nil:
				d.fail(k, f, "repeated parameter (first at line %d)", ps.byName[k.Value].Line)
				continue
			}
			p := d.param(n.Content[j+1], f)
			p.Name, p.Line = k.Value, k.Line
			ps.byName[p.Name] = p
			ps.list = append(ps.list, p)
		}
		return ps // a second params key is reported by the recipe's own decoding
	}
	return ps
}

// param reads one declaration: a scalar is the default, null is no default,
// and a mapping says {default, description}, where default may be
// {fromHostApt: true}.
func (d *decoder) param(n *yaml.Node, field string) *Param {
	p := &Param{}
	r := d.resolve(n)
	switch {
	case r == nil:
		return p
	case isNull(r):
		return p
	case r.Kind == yaml.ScalarNode:
		v := d.str(r, field)
		p.Default = &v
		return p
	}
	seen := d.mapping(r, field, map[string]handler{
		"description": func(v *yaml.Node, f string) { p.Description = d.str(v, f) },
		"choices": func(v *yaml.Node, f string) {
			p.Choices = d.strList(v, f)
			if !d.failed(v) && len(p.Choices) == 0 {
				d.fail(d.resolveQuiet(v), f, "list at least one choice, or leave choices out")
			}
		},
		"default": func(v *yaml.Node, f string) {
			dv := d.resolve(v)
			switch {
			case dv == nil || isNull(dv):
			case dv.Kind == yaml.MappingNode:
				d.mapping(dv, f, map[string]handler{
					"fromHostApt": func(v *yaml.Node, f string) {
						p.FromHostApt = d.boolean(v, f)
						if !p.FromHostApt && !d.failed(v) {
							d.fail(d.resolveQuiet(v), f, "fromHostApt: false means no default; leave the default out instead")
						}
					},
				})
			default:
				s := d.str(dv, f)
				p.Default = &s
			}
		},
	})
	if len(p.Choices) > 0 && p.Default != nil && !slices.Contains(p.Choices, *p.Default) {
		d.fail(seen["default"], child(field, "default"), "default %q is not one of the choices (%s)", *p.Default, strings.Join(p.Choices, ", "))
	}
	if len(p.Choices) > 0 && p.FromHostApt {
		d.fail(seen["choices"], child(field, "choices"), "a parameter defaulting to the host's mirror takes any URL; leave choices out")
	}
	return p
}

// value gives a used parameter its value on first use: --set, then the
// declared default, then the host's mirror. A parameter left without one
// is an error at its declaration, naming it.
func (d *decoder) value(ps *params, p *Param) {
	if p.Used {
		return
	}
	p.Used = true
	at := &yaml.Node{Line: p.Line}
	f := child("params", p.Name)
	if v, ok := ps.opts.Set[p.Name]; ok {
		p.Value, p.Source = v, SourceSet
		if len(p.Choices) > 0 && !slices.Contains(p.Choices, v) {
			d.fail(at, "--set "+p.Name, "parameter %q is %q, which is not one of its choices (%s)", p.Name, v, strings.Join(p.Choices, ", "))
		}
		return
	}
	if p.Default != nil {
		p.Value, p.Source = *p.Default, SourceDefault
		return
	}
	if !p.FromHostApt {
		d.fail(at, f, "parameter %q has no default and no value: give one with --set %s=VALUE", p.Name, p.Name)
		return
	}
	if ps.hostMirror == nil {
		m := ""
		if ps.opts.HostApt != nil {
			var err error
			if m, err = HostDebianMirror(ps.opts.HostApt); err != nil {
				d.fail(at, f, "reading the host's apt sources for parameter %q: %v", p.Name, err)
				return
			}
		}
		ps.hostMirror = &m
	}
	if *ps.hostMirror == "" {
		d.fail(at, f, "parameter %q defaults to the host's Debian mirror, but the host's apt sources name none: give one with --set %s=URL", p.Name, p.Name)
		return
	}
	p.Value, p.Source = *ps.hostMirror, SourceHostApt
}

// substitute replaces ${name} in every string value of the document but
// the params mapping itself, in place. "$${" is a literal "${"; any other
// "$" is kept as written. Keys are never substituted: they are field names.
// A substituted scalar is tagged a string, so "0644" stays a mode and a
// value never turns into a number or a boolean.
func (d *decoder) substitute(n *yaml.Node, field string, ps *params, seen map[*yaml.Node]bool) {
	if n == nil || seen[n] || d.skipped[n] {
		return
	}
	seen[n] = true
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			d.substitute(c, field, ps, seen)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if field == "" && k.Value == "params" {
				continue
			}
			d.substitute(n.Content[i+1], child(field, k.Value), ps, seen)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			d.substitute(c, index(field, i), ps, seen)
		}
	case yaml.AliasNode:
		// The anchor is usually substituted where it stands; one inside
		// params is reached only through its aliases.
		d.substitute(n.Alias, field, ps, seen)
	case yaml.ScalarNode:
		if n.ShortTag() != "!!str" || !strings.Contains(n.Value, "$") {
			return
		}
		if v, names, ok := d.expand(n, field, ps); ok && v != n.Value {
			n.Value, n.Tag = v, "!!str"
			if len(names) > 0 {
				if d.substituted == nil {
					d.substituted = map[*yaml.Node][]string{}
				}
				d.substituted[n] = names
			}
		}
	}
}

// expand substitutes one string, and names the parameters it used, in
// name order; ok is false after an error.
func (d *decoder) expand(n *yaml.Node, field string, ps *params) (string, []string, bool) {
	s := n.Value
	var b strings.Builder
	var names []string
	for i := 0; i < len(s); {
		switch {
		case strings.HasPrefix(s[i:], "$${"):
			b.WriteString("${")
			i += 3
		case strings.HasPrefix(s[i:], "${"):
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				d.fail(n, field, "unterminated ${ in %q (write $${ for a literal ${)", s)
				return "", nil, false
			}
			name := s[i+2 : i+2+end]
			p := ps.byName[name]
			if p == nil {
				d.fail(n, field, "%s", undeclared(name, ps))
				return "", nil, false
			}
			d.value(ps, p)
			if !slices.Contains(names, name) {
				names = append(names, name)
			}
			b.WriteString(p.Value)
			i += 2 + end + 1
		default:
			b.WriteByte(s[i])
			i++
		}
	}
	slices.Sort(names)
	return b.String(), names, true
}

func undeclared(name string, ps *params) string {
	msg := fmt.Sprintf("${%s} names no declared parameter", name)
	if !paramNameRE.MatchString(name) {
		msg = fmt.Sprintf("${%s}: a parameter name must match [A-Za-z_][A-Za-z0-9_]*", name)
	}
	if len(ps.list) > 0 {
		msg += " (params declares " + strings.Join(ps.names(), ", ") + ")"
	} else {
		msg += " (declare it under params:)"
	}
	return msg + "; write $${ for a literal ${"
}

func (ps *params) names() []string {
	var out []string
	for _, p := range ps.list {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// checkSet refuses --set values that would change nothing: an undeclared
// name (a typo) or a parameter no field uses (a value the build ignores).
func (d *decoder) checkSet(ps *params) {
	names := make([]string, 0, len(ps.opts.Set))
	for k := range ps.opts.Set {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, name := range names {
		p := ps.byName[name]
		switch {
		case p == nil && len(ps.list) == 0:
			d.fail(nil, "--set "+name, "the recipe declares no parameters")
		case p == nil:
			d.fail(nil, "--set "+name, "the recipe declares no parameter %q (params declares %s)", name, strings.Join(ps.names(), ", "))
		case !p.Used:
			d.fail(&yaml.Node{Line: p.Line}, "--set "+name, "parameter %q is declared but no field uses it, so setting it would change nothing", name)
		}
	}
}

// Declared is the parameters a recipe declares, in declaration order,
// without values: what a caller must or may give before the recipe loads
// (a recipe whose parameter has no default does not load without it).
func Declared(data []byte, filename string) ([]Param, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, syntaxError(filename, err)
	}
	d := &decoder{file: filename, budget: nodeBudget}
	root := &doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	ps := d.declareParams(root, Options{})
	if len(d.errs) > 0 {
		return nil, join(d.errs)
	}
	out := make([]Param, 0, len(ps.list))
	for _, p := range ps.list {
		out = append(out, *p)
	}
	return out, nil
}
