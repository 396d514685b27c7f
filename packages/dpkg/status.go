// Package dpkg reads and writes dpkg's database as dpkg itself lays it out:
// the status file (paragraphs sorted by package name, fields in dpkg's
// order) and the per-package files in the info directory (.list, .md5sums,
// .conffiles and the maintainer scripts).
package dpkg

import (
	"bytes"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/repo"
)

// Paths of the database inside a root.
const (
	AdminDir   = "/var/lib/dpkg"
	StatusPath = AdminDir + "/status"
	InfoDir    = AdminDir + "/info"
)

// StateInstalled is the Status value of a configured package.
const StateInstalled = "install ok installed"

// Status is the status database: one paragraph per package.
type Status struct {
	paras map[string]*deb.Paragraph // by key()
}

// NewStatus is an empty database, as a missing status file reads.
func NewStatus() *Status { return &Status{paras: map[string]*deb.Paragraph{}} }

// ReadStatus parses a status file.
func ReadStatus(r io.Reader) (*Status, error) {
	s := NewStatus()
	ps, err := deb.ParseControl(r)
	if err != nil {
		return nil, fmt.Errorf("dpkg status: %w", err)
	}
	for _, p := range ps {
		if p.Get("Package") == "" {
			return nil, fmt.Errorf("dpkg status: paragraph without Package: %q", firstLine(p.String()))
		}
		s.paras[key(p)] = p
	}
	return s, nil
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// key tells apart the architectures of a Multi-Arch: same package.
func key(p *deb.Paragraph) string {
	k := p.Get("Package")
	if p.Get("Multi-Arch") == "same" {
		k += ":" + p.Get("Architecture")
	}
	return k
}

// Get returns the paragraph of the named package, or nil.
func (s *Status) Get(name string) *deb.Paragraph {
	if p := s.paras[name]; p != nil {
		return p
	}
	for _, p := range s.paras {
		if p.Get("Package") == name {
			return p
		}
	}
	return nil
}

// Paragraphs returns every package's paragraph, in the order dpkg writes
// them: by package name, then architecture.
func (s *Status) Paragraphs() []*deb.Paragraph {
	out := make([]*deb.Paragraph, 0, len(s.paras))
	for _, k := range s.keys() {
		out = append(out, s.paras[k])
	}
	return out
}

// Put adds or replaces a package's paragraph.
func (s *Status) Put(p *deb.Paragraph) {
	for k, old := range s.paras {
		if old.Get("Package") == p.Get("Package") && old.Get("Architecture") == p.Get("Architecture") {
			delete(s.paras, k)
		}
	}
	s.paras[key(p)] = p
}

// present are the dpkg states in which a package's files are on disk and
// its dependencies count as met for a new installation, as apt treats them.
var present = map[string]bool{
	"installed": true, "unpacked": true, "half-configured": true,
	"triggers-awaited": true, "triggers-pending": true,
}

// Installed returns the packages whose files are in the tree, for the
// resolver. Packages of other architectures than arch and "all" are left
// out, as the resolver works on one architecture.
func (s *Status) Installed(arch string) ([]*repo.Package, error) {
	var out []*repo.Package
	for _, k := range s.keys() {
		p := s.paras[k]
		st := strings.Fields(p.Get("Status"))
		if len(st) != 3 || !present[st[2]] {
			continue
		}
		if a := p.Get("Architecture"); a != arch && a != "all" {
			continue
		}
		pkg, err := repo.FromParagraph(p)
		if err != nil {
			return nil, fmt.Errorf("dpkg status: %w", err)
		}
		out = append(out, pkg)
	}
	return out, nil
}

// keys returns the paragraph keys sorted as dpkg writes them: by package
// name, then architecture.
func (s *Status) keys() []string {
	ks := make([]string, 0, len(s.paras))
	for k := range s.paras {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool {
		a, b := s.paras[ks[i]], s.paras[ks[j]]
		if an, bn := a.Get("Package"), b.Get("Package"); an != bn {
			return an < bn
		}
		return a.Get("Architecture") < b.Get("Architecture")
	})
	return ks
}

// Bytes is the status file as dpkg writes it: every paragraph (those read
// back included, as dpkg rewrites them all) with its fields in dpkg's order.
func (s *Status) Bytes() []byte {
	var b bytes.Buffer
	for _, k := range s.keys() {
		for _, f := range normalize(s.paras[k]).Fields {
			writeField(&b, f)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// writeField writes a field as dpkg's database writer does: "Name: value"
// whatever the value begins with, but Conffiles, whose writer puts each
// file on a line of its own under a bare "Conffiles:".
func writeField(b *bytes.Buffer, f deb.Field) {
	b.WriteString(f.Name)
	if strings.EqualFold(f.Name, "Conffiles") {
		b.WriteByte(':')
	} else {
		b.WriteString(": ")
	}
	b.WriteString(f.Value)
	b.WriteByte('\n')
}

// normalize orders a paragraph's fields as dpkg writes them.
func normalize(p *deb.Paragraph) *deb.Paragraph {
	known := map[string]bool{}
	for _, f := range fieldOrder {
		known[strings.ToLower(f)] = true
	}
	out := &deb.Paragraph{}
	for _, f := range fieldOrder {
		if v, ok := p.Lookup(f); ok {
			out.Fields = append(out.Fields, deb.Field{Name: f, Value: v})
		}
	}
	for _, f := range p.Fields {
		if !known[strings.ToLower(f.Name)] {
			out.Fields = append(out.Fields, f)
		}
	}
	return out
}

// Conffile is one line of a package's Conffiles status field.
type Conffile struct {
	Path string
	MD5  string // of the file as installed; "newconffile" before unpacking
}

// fieldOrder is the order dpkg writes the fields it knows (lib/dpkg/parse.c
// fieldinfos); other fields follow in the order the control file had them.
var fieldOrder = []string{
	"Package", "Essential", "Protected", "Status", "Priority", "Section", "Installed-Size",
	"Origin", "Maintainer", "Bugs", "Architecture", "Multi-Arch", "Source", "Version",
	"Config-Version", "Replaces", "Provides", "Depends", "Pre-Depends", "Recommends",
	"Suggests", "Breaks", "Conflicts", "Enhances", "Conffiles", "Filename", "Size", "MD5sum",
	"MSDOS-Filename", "Description", "Triggers-Pending", "Triggers-Awaited",
}

// dropped are control fields dpkg does not keep in the status.
var dropped = map[string]bool{"package-type": true, "filename": true, "size": true, "md5sum": true}

// StatusParagraph builds a package's status entry from its control file as
// dpkg does on install: Status inserted, Conffiles from what was installed,
// known fields in dpkg's order, then the rest.
func StatusParagraph(control *deb.Paragraph, state string, conffiles []Conffile) *deb.Paragraph {
	known := map[string]bool{}
	for _, f := range fieldOrder {
		known[strings.ToLower(f)] = true
	}
	out := &deb.Paragraph{}
	for _, f := range fieldOrder {
		switch f {
		case "Status":
			out.Fields = append(out.Fields, deb.Field{Name: "Status", Value: state})
			continue
		case "Conffiles":
			if len(conffiles) > 0 {
				var b strings.Builder
				for _, c := range conffiles {
					b.WriteString("\n " + c.Path + " " + c.MD5)
				}
				out.Fields = append(out.Fields, deb.Field{Name: "Conffiles", Value: b.String()})
			}
			continue
		}
		if dropped[strings.ToLower(f)] {
			continue
		}
		if v, ok := control.Lookup(f); ok {
			if v, ok = dpkgValue(f, v); ok {
				out.Fields = append(out.Fields, deb.Field{Name: f, Value: v})
			}
		}
	}
	for _, f := range control.Fields {
		lf := strings.ToLower(f.Name)
		if known[lf] || dropped[lf] {
			continue
		}
		out.Fields = append(out.Fields, f)
	}
	return out
}

// relationFields are the fields dpkg parses as relationships and writes
// back in its own spelling.
var relationFields = map[string]bool{"Depends": true, "Pre-Depends": true, "Recommends": true, "Suggests": true,
	"Breaks": true, "Conflicts": true, "Enhances": true, "Replaces": true, "Provides": true}

// dpkgValue is a known field's value as dpkg writes it into the status
// after parsing the control file, and whether it writes the field at all:
// booleans only when yes, Multi-Arch in lower case and never "no",
// versions without a zero epoch, relationships one line, ", " between
// items, " | " between alternatives and "name (op version)" in each.
func dpkgValue(field, v string) (string, bool) {
	switch {
	case field == "Essential" || field == "Protected":
		return "yes", strings.EqualFold(v, "yes")
	case field == "Multi-Arch":
		v = strings.ToLower(v)
		return v, v != "no"
	case field == "Version":
		return dpkgVersion(v), true
	case relationFields[field]:
		rels, err := deb.ParseRelations(v)
		if err != nil {
			return v, true
		}
		items := make([]string, len(rels))
		for i, alts := range rels {
			for j := range alts {
				alts[j].Version = dpkgVersion(alts[j].Version)
			}
			items[i] = alts.String()
		}
		return strings.Join(items, ", "), true
	}
	return v, true
}

// dpkgVersion writes a version as dpkg does: the epoch only when it is not
// zero or the rest holds a colon, without leading zeros.
func dpkgVersion(s string) string {
	v, err := deb.ParseVersion(s)
	if err != nil || s == "" {
		return s
	}
	out := v.Upstream
	if v.Revision != "" {
		out += "-" + v.Revision
	}
	if v.Epoch != 0 || strings.Contains(out, ":") {
		out = strconv.FormatUint(v.Epoch, 10) + ":" + out
	}
	return out
}
