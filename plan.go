package stamp

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/layers/ociremote"
	"github.com/stamp-dev/stamp/recipes"
)

// step is one layer of the plan with the label it reports under.
type step struct {
	label string // e.g. "customize.layers[2].files"
	layer layers.Layer
	// index is the layer's place in its phase's recipe layers, -1 for a
	// hook or the base.
	index int
}

// phase is one of base, customize, provision.
type phase struct {
	name  string
	steps []step
}

// plannedInput ties an input to the recipe field that asked for it, so an
// error about the input names the field.
type plannedInput struct {
	field string
	in    *layers.Input
	// platform is the os/arch[/variant] an OCI input is resolved for.
	platform string
	// oci is filled while an OCI input resolves; nil for other kinds.
	oci *ociPin
}

// plan turns a recipe into phases of layers. It reads nothing but the recipe.
func plan(rec *recipes.Recipe) ([]phase, []plannedInput, error) {
	var inputs []plannedInput
	hostPath := func(p string) string {
		if filepath.IsAbs(p) || rec.Dir == "" {
			return p
		}
		return filepath.Join(rec.Dir, p)
	}
	hooks := func(field string, runs []string) []step {
		var out []step
		for i, r := range runs {
			label := fmt.Sprintf("%s[%d]", field, i)
			out = append(out, step{label: label, layer: &layers.Hook{Run: hostPath(r)}, index: -1})
		}
		return out
	}
	tarballInput := func(field, uri, sha string) layers.Input {
		in := layers.Input{Kind: layers.InputTarball, URI: uri}
		if !isURL(uri) {
			in.URI = hostPath(uri)
		}
		if sha != "" {
			in.Digest, in.Pinned = "sha256:"+strings.TrimPrefix(sha, "sha256:"), true
		}
		return in
	}

	base := phase{name: "base"}
	base.steps = append(base.steps, hooks("base.pre", rec.Base.Pre)...)
	if d := rec.Base.Debs; d != nil {
		bd := convertDebs(d, hostPath)
		bd.Variant = d.Variant
		for _, in := range bd.Inputs() {
			inputs = append(inputs, plannedInput{field: "base.debs", in: in})
		}
		base.steps = append(base.steps, step{label: "base.debs", layer: bd, index: -1})
	} else {
		bt := &layers.Tarball{Input: tarballInput("base.tarball", rec.Base.Tarball, rec.Base.SHA256)}
		inputs = append(inputs, plannedInput{field: "base.tarball", in: &bt.Input})
		base.steps = append(base.steps, step{label: "base.tarball", layer: bt, index: -1})
	}
	base.steps = append(base.steps, hooks("base.post", rec.Base.Post)...)

	phases := []phase{base}
	for _, ph := range []struct {
		name string
		p    *recipes.Phase
	}{{"customize", &rec.Customize}, {"provision", &rec.Provision}} {
		out := phase{name: ph.name}
		out.steps = append(out.steps, hooks(ph.name+".pre", ph.p.Pre)...)
		for i := range ph.p.Layers {
			l := &ph.p.Layers[i]
			field := l.Field
			if field == "" {
				field = fmt.Sprintf("%s.layers[%d]", ph.name, i)
			}
			layer, err := convert(l, hostInputs{path: hostPath, tarball: tarballInput})
			if err != nil {
				return nil, nil, fmt.Errorf("%s.%s: %w", field, l.Kind(), err)
			}
			label := field + "." + l.Kind()
			if wi, ok := layer.(layers.WithInputs); ok {
				for _, in := range wi.Inputs() {
					pi := plannedInput{field: label, in: in}
					if in.Kind == layers.InputOCI || in.Kind == layers.InputImage {
						pi.platform, pi.oci = ociPlatform(l, rec.Arch), &ociPin{}
					}
					inputs = append(inputs, pi)
				}
			}
			out.steps = append(out.steps, step{label: label, layer: layer, index: i})
		}
		out.steps = append(out.steps, hooks(ph.name+".post", ph.p.Post)...)
		phases = append(phases, out)
	}
	if rec.OfflineOnly {
		// What would run a program of the image in the sandbox (the
		// py_compile handler of a debs layer) counts as unhandled.
		for _, ph := range phases {
			for _, st := range ph.steps {
				if pf, ok := st.layer.(layers.ProgramFree); ok {
					pf.RunNoPrograms()
				}
			}
		}
	}
	return phases, inputs, nil
}

