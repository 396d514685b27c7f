package recipes

import (
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// layerKind is one layer kind as a recipe writes it: its key, how its value
// is decoded into a Layer, and whether a Layer holds it. Adding a kind to
// the schema is its field on Layer, its decoder and one line in layerKinds;
// the conductor's own table (plan.go) turns it into a layers.Layer.
type layerKind struct {
	name string
	// list kinds take one item or a list of them and may not be empty.
	list   bool
	decode func(d *decoder, l *Layer, v *yaml.Node, f string)
	holds  func(l *Layer) bool
}

// layerKinds lists every layer kind in the order the schema documents them.
var layerKinds = []layerKind{
	{"tarball", false, func(d *decoder, l *Layer, v *yaml.Node, f string) { t := d.tarball(v, f); l.Tarball = &t },
		func(l *Layer) bool { return l.Tarball != nil }},
	{"files", true, func(d *decoder, l *Layer, v *yaml.Node, f string) {
		l.Files = []File{}
		d.oneOrList(v, f, func(v *yaml.Node, f string) { l.Files = append(l.Files, d.fileEntry(v, f)) })
	}, func(l *Layer) bool { return l.Files != nil }},
	{"symlink", true, func(d *decoder, l *Layer, v *yaml.Node, f string) {
		l.Symlink = []Symlink{}
		d.oneOrList(v, f, func(v *yaml.Node, f string) { l.Symlink = append(l.Symlink, d.symlink(v, f)) })
	}, func(l *Layer) bool { return l.Symlink != nil }},
	{"mkdir", true, func(d *decoder, l *Layer, v *yaml.Node, f string) {
		l.Mkdir = []Mkdir{}
		d.oneOrList(v, f, func(v *yaml.Node, f string) { l.Mkdir = append(l.Mkdir, d.mkdir(v, f)) })
	}, func(l *Layer) bool { return l.Mkdir != nil }},
	{"remove", true, func(d *decoder, l *Layer, v *yaml.Node, f string) {
		l.Remove = []string{}
		d.oneOrList(v, f, func(v *yaml.Node, f string) { l.Remove = append(l.Remove, d.glob(v, f)) })
	}, func(l *Layer) bool { return l.Remove != nil }},
	{"users", true, func(d *decoder, l *Layer, v *yaml.Node, f string) {
		l.Users = []User{}
		names := map[string]int{}
		d.oneOrList(v, f, func(v *yaml.Node, f string) {
			u := d.user(v, f)
			d.unique(names, u.Name, v, child(f, "name"), "user")
			l.Users = append(l.Users, u)
		})
	}, func(l *Layer) bool { return l.Users != nil }},
	{"groups", true, func(d *decoder, l *Layer, v *yaml.Node, f string) {
		l.Groups = []Group{}
		names := map[string]int{}
		d.oneOrList(v, f, func(v *yaml.Node, f string) {
			g := d.group(v, f)
			d.unique(names, g.Name, v, child(f, "name"), "group")
			l.Groups = append(l.Groups, g)
		})
	}, func(l *Layer) bool { return l.Groups != nil }},
	{"systemd", false, func(d *decoder, l *Layer, v *yaml.Node, f string) { s := d.systemd(v, f); l.Systemd = &s },
		func(l *Layer) bool { return l.Systemd != nil }},
	{"hook", false, func(d *decoder, l *Layer, v *yaml.Node, f string) { h := d.hook(v, f); l.Hook = &h },
		func(l *Layer) bool { return l.Hook != nil }},
	{"oci", false, func(d *decoder, l *Layer, v *yaml.Node, f string) { o := d.oci(v, f); l.OCI = &o },
		func(l *Layer) bool { return l.OCI != nil }},
	{"debs", false, func(d *decoder, l *Layer, v *yaml.Node, f string) { b := d.debs(v, f, false); l.Debs = &b },
		func(l *Layer) bool { return l.Debs != nil }},
	{"images", true, func(d *decoder, l *Layer, v *yaml.Node, f string) { d.images(l, v, f) },
		func(l *Layer) bool { return l.Images != nil }},
	{"run", false, func(d *decoder, l *Layer, v *yaml.Node, f string) { r := d.run(v, f); l.Run = &r },
		func(l *Layer) bool { return l.Run != nil }},
}

// LayerKinds lists every layer kind key, in the order the schema documents them.
func LayerKinds() []string {
	out := make([]string, len(layerKinds))
	for i, k := range layerKinds {
		out[i] = k.name
	}
	return out
}

// Kind is the YAML key that selects the layer, e.g. "files"; the conductor
// picks the layer's conversion by it.
func (l *Layer) Kind() string {
	for _, k := range layerKinds {
		if k.holds(l) {
			return k.name
		}
	}
	return ""
}

func layerKindNamed(name string) *layerKind {
	for i := range layerKinds {
		if layerKinds[i].name == name {
			return &layerKinds[i]
		}
	}
	return nil
}

// layer decodes one item of a layers list: a mapping with exactly one kind key.
func (d *decoder) layer(n *yaml.Node, field string) (Layer, bool) {
	l := Layer{Line: line(n), Field: field}
	r := d.resolve(n)
	if r == nil {
		return l, false
	}
	if r.Kind != yaml.MappingNode || len(r.Content) == 0 {
		d.fail(r, field, "a layer is a mapping with exactly one kind key (%s); got %s", strings.Join(LayerKinds(), ", "), describe(r))
		return l, false
	}
	// when: was evaluated before substitution (conditions); what is left
	// is the kind.
	var kv []*yaml.Node
	for i := 0; i+1 < len(r.Content); i += 2 {
		if r.Content[i].Value != whenKey {
			kv = append(kv, r.Content[i], r.Content[i+1])
		}
	}
	if len(kv) != 2 {
		var keys []string
		for i := 0; i < len(kv); i += 2 {
			keys = append(keys, kv[i].Value)
		}
		if len(keys) == 0 {
			d.fail(r, field, "a layer has a kind key (%s) beside its when", strings.Join(LayerKinds(), ", "))
			return l, false
		}
		d.fail(r, field, "a layer has exactly one kind key, got %s; split it into one list item per kind", strings.Join(keys, ", "))
		return l, false
	}
	k, v := kv[0], kv[1]
	f := child(field, k.Value)
	kind := layerKindNamed(k.Value)
	if kind == nil {
		d.fail(k, f, "unknown layer kind %q; use one of: %s", k.Value, strings.Join(LayerKinds(), ", "))
		return l, false
	}
	kind.decode(d, &l, v, f)
	if rv := d.resolveQuiet(v); kind.list && rv != nil && (isNull(rv) || rv.Kind == yaml.SequenceNode && len(rv.Content) == 0) {
		d.fail(rv, f, "%s layer is empty; list at least one item or drop the layer", k.Value)
	}
	return l, true
}

// unique records name and reports a repeat within one list.
func (d *decoder) unique(seen map[string]int, name string, n *yaml.Node, field, what string) {
	if name == "" {
		return
	}
	if l, dup := seen[name]; dup {
		d.fail(d.resolveQuiet(n), field, "%s %q is listed twice (first at line %d)", what, name, l)
		return
	}
	seen[name] = line(n)
}

// required reports keys that a mapping must have.
func (d *decoder) required(n *yaml.Node, field string, seen map[string]*yaml.Node, keys ...string) {
	if seen == nil {
		return
	}
	for _, k := range keys {
		if seen[k] == nil {
			d.fail(d.resolveQuiet(n), child(field, k), "%s is required", k)
		}
	}
}

func (d *decoder) tarball(n *yaml.Node, field string) Tarball {
	t := Tarball{Dest: "/"}
	if r := d.resolveQuiet(n); r != nil && r.Kind == yaml.ScalarNode {
		t.Path = d.hostPath(n, field)
		d.source(r, field, t.Path, child(field, "sha256"), false)
		return t
	}
	seen := d.mapping(n, field, map[string]handler{
		"path":   func(v *yaml.Node, f string) { t.Path = d.hostPath(v, f) },
		"sha256": func(v *yaml.Node, f string) { t.SHA256 = d.sha(v, f) },
		"dest":   func(v *yaml.Node, f string) { t.Dest = d.treePath(v, f) },
	})
	d.required(n, field, seen, "path")
	if seen != nil && seen["path"] != nil {
		d.source(d.resolveQuiet(n), child(field, "path"), t.Path, child(field, "sha256"), seen["sha256"] != nil)
	}
	return t
}

func (d *decoder) fileEntry(n *yaml.Node, field string) File {
	var f File
	seen := d.mapping(n, field, map[string]handler{
		"path": func(v *yaml.Node, fl string) { f.Path = d.treePath(v, fl) },
		"content": func(v *yaml.Node, fl string) {
			var s string
			if r := d.resolveQuiet(v); r != nil && r.Kind == yaml.ScalarNode && r.ShortTag() == "!!binary" {
				if err := r.Decode(&s); err != nil {
					d.fail(r, fl, "invalid !!binary content: %v", err)
				}
			} else {
				s = d.str(v, fl)
			}
			f.Content = &s
		},
		"from":  func(v *yaml.Node, fl string) { f.From = d.hostPath(v, fl) },
		"mode":  func(v *yaml.Node, fl string) { f.Mode = d.mode(v, fl) },
		"owner": func(v *yaml.Node, fl string) { f.Owner = d.owner(v, fl) },
		"mtime": func(v *yaml.Node, fl string) {
			if t, ok := d.integer(v, fl, 0, maxEpoch); ok {
				f.MTime = &t
			}
		},
	})
	if seen == nil {
		return f
	}
	d.required(n, field, seen, "path")
	switch {
	case seen["content"] != nil && seen["from"] != nil:
		d.fail(seen["from"], field, "give either content or from, not both")
	case seen["content"] == nil && seen["from"] == nil:
		d.fail(d.resolveQuiet(n), field, "give content (inline) or from (a host path)")
	case seen["content"] != nil && f.IsDir():
		d.fail(seen["content"], child(field, "content"), "path %q ends in / (a directory copy), which needs from, not content", f.Path)
	}
	return f
}

func (d *decoder) symlink(n *yaml.Node, field string) Symlink {
	var s Symlink
	seen := d.mapping(n, field, map[string]handler{
		"path":   func(v *yaml.Node, f string) { s.Path = d.treePath(v, f) },
		"target": func(v *yaml.Node, f string) { s.Target = d.str(v, f) },
		"owner":  func(v *yaml.Node, f string) { s.Owner = d.owner(v, f) },
	})
	d.required(n, field, seen, "path", "target")
	if seen != nil && seen["target"] != nil && s.Target == "" && !d.failed(seen["target"]) {
		d.fail(seen["target"], child(field, "target"), "target must not be empty")
	}
	return s
}

func (d *decoder) mkdir(n *yaml.Node, field string) Mkdir {
	var m Mkdir
	if r := d.resolveQuiet(n); r != nil && r.Kind == yaml.ScalarNode && !isNull(r) {
		m.Path = d.treePath(n, field)
		return m
	}
	seen := d.mapping(n, field, map[string]handler{
		"path":  func(v *yaml.Node, f string) { m.Path = d.treePath(v, f) },
		"mode":  func(v *yaml.Node, f string) { m.Mode = d.mode(v, f) },
		"owner": func(v *yaml.Node, f string) { m.Owner = d.owner(v, f) },
	})
	d.required(n, field, seen, "path")
	return m
}

func (d *decoder) accountName(n *yaml.Node, field string) string {
	s := d.str(n, field)
	if !d.failed(n) && !validAccountName(s) {
		d.fail(d.resolveQuiet(n), field, "%q is not a valid user or group name", s)
	}
	return s
}

func (d *decoder) accountNames(n *yaml.Node, field string) []string {
	var out []string
	d.oneOrList(n, field, func(v *yaml.Node, f string) { out = append(out, d.accountName(v, f)) })
	return out
}

// passwdField reads a passwd/group field, which may not hold ":" or a newline.
func (d *decoder) passwdField(n *yaml.Node, field string) string {
	s := d.str(n, field)
	if strings.ContainsAny(s, ":\n") {
		d.fail(d.resolveQuiet(n), field, "must not contain ':' or a newline")
	}
	return s
}

func (d *decoder) user(n *yaml.Node, field string) User {
	var u User
	seen := d.mapping(n, field, map[string]handler{
		"name":    func(v *yaml.Node, f string) { u.Name = d.accountName(v, f) },
		"uid":     func(v *yaml.Node, f string) { u.UID = d.uint32p(v, f) },
		"group":   func(v *yaml.Node, f string) { u.Group = d.accountName(v, f) },
		"gid":     func(v *yaml.Node, f string) { u.GID = d.uint32p(v, f) },
		"groups":  func(v *yaml.Node, f string) { u.Groups = d.accountNames(v, f) },
		"home":    func(v *yaml.Node, f string) { u.Home = d.treePath(v, f) },
		"shell":   func(v *yaml.Node, f string) { u.Shell = d.treePath(v, f) },
		"comment": func(v *yaml.Node, f string) { u.Comment = d.passwdField(v, f) },
		"system":  func(v *yaml.Node, f string) { u.System = d.boolean(v, f) },
		"password": func(v *yaml.Node, f string) {
			u.Password = d.passwdField(v, f)
		},
		"createHome": func(v *yaml.Node, f string) {
			b := d.boolean(v, f)
			u.CreateHome = &b
		},
	})
	d.required(n, field, seen, "name")
	return u
}

func (d *decoder) group(n *yaml.Node, field string) Group {
	var g Group
	seen := d.mapping(n, field, map[string]handler{
		"name":    func(v *yaml.Node, f string) { g.Name = d.accountName(v, f) },
		"gid":     func(v *yaml.Node, f string) { g.GID = d.uint32p(v, f) },
		"members": func(v *yaml.Node, f string) { g.Members = d.accountNames(v, f) },
		"system":  func(v *yaml.Node, f string) { g.System = d.boolean(v, f) },
	})
	d.required(n, field, seen, "name")
	return g
}

// unitRE is a systemd unit name: a name, an optional @instance, and a type suffix.
var unitRE = regexp.MustCompile(`^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]*)?\.(service|socket|target|timer|path|mount|automount|swap|slice|scope|device)$`)

func (d *decoder) units(n *yaml.Node, field string) []string {
	var out []string
	d.oneOrList(n, field, func(v *yaml.Node, f string) {
		s := d.str(v, f)
		if !d.failed(v) && !unitRE.MatchString(s) {
			d.fail(d.resolveQuiet(v), f, "%q is not a systemd unit name such as containerd.service", s)
		}
		out = append(out, s)
	})
	return out
}

func (d *decoder) systemd(n *yaml.Node, field string) Systemd {
	var s Systemd
	d.mapping(n, field, map[string]handler{
		"enable":  func(v *yaml.Node, f string) { s.Enable = d.units(v, f) },
		"disable": func(v *yaml.Node, f string) { s.Disable = d.units(v, f) },
		"mask":    func(v *yaml.Node, f string) { s.Mask = d.units(v, f) },
		"default": func(v *yaml.Node, f string) {
			s.Default = d.str(v, f)
			if !d.failed(v) && (!unitRE.MatchString(s.Default) || !strings.HasSuffix(s.Default, ".target")) {
				d.fail(d.resolveQuiet(v), f, "default %q must be a .target unit such as multi-user.target", s.Default)
			}
		},
	})
	return s
}

var envRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func (d *decoder) hook(n *yaml.Node, field string) Hook {
	var h Hook
	if r := d.resolveQuiet(n); r != nil && r.Kind == yaml.ScalarNode && !isNull(r) {
		h.Run = d.hostPath(n, field)
		return h
	}
	seen := d.mapping(n, field, map[string]handler{
		"run":  func(v *yaml.Node, f string) { h.Run = d.hostPath(v, f) },
		"args": func(v *yaml.Node, f string) { h.Args = d.strList(v, f) },
		"env": func(v *yaml.Node, f string) {
			h.Env = d.strMap(v, f)
			if r := d.resolveQuiet(v); r != nil && r.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(r.Content); i += 2 {
					if k := r.Content[i].Value; !envRE.MatchString(k) {
						d.fail(r.Content[i], child(f, k), "%q is not an environment variable name", k)
					}
				}
			}
		},
	})
	d.required(n, field, seen, "run")
	return h
}

