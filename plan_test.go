package stamp

import (
	"errors"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/recipes"
)

const planHex = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// planRecipe has a step of every shape plan treats differently: hooks
// around each phase, local and URL tarballs with and without a digest,
// files from the host, OCI layers by tag, by digest and for another
// platform, and pinned images.
const planRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: plan
arch: arm64
base:
  tarball: ./base.tar.zst
  sha256: "` + planHex + `"
  pre: [./hooks/pre.sh]
  post: [/abs/post.sh]
customize:
  layers:
    - files: [{path: /etc/motd, from: ./overlay/motd}, {path: /etc/id, content: "x\n"}]
    - oci: {ref: "127.0.0.1:5000/tools/ctr:v1", dest: /usr/bin/}
    - tarball: {path: "https://files.invalid/x.tar", sha256: "` + planHex + `", dest: /opt/x}
  post: [./hooks/customize-post.sh]
provision:
  layers:
    - oci: {ref: "127.0.0.1:5000/tools/ctr@sha256:` + planHex + `", platform: linux/amd64}
    - images: ["127.0.0.1:5000/pause:3.10@sha256:` + planHex + `"]
    - tarball: ./extra.tar
outputs:
  - {format: tar}
`

func parsePlanRecipe(t *testing.T, dir string) *recipes.Recipe {
	t.Helper()
	rec, err := recipes.Parse([]byte(planRecipe), "plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rec.Dir = dir
	return rec
}

// TestPlanLabelsEveryStepByItsRecipeField checks the phases, their order and
// the label every step reports under, hooks included.
func TestPlanLabelsEveryStepByItsRecipeField(t *testing.T) {
	phases, _, err := plan(parsePlanRecipe(t, "/recipes/node"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ph := range phases {
		for _, st := range ph.steps {
			got = append(got, ph.name+": "+st.label)
		}
	}
	want := []string{
		"base: base.pre[0]",
		"base: base.tarball",
		"base: base.post[0]",
		"customize: customize.layers[0].files",
		"customize: customize.layers[1].oci",
		"customize: customize.layers[2].tarball",
		"customize: customize.post[0]",
		"provision: provision.layers[0].oci",
		"provision: provision.layers[1].images",
		"provision: provision.layers[2].tarball",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("steps:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestPlanResolvesHostPathsAgainstTheRecipe checks that relative host paths
// (hooks, tarballs, files' from) are taken from the recipe's directory,
// while absolute paths and URLs are left alone.
func TestPlanResolvesHostPathsAgainstTheRecipe(t *testing.T) {
	phases, _, err := plan(parsePlanRecipe(t, "/recipes/node"))
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string]layers.Layer{}
	for _, ph := range phases {
		for _, st := range ph.steps {
			steps[st.label] = st.layer
		}
	}
	for label, want := range map[string]string{
		"base.pre[0]":       "/recipes/node/hooks/pre.sh",
		"base.post[0]":      "/abs/post.sh",
		"customize.post[0]": "/recipes/node/hooks/customize-post.sh",
	} {
		if h, ok := steps[label].(*layers.Hook); !ok || h.Run != want {
			t.Errorf("%s = %#v, want a hook running %s", label, steps[label], want)
		}
	}
	f := steps["customize.layers[0].files"].(*layers.Files)
	if f.Items[0].From != "/recipes/node/overlay/motd" || f.Items[1].From != "" || f.Items[1].Content == nil || *f.Items[1].Content != "x\n" {
		t.Errorf("files = %+v", f.Items)
	}
	if tb := steps["customize.layers[2].tarball"].(*layers.Tarball); tb.Input.URI != "https://files.invalid/x.tar" || tb.Dest != "/opt/x" {
		t.Errorf("URL tarball = %+v", tb)
	}
	if tb := steps["provision.layers[2].tarball"].(*layers.Tarball); tb.Input.URI != "/recipes/node/extra.tar" {
		t.Errorf("local tarball = %+v", tb)
	}

	// Without a directory (a recipe from stdin) paths stay as written.
	rec := parsePlanRecipe(t, "")
	phases, _, err = plan(rec)
	if err != nil {
		t.Fatal(err)
	}
	if h := phases[0].steps[0].layer.(*layers.Hook); h.Run != "./hooks/pre.sh" {
		t.Errorf("no recipe dir: hook = %s", h.Run)
	}
}

// TestPlanListsInputsWithTheirFieldsPinsAndPlatforms checks the inputs plan
// hands to resolution: the field errors will name, the digest a recipe pins
// (normalised to sha256:), and the platform each OCI input resolves for.
func TestPlanListsInputsWithTheirFieldsPinsAndPlatforms(t *testing.T) {
	_, inputs, err := plan(parsePlanRecipe(t, "/r"))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		field, kind, uri, digest string
		pinned                   bool
		platform                 string
		oci                      bool
	}
	var got []row
	for _, pi := range inputs {
		got = append(got, row{pi.field, string(pi.in.Kind), pi.in.URI, pi.in.Digest, pi.in.Pinned, pi.platform, pi.oci != nil})
	}
	d := "sha256:" + planHex
	want := []row{
		{"base.tarball", "tarball", "/r/base.tar.zst", d, true, "", false},
		{"customize.layers[1].oci", "oci", "127.0.0.1:5000/tools/ctr:v1", "", false, "linux/arm64", true},
		{"customize.layers[2].tarball", "tarball", "https://files.invalid/x.tar", d, true, "", false},
		{"provision.layers[0].oci", "oci", "127.0.0.1:5000/tools/ctr@" + d, d, true, "linux/amd64", true},
		{"provision.layers[1].images", "image", "127.0.0.1:5000/pause:3.10@" + d, d, true, "linux/arm64", true},
		{"provision.layers[2].tarball", "tarball", "/r/extra.tar", "", false, "", false},
	}
	if len(got) != len(want) {
		t.Fatalf("inputs:\n%+v\nwant:\n%+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("input %d = %+v\nwant      %+v", i, got[i], want[i])
		}
	}

	// The inputs are the layers' own: resolving one fills the layer.
	phases, inputs, _ := plan(parsePlanRecipe(t, "/r"))
	inputs[0].in.Digest = "sha256:filled"
	if tb := phases[0].steps[1].layer.(*layers.Tarball); tb.Input.Digest != "sha256:filled" {
		t.Error("the base tarball's planned input is a copy, not the layer's")
	}
}

// prechecked is a layer whose precheck fails, as a run layer's does on a
// machine without user namespaces.
type prechecked struct {
	layers.Layer
	err error
}

func (p prechecked) Precheck(string) error { return p.err }

// TestPrecheckNamesTheStep checks that a step that cannot run here stops the
// build before anything is written, naming the step.
func TestPrecheckNamesTheStep(t *testing.T) {
	no := errors.New("no user namespaces")
	phases := []phase{
		{name: "base", steps: []step{{label: "base.tarball", layer: &layers.Tarball{}}}},
		{name: "provision", steps: []step{
			{label: "provision.layers[0].run", layer: prechecked{err: nil}},
			{label: "provision.layers[1].run", layer: prechecked{err: no}},
		}},
	}
	err := precheck(phases, "amd64")
	if !errors.Is(err, no) || !strings.HasPrefix(err.Error(), "provision.layers[1].run: ") {
		t.Errorf("precheck = %v", err)
	}
	if err := precheck(phases[:1], "amd64"); err != nil {
		t.Errorf("nothing to check: %v", err)
	}
}

func TestSplitOCIRef(t *testing.T) {
	d := "sha256:" + planHex
	for _, c := range []struct{ ref, name, tag, digest string }{
		{"127.0.0.1:5000/a/b:v1", "127.0.0.1:5000/a/b", "v1", ""},
		{"127.0.0.1:5000/a/b", "127.0.0.1:5000/a/b", "", ""},
		{"127.0.0.1:5000/a/b@" + d, "127.0.0.1:5000/a/b", "", d},
		{"a/b:v1@" + d, "a/b", "v1", d},
		{"b", "b", "", ""},
	} {
		n, tg, dg := splitOCIRef(c.ref)
		if n != c.name || tg != c.tag || dg != c.digest {
			t.Errorf("splitOCIRef(%q) = %q %q %q", c.ref, n, tg, dg)
		}
	}
}

// TestPlanBaseDebs: a base bootstrapped from an archive plans to one debs
// layer with the variant, labelled base.debs, whose keyring (a host path
// relative to the recipe) and InRelease are inputs of that field.
func TestPlanBaseDebs(t *testing.T) {
	rec, err := recipes.Parse([]byte(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: plan
base:
  debs: {repo: "file:///srv/debian", suite: bookworm, keyring: ./debian.gpg, variant: important, packages: [systemd-sysv]}
  post: [./check.sh]
outputs:
  - {format: tar}
`), "plan.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rec.Dir = "/recipes/base"
	phases, inputs, err := plan(rec)
	if err != nil {
		t.Fatal(err)
	}
	steps := phases[0].steps
	if phases[0].name != "base" || len(steps) != 2 || steps[0].label != "base.debs" || steps[1].label != "base.post[0]" {
		t.Fatalf("base phase: %+v", phases[0])
	}
	d, ok := steps[0].layer.(*layers.Debs)
	if !ok || d.Variant != "important" || strings.Join(d.Packages, ",") != "systemd-sysv" || d.Repo != "file:///srv/debian" {
		t.Fatalf("base.debs layer: %+v", steps[0].layer)
	}
	var got []string
	for _, in := range inputs {
		got = append(got, in.field+" "+in.in.URI)
	}
	want := "base.debs /recipes/base/debian.gpg|base.debs file:///srv/debian/dists/bookworm/InRelease"
	if strings.Join(got, "|") != want {
		t.Errorf("inputs:\n%s\nwant\n%s", strings.Join(got, "|"), want)
	}
}

// TestPlanOfflineOnlyRunsNoPrograms: offline-only reaches every debs
// layer, whose handlers then run no program of the image even in the
// sandbox; without it they may.
func TestPlanOfflineOnlyRunsNoPrograms(t *testing.T) {
	for _, offline := range []bool{true, false} {
		top := ""
		if offline {
			top = "offline-only: true\n"
		}
		rec, err := recipes.Parse([]byte(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: plan
`+top+`base:
  debs: {repo: "file:///srv/debian", suite: bookworm, trusted: true, variant: minbase}
provision:
  layers:
    - debs: {repo: "file:///srv/debian", suite: bookworm, trusted: true, packages: [python3]}
outputs:
  - {format: tar}
`), "plan.yaml")
		if err != nil {
			t.Fatal(err)
		}
		phases, _, err := plan(rec)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, ph := range phases {
			for _, st := range ph.steps {
				if d, ok := st.layer.(*layers.Debs); ok {
					n++
					if d.NoPrograms != offline {
						t.Errorf("offline-only %v: %s has NoPrograms %v", offline, st.label, d.NoPrograms)
					}
				}
			}
		}
		if n != 2 {
			t.Fatalf("%d debs layers planned, want 2", n)
		}
	}
}
