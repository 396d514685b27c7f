package serve

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/recipes"
)

// httpError is an answer other than success: its status and what it says.
type httpError struct {
	code int
	APIError
	retryAfter int // seconds, for 429
}

func (e *httpError) Error() string { return e.Message }

func failf(code int, field, format string, args ...any) *httpError {
	return &httpError{code: code, APIError: APIError{Message: fmt.Sprintf(format, args...), Field: field}}
}

// loaded is a build request made good: the recipe loaded with its
// parameters, and the build's ID with the parts it is the key of.
type loaded struct {
	rel   string // the recipe, relative to the recipe directory, with "/"
	rec   *recipes.Recipe
	parts []cache.Part
	id    string
}

// recipeFile is the file of the recipe named rel (relative to the recipe
// directory), refusing any name that leads out of it, directly or through
// a symlink, or that names no recipe file.
func (s *Server) recipeFile(rel string) (string, *httpError) {
	switch {
	case rel == "":
		return "", failf(http.StatusBadRequest, "recipe", "name a recipe of GET /v1/recipes")
	case len(rel) > maxRecipeName:
		return "", failf(http.StatusBadRequest, "recipe", "a recipe name of %d bytes; at most %d", len(rel), maxRecipeName)
	case !filepath.IsLocal(filepath.FromSlash(rel)) || strings.Contains(rel, "\\"):
		return "", failf(http.StatusBadRequest, "recipe", "%q is not a path inside the recipe directory", rel)
	case !isRecipeName(rel):
		return "", failf(http.StatusBadRequest, "recipe", "%q: a recipe is a .yaml or .yml file, and no name of its path starts with a dot", rel)
	}
	p := filepath.Join(s.dir, filepath.FromSlash(rel))
	real, err := filepath.EvalSymlinks(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", failf(http.StatusNotFound, "recipe", "no recipe %q", rel)
	}
	if err != nil {
		return "", failf(http.StatusBadRequest, "recipe", "%q: %v", rel, s.hide(err))
	}
	if !within(s.dir, real) {
		return "", failf(http.StatusBadRequest, "recipe", "%q leads out of the recipe directory", rel)
	}
	fi, err := os.Stat(real)
	if err != nil || !fi.Mode().IsRegular() {
		return "", failf(http.StatusNotFound, "recipe", "no recipe %q", rel)
	}
	return real, nil
}

// isRecipeName tells whether a slash-separated path inside the recipe
// directory may name a recipe: a .yaml or .yml file, with no name along it
// starting with a dot (a ConfigMap's ..data, an editor's files).
func isRecipeName(rel string) bool {
	for _, n := range strings.Split(rel, "/") {
		if strings.HasPrefix(n, ".") {
			return false
		}
	}
	return strings.HasSuffix(rel, ".yaml") || strings.HasSuffix(rel, ".yml")
}

// load makes a build request good: the recipe under the recipe directory,
// parameters it declares within the limits, every host path a given
// parameter is part of inside the recipe directory, and the build's ID.
func (s *Server) load(rel string, params map[string]string) (*loaded, *httpError) {
	file, herr := s.recipeFile(rel)
	if herr != nil {
		return nil, herr
	}
	if herr := checkParams(params); herr != nil {
		return nil, herr
	}
	data, err := readLimited(file, maxRecipeFile)
	if err != nil {
		return nil, failf(http.StatusBadRequest, "recipe", "%s: %v", rel, s.hide(err))
	}
	declared, err := recipes.Declared(data, rel)
	if err != nil {
		return nil, recipeError(err, s)
	}
	for _, name := range sortedKeys(params) {
		if !slices.ContainsFunc(declared, func(p recipes.Param) bool { return p.Name == name }) {
			var names []string
			for _, p := range declared {
				names = append(names, p.Name)
			}
			return nil, failf(http.StatusBadRequest, "params."+name, "recipe %s declares no parameter %q (it declares %s)", rel, name, orNone(names))
		}
	}
	rec, err := recipes.ParseWith(data, file, recipes.Options{Set: params, HostApt: os.DirFS("/etc/apt")})
	if err != nil {
		return nil, recipeError(err, s)
	}
	rec.Dir = filepath.Dir(file)
	// A path the recipe's author wrote, defaults included, is theirs to
	// place; one a client's value is part of must stay in the directory.
	for _, hp := range rec.HostPaths {
		given := slices.IndexFunc(hp.Params, func(p string) bool { _, ok := params[p]; return ok })
		if given >= 0 && !within(s.dir, resolveHost(rec.Dir, hp.Path)) {
			return nil, failf(http.StatusBadRequest, hp.Field, "parameter %s made this path %q, which leads out of the recipe directory", hp.Params[given], hp.Path)
		}
	}
	l := &loaded{rel: rel, rec: rec}
	if err := s.identify(l); err != nil {
		return nil, failf(http.StatusInternalServerError, "", "build ID of %s: %v", rel, s.hide(err))
	}
	return l, nil
}

