package recipes

import (
	"errors"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"
)

// paramsRecipe uses parameters in nested fields of several kinds: a
// path, inline content, a mode, an owner, list items, a layer's mapping, a
// map's values, an output field and an alias of a params default.
const paramsRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: params
params:
  host: node-a
  mode: {default: "0640", description: the hostname file's mode}
  mirror: {default: {fromHostApt: true}}
  suite: &suite bookworm
  size: 4GiB
  unused:
base:
  tarball: ./base-${suite}.tar
customize:
  layers:
    - files:
        - {path: /etc/hostname, content: "${host}\n", mode: "${mode}", owner: "${host}:0"}
        - {path: "/etc/${host}/motd", content: "cost: $$5, shell: ${HOME} is $${HOME}, $HOME stays"}
    - remove: ["/usr/share/${host}/**"]
    - hook: {run: ./hooks/x.sh, args: ["${suite}", plain], env: {MIRROR: "${mirror}"}}
provision:
  layers:
    - debs: {repo: "${mirror}", suite: *suite, packages: [socat, "${host}-tools"]}
outputs:
  - {format: raw, size: "${size}"}
`

func mustParse(t *testing.T, y string, o Options) *Recipe {
	t.Helper()
	r, err := ParseWith([]byte(y), "r.yaml", o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParamsSubstituteNestedFields(t *testing.T) {
	y := strings.Replace(paramsRecipe, "${HOME} is ", "", 1)
	r := mustParse(t, y, Options{Set: map[string]string{"host": "n1", "mirror": "file:///srv/debian"}})
	if r.Base.Tarball != "./base-bookworm.tar" {
		t.Errorf("base.tarball = %q", r.Base.Tarball)
	}
	f := r.Customize.Layers[0].Files
	if *f[0].Content != "n1\n" || f[0].Mode == nil || *f[0].Mode != 0o640 || f[0].Owner != (Owner{"n1", "0"}) {
		t.Errorf("files[0] = %+v mode %v", f[0], f[0].Mode)
	}
	if f[1].Path != "/etc/n1/motd" || *f[1].Content != "cost: $$5, shell: ${HOME}, $HOME stays" {
		t.Errorf("files[1] = %q %q", f[1].Path, *f[1].Content)
	}
	if got := r.Customize.Layers[1].Remove; !reflect.DeepEqual(got, []string{"/usr/share/n1/**"}) {
		t.Errorf("remove = %q", got)
	}
	h := r.Customize.Layers[2].Hook
	if !reflect.DeepEqual(h.Args, []string{"bookworm", "plain"}) || h.Env["MIRROR"] != "file:///srv/debian" {
		t.Errorf("hook = %+v", h)
	}
	d := r.Provision.Layers[0].Debs
	if d.Repo != "file:///srv/debian" || d.Suite != "bookworm" || !reflect.DeepEqual(d.Packages, []string{"socat", "n1-tools"}) {
		t.Errorf("debs = %+v", d)
	}
	if r.Outputs[0].Size != 4<<30 {
		t.Errorf("size = %d", r.Outputs[0].Size)
	}
	want := map[string]string{"host": "n1", "mode": "0640", "mirror": "file:///srv/debian", "size": "4GiB", "suite": "bookworm"}
	if got := r.ParamValues(); !reflect.DeepEqual(got, want) {
		t.Errorf("ParamValues = %v, want %v", got, want)
	}
	if got := r.SetArgs(); !reflect.DeepEqual(got, []string{"host=n1", "mirror=file:///srv/debian", "mode=0640", "size=4GiB", "suite=bookworm"}) {
		t.Errorf("SetArgs = %q", got)
	}
	var names, sources []string
	for _, p := range r.Params {
		names, sources = append(names, p.Name), append(sources, p.Source)
	}
	if !reflect.DeepEqual(names, []string{"host", "mode", "mirror", "suite", "size", "unused"}) ||
		!reflect.DeepEqual(sources, []string{SourceSet, SourceDefault, SourceSet, SourceDefault, SourceDefault, ""}) {
		t.Errorf("params %q from %q", names, sources)
	}
	if r.Params[1].Description != "the hostname file's mode" || r.Params[5].Used || r.Params[5].Default != nil {
		t.Errorf("params = %+v", r.Params)
	}
}

// A value is inserted as it is: it is never expanded again, and a value
// that looks like a number, a boolean or null stays a string.
func TestParamsValuesAreLiteralStrings(t *testing.T) {
	y := head + "params: {a: x, b: y, m: m}\ncustomize:\n  layers:\n    - files: [{path: /a, content: \"${a}\", mode: \"${m}\"}]\n    - hook: {run: ./h, args: [\"${b}\"]}\n    - mkdir:\n        - path: /d\n          mode: ${m}\nseed: ${a}-s\n"
	r := mustParse(t, y, Options{Set: map[string]string{"a": "${b}", "b": "true", "m": "0755"}})
	f := r.Customize.Layers[0].Files[0]
	if *f.Content != "${b}" || *f.Mode != 0o755 {
		t.Errorf("content %q mode %v", *f.Content, f.Mode)
	}
	if args := r.Customize.Layers[1].Hook.Args; !reflect.DeepEqual(args, []string{"true"}) {
		t.Errorf("args = %q", args)
	}
	// Unquoted in block style, the value is still a string: a mode, not 755.
	if m := r.Customize.Layers[2].Mkdir[0].Mode; m == nil || *m != 0o755 || r.Seed != "${b}-s" {
		t.Errorf("mkdir mode %v, seed %q", m, r.Seed)
	}
	// Without parameters a recipe decodes as before, "$" and all.
	r = mustParse(t, head+"customize:\n  layers:\n    - files: [{path: /a, content: \"$$ $x $${x}\"}]\n", Options{})
	if got := *r.Customize.Layers[0].Files[0].Content; got != "$$ $x ${x}" {
		t.Errorf("content = %q", got)
	}
}

func TestParamsErrors(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		set   map[string]string
		line  int
		field string
		msg   string
	}{
		{"undeclared", head + "params: {a: x}\ncustomize:\n  layers:\n    - files:\n        - {path: /a, content: x}\n        - {path: /b, content: \"${nope}\"}\n",
			nil, 10, "customize.layers[0].files[1].content", "${nope} names no declared parameter (params declares a); write $${ for a literal ${"},
		{"undeclared without params", head + "outputs:\n  - {format: raw, size: \"${size}\"}\n",
			nil, 6, "outputs[0].size", "${size} names no declared parameter (declare it under params:)"},
		{"shell in content", head + "params: {a: x}\ncustomize:\n  layers:\n    - files:\n        - path: /s.sh\n          content: |\n            echo ${HOME}\n",
			nil, 10, "customize.layers[0].files[0].content", "${HOME} names no declared parameter"},
		{"unterminated", head + "params: {a: x}\nseed: \"${a\"\n", nil, 6, "seed", `unterminated ${ in "${a"`},
		{"bad name in reference", head + "params: {a: x}\nseed: \"${a b}\"\n", nil, 6, "seed", "${a b}: a parameter name must match"},
		{"no value", head + "params:\n  a: x\n  token:\nseed: \"${a}-${token}\"\n", nil, 7, "params.token",
			`parameter "token" has no default and no value: give one with --set token=VALUE`},
		{"unknown set", head + "params: {a: x}\nseed: \"${a}\"\n", map[string]string{"b": "1"}, 0, "--set b",
			`the recipe declares no parameter "b" (params declares a)`},
		{"set without params", head, map[string]string{"b": "1"}, 0, "--set b", "the recipe declares no parameters"},
		{"unused set", head + "params:\n  a: x\n  b: y\nseed: \"${a}\"\n", map[string]string{"b": "1"}, 7, "--set b",
			`parameter "b" is declared but no field uses it`},
		{"bad param name", head + "params: {a-b: x}\n", nil, 5, "params.a-b", "must match [A-Za-z_][A-Za-z0-9_]*"},
		{"repeated param", head + "params:\n  a: x\n  a: y\n", nil, 7, "params.a", "repeated parameter (first at line 6)"},
		{"params not a mapping", head + "params: [a]\n", nil, 5, "params", "expected a mapping of parameter names"},
		{"unknown param field", head + "params:\n  a: {value: x}\n", nil, 6, "params.a.value", "unknown field"},
		{"fromHostApt false", head + "params:\n  a: {default: {fromHostApt: false}}\n", nil, 6, "params.a.default.fromHostApt", "leave the default out"},
		{"host apt without a host", head + "params:\n  m: {default: {fromHostApt: true}}\nseed: \"${m}\"\n", nil, 6, "params.m",
			`defaults to the host's Debian mirror, but the host's apt sources name none: give one with --set m=URL`},
		// Substituted values are checked like written ones.
		{"value checked", head + "params: {m: x}\ncustomize:\n  layers:\n    - files: [{path: /a, content: x, mode: \"${m}\"}]\n",
			map[string]string{"m": "0999"}, 8, "customize.layers[0].files[0].mode", `mode "0999" is not an octal number`},
		{"value in an integer field", head + "params: {e: x}\nepoch: ${e}\n", map[string]string{"e": "1700000000"}, 6, "epoch",
			`expected an integer, got the string "1700000000"; a parameter's value is always a string`},
		{"value made a relative path", head + "params: {p: x}\ncustomize:\n  layers:\n    - mkdir: [{path: \"${p}/x\"}]\n",
			nil, 8, "customize.layers[0].mkdir[0].path", `path "x/x" must be absolute`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseWith([]byte(tc.yaml), "r.yaml", Options{Set: tc.set})
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want an *Error", err)
			}
			if e.Line != tc.line || e.Field != tc.field || !strings.Contains(e.Msg, tc.msg) {
				t.Errorf("got %q (line %d, field %q), want line %d, field %q, msg containing %q", e.Error(), e.Line, e.Field, tc.line, tc.field, tc.msg)
			}
			if e.File != "r.yaml" {
				t.Errorf("file = %q", e.File)
			}
		})
	}
}

