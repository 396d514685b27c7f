package repo

import (
	"context"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/rootfs/compress"
)

// Fetcher brings a URI's content into a content-addressed store and opens
// it by digest. want, when set, is the "sha256:<hex>" the content must
// have; a mismatch is an error and stores nothing. layers/cache.Cache is one.
type Fetcher interface {
	Fetch(ctx context.Context, uri, want string) (digest string, err error)
	Open(digest string) (io.ReadCloser, error)
}

// Source is one suite of a repository.
type Source struct {
	URL string // archive root: http(s):// or file://
	// Suite is a suite under dists/ ("bookworm"), or, ending in "/", the
	// directory of a flat repository ("/" for the root itself): its
	// Release and Packages sit in that directory, it has no components,
	// and its Filename fields are relative to URL, as apt reads
	// "deb URL DIR/". The Kubernetes project publishes its packages so.
	Suite string
	// Components are read under a suite; a flat repository has none.
	Components []string
	Arch       string
	// Keyring verifies InRelease; unused when Trusted.
	Keyring openpgp.EntityList
	// Trusted reads the unsigned Release instead of InRelease.
	Trusted bool
}

// ReleaseURL is the Release file the source is read from: InRelease,
// or Release when the source is trusted.
func (s Source) ReleaseURL() string {
	name := "InRelease"
	if s.Trusted {
		name = "Release"
	}
	return s.dist() + "/" + name
}

// Flat reports whether the source is a flat repository.
func (s Source) Flat() bool { return strings.HasSuffix(s.Suite, "/") }

// dist is the directory the Release and the indexes are named under.
func (s Source) dist() string {
	root := strings.TrimSuffix(s.URL, "/")
	if !s.Flat() {
		return root + "/dists/" + s.Suite
	}
	if dir := strings.Trim(path.Clean("/"+s.Suite), "/"); dir != "" {
		return root + "/" + dir
	}
	return root
}

// Index is what a source offers.
type Index struct {
	Release  *Release
	Packages []*Package
	// Files are the index files read, by URL, with their digests.
	Files map[string]string
}

// indexNames are the compressions tried for a Packages index, in order:
// the fastest to decode first.
var indexNames = []string{"Packages.gz", "Packages.zst", "Packages.xz", "Packages"}

// Load reads the source's Release (from the store when releaseDigest is
// set, as the build's lock pins it) and the Packages indexes of every
// component for the architecture and "all", each verified against the
// Release's SHA256. A flat source has one Packages index beside its
// Release, which may list every architecture: only the source's own and
// "all" are kept.
func Load(ctx context.Context, f Fetcher, s Source, releaseDigest string) (*Index, error) {
	relURL := s.ReleaseURL()
	if s.Flat() && len(s.Components) > 0 {
		return nil, fmt.Errorf("%s: a flat repository (suite %q) has no components, but %s were asked for", relURL, s.Suite, strings.Join(s.Components, ", "))
	}
	if releaseDigest == "" {
		var err error
		if releaseDigest, err = f.Fetch(ctx, relURL, ""); err != nil {
			return nil, err
		}
	}
	data, err := readAll(f, releaseDigest)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", relURL, err)
	}
	var rel *Release
	if s.Trusted {
		rel, err = ParseRelease(data)
	} else {
		if len(s.Keyring) == 0 {
			return nil, fmt.Errorf("%s: no keyring to verify it with (name one, or set trusted: true)", relURL)
		}
		rel, err = VerifyInRelease(data, s.Keyring)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", relURL, err)
	}
	if err := checkArch(rel, s.Arch); err != nil {
		return nil, fmt.Errorf("%s: %w", relURL, err)
	}
	idx := &Index{Release: rel, Files: map[string]string{relURL: releaseDigest}}
	if s.Flat() {
		name, sum, ok := pickIndex(rel, "")
		if !ok {
			return nil, fmt.Errorf("%s: lists no Packages index beside it", relURL)
		}
		u := s.dist() + "/" + name
		pkgs, d, err := fetchPackages(ctx, f, u, name, sum, s.URL)
		if err != nil {
			return nil, err
		}
		idx.Files[u] = d
		for _, p := range pkgs {
			if p.Arch == s.Arch || p.Arch == "all" {
				idx.Packages = append(idx.Packages, p)
			}
		}
		return idx, nil
	}
	seen := map[string]bool{}
	for _, comp := range s.Components {
		found := false
		for _, arch := range []string{s.Arch, "all"} {
			name, sum, ok := pickIndex(rel, comp+"/binary-"+arch+"/")
			if !ok {
				continue
			}
			found = true
			u := s.dist() + "/" + name
			pkgs, d, err := fetchPackages(ctx, f, u, name, sum, s.URL)
			if err != nil {
				return nil, err
			}
			idx.Files[u] = d
			for _, p := range pkgs {
				// Debian lists arch-all packages in binary-ARCH too.
				k := p.Name + " " + p.Version + " " + p.Arch
				if seen[k] {
					continue
				}
				seen[k] = true
				idx.Packages = append(idx.Packages, p)
			}
		}
		if !found {
			return nil, fmt.Errorf("%s: no Packages index for component %s, architecture %s", relURL, comp, s.Arch)
		}
	}
	return idx, nil
}

