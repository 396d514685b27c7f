package stamp

import (
	"bufio"
	"bytes"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// importRule forbids the packages under from to reach the packages under
// any of not, directly or through other packages of this module. A prefix
// names a package and the packages below it ("rootfs" is rootfs/...).
type importRule struct {
	from string
	not  []string
}

// importRules are the directions of DESIGN's "Imports point one way": cmd →
// root → recipes, layers, formats; layers → rootfs, packages; formats → disk,
// rootfs; disk → rootfs. Nothing below cmd imports the root, and nothing that
// ships imports test. The packages split off the conductor sit where these
// rules place them: rootfs/hostroot (apply and undo) is rootfs's, so it knows
// no recipe or layer, and the root and cmd (for undo) may both import it.
var importRules = []importRule{
	{"rootfs", []string{"layers", "formats", "recipes", "disk", "packages", ".", "cmd", "test"}},
	{"formats", []string{"layers", "recipes", "packages", ".", "cmd", "test"}},
	{"disk", []string{"recipes", "layers", "formats", "packages", ".", "cmd", "test"}},
	{"packages", []string{"recipes", "layers", "formats", "disk", ".", "cmd", "test"}},
	{"layers", []string{"formats", "recipes", "disk", ".", "cmd", "test"}},
	{"recipes", []string{".", "cmd", "test"}},
	{".", []string{"cmd", "test"}},
	{"cmd", []string{"test"}},
}

// under says whether the package rel (relative to the module, "." for the
// root) is prefix or below it.
func under(rel, prefix string) bool {
	if prefix == "." {
		return rel == "."
	}
	return rel == prefix || strings.HasPrefix(rel, prefix+"/")
}

// importViolations walks graph (module-relative package → the module's
// packages it imports) and names every path by which a rule is broken, as a
// chain of imports, in sorted order.
func importViolations(graph map[string][]string, rules []importRule) []string {
	var out []string
	for _, from := range slices.Sorted(maps.Keys(graph)) {
		for _, r := range rules {
			if !under(from, r.from) {
				continue
			}
			// Breadth first, so the chain reported is a shortest one.
			via := map[string]string{from: ""}
			queue := []string{from}
			for len(queue) > 0 {
				p := queue[0]
				queue = queue[1:]
				for _, q := range graph[p] {
					if _, seen := via[q]; seen {
						continue
					}
					via[q] = p
					queue = append(queue, q)
					if !slices.ContainsFunc(r.not, func(n string) bool { return under(q, n) }) {
						continue
					}
					chain := []string{q}
					for c := p; c != ""; c = via[c] {
						chain = append(chain, c)
					}
					slices.Reverse(chain)
					out = append(out, strings.Join(chain, " → "))
				}
			}
		}
	}
	return out
}

// moduleImports runs go list over the module and returns its import graph
// restricted to the module's own packages, by module-relative path.
func moduleImports(t *testing.T) map[string][]string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool, "list", "-f", "{{.ImportPath}} {{.Module.Path}}{{range .Imports}} {{.}}{{end}}", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	graph := map[string][]string{}
	var module string
	sc := bufio.NewScanner(bytes.NewReader(b))
	var lines [][]string
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			t.Fatalf("go list printed %q", sc.Text())
		}
		module = f[1]
		lines = append(lines, f)
	}
	rel := func(p string) (string, bool) {
		if p == module {
			return ".", true
		}
		r, ok := strings.CutPrefix(p, module+"/")
		return r, ok
	}
	for _, f := range lines {
		from, ok := rel(f[0])
		if !ok {
			t.Fatalf("go list named %s outside the module %s", f[0], module)
		}
		graph[from] = nil
		for _, imp := range f[2:] {
			if to, ok := rel(imp); ok {
				graph[from] = append(graph[from], to)
			}
		}
	}
	return graph
}

func TestImportDirections(t *testing.T) {
	graph := moduleImports(t)
	// A rule about packages that are not there any more checks nothing.
	for _, r := range importRules {
		found := false
		for p := range graph {
			found = found || under(p, r.from)
		}
		if !found {
			t.Errorf("no package is under %q; the rule for it is stale", r.from)
		}
	}
	for _, v := range importViolations(graph, importRules) {
		t.Errorf("import against the design's direction: %s", v)
	}
}

// TestImportViolationsFindsEachEdge holds the walker to the brief it has: a
// graph with each forbidden import, direct or through a package in between,
// is reported, and the allowed directions are not.
func TestImportViolationsFindsEachEdge(t *testing.T) {
	allowed := map[string][]string{
		"cmd/stamp":        {".", "rootfs/hostroot"},
		".":                {"recipes", "layers", "formats", "rootfs", "rootfs/hostroot"},
		"rootfs/hostroot":  {"rootfs", "rootfs/hashio"},
		"layers":           {"rootfs", "packages/deb", "layers/cache"},
		"layers/cache":     {"rootfs/hashio"},
		"formats":          {"disk", "disk/ext4", "rootfs"},
		"disk/ext4":        {"rootfs"},
		"packages/scripts": {"rootfs", "packages/deb"},
		"test/harness":     {"rootfs", "formats"},
	}
	if v := importViolations(allowed, importRules); len(v) != 0 {
		t.Fatalf("allowed graph reported: %q", v)
	}
	for _, tc := range []struct{ from, to, want string }{
		{"rootfs", "layers", "rootfs → layers"},
		{"rootfs/hashio", "formats", "rootfs/hashio → formats"},
		{"rootfs", "recipes", "rootfs → recipes"},
		{"rootfs/hostroot", "recipes", "rootfs/hostroot → recipes"},
		{"rootfs/hostroot", "layers", "rootfs/hostroot → layers"},
		{"rootfs/hostroot", ".", "rootfs/hostroot → ."},
		{"formats", "layers/cache", "formats → layers/cache"},
		{"formats", "recipes", "formats → recipes"},
		{"disk/ext4", "recipes", "disk/ext4 → recipes"},
		{"disk", "layers", "disk → layers"},
		{"disk", "formats", "disk → formats"},
		{"packages/deb", "recipes", "packages/deb → recipes"},
		{"packages/scripts", "layers", "packages/scripts → layers"},
		{"layers", "formats", "layers → formats"},
		{"layers/cache", "recipes", "layers/cache → recipes"},
		{"formats", "test/harness", "formats → test/harness"},
		// Through a package in between: disk/ext4 is allowed to import
		// rootfs, so rootfs importing layers shows as a chain from it too.
		{"rootfs", "layers", "disk/ext4 → rootfs → layers"},
	} {
		g := map[string][]string{}
		for k, v := range allowed {
			g[k] = slices.Clone(v)
		}
		g[tc.from] = append(g[tc.from], tc.to)
		if _, ok := g[tc.to]; !ok {
			g[tc.to] = nil
		}
		if v := importViolations(g, importRules); !slices.Contains(v, tc.want) {
			t.Errorf("%s importing %s: reported %q, want %q among them", tc.from, tc.to, v, tc.want)
		}
	}
}
