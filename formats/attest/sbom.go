package attest

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
)

// spdxDocument is the part of SPDX 2.3 stamp writes.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name                  string         `json:"name"`
	SPDXID                string         `json:"SPDXID"`
	VersionInfo           string         `json:"versionInfo,omitempty"`
	DownloadLocation      string         `json:"downloadLocation"`
	FilesAnalyzed         bool           `json:"filesAnalyzed"`
	PrimaryPackagePurpose string         `json:"primaryPackagePurpose,omitempty"`
	Checksums             []spdxChecksum `json:"checksums,omitempty"`
	LicenseConcluded      string         `json:"licenseConcluded"`
	LicenseDeclared       string         `json:"licenseDeclared"`
	CopyrightText         string         `json:"copyrightText"`
	SourceInfo            string         `json:"sourceInfo,omitempty"`
	Comment               string         `json:"comment,omitempty"`
	ExternalRefs          []spdxRef      `json:"externalRefs,omitempty"`
}

type spdxChecksum struct {
	Algorithm     string `json:"algorithm"`
	ChecksumValue string `json:"checksumValue"`
}

type spdxRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

// Deb is one installed package of the image's dpkg database.
type Deb struct {
	Name, Version, Arch, Source string
}

// Pulled is an OCI artifact or image the recipe pulled by reference: Kind
// "oci" or "image", Field the recipe field that named it.
type Pulled struct {
	Field, Kind, Ref, Digest string
}

// SBOMJSON makes sbom.spdx.json for the image name: the image, the OCI
// artifacts the recipe pulled and the Debian packages installed in the tree
// (debs, sorted by name and architecture). created is the
// epoch and the namespace comes from the tree digest, so the same tree gives
// the same bytes.
func SBOMJSON(name string, tree *rootfs.Sealed, ep time.Time, treeDigest string, pulled []Pulled, debs []Deb) ([]byte, error) {
	treeHex := strings.TrimPrefix(treeDigest, "sha256:")
	doc := spdxDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              name,
		DocumentNamespace: "https://stamp.dev/spdx/" + name + "-" + treeHex,
		CreationInfo: spdxCreationInfo{
			Created:  ep.UTC().Format("2006-01-02T15:04:05Z"),
			Creators: []string{"Tool: stamp-" + ThisBuilder().Version["stamp"]},
		},
	}
	image := spdxPackage{Name: name, SPDXID: "SPDXRef-Image", DownloadLocation: "NOASSERTION",
		PrimaryPackagePurpose: "OPERATING_SYSTEM", Comment: "stamp tree digest " + treeDigest}
	doc.Packages = append(doc.Packages, withNoAssertion(image))
	doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", image.SPDXID})

	ids := map[string]int{}
	id := func(prefix, name string) string {
		base := "SPDXRef-" + prefix + "-" + spdxIDPart(name)
		ids[base]++
		if n := ids[base]; n > 1 {
			return fmt.Sprintf("%s-%d", base, n)
		}
		return base
	}
	for _, pl := range pulled {
		p := ociPackage(pl.Kind, pl.Ref, pl.Digest)
		p.SPDXID = id("OCI", p.Name)
		p.SourceInfo = "pulled by " + pl.Field
		doc.Packages = append(doc.Packages, withNoAssertion(p))
		doc.Relationships = append(doc.Relationships, spdxRelationship{image.SPDXID, "CONTAINS", p.SPDXID})
	}
	distro := osRelease(tree)
	for _, d := range debs {
		p := spdxPackage{Name: d.Name, VersionInfo: d.Version, DownloadLocation: "NOASSERTION", PrimaryPackagePurpose: "INSTALL"}
		p.SPDXID = id("deb", d.Name+"-"+d.Arch)
		if d.Source != "" {
			p.SourceInfo = "built from Debian source package " + d.Source
		}
		p.ExternalRefs = []spdxRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: debPURL(d, distro)}}
		doc.Packages = append(doc.Packages, withNoAssertion(p))
		doc.Relationships = append(doc.Relationships, spdxRelationship{image.SPDXID, "CONTAINS", p.SPDXID})
	}
	return CanonicalJSON(doc)
}

func withNoAssertion(p spdxPackage) spdxPackage {
	p.LicenseConcluded, p.LicenseDeclared, p.CopyrightText = "NOASSERTION", "NOASSERTION", "NOASSERTION"
	return p
}

// ociPackage describes an OCI artifact or image pulled by reference.
func ociPackage(kind, ref, digest string) spdxPackage {
	name := ref
	if i := strings.Index(name, "@"); i >= 0 {
		name = name[:i]
	}
	repo := name
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		repo = name[:i]
	}
	last := repo[strings.LastIndex(repo, "/")+1:]
	p := spdxPackage{Name: name, VersionInfo: digest, DownloadLocation: "NOASSERTION", PrimaryPackagePurpose: "CONTAINER"}
	if kind == "oci" {
		p.PrimaryPackagePurpose = "OTHER"
	}
	if algo, hex, ok := strings.Cut(digest, ":"); ok && algo == "sha256" {
		p.Checksums = []spdxChecksum{{Algorithm: "SHA256", ChecksumValue: hex}}
		purl := "pkg:oci/" + strings.ToLower(last) + "@" + purlEscape(digest) + "?repository_url=" + url.QueryEscape(repo)
		p.ExternalRefs = []spdxRef{{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl", ReferenceLocator: purl}}
	}
	return p
}

// spdxIDPart keeps what an SPDX identifier may hold ([A-Za-z0-9.-]) and
// spells the rest as hex, so distinct names stay distinct.
func spdxIDPart(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '-' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "x%02X", c)
		}
	}
	return b.String()
}

// distro is what /etc/os-release says, for package URLs.
type distro struct{ id, versionID string }

func osRelease(tree *rootfs.Sealed) distro {
	d := distro{id: "debian"}
	e, err := tree.Lookup("/etc/os-release", true)
	if err != nil || e == nil || e.Type != rootfs.TypeRegular {
		return d
	}
	f, err := tree.Open(e.Path)
	if err != nil {
		return d
	}
	defer f.Close()
	sc := bufio.NewScanner(io.LimitReader(f, 64<<10))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		v = strings.Trim(v, `"'`)
		switch k {
		case "ID":
			if v != "" {
				d.id = v
			}
		case "VERSION_ID":
			d.versionID = v
		}
	}
	return d
}

// debPURL is the package URL of an installed Debian package.
func debPURL(d Deb, dist distro) string {
	q := url.Values{}
	if d.Arch != "" {
		q.Set("arch", d.Arch)
	}
	if dist.versionID != "" {
		q.Set("distro", dist.id+"-"+dist.versionID)
	}
	// url.Values.Encode sorts by key.
	s := "pkg:deb/" + dist.id + "/" + purlEscape(d.Name) + "@" + purlEscape(d.Version)
	if enc := q.Encode(); enc != "" {
		s += "?" + enc
	}
	return s
}

// purlEscape percent-encodes a package URL segment; a colon, which
// url.PathEscape leaves alone, is encoded as the purl spec's examples do.
func purlEscape(s string) string {
	return strings.ReplaceAll(url.PathEscape(s), ":", "%3A")
}