var platformRE = regexp.MustCompile(`^[a-z0-9]+/[a-z0-9]+(/[a-z0-9]+)?$`)

func (d *decoder) oci(n *yaml.Node, field string) OCI {
	o := OCI{Dest: "/"}
	seen := d.mapping(n, field, map[string]handler{
		"ref": func(v *yaml.Node, f string) {
			o.Ref = d.str(v, f)
			if err := checkRef(o.Ref, false); err != nil && !d.failed(v) {
				d.fail(d.resolveQuiet(v), f, "%s", err.Error())
			}
		},
		"dest": func(v *yaml.Node, f string) { o.Dest = d.treePath(v, f) },
		"paths": func(v *yaml.Node, f string) {
			d.oneOrList(v, f, func(v *yaml.Node, f string) { o.Paths = append(o.Paths, d.treePath(v, f)) })
		},
		"mode":  func(v *yaml.Node, f string) { o.Mode = d.mode(v, f) },
		"owner": func(v *yaml.Node, f string) { o.Owner = d.owner(v, f) },
		"platform": func(v *yaml.Node, f string) {
			o.Platform = d.str(v, f)
			if !d.failed(v) && !platformRE.MatchString(o.Platform) {
				d.fail(d.resolveQuiet(v), f, "platform %q must be os/arch[/variant], e.g. linux/amd64", o.Platform)
			}
		},
	})
	d.required(n, field, seen, "ref")
	return o
}

