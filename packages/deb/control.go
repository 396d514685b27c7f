package deb

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strings"
)

// Field is one "Name: value" of a paragraph. Value is what dpkg reads as
// the value: the text after the colon and the blanks that follow it, with
// continuation lines joined by "\n", each as written, and the white space
// at the end of the whole value left out; white space at the end of an
// earlier line (a Description's synopsis, say) stays.
type Field struct {
	Name  string
	Value string
}

// Paragraph is one deb822 stanza with its fields in file order, so it can
// be written back as it was read.
type Paragraph struct {
	Fields []Field
}

// Get returns the value of the named field (case-insensitive), or "".
func (p *Paragraph) Get(name string) string {
	v, _ := p.Lookup(name)
	return v
}

// Lookup returns the value of the named field and whether it is present.
func (p *Paragraph) Lookup(name string) (string, bool) {
	for _, f := range p.Fields {
		if strings.EqualFold(f.Name, name) {
			return f.Value, true
		}
	}
	return "", false
}

// Set replaces the named field's value, or appends the field.
func (p *Paragraph) Set(name, value string) {
	for i, f := range p.Fields {
		if strings.EqualFold(f.Name, name) {
			p.Fields[i].Value = value
			return
		}
	}
	p.Fields = append(p.Fields, Field{Name: name, Value: value})
}

// Delete removes the named field.
func (p *Paragraph) Delete(name string) {
	out := p.Fields[:0]
	for _, f := range p.Fields {
		if !strings.EqualFold(f.Name, name) {
			out = append(out, f)
		}
	}
	p.Fields = out
}

// WriteTo writes the paragraph's fields, without the blank line that
// separates paragraphs.
func (p *Paragraph) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	for _, f := range p.Fields {
		b.WriteString(f.Name)
		b.WriteByte(':')
		if f.Value != "" && f.Value[0] != '\n' {
			b.WriteByte(' ')
		}
		b.WriteString(f.Value)
		b.WriteByte('\n')
	}
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

// String is the paragraph as WriteTo writes it.
func (p *Paragraph) String() string {
	var b strings.Builder
	p.WriteTo(&b)
	return b.String()
}

// ControlReader reads deb822 paragraphs one at a time, so a 50 MB Packages
// index never has to be held as text.
type ControlReader struct {
	sc   *bufio.Scanner
	line int
}

// NewControlReader reads paragraphs from r.
func NewControlReader(r io.Reader) *ControlReader {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	return &ControlReader{sc: sc}
}

// Next returns the next paragraph, or io.EOF after the last. Lines starting
// with "#" are comments, as in debian/control and deb822 sources.
func (c *ControlReader) Next() (*Paragraph, error) {
	var p *Paragraph
	for c.sc.Scan() {
		c.line++
		l := c.sc.Text()
		l = strings.TrimSuffix(l, "\r")
		if strings.TrimSpace(l) == "" {
			if p != nil {
				p.trimLast()
				return p, nil
			}
			continue
		}
		if l[0] == '#' {
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			if p == nil || len(p.Fields) == 0 {
				return nil, fmt.Errorf("line %d: continuation line outside a field", c.line)
			}
			f := &p.Fields[len(p.Fields)-1]
			f.Value += "\n" + l
			continue
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok || name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("line %d: %q is not a \"Field: value\" line", c.line, truncate(l))
		}
		if p == nil {
			p = &Paragraph{}
		}
		p.trimLast()
		p.Fields = append(p.Fields, Field{Name: name, Value: strings.TrimLeft(value, spaces)})
	}
	if err := c.sc.Err(); err != nil {
		return nil, fmt.Errorf("line %d: %w", c.line, err)
	}
	if p != nil {
		p.trimLast()
		return p, nil
	}
	return nil, io.EOF
}

// spaces are what C's isspace takes for white space, as dpkg's parser
// trims it.
const spaces = " \t\n\v\f\r"

// trimLast ends the last field's value where dpkg does: white space at
// its very end is not part of it.
func (p *Paragraph) trimLast() {
	if n := len(p.Fields); n > 0 {
		p.Fields[n-1].Value = strings.TrimRight(p.Fields[n-1].Value, spaces)
	}
}

// ParseControl reads every paragraph of r.
func ParseControl(r io.Reader) ([]*Paragraph, error) {
	cr := NewControlReader(r)
	var out []*Paragraph
	for {
		p, err := cr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
}

func truncate(s string) string {
	if len(s) > 60 {
		return s[:60] + "..."
	}
	return s
}