// fetchPackages brings the index at u into the store, verified against
// the Release's sum, and reads it.
func fetchPackages(ctx context.Context, f Fetcher, u, name string, sum FileSum, repoURL string) ([]*Package, string, error) {
	d, err := f.Fetch(ctx, u, "sha256:"+sum.SHA256)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", u, err)
	}
	pkgs, err := readPackages(f, d, name, repoURL)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", u, err)
	}
	return pkgs, d, nil
}

// checkArch refuses a suite whose Release says it does not carry arch.
func checkArch(rel *Release, arch string) error {
	archs := strings.Fields(rel.Paragraph.Get("Architectures"))
	if len(archs) == 0 {
		return nil
	}
	for _, a := range archs {
		if a == arch {
			return nil
		}
	}
	return fmt.Errorf("suite has no architecture %s (it has %s)", arch, strings.Join(archs, " "))
}

// pickIndex finds the Packages index under dir (e.g. "main/binary-amd64/")
// that the Release lists.
func pickIndex(rel *Release, dir string) (string, FileSum, bool) {
	for _, n := range indexNames {
		if s, ok := rel.Files[dir+n]; ok {
			return dir + n, s, true
		}
	}
	return "", FileSum{}, false
}

func readAll(f Fetcher, digest string) ([]byte, error) {
	rc, err := f.Open(digest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func readPackages(f Fetcher, digest, name, repoURL string) ([]*Package, error) {
	rc, err := f.Open(digest)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var alg compress.Algorithm
	switch {
	case strings.HasSuffix(name, ".gz"):
		alg = compress.Gzip
	case strings.HasSuffix(name, ".xz"):
		alg = compress.XZ
	case strings.HasSuffix(name, ".zst"):
		alg = compress.Zstd
	default:
		alg = compress.None
	}
	zr, err := compress.NewReader(alg, rc)
	if err != nil {
		return nil, err
	}
	defer zr.Close()
	pkgs, err := ParsePackages(zr, repoURL)
	if err != nil {
		return nil, err
	}
	// Read to the end so the store's verifying reader sees every byte.
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return nil, err
	}
	return pkgs, nil
}

// FetchDeb brings p's .deb into the store, verified against the SHA256 its
// index gives, and returns its digest.
func FetchDeb(ctx context.Context, f Fetcher, p *Package) (string, error) {
	d, err := f.Fetch(ctx, p.URL(), "sha256:"+p.SHA256)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", p.Name, p.Version, err)
	}
	return d, nil
}

// Merge joins the packages of several indexes, sorted by name, then
// version (newest first), then architecture, so every later choice is
// independent of the order indexes were read in.
func Merge(idx ...*Index) []*Package {
	var all []*Package
	for _, i := range idx {
		all = append(all, i.Packages...)
	}
	sort.SliceStable(all, func(a, b int) bool {
		pa, pb := all[a], all[b]
		if pa.Name != pb.Name {
			return pa.Name < pb.Name
		}
		if c := deb.CompareVersions(pa.Version, pb.Version); c != 0 {
			return c > 0
		}
		return pa.Arch < pb.Arch
	})
	return all
}