// SkippableCommands are the commands a debs layer may skip: their work
// lands only in files nothing reads when the image boots through stamp's
// own initramfs (the raw format's, or a PXE output's), such as
// initramfs-tools' /boot/initrd.img-*.
var SkippableCommands = []string{"update-initramfs"}

// debs reads a debs layer, or base.debs when base is set: there
// packages may be left out (the variant gives them) and variant is known.
func (d *decoder) debs(n *yaml.Node, field string, base bool) Debs {
	var b Debs
	seen := d.mapping(n, field, map[string]handler{
		"variant": func(v *yaml.Node, f string) {
			b.Variant = d.str(v, f)
			switch {
			case d.failed(v):
			case !base:
				d.fail(d.resolveQuiet(v), f, "variant belongs to base.debs, which bootstraps a system; a debs layer installs packages onto the tree it is given")
			case !slices.Contains(Variants, b.Variant):
				d.fail(d.resolveQuiet(v), f, "variant %q must be one of %s", b.Variant, strings.Join(Variants, ", "))
			}
		},
		"repo": func(v *yaml.Node, f string) {
			b.Repo = d.str(v, f)
			scheme, _, ok := strings.Cut(b.Repo, "://")
			if !d.failed(v) && (!ok || scheme != "http" && scheme != "https" && scheme != "file") {
				d.fail(d.resolveQuiet(v), f, "repo %q must be an http://, https:// or file:// URL", b.Repo)
			}
			if rest, ok := strings.CutPrefix(b.Repo, "file://"); ok && !d.failed(v) {
				d.hostPaths = append(d.hostPaths, HostPath{Field: f, Path: rest, Repo: true, Params: d.substituted[d.resolveQuiet(v)]})
			}
		},
		"suite":        func(v *yaml.Node, f string) { b.Suite = d.str(v, f) },
		"suites":       func(v *yaml.Node, f string) { b.Suites = d.strList(v, f) },
		"components":   func(v *yaml.Node, f string) { b.Components = d.strList(v, f) },
		"packages":     func(v *yaml.Node, f string) { b.Packages = d.strList(v, f) },
		"keyring":      func(v *yaml.Node, f string) { b.Keyring = d.hostPath(v, f) },
		"trusted":      func(v *yaml.Node, f string) { b.Trusted = d.boolean(v, f) },
		"recommends":   func(v *yaml.Node, f string) { b.Recommends = d.boolean(v, f) },
		"exclude":      func(v *yaml.Node, f string) { b.Exclude = d.strList(v, f) },
		"deferScripts": func(v *yaml.Node, f string) { b.DeferScripts = d.boolean(v, f) },
		"skip": func(v *yaml.Node, f string) {
			b.Skip = d.strList(v, f)
			for _, c := range b.Skip {
				if !slices.Contains(SkippableCommands, c) {
					d.fail(d.resolveQuiet(v), f, "skip %q: only %s can be skipped", c, strings.Join(SkippableCommands, ", "))
				}
			}
		},
		"scripts": func(v *yaml.Node, f string) {
			b.Scripts = d.str(v, f)
			if !d.failed(v) && b.Scripts != ScriptsOffline && b.Scripts != ScriptsChroot {
				d.fail(d.resolveQuiet(v), f, "scripts %q must be %q or %q", b.Scripts, ScriptsOffline, ScriptsChroot)
			}
		},
	})
	if seen == nil {
		return b
	}
	if base {
		d.required(n, field, seen, "repo")
		if b.Variant == "" {
			b.Variant = DefaultVariant
		}
	} else {
		d.required(n, field, seen, "repo", "packages")
	}
	at := d.resolveQuiet(n)
	switch {
	case seen["suite"] != nil && seen["suites"] != nil:
		d.fail(seen["suites"], child(field, "suites"), "give suite or suites, not both")
	case b.Suite == "" && len(b.Suites) == 0:
		d.fail(at, child(field, "suite"), "suite is required (e.g. bookworm)")
	}
	if seen["packages"] != nil && len(b.Packages) == 0 {
		d.fail(seen["packages"], child(field, "packages"), "list at least one package")
	}
	for _, s := range append([]string{b.Suite}, b.Suites...) {
		if strings.HasSuffix(s, "/") && seen["components"] != nil {
			d.fail(seen["components"], child(field, "components"), "suite %q is a flat repository (it ends in /), which has no components", s)
			break
		}
	}
	if len(b.Components) == 0 {
		b.Components = []string{"main"}
	}
	if b.Scripts == "" {
		b.Scripts = ScriptsOffline
	}
	if b.Scripts == ScriptsChroot && len(b.Skip) > 0 {
		d.fail(seen["skip"], child(field, "skip"), "skip has no effect with scripts: chroot, where every script runs")
	}
	if b.Scripts == ScriptsChroot && b.DeferScripts {
		d.fail(seen["deferScripts"], child(field, "deferScripts"), "deferScripts has no effect with scripts: chroot, where every script runs")
	}
	return b
}