// An error names every problem, with the file and line in its text.
func TestParamsErrorText(t *testing.T) {
	y := head + "params: {a: x}\nseed: \"${b}\"\ncustomize:\n  layers:\n    - remove: [\"/${c}\"]\n"
	_, err := ParseWith([]byte(y), "dir/r.yaml", Options{})
	for _, want := range []string{"dir/r.yaml:6: seed: ${b} names no declared parameter", "dir/r.yaml:9: customize.layers[0].remove[0]: ${c} names"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not contain %q", err, want)
		}
	}
}

func TestParseSet(t *testing.T) {
	for arg, want := range map[string][2]string{"a=b": {"a", "b"}, "mirror=http://x/?a=b": {"mirror", "http://x/?a=b"}, "e=": {"e", ""}} {
		n, v, err := ParseSet(arg)
		if err != nil || n != want[0] || v != want[1] {
			t.Errorf("ParseSet(%q) = %q, %q, %v", arg, n, v, err)
		}
	}
	for _, arg := range []string{"a", "=b", "a-b=c", "${a}=b"} {
		if _, _, err := ParseSet(arg); err == nil {
			t.Errorf("ParseSet(%q) accepted", arg)
		}
	}
}

func TestHostDebianMirror(t *testing.T) {
	for dir, want := range map[string]string{
		// debian.sources: deb-src, a disabled stanza and a cdrom: URI
		// are passed over; 0vendor.sources sorts first but names no
		// Debian suite.
		"deb822": "http://mirror.example.invalid/debian",
		// sources.list before sources.list.d; security and vendor
		// suites, commented and deb-src lines are passed over.
		"oneline": "file:///srv/mirror/debian",
		"none":    "",
	} {
		got, err := HostDebianMirror(os.DirFS("testdata/apt/" + dir))
		if err != nil || got != want {
			t.Errorf("%s: HostDebianMirror = %q, %v; want %q", dir, got, err, want)
		}
	}
	if got, err := HostDebianMirror(fstest.MapFS{}); got != "" || err != nil {
		t.Errorf("empty /etc/apt: %q, %v", got, err)
	}
}

