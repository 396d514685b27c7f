package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/test/harness"
)

// paramsRecipe uses its parameters in inline content, a mode, a layer's
// host path (so the lock's key depends on a value) and a hook's
// environment.
const paramsRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: params
epoch: 1700000000
params:
  greeting: hello
  mode: {default: "0644", description: mode of /etc/greeting}
  variant: a
  declaredOnly:
base:
  tarball: ./base.tar
customize:
  layers:
    - files:
        - path: /etc/greeting
          content: "${greeting}\n"
          mode: ${mode}
        - {path: /etc/literal, content: "$${greeting} stays\n"}
    - tarball: {path: "./extra-${variant}.tar"}
    - hook: {run: ./hooks/env.sh, env: {VARIANT: "${variant}"}}
outputs:
  - {format: tar}
`

const paramsHook = `#!/bin/sh
set -eu
echo "$VARIANT" > "$STAMP_ROOT/etc/variant-from-hook"
`

func paramsDir(t *testing.T) string {
	t.Helper()
	dir := harness.TempDirFor65534(t)
	writeFiles(t, dir, map[string]string{
		"recipe.yaml":  paramsRecipe,
		"hooks/env.sh": paramsHook,
		"base.tar":     string(hostileTar(t, tarMember{name: "etc/hostname", body: "base\n"})),
		"extra-a.tar":  string(hostileTar(t, tarMember{name: "etc/extra", body: "from a\n"})),
		"extra-b.tar":  string(hostileTar(t, tarMember{name: "etc/extra", body: "from b\n"})),
	})
	return dir
}

// --set values land in the image, in provenance.json's externalParameters
// and in the embedded record; verify hands them to both of its builds.
func TestParamsSetLandsInImageAndProvenance(t *testing.T) {
	dir := paramsDir(t)
	cache := filepath.Join(dir, "cache")
	out := filepath.Join(dir, "out")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", cache,
		"--set", "greeting=hi, there", "--set", "variant=b", "--set", "mode=0600").mustSucceed(t)
	tarPath := filepath.Join(out, "params.tar")
	for member, want := range map[string]string{
		"/etc/greeting":          "hi, there\n",
		"/etc/literal":           "${greeting} stays\n",
		"/etc/extra":             "from b\n",
		"/etc/variant-from-hook": "b\n",
	} {
		if got := string(tarMemberBytes(t, tarPath, member)); got != want {
			t.Errorf("%s = %q, want %q", member, got, want)
		}
	}
	if e := harness.TarIndex(harness.ReadTar(t, tarPath))["/etc/greeting"]; e.Mode != 0o600 {
		t.Errorf("/etc/greeting mode %04o, want 0600", e.Mode)
	}
	want := map[string]string{"greeting": "hi, there", "mode": "0600", "variant": "b"}

	var st struct {
		Predicate struct {
			BuildDefinition struct {
				ExternalParameters struct {
					Parameters map[string]string `json:"parameters"`
				} `json:"externalParameters"`
			} `json:"buildDefinition"`
		} `json:"predicate"`
	}
	if err := json.Unmarshal(mustReadFile(t, filepath.Join(out, "provenance.json")), &st); err != nil {
		t.Fatal(err)
	}
	if got := st.Predicate.BuildDefinition.ExternalParameters.Parameters; !reflect.DeepEqual(got, want) {
		t.Errorf("provenance.json parameters = %v, want %v", got, want)
	}
	var rec struct {
		Params map[string]string `json:"params"`
	}
	if err := json.Unmarshal(tarMemberBytes(t, tarPath, "/usr/lib/stamp/manifest.json"), &rec); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(rec.Params, want) {
		t.Errorf("embedded record params = %v, want %v", rec.Params, want)
	}

	// Both builds of verify get the values: the second runs in a clean
	// environment and would otherwise build the defaults.
	vdir := filepath.Join(dir, "verify")
	stamp(t, dir, nil, "verify", "recipe.yaml", "--cache-dir", cache, "-o", vdir, "--set", "greeting=verified").mustSucceed(t)
	for _, b := range []string{"a", "b"} {
		if got := string(tarMemberBytes(t, filepath.Join(vdir, b, "params.tar"), "/etc/greeting")); got != "verified\n" {
			t.Errorf("verify build %s: /etc/greeting = %q", b, got)
		}
	}
}

// Parameter mistakes are usage errors (exit 2) that name the parameter, and
// nothing is built.
func TestParamsUsageErrors(t *testing.T) {
	dir := paramsDir(t)
	writeFiles(t, dir, map[string]string{
		"undeclared.yaml": strings.Replace(paramsRecipe, "${greeting}\\n", "${greting}\\n", 1),
		"required.yaml":   strings.Replace(paramsRecipe, "  greeting: hello\n", "  greeting:\n", 1),
	})
	cases := []struct {
		args  []string
		wants []string
	}{
		{[]string{"build", "recipe.yaml", "--set", "colour=red"}, []string{`--set colour: the recipe declares no parameter "colour"`, "declaredOnly, greeting, mode, variant"}},
		{[]string{"build", "recipe.yaml", "--set", "declaredOnly=x"}, []string{`recipe.yaml:9: --set declaredOnly: parameter "declaredOnly" is declared but no field uses it`}},
		{[]string{"build", "recipe.yaml", "--set", "no-equals"}, []string{`--set "no-equals" must be NAME=VALUE`}},
		{[]string{"build", "required.yaml"}, []string{`required.yaml:6: params.greeting: parameter "greeting" has no default and no value: give one with --set greeting=VALUE`}},
		{[]string{"build", "undeclared.yaml"}, []string{`undeclared.yaml:16: customize.layers[0].files[0].content: ${greting} names no declared parameter`}},
		{[]string{"lock", "recipe.yaml", "--set", "colour=red"}, []string{"--set colour"}},
		{[]string{"fetch", "recipe.yaml", "--set", "colour=red"}, []string{"--set colour"}},
		{[]string{"verify", "recipe.yaml", "--set", "colour=red"}, []string{"--set colour"}},
		{[]string{"apply", "recipe.yaml", "--root", dir, "--set", "colour=red"}, []string{"--set colour"}},
	}
	for _, c := range cases {
		out := filepath.Join(dir, "out")
		args := append(c.args, "-o", out, "--cache-dir", filepath.Join(dir, "cache"))
		if c.args[0] == "apply" || c.args[0] == "lock" || c.args[0] == "fetch" {
			args = append(c.args, "--cache-dir", filepath.Join(dir, "cache"))
		}
		stamp(t, dir, nil, args...).mustFail(t, 2, c.wants...)
		if _, err := os.Stat(out); err == nil {
			t.Errorf("%q made %s", c.args, out)
		}
	}
}

// stamp.lock names inputs by the URIs the values gave and records the
// values: a pin made under one value never serves another, and a build
// under other values says so.
func TestParamsLockKeyedByValues(t *testing.T) {
	dir := paramsDir(t)
	cache := filepath.Join(dir, "cache")
	stamp(t, dir, nil, "lock", "recipe.yaml", "--cache-dir", cache, "--set", "variant=a").mustSucceed(t)
	lk := string(mustReadFile(t, filepath.Join(dir, "stamp.lock")))
	if !strings.Contains(lk, "params:\n  greeting: hello\n  mode: \"0644\"\n  variant: a\n") || !strings.Contains(lk, "uri: extra-a.tar") || strings.Contains(lk, "extra-b.tar") {
		t.Fatalf("stamp.lock:\n%s", lk)
	}
	// extra-a.tar changes behind the lock: a build under variant=a refuses it.
	writeFiles(t, dir, map[string]string{"extra-a.tar": string(hostileTar(t, tarMember{name: "etc/extra", body: "changed\n"}))})
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out-a"), "--cache-dir", cache).
		mustFail(t, 1, "extra-a.tar", "stamp.lock")
	// Under variant=b the input is another file; the pin of extra-a.tar
	// does not answer for it, and the build says the lock is of other values.
	r := stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out-b"), "--cache-dir", cache, "--set", "variant=b").mustSucceed(t)
	if !strings.Contains(r.stderr, "other parameter values (variant: a -> b)") {
		t.Errorf("the build under variant=b does not mention the lock's values:\n%s", r.stderr)
	}
	if got := string(tarMemberBytes(t, filepath.Join(dir, "out-b", "params.tar"), "/etc/extra")); got != "from b\n" {
		t.Errorf("/etc/extra = %q", got)
	}
}

// A parameter that defaults to the host's Debian mirror takes the first
// Debian source of the real /etc/apt, or, when it names none, must be set.
func TestParamsHostAptMirror(t *testing.T) {
	dir := paramsDir(t)
	host, err := recipes.HostDebianMirror(os.DirFS("/etc/apt"))
	if err != nil {
		t.Fatal(err)
	}
	recipe := strings.Replace(paramsRecipe, `"${greeting}\n"`, `"${mirror}\n"`, 1)
	recipe = strings.Replace(recipe, "  greeting: hello\n", "  mirror: {default: {fromHostApt: true}}\n", 1)
	writeFiles(t, dir, map[string]string{"mirror.yaml": recipe})
	out := filepath.Join(dir, "out")
	r := stamp(t, dir, nil, "build", "mirror.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"))
	if host == "" {
		r.mustFail(t, 2, "params.mirror", "--set mirror=URL")
	} else {
		r.mustSucceed(t)
		if got := string(tarMemberBytes(t, filepath.Join(out, "params.tar"), "/etc/greeting")); got != host+"\n" {
			t.Errorf("/etc/greeting = %q, want the host's mirror %q", got, host)
		}
	}
	out = filepath.Join(dir, "out-set")
	stamp(t, dir, nil, "build", "mirror.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"),
		"--set", "mirror=file:///srv/mirror").mustSucceed(t)
	if got := string(tarMemberBytes(t, filepath.Join(out, "params.tar"), "/etc/greeting")); got != "file:///srv/mirror\n" {
		t.Errorf("/etc/greeting = %q", got)
	}
}
