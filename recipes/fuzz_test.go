package recipes

import (
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse checks Parse never panics, and that what it accepts keeps the
// promises callers rely on.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("examples/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(designExample))
	f.Add([]byte(head + "customize:\n  layers:\n    - files: [{path: /x, content: y, mode: 0644}]\n"))
	f.Add([]byte(head + "outputs:\n  - {format: raw}\n  - {format: qcow2}\n  - {format: oci, kind: containerdisk}\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte(head + "customize: &c {layers: [{hook: ./x}], pre: *c}\n"))
	f.Add([]byte(head + "params: {a: &p x, b: {default: {fromHostApt: true}}}\nseed: *p\ncustomize: {layers: [{hook: \"./${a}$${b}\"}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if r != nil {
				t.Fatal("recipe returned with an error")
			}
			for _, e := range unjoin(err) {
				if e.File != "fuzz.yaml" {
					t.Fatalf("error without an *Error or file: %v", e)
				}
			}
			return
		}
		if (r.Base.Tarball == "") == (r.Base.Debs == nil) || r.Name == "" || r.APIVersion != APIVersion {
			t.Fatalf("accepted a recipe without base, name or apiVersion: %+v", r)
		}
		for _, p := range []Phase{r.Customize, r.Provision} {
			for _, l := range p.Layers {
				if l.Kind() == "" {
					t.Fatalf("accepted layer %s without a kind", l.Field)
				}
			}
		}
		names := map[string]bool{}
		for _, o := range r.Outputs {
			if names[o.Name] {
				t.Fatalf("duplicate output name %q accepted", o.Name)
			}
			names[o.Name] = true
			if o.From != "" && !names[o.From] {
				t.Fatalf("output %s from %q which is not earlier", o.Name, o.From)
			}
		}
	})
}