// brokenFS fails every read, so a test can tell the host was not asked.
type brokenFS struct{}

func (brokenFS) Open(string) (fs.File, error) { return nil, errors.New("host apt sources were read") }

func TestParamsHostAptDefault(t *testing.T) {
	y := head + "params:\n  mirror: {default: {fromHostApt: true}}\nprovision:\n  layers:\n    - debs: {repo: \"${mirror}\", suite: bookworm, packages: [socat]}\n"
	r := mustParse(t, y, Options{HostApt: os.DirFS("testdata/apt/deb822")})
	if got := r.Provision.Layers[0].Debs.Repo; got != "http://mirror.example.invalid/debian" || r.Params[0].Source != SourceHostApt {
		t.Errorf("repo = %q from %q", got, r.Params[0].Source)
	}
	// --set wins, and the host is not read at all.
	r = mustParse(t, y, Options{HostApt: brokenFS{}, Set: map[string]string{"mirror": "file:///srv/debian"}})
	if got := r.Provision.Layers[0].Debs.Repo; got != "file:///srv/debian" {
		t.Errorf("repo = %q", got)
	}
	// An unused host-apt parameter reads nothing and needs no value.
	mustParse(t, head+"params:\n  mirror: {default: {fromHostApt: true}}\n", Options{HostApt: brokenFS{}})

	_, err := ParseWith([]byte(y), "r.yaml", Options{HostApt: os.DirFS("testdata/apt/none")})
	if err == nil || !strings.Contains(err.Error(), "r.yaml:6: params.mirror: parameter \"mirror\" defaults to the host's Debian mirror, but the host's apt sources name none: give one with --set mirror=URL") {
		t.Errorf("no host mirror: %v", err)
	}
	_, err = ParseWith([]byte(y), "r.yaml", Options{HostApt: brokenFS{}})
	if err == nil || !strings.Contains(err.Error(), "r.yaml:6: params.mirror: reading the host's apt sources") {
		t.Errorf("unreadable host sources: %v", err)
	}
}

