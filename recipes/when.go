package recipes

import (
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// whenKey is the key beside a layer's kind key that makes the layer apply
// only for some parameter values:
//
//   - when: {containerd: upstream}
//     debs: {repo: "${containerd_repo}", ...}
//
// A parameter's value is a string substituted into fields, so on its own it
// can name a package but not choose between layers from different
// repositories; when: is that choice.
const whenKey = "when"

// conditions evaluates the when: of every item of customize.layers,
// provision.layers and outputs before anything is substituted, and marks the items
// whose condition does not hold as skipped: they are neither substituted
// nor decoded, so a parameter only they use needs no value (and setting it
// is an error, as for any parameter no field uses). Their indexes stay as
// written, so every error and record still names the item by its place in
// the file.
func (d *decoder) conditions(root *yaml.Node, ps *params) {
	root = d.resolveQuiet(root)
	if root == nil || root.Kind != yaml.MappingNode {
		return
	}
	for i := 0; i+1 < len(root.Content); i += 2 {
		switch phase := root.Content[i].Value; phase {
		case "customize", "provision":
			d.conditionsOf(mappingValue(d.resolveQuiet(root.Content[i+1]), "layers"), child(phase, "layers"), ps)
		case "outputs":
			d.conditionsOf(d.resolveQuiet(root.Content[i+1]), phase, ps)
		}
	}
}

// conditionsOf marks the items of list (named field) whose when: does not
// hold as skipped.
func (d *decoder) conditionsOf(list *yaml.Node, field string, ps *params) {
	if list == nil || list.Kind != yaml.SequenceNode {
		return
	}
	for j, item := range list.Content {
		it := d.resolveQuiet(item)
		cond := mappingValue(it, whenKey)
		if cond == nil {
			continue
		}
		if !d.when(cond, child(index(field, j), whenKey), ps) {
			if d.skipped == nil {
				d.skipped = map[*yaml.Node]bool{}
			}
			d.skipped[it] = true
		}
	}
}

// when reads one condition, a mapping of declared parameter names to
// literal values, and reports whether every parameter has its value. A
// value outside a parameter's declared choices is an error, so a misspelt
// choice never silently leaves a layer out.
func (d *decoder) when(n *yaml.Node, field string, ps *params) bool {
	r := d.resolve(n)
	if r == nil {
		return false
	}
	if r.Kind != yaml.MappingNode || len(r.Content) == 0 {
		d.fail(r, field, "when is a mapping of parameter names to the values the layer applies for, e.g. {containerd: upstream}; got %s", describe(r))
		return false
	}
	holds := true
	for i := 0; i+1 < len(r.Content); i += 2 {
		k, v := d.resolveQuiet(r.Content[i]), d.resolveQuiet(r.Content[i+1])
		f := child(field, k.Value)
		p := ps.byName[k.Value]
		switch {
		case p == nil:
			d.fail(k, f, "when names no declared parameter %q (params declares %s)", k.Value, strings.Join(ps.names(), ", "))
			holds = false
			continue
		case v == nil || v.Kind != yaml.ScalarNode || isNull(v):
			d.fail(r.Content[i+1], f, "when compares %q with a value; got %s", k.Value, describeOrNothing(v))
			holds = false
			continue
		case strings.Contains(v.Value, "${"):
			d.fail(v, f, "a when value is literal: ${...} is not substituted here")
			holds = false
			continue
		case len(p.Choices) > 0 && !slices.Contains(p.Choices, v.Value):
			d.fail(v, f, "%q is not one of parameter %q's choices (%s)", v.Value, p.Name, strings.Join(p.Choices, ", "))
			holds = false
			continue
		}
		d.value(ps, p)
		if p.Value != v.Value {
			holds = false
		}
	}
	return holds
}

// mappingValue is the value of key k in mapping n, nil when n is not a
// mapping or has no such key.
func mappingValue(n *yaml.Node, k string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == k {
			return n.Content[i+1]
		}
	}
	return nil
}

func describeOrNothing(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	return describe(n)
}