// checkParams holds a request's parameters to the limits: a few, named as
// the recipe grammar names them, short, and printable.
func checkParams(params map[string]string) *httpError {
	if len(params) > maxParams {
		return failf(http.StatusBadRequest, "params", "%d parameters; at most %d", len(params), maxParams)
	}
	for _, name := range sortedKeys(params) {
		v := params[name]
		f := "params." + name
		if _, _, err := recipes.ParseSet(name + "=" + v); err != nil || len(name) > maxParamName {
			return failf(http.StatusBadRequest, "params", "a parameter name is [A-Za-z_][A-Za-z0-9_]* of at most %d bytes; got %q", maxParamName, trim(name, maxParamName))
		}
		if len(v) > maxParamValue {
			return failf(http.StatusBadRequest, f, "a value of %d bytes; at most %d", len(v), maxParamValue)
		}
		if !utf8.ValidString(v) || strings.ContainsFunc(v, func(r rune) bool { return unicode.IsControl(r) && r != '\n' && r != '\t' }) {
			return failf(http.StatusBadRequest, f, "a value must be UTF-8 text without control characters but newline and tab")
		}
	}
	return nil
}

// recipeError is a recipe that does not load, naming its first field at
// fault; the server's own directories are not shown.
func recipeError(err error, s *Server) *httpError {
	herr := failf(http.StatusBadRequest, "", "%v", s.hide(err))
	var re *recipes.Error
	if errors.As(err, &re) {
		herr.Field = re.Field
	}
	return herr
}

// hide takes the server's own directories out of a message: a client
// names recipes relative to the recipe directory, and has no business
// with where the cache is.
func (s *Server) hide(err error) string {
	msg := strings.ReplaceAll(err.Error(), s.dir+string(filepath.Separator), "")
	return strings.ReplaceAll(msg, s.o.CacheDir, "$CACHE")
}

// resolveHost is where a host path of a recipe in dir leads, symlinks
// followed as far as they exist.
func resolveHost(dir, p string) string {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	p = filepath.Clean(p)
	// The longest part that exists is resolved; the rest is taken as
	// written, since nothing there can be a symlink yet.
	rest := ""
	for cur := p; ; {
		if real, err := filepath.EvalSymlinks(cur); err == nil {
			return filepath.Join(real, rest)
		}
		parent := filepath.Dir(cur)
		if parent == cur {
			return p
		}
		rest = filepath.Join(filepath.Base(cur), rest)
		cur = parent
	}
}

// identify computes the build's ID: the key of what decides its outputs.
// That is stamp itself, the recipe file's name under the directory, the
// recipe as decoded (phases and outputs), the parameters' values, its
// stamp.lock, and every host file it names by content, so a file changed
// under the recipe gives a new ID instead of the old build. The
// conductor's own keys then decide what is built again.
func (s *Server) identify(l *loaded) error {
	rec := l.rec
	outs := slices.Clone(rec.Outputs)
	for i := range outs {
		outs[i].Line = 0 // where it is written is not what it says
	}
	outputs, err := jsonDigest(outs)
	if err != nil {
		return err
	}
	params, err := jsonDigest(rec.ParamValues())
	if err != nil {
		return err
	}
	parts := []cache.Part{
		{Name: "stamp", Digest: "sha256:" + s.self},
		{Name: "recipe file", Digest: l.rel},
		{Name: "recipe", Digest: rec.TreeDigest},
		{Name: "outputs", Digest: outputs},
		{Name: "params", Digest: params},
		{Name: "lock", Digest: s.hostDigest(filepath.Join(rec.Dir, "stamp.lock"), false)},
	}
	for _, hp := range rec.HostPaths {
		parts = append(parts, cache.Part{Name: "host " + hp.Field + " " + hp.Path, Digest: s.hostDigest(resolveHost(rec.Dir, hp.Path), hp.Repo)})
	}
	l.parts = parts
	k, err := cache.ParseDigest(cache.KeyOf(parts))
	l.id = k
	return err
}

