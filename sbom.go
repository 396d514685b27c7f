package stamp

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/formats/attest"
	"github.com/stamp-dev/stamp/packages/dpkg"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

// sbomJSON makes sbom.spdx.json. The conductor reads the tree's dpkg
// database with packages/dpkg and hands attest the packages: formats may not
// import packages.
func sbomJSON(tree *rootfs.Sealed, rec *recipes.Recipe, ep time.Time, treeDigest string, inputs []plannedInput) ([]byte, error) {
	var pulled []attest.Pulled
	for _, pi := range inputs {
		if pi.in.Kind != "oci" && pi.in.Kind != "image" {
			continue
		}
		pulled = append(pulled, attest.Pulled{Field: pi.field, Kind: string(pi.in.Kind), Ref: pi.in.URI, Digest: pi.in.Digest})
	}
	debs, err := installedDebs(tree)
	if err != nil {
		return nil, err
	}
	return attest.SBOMJSON(rec.Name, tree, ep, treeDigest, pulled, debs)
}

// installedDebs lists the packages the tree's dpkg database has installed,
// nil when there is none, sorted by name and architecture.
func installedDebs(tree *rootfs.Sealed) ([]attest.Deb, error) {
	e := tree.Get(dpkg.StatusPath)
	if e == nil || e.Type != rootfs.TypeRegular {
		return nil, nil
	}
	f, err := tree.Open(dpkg.StatusPath)
	if err != nil {
		return nil, fmt.Errorf("sbom: %w", err)
	}
	defer f.Close()
	debs, err := debsFromStatus(f)
	if err != nil {
		return nil, fmt.Errorf("sbom: %s: %w", dpkg.StatusPath, err)
	}
	return debs, nil
}

// debsFromStatus lists the installed packages of a dpkg status file.
func debsFromStatus(r io.Reader) ([]attest.Deb, error) {
	st, err := dpkg.ReadStatus(r)
	if err != nil {
		return nil, err
	}
	var out []attest.Deb
	for _, p := range st.Paragraphs() {
		if s := strings.Fields(p.Get("Status")); len(s) != 3 || s[2] != "installed" {
			continue
		}
		d := attest.Deb{Name: p.Get("Package"), Version: p.Get("Version"), Arch: p.Get("Architecture")}
		// "Source: name (version)" names the source when it differs.
		if src := strings.Fields(p.Get("Source")); len(src) > 0 {
			d.Source = src[0]
		}
		out = append(out, d)
	}
	return out, nil
}