// precheck asks every step that needs something of the build machine (a
// sandbox's namespaces, a way to run programs of arch) whether it is
// there, so that a build which could not finish fails before it writes
// anything, naming the step.
func precheck(phases []phase, arch string) error {
	for _, ph := range phases {
		for _, st := range ph.steps {
			if pc, ok := st.layer.(layers.Prechecker); ok {
				if err := pc.Precheck(arch); err != nil {
					return fmt.Errorf("%s: %w", st.label, err)
				}
			}
		}
	}
	return nil
}

func isURL(s string) bool {
	return strings.HasPrefix(s, "https://") || strings.HasPrefix(s, "http://") || strings.HasPrefix(s, "file://")
}

func owner(o recipes.Owner) layers.Owner { return layers.Owner{User: o.User, Group: o.Group} }

func mode(m *recipes.Mode) *uint32 {
	if m == nil {
		return nil
	}
	v := uint32(*m)
	return &v
}

// hostInputs turns a recipe's host paths and tarball references into the
// layers' terms.
type hostInputs struct {
	path    func(string) string
	tarball func(field, uri, sha string) layers.Input
}

// layerConverters maps every layer kind a recipe may name (recipes.LayerKinds)
// to the conversion that makes its layers.Layer; a new kind is its file in
// layers, its schema in recipes and one line here. A test holds the two
// tables together.
var layerConverters = map[string]func(l *recipes.Layer, h hostInputs) layers.Layer{
	"tarball": func(l *recipes.Layer, h hostInputs) layers.Layer {
		return &layers.Tarball{Input: h.tarball(l.Field, l.Tarball.Path, l.Tarball.SHA256), Dest: l.Tarball.Dest}
	},
	"files": convertFiles,
	"symlink": func(l *recipes.Layer, _ hostInputs) layers.Layer {
		var links []layers.Link
		for _, s := range l.Symlink {
			links = append(links, layers.Link{Path: s.Path, Target: s.Target, Owner: owner(s.Owner)})
		}
		return &layers.Symlink{Links: links}
	},
	"mkdir": func(l *recipes.Layer, _ hostInputs) layers.Layer {
		var dirs []layers.Dir
		for _, d := range l.Mkdir {
			dirs = append(dirs, layers.Dir{Path: d.Path, Mode: mode(d.Mode), Owner: owner(d.Owner)})
		}
		return &layers.Mkdir{Dirs: dirs}
	},
	"remove": func(l *recipes.Layer, _ hostInputs) layers.Layer { return &layers.Remove{Patterns: l.Remove} },
	"users": func(l *recipes.Layer, _ hostInputs) layers.Layer {
		var users []layers.User
		for _, u := range l.Users {
			users = append(users, layers.User{Name: u.Name, UID: u.UID, Group: u.Group, GID: u.GID, Groups: u.Groups,
				Home: u.Home, Shell: u.Shell, Comment: u.Comment, System: u.System, Password: u.Password, CreateHome: u.CreateHome})
		}
		return &layers.Users{Users: users}
	},
	"groups": func(l *recipes.Layer, _ hostInputs) layers.Layer {
		var groups []layers.Group
		for _, g := range l.Groups {
			groups = append(groups, layers.Group{Name: g.Name, GID: g.GID, Members: g.Members, System: g.System})
		}
		return &layers.Groups{Groups: groups}
	},
	"systemd": func(l *recipes.Layer, _ hostInputs) layers.Layer {
		s := l.Systemd
		return &layers.Systemd{Enable: s.Enable, Disable: s.Disable, Mask: s.Mask, Default: s.Default}
	},
	"hook": func(l *recipes.Layer, h hostInputs) layers.Layer {
		return &layers.Hook{Run: h.path(l.Hook.Run), Args: l.Hook.Args, Env: l.Hook.Env}
	},
	"debs": func(l *recipes.Layer, h hostInputs) layers.Layer { return convertDebs(l.Debs, h.path) },
	"oci": func(l *recipes.Layer, _ hostInputs) layers.Layer {
		o := l.OCI
		in := layers.Input{Kind: layers.InputOCI, URI: o.Ref}
		if _, _, d := splitOCIRef(o.Ref); d != "" {
			in.Digest, in.Pinned = d, true
		}
		return &layers.OCI{Input: in, Dest: o.Dest, Paths: o.Paths, Mode: mode(o.Mode), Owner: owner(o.Owner), Platform: o.Platform}
	},
	"run": func(l *recipes.Layer, _ hostInputs) layers.Layer {
		return &layers.Run{Command: l.Run.Command, Env: l.Run.Env, Network: l.Run.Network}
	},
	"images": func(l *recipes.Layer, _ hostInputs) layers.Layer {
		im := &layers.Images{Into: l.ImagesInto, DiscardLayers: l.ImagesDiscardLayers}
		for _, i := range l.Images {
			// A tag without a digest is resolved once and pinned in
			// stamp.lock, as the oci layer's references are.
			d := i.Digest()
			im.Images = append(im.Images, &layers.Input{Kind: layers.InputImage, URI: i.Ref, Digest: d, Pinned: d != ""})
		}
		return im
	},
}

