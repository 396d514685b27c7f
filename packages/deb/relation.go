package deb

import (
	"fmt"
	"strings"
)

// Op is a version relation operator of a dependency.
type Op string

// The operators dpkg accepts; "<" and ">" are the obsolete spellings of
// "<=" and ">=".
const (
	OpNone Op = ""
	OpLT   Op = "<<"
	OpLE   Op = "<="
	OpEQ   Op = "="
	OpGE   Op = ">="
	OpGT   Op = ">>"
)

// Dep is one package named in a relationship field, with its optional
// architecture qualifier and version constraint.
type Dep struct {
	Name    string
	Arch    string // "" | "any" | "native" | an architecture name
	Op      Op
	Version string
}

// String formats d as it is written in a control file.
func (d Dep) String() string {
	s := d.Name
	if d.Arch != "" {
		s += ":" + d.Arch
	}
	if d.Op != OpNone {
		s += " (" + string(d.Op) + " " + d.Version + ")"
	}
	return s
}

// Satisfied reports whether version v meets d's constraint.
func (d Dep) Satisfied(v string) bool {
	if d.Op == OpNone {
		return true
	}
	c := CompareVersions(v, d.Version)
	switch d.Op {
	case OpLT:
		return c < 0
	case OpLE:
		return c <= 0
	case OpEQ:
		return c == 0
	case OpGE:
		return c >= 0
	case OpGT:
		return c > 0
	}
	return false
}

// Alternatives is one comma-separated item of a relationship field: any of
// its deps satisfies it.
type Alternatives []Dep

// String formats a as it is written in a control file.
func (a Alternatives) String() string {
	s := make([]string, len(a))
	for i, d := range a {
		s[i] = d.String()
	}
	return strings.Join(s, " | ")
}

// ParseRelations parses a relationship field such as Depends. Architecture
// restrictions ("[amd64]") and build profiles ("<!nocheck>") belong to
// source packages; they are accepted and dropped.
func ParseRelations(s string) ([]Alternatives, error) {
	var out []Alternatives
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		var alts Alternatives
		for _, one := range strings.Split(item, "|") {
			d, err := parseDep(one)
			if err != nil {
				return nil, fmt.Errorf("%q: %w", strings.TrimSpace(item), err)
			}
			alts = append(alts, d)
		}
		out = append(out, alts)
	}
	return out, nil
}

func parseDep(s string) (Dep, error) {
	var d Dep
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '['); i >= 0 {
		j := strings.IndexByte(s[i:], ']')
		if j < 0 {
			return d, fmt.Errorf("unclosed [")
		}
		s = strings.TrimSpace(s[:i] + s[i+j+1:])
	}
	if i := strings.IndexByte(s, '<'); i >= 0 && !strings.Contains(s[:i], "(") {
		s = strings.TrimSpace(s[:i])
	}
	name := s
	var cons string
	if i := strings.IndexByte(s, '('); i >= 0 {
		j := strings.IndexByte(s, ')')
		if j < i {
			return d, fmt.Errorf("unclosed (")
		}
		name, cons = strings.TrimSpace(s[:i]), strings.TrimSpace(s[i+1:j])
		if rest := strings.TrimSpace(s[j+1:]); rest != "" && rest[0] != '<' {
			return d, fmt.Errorf("unexpected %q after the version", rest)
		}
	}
	if n, a, ok := strings.Cut(name, ":"); ok {
		name, d.Arch = n, a
	}
	if name == "" || strings.ContainsAny(name, " \t") {
		return d, fmt.Errorf("bad package name %q", name)
	}
	d.Name = name
	if cons == "" {
		return d, nil
	}
	k := 0
	for k < len(cons) && strings.IndexByte("<>=", cons[k]) >= 0 {
		k++
	}
	op, ver := cons[:k], strings.TrimSpace(cons[k:])
	switch op {
	case "<<", "<=", "=", ">=", ">>":
		d.Op = Op(op)
	case "<":
		d.Op = OpLE
	case ">":
		d.Op = OpGE
	default:
		return d, fmt.Errorf("bad version operator %q", op)
	}
	if _, err := ParseVersion(ver); err != nil {
		return d, err
	}
	d.Version = ver
	return d, nil
}
