package recipes

import (
	"fmt"
	"math"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// decoder walks a yaml.Node tree by hand rather than through yaml.Unmarshal,
// so every error names the field path and line, and decoding goes on after
// the first error to report as many as it can.
type decoder struct {
	file   string
	errs   []*Error
	budget int // nodes left to visit; aliases can multiply a small document
	// substituted holds the scalars ${name} was replaced in, with the
	// parameters' names, so a type error there can say why a parameter
	// cannot give a number, and a host path which parameters made it.
	substituted map[*yaml.Node][]string
	// hostPaths collects every host path a field names, for Recipe.HostPaths.
	hostPaths []HostPath
	// skipped holds the layer items whose when: does not hold: neither
	// substituted nor decoded, and left out of the recipe's digest.
	skipped map[*yaml.Node]bool
}

// notString explains a type error on a scalar a parameter filled.
func (d *decoder) notString(n *yaml.Node) string {
	if len(d.substituted[n]) > 0 {
		return "; a parameter's value is always a string, so it cannot give a number or a boolean"
	}
	return ""
}

// nodeBudget bounds the work on a document whose aliases expand it enormously.
const nodeBudget = 1 << 18

type handler func(v *yaml.Node, field string)

func child(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func index(field string, i int) string { return field + "[" + strconv.Itoa(i) + "]" }

func (d *decoder) fail(n *yaml.Node, field, format string, args ...any) {
	e := &Error{File: d.file, Field: field, Msg: fmt.Sprintf(format, args...)}
	if n != nil {
		e.Line, e.Column = n.Line, n.Column
	}
	d.errs = append(d.errs, e)
}

// resolve follows aliases and charges the budget. It returns nil when the
// budget is spent; callers then skip the value.
func (d *decoder) resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i > 64 {
			return nil
		}
		n = n.Alias
	}
	d.budget--
	if d.budget == 0 {
		d.fail(n, "", "document too large after expanding aliases")
	}
	if d.budget <= 0 {
		return nil
	}
	return n
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// describe names a node's type for "expected X, got Y" messages.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!str":
			return fmt.Sprintf("the string %q", n.Value)
		case "!!int":
			return "the integer " + n.Value
		case "!!float":
			return "the number " + n.Value
		case "!!bool":
			return "the boolean " + n.Value
		case "!!null":
			return "null"
		}
		return fmt.Sprintf("%s %q", n.ShortTag(), n.Value)
	}
	return "a document"
}

// mapping decodes n key by key in document order. Unknown and repeated keys
// are errors. It returns the key nodes seen (for presence checks), or nil
// when n is not a mapping. A null value is an empty mapping.
func (d *decoder) mapping(n *yaml.Node, field string, keys map[string]handler) map[string]*yaml.Node {
	if n = d.resolve(n); n == nil {
		return nil
	}
	if isNull(n) {
		return map[string]*yaml.Node{}
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, field, "expected a mapping, got %s", describe(n))
		return nil
	}
	seen := make(map[string]*yaml.Node, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := d.resolve(n.Content[i]), n.Content[i+1]
		if k == nil {
			return seen
		}
		if k.Kind != yaml.ScalarNode {
			d.fail(k, field, "keys must be strings, got %s", describe(k))
			continue
		}
		if k.Value == "<<" && k.ShortTag() == "!!merge" {
			d.fail(k, field, "merge keys (<<) are not supported; repeat the fields or use an alias for the whole value")
			continue
		}
		f := child(field, k.Value)
		if prev, dup := seen[k.Value]; dup {
			d.fail(k, f, "repeated key (first at line %d)", prev.Line)
			continue
		}
		seen[k.Value] = k
		h, ok := keys[k.Value]
		if !ok {
			d.fail(k, f, "unknown field")
			continue
		}
		h(v, f)
	}
	return seen
}

// scalar returns the resolved scalar node, or nil after an error.
func (d *decoder) scalar(n *yaml.Node, field, want string) *yaml.Node {
	if n = d.resolve(n); n == nil {
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(n, field, "expected %s, got %s", want, describe(n))
		return nil
	}
	return n
}

// str reads a string. Numbers are taken as written (a suite "12", a size
// 4096); booleans are refused, since "yes"-like values are rarely meant.
// Null is "".
func (d *decoder) str(n *yaml.Node, field string) string {
	n = d.scalar(n, field, "a string")
	if n == nil {
		return ""
	}
	switch n.ShortTag() {
	case "!!str", "!!int", "!!float":
		return n.Value
	case "!!null":
		return ""
	}
	d.fail(n, field, "expected a string, got %s", describe(n))
	return ""
}