func convertFiles(l *recipes.Layer, h hostInputs) layers.Layer {
	var items []layers.File
	for _, f := range l.Files {
		it := layers.File{Path: f.Path, Content: f.Content, Mode: mode(f.Mode), Owner: owner(f.Owner)}
		if f.From != "" {
			it.From = h.path(f.From)
		}
		if f.MTime != nil {
			t := time.Unix(*f.MTime, 0).UTC()
			it.MTime = &t
		}
		items = append(items, it)
	}
	return &layers.Files{Items: items}
}

// convert maps one recipe layer to the layer that applies it.
func convert(l *recipes.Layer, h hostInputs) (layers.Layer, error) {
	c, ok := layerConverters[l.Kind()]
	if !ok {
		return nil, fmt.Errorf("layer kind %q is not supported by this version of stamp", l.Kind())
	}
	return c(l, h), nil
}

// ociPlatform is the platform an OCI input of layer l is pulled for: the
// layer's own, or linux/<recipe arch>.
func ociPlatform(l *recipes.Layer, arch string) string {
	if l.OCI != nil && l.OCI.Platform != "" {
		return l.OCI.Platform
	}
	return ociremote.DefaultPlatform(arch)
}

// splitOCIRef splits name:tag@digest; absent parts are "".
func splitOCIRef(ref string) (name, tag, digest string) {
	name, digest, _ = strings.Cut(ref, "@")
	if c := strings.LastIndex(name, ":"); c > strings.LastIndex(name, "/") {
		name, tag = name[:c], name[c+1:]
	}
	return name, tag, digest
}

// convertDebs maps a debs layer; its keyring is a host input like any file.
func convertDebs(d *recipes.Debs, hostPath func(string) string) *layers.Debs {
	suites := d.Suites
	if d.Suite != "" {
		suites = []string{d.Suite}
	}
	keyring := ""
	if d.Keyring != "" {
		keyring = hostPath(d.Keyring)
	}
	l := layers.NewDebs(d.Repo, suites, keyring, d.Trusted)
	l.Components, l.Packages, l.Recommends, l.Exclude = d.Components, d.Packages, d.Recommends, d.Exclude
	l.DeferScripts, l.Skip = d.DeferScripts, d.Skip
	l.Chroot = d.Scripts == recipes.ScriptsChroot
	return l
}