// hostDigest is the digest of a host file or directory, or "none" when it
// is not there (the build then says what is missing). A repository is its
// indexes, which change whenever a package does, not its packages.
func (s *Server) hostDigest(p string, repo bool) string {
	if repo {
		if _, err := os.Stat(filepath.Join(p, "dists")); err == nil {
			p = filepath.Join(p, "dists")
		} else {
			return s.flatRepoDigest(p)
		}
	}
	d, err := s.reader.HashTree(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "none"
	}
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return d
}

// flatRepoDigest is a flat repository's indexes: the files at its top.
func (s *Server) flatRepoDigest(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return "none"
	}
	h := sha256.New()
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		sum, err := s.reader.HashFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return "unreadable: " + err.Error()
		}
		fmt.Fprintf(h, "%q %s\n", e.Name(), sum)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

func jsonDigest(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// RecipeInfo is one recipe of GET /v1/recipes.
type RecipeInfo struct {
	// Recipe is its path under the recipe directory, what POST
	// /v1/builds names.
	Recipe  string       `json:"recipe"`
	Name    string       `json:"name,omitempty"`
	Params  []ParamInfo  `json:"params"`
	Outputs []OutputInfo `json:"outputs"`
	Error   *APIError    `json:"error,omitempty"`
}

// ParamInfo is a parameter a recipe declares.
type ParamInfo struct {
	Name        string  `json:"name"`
	Default     *string `json:"default,omitempty"`
	Description string  `json:"description,omitempty"`
	// FromHostApt defaults it to the server's own Debian mirror.
	FromHostApt bool `json:"fromHostApt,omitempty"`
	// Required: the recipe loads only when it is given.
	Required bool `json:"required"`
}

// OutputInfo is one output a recipe makes.
type OutputInfo struct {
	Name   string `json:"name"`
	Format string `json:"format"`
	From   string `json:"from,omitempty"`
}

// recipesIn lists every recipe under the recipe directory, in path order,
// with its parameters and outputs (as its defaults load it; a required
// parameter is given a placeholder to see them).
func (s *Server) recipesIn() ([]RecipeInfo, error) {
	var out []RecipeInfo
	err := filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == s.dir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() || len(out) >= 1000 {
			return nil
		}
		rel, err := filepath.Rel(s.dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if !isRecipeName(rel) {
			return nil
		}
		file, herr := s.recipeFile(rel)
		if herr != nil {
			return nil // a symlink out of the directory, or to no file
		}
		if info, ok := s.describe(rel, file); ok {
			out = append(out, info)
		}
		return nil
	})
	return out, err
}

// describe reads one recipe for the listing; ok is false for a YAML file
// that is no recipe.
func (s *Server) describe(rel, file string) (RecipeInfo, bool) {
	info := RecipeInfo{Recipe: rel, Params: []ParamInfo{}, Outputs: []OutputInfo{}}
	data, err := readLimited(file, maxRecipeFile)
	if err != nil {
		return info, false
	}
	// Other YAML may sit beside the recipes (a kustomization, say).
	var head struct {
		Kind string `yaml:"kind"`
	}
	if yaml.Unmarshal(data, &head) != nil || head.Kind != recipes.Kind {
		return info, false
	}
	decl, err := recipes.Declared(data, rel)
	if err != nil {
		info.Error = &recipeError(err, s).APIError
		return info, true
	}
	set := map[string]string{}
	for _, p := range decl {
		pi := ParamInfo{Name: p.Name, Default: p.Default, Description: p.Description, FromHostApt: p.FromHostApt,
			Required: p.Default == nil && !p.FromHostApt}
		if pi.Required {
			set[p.Name] = "file:///placeholder"
		}
		info.Params = append(info.Params, pi)
	}
	rec, err := recipes.ParseWith(data, file, recipes.Options{Set: set, HostApt: os.DirFS("/etc/apt")})
	if err != nil {
		// An unused required parameter given a value is an error too;
		// without it, the recipe may load.
		rec, err = recipes.ParseWith(data, file, recipes.Options{HostApt: os.DirFS("/etc/apt")})
	}
	if err != nil {
		info.Error = &recipeError(err, s).APIError
		return info, true
	}
	info.Name = rec.Name
	for _, o := range rec.Outputs {
		info.Outputs = append(info.Outputs, OutputInfo{Name: o.Name, Format: o.Format, From: o.From})
	}
	return info, true
}

func readLimited(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return b, nil
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