// LoadWith reads the file and hands the options on.
func TestLoadWithParams(t *testing.T) {
	p := t.TempDir() + "/r.yaml"
	if err := os.WriteFile(p, []byte(head+"params: {n: x}\nseed: \"s-${n}\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := LoadWith(p, Options{Set: map[string]string{"n": "y"}})
	if err != nil || r.Seed != "s-y" || r.Dir == "" {
		t.Fatalf("LoadWith: %+v, %v", r, err)
	}
}

// HostPaths lists every host path a field names, in document order, and
// says which parameters made it: a service building for others checks
// where those lead.
func TestHostPaths(t *testing.T) {
	y := strings.Replace(paramsRecipe, "${HOME} is ", "", 1)
	r := mustParse(t, y, Options{Set: map[string]string{"mirror": "file:///srv/debian"}})
	want := []HostPath{
		{Field: "base.tarball", Path: "./base-bookworm.tar", Params: []string{"suite"}},
		{Field: "customize.layers[2].hook.run", Path: "./hooks/x.sh"},
		{Field: "provision.layers[0].debs.repo", Path: "/srv/debian", Repo: true, Params: []string{"mirror"}},
	}
	if !reflect.DeepEqual(r.HostPaths, want) {
		t.Errorf("HostPaths = %+v\nwant %+v", r.HostPaths, want)
	}
	// A path made of two parameters names both.
	r = mustParse(t, head+"params: {b: x, a: y}\ncustomize:\n  layers:\n    - files: [{path: /k, from: \"./${b}/${a}-${b}\"}]\n", Options{})
	if got := r.HostPaths[1]; got.Path != "./x/y-x" || !reflect.DeepEqual(got.Params, []string{"a", "b"}) {
		t.Errorf("HostPaths[1] = %+v", got)
	}
	// A URL is no host path, nor an http repository.
	r = mustParse(t, head+"customize:\n  layers:\n    - tarball: {path: \"https://example.invalid/a.tar\", sha256: \""+strings.Repeat("a", 64)+"\"}\n"+
		"    - files: [{path: /k, from: ./k}]\n    - debs: {repo: \"http://127.0.0.1/debian\", suite: s, packages: [p]}\n", Options{})
	want = []HostPath{{Field: "base.tarball", Path: "./b.tar"}, {Field: "customize.layers[1].files[0].from", Path: "./k"}}
	if !reflect.DeepEqual(r.HostPaths, want) {
		t.Errorf("HostPaths = %+v\nwant %+v", r.HostPaths, want)
	}
}

// Declared gives the parameters of a recipe that does not load without
// values, with their defaults and descriptions.
func TestDeclared(t *testing.T) {
	if _, err := ParseWith([]byte(paramsRecipe), "r.yaml", Options{}); err == nil {
		t.Fatal("paramsRecipe loads without a mirror; the test proves nothing")
	}
	ps, err := Declared([]byte(paramsRecipe), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range ps {
		names = append(names, p.Name)
	}
	if !reflect.DeepEqual(names, []string{"host", "mode", "mirror", "suite", "size", "unused"}) {
		t.Fatalf("names %q", names)
	}
	if *ps[0].Default != "node-a" || ps[1].Description != "the hostname file's mode" || !ps[2].FromHostApt || ps[5].Default != nil || ps[0].Used {
		t.Errorf("params = %+v", ps)
	}
	if _, err := Declared([]byte("params: {1x: a}\n"), "r.yaml"); err == nil || !strings.Contains(err.Error(), "params.1x") {
		t.Errorf("a bad name: %v", err)
	}
}
