package repo

import (
	"encoding/hex"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"

	"github.com/stamp-dev/stamp/packages/deb"
)

// Package is one binary package as an index (or the dpkg status) describes it.
type Package struct {
	Name      string
	Version   string
	Arch      string // amd64, arm64, all...
	MultiArch string // "", same, foreign, allowed, no
	Essential bool
	Priority  string

	Depends, PreDepends, Recommends, Provides, Conflicts, Breaks []deb.Alternatives

	// Filename is the .deb's path relative to the repository root.
	Filename string
	SHA256   string // lowercase hex of the .deb
	Size     int64
	// Repo is the repository root URL the package comes from.
	Repo string

	// Paragraph is the entry as the index has it, which becomes the
	// package's paragraph in the dpkg status.
	Paragraph *deb.Paragraph
}

// ID names the package as apt and errors do: "name version arch".
func (p *Package) ID() string { return p.Name + " " + p.Version + " " + p.Arch }

// URL is where the .deb is fetched from. Filename is a path, not a URL:
// each segment is escaped, as apt quotes it (pool files written by
// apt-get download carry a literal "%3a" for the epoch's colon).
func (p *Package) URL() string {
	segs := strings.Split(p.Filename, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.TrimSuffix(p.Repo, "/") + "/" + strings.Join(segs, "/")
}

// FromParagraph decodes the fields a resolver needs from a Packages (or
// status, or control) paragraph.
func FromParagraph(para *deb.Paragraph) (*Package, error) {
	p := &Package{
		Name:      para.Get("Package"),
		Version:   para.Get("Version"),
		Arch:      para.Get("Architecture"),
		MultiArch: para.Get("Multi-Arch"),
		Essential: para.Get("Essential") == "yes",
		Priority:  para.Get("Priority"),
		Filename:  para.Get("Filename"),
		SHA256:    strings.ToLower(para.Get("SHA256")),
		Paragraph: para,
	}
	if p.Name == "" {
		return nil, fmt.Errorf("entry without Package field")
	}
	if _, err := deb.ParseVersion(p.Version); err != nil {
		return nil, fmt.Errorf("%s: %w", p.Name, err)
	}
	if s := para.Get("Size"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: Size %q: %w", p.Name, s, err)
		}
		p.Size = n
	}
	for _, f := range []struct {
		name string
		dst  *[]deb.Alternatives
	}{
		{"Depends", &p.Depends}, {"Pre-Depends", &p.PreDepends}, {"Recommends", &p.Recommends},
		{"Provides", &p.Provides}, {"Conflicts", &p.Conflicts}, {"Breaks", &p.Breaks},
	} {
		v := para.Get(f.name)
		if v == "" {
			continue
		}
		rel, err := deb.ParseRelations(v)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %s: %w", p.Name, p.Version, f.name, err)
		}
		*f.dst = rel
	}
	return p, nil
}

// ParsePackages reads a Packages index whose Filename fields are relative
// to repo. Every entry must carry a SHA256 of its .deb.
func ParsePackages(r io.Reader, repo string) ([]*Package, error) {
	cr := deb.NewControlReader(r)
	var out []*Package
	for {
		para, err := cr.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		p, err := FromParagraph(para)
		if err != nil {
			return nil, err
		}
		if p.Filename == "" {
			return nil, fmt.Errorf("%s %s: no Filename", p.Name, p.Version)
		}
		if b, err := hex.DecodeString(p.SHA256); err != nil || len(b) != 32 {
			return nil, fmt.Errorf("%s %s: no valid SHA256 for %s (MD5sum alone is not trusted)", p.Name, p.Version, p.Filename)
		}
		p.Repo = repo
		out = append(out, p)
	}
}
