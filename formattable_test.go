package stamp

import (
	"reflect"
	"sort"
	"testing"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/recipes"
)

// TestFormatTablesAgree holds the recipe schema's formats against the
// formats package's table. Neither package imports the other, so each keeps
// its own half: recipes the keys and what an output may be made from as a
// recipe says it, formats the writer, the reader and the same graph, and the
// conductor converts the one's options into the other's. A format in one
// and not the other, or a graph that differs, fails here.
func TestFormatTablesAgree(t *testing.T) {
	table := map[string]formats.Entry{}
	for _, e := range formats.Table() {
		table[e.Name] = e
	}
	names := recipes.Formats()
	for _, name := range names {
		e, ok := table[name]
		if !ok {
			t.Errorf("a recipe may ask for format %s, which formats.Table lacks", name)
			continue
		}
		if e.Writer == nil || e.Reader == nil {
			t.Errorf("format %s has no writer or no reader", name)
		}
		if outputOptions[name] == nil {
			t.Errorf("format %s: the conductor cannot convert its options", name)
		}
		if got, want := madeFrom(recipes.MadeFrom(name)), madeFrom(e.MadeFrom); !reflect.DeepEqual(got, want) {
			t.Errorf("format %s: recipes says it is made from %v, formats %v", name, got, want)
		}
	}
	if len(outputOptions) != len(names) {
		t.Errorf("the conductor converts options of %d formats, recipes names %d", len(outputOptions), len(names))
	}
	for name := range table {
		found := false
		for _, n := range names {
			found = found || n == name
		}
		if !found {
			t.Errorf("formats.Table has %s, which no recipe can ask for", name)
		}
	}
}

// madeFrom lists a made-from graph as "kind: a b" lines, so that nil and
// empty read alike.
func madeFrom(g map[string][]string) []string {
	var out []string
	for kind, from := range g {
		line := kind + ":"
		for _, f := range from {
			line += " " + f
		}
		out = append(out, line)
	}
	sort.Strings(out)
	return out
}