func (d *decoder) run(n *yaml.Node, field string) Run {
	var r Run
	seen := d.mapping(n, field, map[string]handler{
		"command": func(v *yaml.Node, f string) {
			rv := d.resolveQuiet(v)
			if rv != nil && rv.Kind != yaml.SequenceNode {
				d.fail(rv, f, "command is a list: the program and its arguments, e.g. [/bin/sh, -c, \"...\"]; got %s", describe(rv))
				return
			}
			r.Command = d.strList(v, f)
			switch {
			case len(r.Command) == 0 && !d.failed(v):
				d.fail(rv, f, "command must name a program")
			case len(r.Command) > 0 && r.Command[0] == "":
				d.fail(rv, f, "the program (command[0]) must not be empty")
			}
			for i, a := range r.Command {
				if strings.ContainsRune(a, 0) {
					d.fail(rv, index(f, i), "contains a NUL byte")
				}
			}
		},
		"env": func(v *yaml.Node, f string) {
			r.Env = d.strMap(v, f)
			if rv := d.resolveQuiet(v); rv != nil && rv.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(rv.Content); i += 2 {
					if k := rv.Content[i].Value; !envRE.MatchString(k) {
						d.fail(rv.Content[i], child(f, k), "%q is not an environment variable name", k)
					}
				}
			}
			for k, val := range r.Env {
				if strings.ContainsRune(val, 0) {
					d.fail(d.resolveQuiet(v), child(f, k), "contains a NUL byte")
				}
			}
		},
		"network": func(v *yaml.Node, f string) { r.Network = d.boolean(v, f) },
	})
	d.required(n, field, seen, "command")
	return r
}

