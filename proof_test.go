package stamp

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/rootfs"
)

func proofEntry(p string, typ rootfs.Type, perm uint32, digest string) *rootfs.Entry {
	return &rootfs.Entry{Path: p, Inode: &rootfs.Inode{Type: typ, Perm: perm, MTime: time.Unix(1700000000, 0), Digest: digest, Size: 4}}
}

func TestDiffImagesNamesEveryField(t *testing.T) {
	a := []*rootfs.Entry{
		proofEntry("/", rootfs.TypeDir, 0o755, ""),
		proofEntry("/etc/a", rootfs.TypeRegular, 0o644, "aa"),
		proofEntry("/etc/gone", rootfs.TypeRegular, 0o644, "bb"),
		proofEntry("/etc/same", rootfs.TypeRegular, 0o644, "cc"),
		proofEntry("/etc/type", rootfs.TypeRegular, 0o644, "dd"),
		proofEntry(rootfs.RecordPath, rootfs.TypeRegular, 0o644, "r1"),
	}
	b := []*rootfs.Entry{
		proofEntry("/", rootfs.TypeDir, 0o755, ""),
		proofEntry("/etc/a", rootfs.TypeRegular, 0o600, "ab"),
		proofEntry("/etc/new", rootfs.TypeRegular, 0o644, "ee"),
		proofEntry("/etc/same", rootfs.TypeRegular, 0o644, "cc"),
		proofEntry("/etc/type", rootfs.TypeDir, 0o755, ""),
		proofEntry(rootfs.RecordPath, rootfs.TypeRegular, 0o644, "r2"),
	}
	b[1].UID, b[1].MTime = 7, time.Unix(1700000001, 0)
	b[1].Xattrs = map[string]string{"user.x": "1"}
	rootfs.SetNlink(a)
	rootfs.SetNlink(b)
	ia := &formats.Image{Format: "tar", Entries: a}
	ib := &formats.Image{Format: "raw", Entries: b}
	var got []string
	for _, c := range DiffImages(ia, ib, DiffOptions{}) {
		got = append(got, string(c.Kind)+" "+c.Path+" "+strings.Join(c.FieldNames(), ","))
	}
	want := []string{
		"changed /etc/a content,mode,owner,mtime,xattr",
		"removed /etc/gone ",
		"added /etc/new ",
		"changed /etc/type type",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	with := DiffImages(ia, ib, DiffOptions{IncludeRecord: true})
	if last := with[len(with)-1]; last.Path != rootfs.RecordPath || last.FieldNames()[0] != FieldContent {
		t.Errorf("the record is not compared when asked for: %v", last)
	}
	// Facts and extra entries count only between images of one format.
	ia.Facts, ib.Facts = []formats.Fact{{Key: "k", Value: "1"}}, []formats.Fact{{Key: "k", Value: "2"}}
	if n := len(DiffImages(ia, ib, DiffOptions{})); n != len(want) {
		t.Errorf("facts of different formats compared: %d changes", n)
	}
	ib.Format = "tar"
	if c := DiffImages(ia, ib, DiffOptions{}); c[len(c)-1].Kind != Structure || c[len(c)-1].Path != "k" {
		t.Errorf("a differing fact is not reported: %v", c)
	}
}

func TestParseDpkgStatus(t *testing.T) {
	status := "Package: b\nStatus: install ok installed\nArchitecture: all\nVersion: 2\nDescription: x\n more\n .\n\n" +
		"Package: a\nStatus: install ok installed\nArchitecture: amd64\nSource: asrc (1)\nVersion: 1:1.0-1\n\n" +
		"Package: c\nStatus: deinstall ok config-files\nVersion: 3\n"
	got, err := parseDpkgStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	want := []debPackage{{Name: "a", Version: "1:1.0-1", Arch: "amd64", Source: "asrc"}, {Name: "b", Version: "2", Arch: "all"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := parseDpkgStatus(strings.NewReader("no colon here\n")); err == nil {
		t.Error("a line that is not a field is accepted")
	}
	if p := debPURL(want[0], distro{"debian", "12"}); p != "pkg:deb/debian/a@1%3A1.0-1?arch=amd64&distro=debian-12" {
		t.Errorf("purl %s", p)
	}
	if a, b := spdxIDPart("libstdc++6"), spdxIDPart("libstdc--6"); a == b {
		t.Errorf("SPDX ids collide: %s", a)
	}
}

func TestCanonicalJSONSortsKeys(t *testing.T) {
	type s struct {
		Z int            `json:"z"`
		A map[string]any `json:"a"`
	}
	got, err := canonicalJSON(s{Z: 1700000000, A: map[string]any{"y": "<&>", "b": 2}})
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"a\": {\n    \"b\": 2,\n    \"y\": \"<&>\"\n  },\n  \"z\": 1700000000\n}\n"
	if string(got) != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestFirstStreamDifference(t *testing.T) {
	big := bytes.Repeat([]byte("x"), 3<<20)
	for _, tc := range []struct {
		a, b []byte
		want int64
	}{
		{[]byte("same"), []byte("same"), -1},
		{[]byte("abcd"), []byte("abXd"), 2},
		{[]byte("abc"), []byte("abcdef"), 3},
		{big, append(append([]byte{}, big[:2<<20+5]...), 'y'), 2<<20 + 5},
	} {
		got, err := firstStreamDifference(bytes.NewReader(tc.a), bytes.NewReader(tc.b))
		if err != nil || got != tc.want {
			t.Errorf("first difference %d (%v), want %d", got, err, tc.want)
		}
	}
}

func TestReadSumsAndGroups(t *testing.T) {
	p := filepath.Join(t.TempDir(), "SHA256SUMS")
	h := strings.Repeat("ab", 32)
	os.WriteFile(p, []byte(h+"  x.tar\n"+h+"  x.oci/index.json\n"+strings.ToUpper(h)+" *x.oci/oci-layout\n"), 0o644)
	sums, err := ReadSums(p)
	if err != nil {
		t.Fatal(err)
	}
	names, groups := groupSums(sums)
	if !reflect.DeepEqual(names, []string{"x.tar", "x.oci"}) || len(groups["x.oci"]) != 2 || groups["x.oci"][1].SHA256 != h {
		t.Errorf("groups %v %v", names, groups)
	}
	if groupDigest(groups["x.tar"]) != h {
		t.Error("a single file's digest is not its own")
	}
	os.WriteFile(p, []byte("not-a-digest  x\n"), 0o644)
	if _, err := ReadSums(p); err == nil {
		t.Error("a malformed SHA256SUMS is accepted")
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
	if p := ociPackage("image", "registry.k8s.io/pause:3.10@"+d, d); p.Name != "registry.k8s.io/pause:3.10" || p.PrimaryPackagePurpose != "CONTAINER" {
		t.Errorf("image package %+v", p)
	}
}
