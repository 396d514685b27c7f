package attest

import (
	"reflect"
	"strings"
	"testing"
)

func TestCanonicalJSONSortsKeys(t *testing.T) {
	type s struct {
		Z int            `json:"z"`
		A map[string]any `json:"a"`
	}
	got, err := CanonicalJSON(s{Z: 1700000000, A: map[string]any{"y": "<&>", "b": 2}})
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"a\": {\n    \"b\": 2,\n    \"y\": \"<&>\"\n  },\n  \"z\": 1700000000\n}\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestDiffBuilders(t *testing.T) {
	a := Builder{ID: BuilderID, Version: map[string]string{"go": "go1.25", "stamp": "v1", "module:x": "v1"}}
	b := Builder{ID: BuilderID, Version: map[string]string{"go": "go1.26", "stamp": "v1", "module:y": "v2"}}
	got := DiffBuilders(a, b)
	want := []string{"go: go1.25 -> go1.26", "module:x: v1 -> (none)", "module:y: (none) -> v2"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	if this := ThisBuilder(); this.Version["go"] == "" {
		t.Errorf("the running binary's Go version is unknown: %v", this.Version)
	}
}

func TestOCIPackage(t *testing.T) {
	d := "sha256:" + strings.Repeat("0a", 32)
	p := ociPackage("oci", "127.0.0.1:5000/k8s/bins:v1.31.4", d)
	if p.Name != "127.0.0.1:5000/k8s/bins:v1.31.4" || p.VersionInfo != d || p.Checksums[0].ChecksumValue != strings.Repeat("0a", 32) {
		t.Errorf("package %+v", p)
	}
	if got, want := p.ExternalRefs[0].ReferenceLocator, "pkg:oci/bins@sha256%3A"+strings.Repeat("0a", 32)+"?repository_url=127.0.0.1%3A5000%2Fk8s%2Fbins"; got != want {
		t.Errorf("purl %s, want %s", got, want)
	}
	if p := ociPackage("image", "registry.example.invalid/pause:3.10@"+d, d); p.Name != "registry.example.invalid/pause:3.10" || p.PrimaryPackagePurpose != "CONTAINER" {
		t.Errorf("image package %+v", p)
	}
}

func TestDebPURLAndSPDXIDs(t *testing.T) {
	d := Deb{Name: "a", Version: "1:1.0-1", Arch: "amd64", Source: "asrc"}
	if p := debPURL(d, distro{"debian", "12"}); p != "pkg:deb/debian/a@1%3A1.0-1?arch=amd64&distro=debian-12" {
		t.Errorf("purl %s", p)
	}
	if a, b := spdxIDPart("libstdc++6"), spdxIDPart("libstdc--6"); a == b {
		t.Errorf("SPDX ids collide: %s", a)
	}
}