// offlineOnly refuses, in a recipe that asks for offline-only, every step
// that would run a program of the image.
func (d *decoder) offlineOnly(r *Recipe) {
	if !r.OfflineOnly {
		return
	}
	if b := r.Base.Debs; b != nil && b.Scripts == ScriptsChroot {
		d.errs = append(d.errs, &Error{File: d.file, Line: r.Base.Line, Field: "base.debs.scripts",
			Msg: "offline-only: true forbids scripts: chroot, which runs maintainer scripts in the image; use scripts: offline"})
	}
	for _, ph := range []*Phase{&r.Customize, &r.Provision} {
		for _, l := range ph.Layers {
			switch {
			case l.Run != nil:
				d.errs = append(d.errs, &Error{File: d.file, Line: l.Line, Field: child(l.Field, "run"),
					Msg: "offline-only: true forbids run steps, which run a program of the image; drop the step or offline-only"})
			case l.Debs != nil && l.Debs.Scripts == ScriptsChroot:
				d.errs = append(d.errs, &Error{File: d.file, Line: l.Line, Field: child(l.Field, "debs.scripts"),
					Msg: "offline-only: true forbids scripts: chroot, which runs maintainer scripts in the image; use scripts: offline"})
			}
		}
	}
}

// ImagesInto are the places an images layer can put its images: "archives"
// (the default: OCI archives that a unit imports into containerd at first
// boot) or "containerd" (containerd's own state, written at build time).
var ImagesInto = []string{"archives", "containerd"}

