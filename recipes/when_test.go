package recipes

import (
	"strings"
	"testing"
)

// whenRecipe picks the container runtime as the node recipe does: a
// parameter with choices, and one debs layer per choice, the upstream one
// from a repository only it names.
const whenRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: when
params:
  mirror: file:///srv/debian
  runtime: {default: upstream, choices: [upstream, debian], description: which containerd}
  runtime_repo: {description: upstream's packages}
base:
  tarball: ./base.tar
customize:
  layers:
    - files: [{path: /etc/hostname, content: "node\n"}]
    - when: {runtime: upstream}
      debs: {repo: "${runtime_repo}", suite: /, packages: [containerd.io, runc]}
    - debs: {repo: "${mirror}", suite: bookworm, packages: [socat]}
      when: {runtime: debian}
provision:
  layers:
    - when: {runtime: debian}
      remove: [/etc/motd]
`

func TestWhenPicksLayers(t *testing.T) {
	up := mustParse(t, whenRecipe, Options{Set: map[string]string{"runtime_repo": "file:///srv/upstream"}})
	if n := len(up.Customize.Layers); n != 2 {
		t.Fatalf("upstream: %d customize layers, want 2", n)
	}
	l := up.Customize.Layers[1]
	if l.Debs == nil || l.Debs.Repo != "file:///srv/upstream" || l.Field != "customize.layers[1]" {
		t.Errorf("upstream: layer %+v field %q", l.Debs, l.Field)
	}
	if len(up.Provision.Layers) != 0 {
		t.Errorf("upstream: provision layers %+v, want none", up.Provision.Layers)
	}
	if v := up.ParamValues(); v["runtime"] != "upstream" || v["runtime_repo"] != "file:///srv/upstream" || v["mirror"] != "" {
		t.Errorf("upstream: used parameters %v, want runtime and runtime_repo only", v)
	}

	// The debian layer stands third: its field still says so, and
	// runtime_repo, used only by the layer left out, needs no value.
	deb := mustParse(t, whenRecipe, Options{Set: map[string]string{"runtime": "debian"}})
	if n := len(deb.Customize.Layers); n != 2 {
		t.Fatalf("debian: %d customize layers, want 2", n)
	}
	l = deb.Customize.Layers[1]
	if l.Debs == nil || l.Debs.Repo != "file:///srv/debian" || l.Field != "customize.layers[2]" {
		t.Errorf("debian: layer %+v field %q", l.Debs, l.Field)
	}
	if len(deb.Provision.Layers) != 1 || deb.Provision.Layers[0].Field != "provision.layers[0]" {
		t.Errorf("debian: provision layers %+v", deb.Provision.Layers)
	}
	if _, used := deb.ParamValues()["runtime_repo"]; used {
		t.Error("debian: runtime_repo counts as used")
	}

	if up.TreeDigest == deb.TreeDigest {
		t.Error("the two choices give the same recipe digest")
	}
	// A layer left out is not part of what decides the tree: editing it
	// leaves the digest alone, editing one that applies does not.
	edited := mustParse(t, strings.Replace(whenRecipe, "packages: [socat]", "packages: [socat, jq]", 1),
		Options{Set: map[string]string{"runtime_repo": "file:///srv/upstream"}})
	if edited.TreeDigest != up.TreeDigest {
		t.Error("editing a layer that does not apply changed the recipe digest")
	}
	edited = mustParse(t, strings.Replace(whenRecipe, "packages: [socat]", "packages: [socat, jq]", 1),
		Options{Set: map[string]string{"runtime": "debian"}})
	if edited.TreeDigest == deb.TreeDigest {
		t.Error("editing a layer that applies left the recipe digest as it was")
	}
}

func TestWhenErrors(t *testing.T) {
	for _, c := range []struct {
		name, old, new string
		set            map[string]string
		want           string
	}{
		{"set outside the choices", "", "", map[string]string{"runtime": "debain"},
			`--set runtime: parameter "runtime" is "debain", which is not one of its choices (upstream, debian)`},
		{"when outside the choices", "when: {runtime: debian}\n", "when: {runtime: debain}\n", nil,
			`customize.layers[2].when.runtime: "debain" is not one of parameter "runtime"'s choices (upstream, debian)`},
		{"undeclared parameter", "when: {runtime: upstream}", "when: {runtme: upstream}", nil,
			`customize.layers[1].when.runtme: when names no declared parameter "runtme" (params declares mirror, runtime, runtime_repo)`},
		{"a list", "when: {runtime: upstream}", "when: [runtime]", nil,
			"customize.layers[1].when: when is a mapping of parameter names"},
		{"no value", "when: {runtime: upstream}", "when: {runtime: }", nil,
			`customize.layers[1].when.runtime: when compares "runtime" with a value`},
		{"substitution", "when: {runtime: upstream}", "when: {runtime: \"${mirror}\"}", nil,
			"customize.layers[1].when.runtime: a when value is literal"},
		{"no kind", "      debs: {repo: \"${runtime_repo}\", suite: /, packages: [containerd.io, runc]}\n", "", nil,
			"customize.layers[1]: a layer has a kind key"},
		{"default outside the choices", "default: upstream, choices", "default: stable, choices", nil,
			`params.runtime.default: default "stable" is not one of the choices (upstream, debian)`},
		{"setting what only a skipped layer uses", "", "", map[string]string{"runtime": "debian", "runtime_repo": "file:///x"},
			`--set runtime_repo: parameter "runtime_repo" is declared but no field uses it`},
		{"a skipped layer's parameter is still required when it applies", "", "", nil,
			`params.runtime_repo: parameter "runtime_repo" has no default and no value`},
	} {
		t.Run(c.name, func(t *testing.T) {
			y := whenRecipe
			if c.old != "" {
				if !strings.Contains(y, c.old) {
					t.Fatalf("%q is not in the recipe", c.old)
				}
				y = strings.Replace(y, c.old, c.new, 1)
			}
			_, err := ParseWith([]byte(y), "r.yaml", Options{Set: c.set})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
}

// whenOutputsRecipe picks the disk's layout as the node recipe does: a
// plain disk, or a sealed one whose key only it names; both make the
// qcow2 of the raw that applies.
const whenOutputsRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: node
params:
  disk: {default: plain, choices: [plain, sealed]}
  key: {description: the signing key}
  cert: {description: its certificate}
base:
  tarball: ./base.tar
outputs:
  - when: {disk: plain}
    format: raw
    partitions: [{name: esp, type: esp, size: 64MiB}, {name: root, type: root}]
    boot: {loader: systemd-boot}
  - format: raw
    when: {disk: sealed}
    partitions: [{name: esp, type: esp, size: 64MiB}, {name: usr, type: usr}, {name: usr-verity, type: usr-verity}, {name: root, type: root}]
    boot: {loader: uki, secureBoot: {key: "${key}", cert: "${cert}"}}
  - {format: qcow2, from: raw}
`

func TestWhenPicksOutputs(t *testing.T) {
	plain := mustParse(t, whenOutputsRecipe, Options{})
	if len(plain.Outputs) != 2 || plain.Outputs[0].Boot == nil || plain.Outputs[0].Boot.Loader != "systemd-boot" ||
		plain.Outputs[0].Field != "outputs[0]" || plain.Outputs[1].Field != "outputs[2]" {
		t.Fatalf("plain: outputs %+v", plain.Outputs)
	}
	if _, used := plain.ParamValues()["key"]; used {
		t.Error("plain: key counts as used")
	}
	sealed := mustParse(t, whenOutputsRecipe, Options{Set: map[string]string{"disk": "sealed", "key": "./db.key", "cert": "./db.crt"}})
	if len(sealed.Outputs) != 2 || sealed.Outputs[0].Field != "outputs[1]" || sealed.Outputs[0].Boot.Loader != "uki" ||
		!strings.HasSuffix(sealed.Outputs[0].Boot.SecureBoot.Key, "db.key") || sealed.Outputs[1].From != "raw" {
		t.Fatalf("sealed: outputs %+v", sealed.Outputs)
	}
	// The outputs are not part of what decides the tree: both choices
	// build, and cache, one tree.
	if plain.TreeDigest != sealed.TreeDigest {
		t.Error("choosing an output changed the recipe digest")
	}

	for _, c := range []struct {
		name string
		set  map[string]string
		want string
	}{
		{"a parameter only a skipped output uses", map[string]string{"key": "./db.key"},
			`--set key: parameter "key" is declared but no field uses it`},
		{"required when its output applies", map[string]string{"disk": "sealed", "cert": "./db.crt"},
			`params.key: parameter "key" has no default and no value`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := ParseWith([]byte(whenOutputsRecipe), "r.yaml", Options{Set: c.set}); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	bad := strings.Replace(whenOutputsRecipe, "when: {disk: sealed}", "when: {disk: seald}", 1)
	if _, err := ParseWith([]byte(bad), "r.yaml", Options{}); err == nil ||
		!strings.Contains(err.Error(), `outputs[1].when.disk: "seald" is not one of parameter "disk"'s choices (plain, sealed)`) {
		t.Fatalf("a misspelt choice: %v", err)
	}
}