// strList reads a list of strings; a single string is a list of one; null
// and [] are nil.
func (d *decoder) strList(n *yaml.Node, field string) []string {
	var out []string
	d.oneOrList(n, field, func(v *yaml.Node, f string) {
		out = append(out, d.str(v, f))
	})
	return out
}

func (d *decoder) boolean(n *yaml.Node, field string) bool {
	n = d.scalar(n, field, "true or false")
	if n == nil {
		return false
	}
	if n.ShortTag() != "!!bool" {
		d.fail(n, field, "expected true or false, got %s%s", describe(n), d.notString(n))
		return false
	}
	var b bool
	if err := n.Decode(&b); err != nil {
		d.fail(n, field, "expected true or false, got %s", describe(n))
	}
	return b
}

func (d *decoder) integer(n *yaml.Node, field string, lo, hi int64) (int64, bool) {
	n = d.scalar(n, field, "an integer")
	if n == nil {
		return 0, false
	}
	if n.ShortTag() != "!!int" {
		d.fail(n, field, "expected an integer, got %s%s", describe(n), d.notString(n))
		return 0, false
	}
	var v int64
	if err := n.Decode(&v); err != nil || v < lo || v > hi {
		d.fail(n, field, "%s is out of range %d..%d", n.Value, lo, hi)
		return 0, false
	}
	return v, true
}

func (d *decoder) uint32p(n *yaml.Node, field string) *uint32 {
	v, ok := d.integer(n, field, 0, math.MaxUint32)
	if !ok {
		return nil
	}
	u := uint32(v)
	return &u
}

func (d *decoder) mode(n *yaml.Node, field string) *Mode {
	if n = d.resolve(n); n == nil {
		return nil
	}
	var m Mode
	if err := m.UnmarshalYAML(n); err != nil {
		d.fail(n, field, "%s", err.Error())
		return nil
	}
	return &m
}

func (d *decoder) owner(n *yaml.Node, field string) Owner {
	n = d.scalar(n, field, `an owner such as "0:0" or "root:root"`)
	if n == nil {
		return Owner{}
	}
	switch n.ShortTag() {
	case "!!str", "!!int": // owner: 0 is unambiguous
	default:
		d.fail(n, field, `expected an owner such as "0:0" or "root:root", got %s`, describe(n))
		return Owner{}
	}
	o, err := ParseOwner(n.Value)
	if err != nil {
		d.fail(n, field, "%s", err.Error())
	}
	return o
}

// strMap reads a mapping of strings to strings.
func (d *decoder) strMap(n *yaml.Node, field string) map[string]string {
	if n = d.resolve(n); n == nil {
		return nil
	}
	out := map[string]string{}
	if isNull(n) {
		return out
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, field, "expected a mapping, got %s", describe(n))
		return out
	}
	lines := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := d.resolve(n.Content[i])
		if k == nil {
			return out
		}
		key := d.str(k, field)
		f := child(field, key)
		if l, dup := lines[key]; dup {
			d.fail(k, f, "repeated key (first at line %d)", l)
			continue
		}
		lines[key] = k.Line
		out[key] = d.str(n.Content[i+1], f)
	}
	return out
}

// list calls fn for each item of a sequence; null is an empty list.
func (d *decoder) list(n *yaml.Node, field string, fn handler) {
	if n = d.resolve(n); n == nil || isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, field, "expected a list, got %s", describe(n))
		return
	}
	for i, item := range n.Content {
		fn(item, index(field, i))
	}
}

// oneOrList is list, but a single non-list value counts as a list of one
// (and its field path has no index).
func (d *decoder) oneOrList(n *yaml.Node, field string, fn handler) {
	r := d.resolve(n)
	if r == nil || isNull(r) {
		return
	}
	if r.Kind != yaml.SequenceNode {
		fn(r, field)
		return
	}
	for i, item := range r.Content {
		fn(item, index(field, i))
	}
}

// line is the line of n after following aliases, for records that keep it.
func line(n *yaml.Node) int {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 64; i++ {
		n = n.Alias
	}
	if n == nil {
		return 0
	}
	return n.Line
}