// images reads an images layer: a list of references (each a string or
// {ref: ...}), or a mapping with refs and where they go.
func (d *decoder) images(l *Layer, n *yaml.Node, field string) {
	l.Images = []Image{}
	r := d.resolveQuiet(n)
	if r == nil || r.Kind != yaml.MappingNode || !hasKey(r, "refs") && !hasKey(r, "into") {
		d.oneOrList(n, field, func(v *yaml.Node, f string) { l.Images = append(l.Images, d.image(v, f)) })
		return
	}
	seen := d.mapping(n, field, map[string]handler{
		"refs": func(v *yaml.Node, f string) {
			rv := d.resolveQuiet(v)
			if rv != nil && (isNull(rv) || rv.Kind == yaml.SequenceNode && len(rv.Content) == 0) {
				d.fail(rv, f, "list at least one image")
				return
			}
			d.oneOrList(v, f, func(v *yaml.Node, f string) { l.Images = append(l.Images, d.image(v, f)) })
		},
		"into": func(v *yaml.Node, f string) {
			l.ImagesInto = d.str(v, f)
			if !d.failed(v) && !slices.Contains(ImagesInto, l.ImagesInto) {
				d.fail(d.resolveQuiet(v), f, "into %q must be one of %s", l.ImagesInto, strings.Join(ImagesInto, ", "))
			}
		},
		"discardLayers": func(v *yaml.Node, f string) {
			b := d.boolean(v, f)
			l.ImagesDiscardLayers = &b
		},
	})
	d.required(n, field, seen, "refs")
	if seen != nil && seen["discardLayers"] != nil && l.ImagesInto != "containerd" {
		d.fail(seen["discardLayers"], child(field, "discardLayers"), "discardLayers needs into: containerd; archives keep every layer")
	}
	if l.ImagesInto == "archives" {
		l.ImagesInto = ""
	}
}

// hasKey reports whether the mapping n has the key k.
func hasKey(n *yaml.Node, k string) bool {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == k {
			return true
		}
	}
	return false
}

func (d *decoder) image(n *yaml.Node, field string) Image {
	var im Image
	at := d.resolveQuiet(n)
	if at != nil && at.Kind == yaml.MappingNode {
		seen := d.mapping(n, field, map[string]handler{
			"ref": func(v *yaml.Node, f string) { im.Ref = d.str(v, f); at = d.resolveQuiet(v) },
		})
		d.required(n, field, seen, "ref")
		field = child(field, "ref")
		if seen == nil || seen["ref"] == nil {
			return im
		}
	} else {
		im.Ref = d.str(n, field)
	}
	if d.failed(at) {
		return im
	}
	if err := checkRef(im.Ref, true); err != nil {
		d.fail(at, field, "%s", err.Error())
	}
	return im
}
