package stamp

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/layers"
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

// kindKnowledge is what the conductor learns of a layer of one kind through
// the layers package's optional interfaces.
type kindKnowledge struct {
	keeping     layers.Keeping
	inputs      bool // WithInputs, with at least one input
	hostFiles   bool // WithHostFiles: provenance lists them
	hostSources bool // WithHostSources: the cache keys on them
	resolver    bool // Resolver: the lock records what it resolves
	programFree bool // ProgramFree: offline-only reaches it
	prechecks   bool // Prechecker
}

// TestEveryKindSaysWhatTheConductorNeeds holds each kind of
// everyKindRecipe to what the phase cache, the inputs, the lock, the
// provenance and the pre-build check must know of it. The conductor asks
// each question through an optional interface, with no list of kinds, so a
// kind that forgets one is quietly taken as having nothing to say: a kind
// without a line here fails, and so does one whose layer answers otherwise.
func TestEveryKindSaysWhatTheConductorNeeds(t *testing.T) {
	want := map[string]kindKnowledge{
		"tarball": {keeping: layers.KeepingReferenced, inputs: true},
		"files":   {hostSources: true},
		"symlink": {},
		"mkdir":   {},
		"remove":  {},
		"users":   {},
		"groups":  {},
		"systemd": {},
		"hook":    {keeping: layers.KeepingMaterialized, hostFiles: true},
		"oci":     {inputs: true},
		"debs":    {keeping: layers.KeepingAlways, inputs: true, resolver: true, programFree: true, prechecks: true},
		"images":  {inputs: true},
		"run":     {keeping: layers.KeepingMaterialized, prechecks: true},
	}
	rec, err := recipes.Parse([]byte(strings.Replace(everyKindRecipe, "    - files: [{path: /etc/hostname, content: \"node\\n\"}]\n",
		"    - files: [{path: /etc/hostname, content: \"node\\n\"}, {path: /etc/kubernetes/, from: ./overlay/}]\n", 1)), "kinds.yaml")
	if err != nil {
		t.Fatal(err)
	}
	phases, _, err := plan(rec)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range phases[len(phases)-1].steps {
		l := st.layer
		w, ok := want[l.Kind()]
		if !ok {
			t.Errorf("kind %s: say here what the conductor must know of it", l.Kind())
			continue
		}
		var got kindKnowledge
		if pk, ok := l.(layers.PhaseKeeper); ok {
			got.keeping = pk.PhaseKeeping()
		}
		if wi, ok := l.(layers.WithInputs); ok {
			got.inputs = len(wi.Inputs()) > 0
		}
		if hf, ok := l.(layers.WithHostFiles); ok {
			got.hostFiles = len(hf.HostFiles()) > 0
		}
		if hs, ok := l.(layers.WithHostSources); ok {
			got.hostSources = len(hs.HostSources()) > 0
		}
		_, got.resolver = l.(layers.Resolver)
		_, got.programFree = l.(layers.ProgramFree)
		_, got.prechecks = l.(layers.Prechecker)
		if got != w {
			t.Errorf("kind %s: the layer says %+v, want %+v", l.Kind(), got, w)
		}
		delete(want, l.Kind())
	}
	for k := range want {
		t.Errorf("kind %s: a line here but no layer of it in everyKindRecipe", k)
	}
}
