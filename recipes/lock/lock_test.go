package lock

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const (
	d1 = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	d2 = "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

func sample() *Lock {
	l := &Lock{}
	l.Set(Input{Kind: "oci", URI: "127.0.0.1:5000/k8s/bins:v1.31.4", Digest: d2, Extra: map[string]string{"platform": "linux/amd64", "mediaType": "application/vnd.oci.image.index.v1+json"}})
	l.Set(Input{Kind: "tarball", URI: "./base.tar.zst", Digest: d1})
	l.Set(Input{Kind: "deb", URI: "file:///srv/debian socat", Digest: d1, Extra: map[string]string{"version": "1.7.4.4-2"}})
	l.Set(Input{Kind: "tarball", URI: "https://example.com/a: b.tar", Digest: d2})
	return l
}

const sampleWant = Header + `inputs:
  - kind: deb
    uri: file:///srv/debian socat
    digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    extra:
      version: 1.7.4.4-2
  - kind: oci
    uri: 127.0.0.1:5000/k8s/bins:v1.31.4
    digest: sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210
    extra:
      mediaType: application/vnd.oci.image.index.v1+json
      platform: linux/amd64
  - kind: tarball
    uri: ./base.tar.zst
    digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
  - kind: tarball
    uri: 'https://example.com/a: b.tar'
    digest: sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210
`

func TestMarshalStable(t *testing.T) {
	got := string(sample().Marshal())
	if got != sampleWant {
		t.Errorf("Marshal =\n%s\nwant\n%s", got, sampleWant)
	}
	// Insertion order does not matter.
	l := sample()
	for i, j := 0, len(l.Inputs)-1; i < j; i, j = i+1, j-1 {
		l.Inputs[i], l.Inputs[j] = l.Inputs[j], l.Inputs[i]
	}
	if again := string(l.Marshal()); again != got {
		t.Errorf("Marshal depends on insertion order:\n%s", again)
	}
	if empty := string((&Lock{}).Marshal()); empty != Header+"inputs: []\n" {
		t.Errorf("empty lock = %q", empty)
	}
}

func TestRoundTrip(t *testing.T) {
	data := sample().Marshal()
	l, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	// Strings YAML would otherwise read as numbers, booleans or null stay strings.
	for _, uri := range []string{"0644", "true", "null", "~", "1e3", "- x", "#x", "a\nb"} {
		l.Set(Input{Kind: "file", URI: uri, Digest: d1, Extra: map[string]string{"n": "0755"}})
	}
	data = l.Marshal()
	l, err = Parse(data)
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	for _, uri := range []string{"0644", "true", "null", "~", "1e3", "- x", "#x", "a\nb"} {
		if in, ok := l.Get("file", uri); !ok || in.Extra["n"] != "0755" {
			t.Errorf("uri %q did not survive a round trip: %+v", uri, in)
		}
	}
	if again := l.Marshal(); string(again) != string(data) {
		t.Errorf("round trip changed bytes:\n%s\nvs\n%s", again, data)
	}
	in, ok := l.Get("oci", "127.0.0.1:5000/k8s/bins:v1.31.4")
	if !ok || in.Digest != d2 || in.Extra["platform"] != "linux/amd64" {
		t.Errorf("Get = %+v, %v", in, ok)
	}
	if _, ok := l.Get("tarball", "127.0.0.1:5000/k8s/bins:v1.31.4"); ok {
		t.Error("Get matched on URI alone")
	}
	l.Set(Input{Kind: "tarball", URI: "./base.tar.zst", Digest: d2})
	if in, _ := l.Get("tarball", "./base.tar.zst"); in.Digest != d2 || len(l.Inputs) != 12 {
		t.Errorf("Set did not replace: %+v, %d inputs", in, len(l.Inputs))
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	l, err := Load(filepath.Join(dir, "stamp.lock"))
	if err != nil || len(l.Inputs) != 0 {
		t.Fatalf("missing lock = %+v, %v", l, err)
	}
	file := filepath.Join(dir, "stamp.lock")
	if err := os.WriteFile(file, sample().Marshal(), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err = Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(l.Marshal(), sample().Marshal()) {
		t.Error("Load did not give back what was written")
	}
	if err := os.WriteFile(file, []byte("inputs: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(file); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("Load(bad) = %v, want an error naming the file", err)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tt := range []struct {
		name, yaml, want string
	}{
		{"unknown field", "inputs:\n  - kind: file\n    uri: ./a\n    digest: " + d1 + "\n    size: 3\n", "field size not found"},
		{"unknown top field", "version: 2\ninputs: []\n", "field version not found"},
		{"bad kind", "inputs:\n  - kind: git\n    uri: ./a\n    digest: " + d1 + "\n", `line 2: inputs[0].kind: "git" must be one of`},
		{"no uri", "inputs:\n  - kind: file\n    digest: " + d1 + "\n", "line 2: inputs[0].uri: is required"},
		{"bare digest", "inputs:\n  - {kind: file, uri: a, digest: " + d1[7:] + "}\n", "inputs[0].digest"},
		{"short digest", "inputs:\n  - {kind: file, uri: a, digest: " + d1 + "}\n  - {kind: file, uri: b, digest: \"sha256:12\"}\n", "line 3: inputs[1].digest"},
		{"twice", "inputs:\n  - {kind: file, uri: a, digest: " + d1 + "}\n  - {kind: file, uri: a, digest: " + d2 + "}\n", "line 3: inputs[1]: file \"a\" is already pinned by inputs[0]"},
		{"syntax", "inputs: [\n", "invalid lock"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	for _, ok := range []string{"", "# just a comment\n", Header + "inputs: []\n"} {
		if l, err := Parse([]byte(ok)); err != nil || len(l.Inputs) != 0 {
			t.Errorf("Parse(%q) = %+v, %v", ok, l, err)
		}
	}
}

// A lock records the parameter values it was made under, sorted, and reads
// them back; a lock without parameters is written as before.
func TestParamsRoundTrip(t *testing.T) {
	l := sample()
	l.Params = map[string]string{"suite": "bookworm", "mirror": "file:///srv/debian"}
	data := l.Marshal()
	want := Header + "params:\n  mirror: file:///srv/debian\n  suite: bookworm\ninputs:\n"
	if !strings.HasPrefix(string(data), want) {
		t.Fatalf("Marshal:\n%s\nwant a start of\n%s", data, want)
	}
	back, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Params, l.Params) || string(back.Marshal()) != string(data) {
		t.Errorf("round trip: %+v", back)
	}
	if got := string(sample().Marshal()); got != sampleWant {
		t.Errorf("a lock without params changed:\n%s", got)
	}
	if _, err := Parse([]byte("params: [a]\ninputs: []\n")); err == nil {
		t.Error("params as a list accepted")
	}
}

func TestParamsDiffer(t *testing.T) {
	l := &Lock{Params: map[string]string{"mirror": "file:///a", "suite": "bookworm", "old": "x"}}
	got := l.ParamsDiffer(map[string]string{"mirror": "file:///b", "suite": "bookworm", "new": ""})
	want := []string{"mirror: file:///a -> file:///b", "new: (none) -> ", "old: x -> (none)"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ParamsDiffer = %q, want %q", got, want)
	}
	if got := l.ParamsDiffer(l.Params); got != nil {
		t.Errorf("same values differ: %q", got)
	}
	if got := (&Lock{}).ParamsDiffer(nil); got != nil {
		t.Errorf("no params differ: %q", got)
	}
}
