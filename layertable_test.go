package stamp

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/recipes"
)

// everyKindRecipe has one layer of every kind, in recipes.LayerKinds' order.
const everyKindRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: kinds
base: {tarball: ./base.tar}
provision:
  layers:
    - tarball: {path: ./extra.tar, dest: /opt}
    - files: [{path: /etc/hostname, content: "node\n"}]
    - symlink: {path: /usr/local/bin/k, target: /usr/bin/kubectl}
    - mkdir: [{path: /var/lib/kubelet, mode: "0700"}]
    - remove: ["/usr/share/doc/**"]
    - users: [{name: capi, uid: 1000}]
    - groups: [{name: docker, gid: 998}]
    - systemd: {enable: [kubelet.service]}
    - hook: ./hook.sh
    - oci: {ref: "127.0.0.1:5000/bins:v1"}
    - debs: {repo: "file:///srv/debian", suite: bookworm, packages: [socat], trusted: true}
    - images: ["pause:3.10@sha256:0000000000000000000000000000000000000000000000000000000000000000"]
    - run: {command: [/bin/true]}
`

// TestLayerTablesAgree holds the recipe schema's layer kinds against the
// conductor's conversions: every kind a recipe may name converts to a layer
// and is labelled by its kind, and no conversion is left for a kind the
// schema dropped.
func TestLayerTablesAgree(t *testing.T) {
	rec, err := recipes.Parse([]byte(everyKindRecipe), "kinds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	kinds := recipes.LayerKinds()
	ls := rec.Provision.Layers
	if len(ls) != len(kinds) {
		t.Fatalf("the recipe has %d layers, the schema %d kinds: give every kind a layer here", len(ls), len(kinds))
	}
	phases, _, err := plan(rec)
	if err != nil {
		t.Fatal(err)
	}
	steps := phases[len(phases)-1].steps
	for i, kind := range kinds {
		if got := ls[i].Kind(); got != kind {
			t.Errorf("layer %d: Kind() = %q, want %q", i, got, kind)
		}
		if i >= len(steps) || !strings.HasSuffix(steps[i].label, "."+kind) || steps[i].layer == nil {
			t.Errorf("kind %s: no step made from it", kind)
		}
	}
	var converted []string
	for k := range layerConverters {
		converted = append(converted, k)
	}
	sort.Strings(converted)
	want := append([]string(nil), kinds...)
	sort.Strings(want)
	if !reflect.DeepEqual(converted, want) {
		t.Errorf("the conductor converts %v, the schema has %v", converted, want)
	}
}
