package recipes

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// outputNode keeps the nodes an output came from, for errors found when
// outputs are checked against each other.
type outputNode struct {
	out  Output
	node *yaml.Node
	seen map[string]*yaml.Node
}

// outputKeys says which keys apply to each format; a key given to a format
// that ignores it is an error rather than a silent no-op.
var outputKeys = map[string][]string{
	FormatTar:   {"compression"},
	FormatCpio:  {"compression"},
	FormatPXE:   {"compression", "from", "boot"},
	FormatRaw:   {"size", "partitions", "boot", "freeSpace", "grow"},
	FormatQcow2: {"from", "compression"},
	FormatOCI:   {"from", "kind", "layout", "compression", "entrypoint", "env", "labels"},
}

var formats = []string{FormatTar, FormatRaw, FormatQcow2, FormatCpio, FormatPXE, FormatOCI}

var compressions = []string{"none", "gzip", "zstd", "xz"}

// qcow2Compressions are what qcow2 clusters can hold (zlib deflate).
var qcow2Compressions = []string{"none", "zlib"}

// ociCompressions are the layer media types the image spec names
// (tar+gzip, tar+zstd, tar); gzip comes first as the default because it is
// the one every registry and client reads.
var ociCompressions = []string{"gzip", "zstd", "none"}

func oneOf(s string, set ...string) bool {
	for _, x := range set {
		if s == x {
			return true
		}
	}
	return false
}

// enum reads a string that must be one of set.
func (d *decoder) enum(n *yaml.Node, field, what string, set ...string) string {
	s := d.str(n, field)
	if !d.failed(n) && !oneOf(s, set...) {
		d.fail(d.resolveQuiet(n), field, "%s %q must be one of %s", what, s, strings.Join(set, ", "))
	}
	return s
}

func (d *decoder) size(n *yaml.Node, field string, auto bool) string {
	s := d.str(n, field)
	if d.failed(n) {
		return s
	}
	if _, err := ParseSize(s); err != nil {
		d.fail(d.resolveQuiet(n), field, "%s", err.Error())
	} else if s == "auto" && !auto {
		d.fail(d.resolveQuiet(n), field, "size must be a number here, not auto")
	}
	return s
}

func (d *decoder) output(n *yaml.Node, field string) outputNode {
	o := Output{Line: line(n), Field: field}
	seen := d.mapping(n, field, map[string]handler{
		"format": func(v *yaml.Node, f string) { o.Format = d.enum(v, f, "format", formats...) },
		"name": func(v *yaml.Node, f string) {
			o.Name = d.str(v, f)
			if !d.failed(v) && !nameRE.MatchString(o.Name) {
				d.fail(d.resolveQuiet(v), f, "name %q must match [a-z0-9][a-z0-9._-]*", o.Name)
			}
		},
		"compression": func(v *yaml.Node, f string) {
			o.Compression = d.enum(v, f, "compression", append(append([]string{}, compressions...), "zlib")...)
		},
		"size": func(v *yaml.Node, f string) { o.Size = d.size(v, f, true) },
		"partitions": func(v *yaml.Node, f string) {
			o.Partitions = []Partition{}
			names := map[string]int{}
			d.list(v, f, func(item *yaml.Node, f string) {
				p := d.partition(item, f)
				d.unique(names, p.Name, item, child(f, "name"), "partition")
				o.Partitions = append(o.Partitions, p)
			})
		},
		"boot":       func(v *yaml.Node, f string) { b := d.boot(v, f); o.Boot = &b },
		"from":       func(v *yaml.Node, f string) { o.From = d.str(v, f) },
		"kind":       func(v *yaml.Node, f string) { o.Kind = d.enum(v, f, "kind", "rootfs", "containerdisk") },
		"layout":     func(v *yaml.Node, f string) { o.Layout = d.enum(v, f, "layout", "dir", "archive") },
		"entrypoint": func(v *yaml.Node, f string) { o.Entrypoint = d.strList(v, f) },
		"env": func(v *yaml.Node, f string) {
			d.list(v, f, func(item *yaml.Node, f string) {
				s := d.str(item, f)
				k, _, ok := strings.Cut(s, "=")
				if !d.failed(item) && (!ok || !envRE.MatchString(k)) {
					d.fail(d.resolveQuiet(item), f, "env entry %q must be NAME=VALUE", s)
				}
				o.Env = append(o.Env, s)
			})
		},
		"labels":    func(v *yaml.Node, f string) { o.Labels = d.strMap(v, f) },
		"freeSpace": func(v *yaml.Node, f string) { o.FreeSpace = d.size(v, f, false) },
		"grow":      func(v *yaml.Node, f string) { g := d.boolean(v, f); o.Grow = &g },
	})
	on := outputNode{out: o, node: d.resolveQuiet(n), seen: seen}
	if seen == nil {
		return on
	}
	if seen["format"] == nil {
		d.fail(on.node, child(field, "format"), "format is required (one of %s)", strings.Join(formats, ", "))
		return on
	}
	allowed, ok := outputKeys[o.Format]
	if !ok {
		return on
	}
	// Report keys in document order.
	for i := 0; i+1 < len(on.node.Content); i += 2 {
		k := on.node.Content[i].Value
		if k != "format" && k != "name" && !oneOf(k, allowed...) && seen[k] == on.node.Content[i] {
			if _, known := keyFormats(k); known {
				d.fail(on.node.Content[i], child(field, k), "%s does not apply to format %s", k, o.Format)
			}
		}
	}
	d.outputDefaults(&on)
	return on
}

// keyFormats reports whether k is a key some format uses.
func keyFormats(k string) ([]string, bool) {
	var fs []string
	for _, f := range formats {
		if oneOf(k, outputKeys[f]...) {
			fs = append(fs, f)
		}
	}
	return fs, len(fs) > 0
}

func (d *decoder) outputDefaults(on *outputNode) {
	o := &on.out
	if o.Name == "" {
		o.Name = o.Format
	}
	if c := on.seen["compression"]; c != nil && o.Compression != "" {
		set := compressions
		switch o.Format {
		case FormatQcow2:
			set = qcow2Compressions
		case FormatOCI:
			set = ociCompressions
		}
		if !oneOf(o.Compression, set...) {
			d.fail(c, child(o.Field, "compression"), "compression %q must be one of %s for format %s", o.Compression, strings.Join(set, ", "), o.Format)
		}
	}
	switch o.Format {
	case FormatTar:
		if o.Compression == "" {
			o.Compression = "none"
		}
	case FormatCpio, FormatPXE:
		if o.Compression == "" {
			o.Compression = "zstd"
		}
	case FormatOCI:
		if o.Kind == "" {
			o.Kind = "rootfs"
		}
		if o.Layout == "" {
			o.Layout = "dir"
		}
		if o.Compression == "" {
			o.Compression = ociCompressions[0]
		}
		if o.Kind == "rootfs" && on.seen["from"] != nil {
			d.fail(on.seen["from"], child(o.Field, "from"), "an oci rootfs is made from the tree; from applies to kind containerdisk")
		}
	case FormatRaw:
		if o.Size == "" {
			o.Size = "auto"
		}
		if on.seen["partitions"] == nil {
			o.Partitions = []Partition{
				{Name: "esp", Type: "esp", Size: "256MiB", Filesystem: "vfat"},
				{Name: "root", Type: "root", Size: "auto", Filesystem: "ext4"},
			}
		}
		d.checkPartitions(on)
	}
}

func (d *decoder) checkPartitions(on *outputNode) {
	o := &on.out
	at, field := on.node, o.Field
	if p := on.seen["partitions"]; p != nil {
		at, field = p, child(o.Field, "partitions")
	}
	count := map[string]int{}
	for _, p := range o.Partitions {
		count[p.Type]++
	}
	switch {
	case len(o.Partitions) == 0:
		d.fail(at, field, "a raw disk needs partitions; leave the key out for an ESP and a root partition")
		return
	case count["root"] != 1:
		d.fail(at, field, "a raw disk needs exactly one partition of type root, got %d", count["root"])
	case count["esp"] > 1:
		d.fail(at, field, "a raw disk may have one ESP, got %d", count["esp"])
	}
	if o.Boot != nil && o.Boot.Loader == "systemd-boot" && count["esp"] == 0 {
		d.fail(on.seen["boot"], child(o.Field, "boot.loader"), "systemd-boot needs a partition of type esp")
	}
	if o.Boot != nil && o.Boot.BIOS && count["bios"] == 0 && o.Boot.Loader == "grub" {
		d.fail(on.seen["boot"], child(o.Field, "boot.bios"), "BIOS boot with grub on GPT needs a partition of type bios")
	}
}

var partitionTypes = []string{"esp", "root", "xbootldr", "swap", "linux", "bios"}

// defaultFilesystem is each partition type's file system, and the only one it may have
// where the type fixes it.
var defaultFilesystem = map[string]string{
	"esp": "vfat", "root": "ext4", "xbootldr": "vfat", "swap": "swap", "linux": "ext4", "bios": "none",
}

func (d *decoder) partition(n *yaml.Node, field string) Partition {
	var p Partition
	seen := d.mapping(n, field, map[string]handler{
		"name": func(v *yaml.Node, f string) {
			p.Name = d.str(v, f)
			if !d.failed(v) && !nameRE.MatchString(p.Name) {
				d.fail(d.resolveQuiet(v), f, "name %q must match [a-z0-9][a-z0-9._-]*", p.Name)
			}
		},
		"type": func(v *yaml.Node, f string) { p.Type = d.enum(v, f, "type", partitionTypes...) },
		"size": func(v *yaml.Node, f string) { p.Size = d.size(v, f, true) },
		"filesystem": func(v *yaml.Node, f string) {
			p.Filesystem = d.enum(v, f, "filesystem", "vfat", "ext4", "swap", "none")
		},
		"label": func(v *yaml.Node, f string) { p.Label = d.str(v, f) },
	})
	if seen == nil {
		return p
	}
	d.required(n, field, seen, "name", "type")
	if p.Size == "" {
		p.Size = "auto"
	}
	want, ok := defaultFilesystem[p.Type]
	if !ok {
		return p
	}
	if p.Filesystem == "" {
		p.Filesystem = want
	}
	fixed := map[string]bool{"esp": true, "xbootldr": true, "swap": true, "bios": true}
	if fixed[p.Type] && p.Filesystem != want && seen["filesystem"] != nil && !d.failed(seen["filesystem"]) {
		d.fail(seen["filesystem"], child(field, "filesystem"), "a partition of type %s has filesystem %s", p.Type, want)
	}
	if p.Type == "root" && p.Filesystem != "ext4" && seen["filesystem"] != nil {
		d.fail(seen["filesystem"], child(field, "filesystem"), "the root partition is ext4")
	}
	max := map[string]int{"vfat": 11, "ext4": 16, "swap": 15}[p.Filesystem]
	if max > 0 && len(p.Label) > max {
		d.fail(seen["label"], child(field, "label"), "a %s label holds at most %d bytes, got %d", p.Filesystem, max, len(p.Label))
	}
	return p
}

func (d *decoder) boot(n *yaml.Node, field string) Boot {
	b := Boot{Loader: "systemd-boot"}
	seen := d.mapping(n, field, map[string]handler{
		"loader":  func(v *yaml.Node, f string) { b.Loader = d.enum(v, f, "loader", "systemd-boot", "grub", "none") },
		"cmdline": func(v *yaml.Node, f string) { b.Cmdline = d.str(v, f) },
		"bios":    func(v *yaml.Node, f string) { b.BIOS = d.boolean(v, f) },
	})
	if seen != nil && b.BIOS && b.Loader == "systemd-boot" {
		d.fail(seen["bios"], child(field, "bios"), "systemd-boot cannot boot BIOS machines; use loader grub")
	}
	return b
}

// sources says which earlier formats an output may be made from. A format
// missing here is made from the tree and takes no from.
var sources = map[string][]string{
	FormatQcow2:                       {FormatRaw},
	FormatPXE:                         {FormatCpio},
	FormatOCI + "/" + "containerdisk": {FormatQcow2, FormatRaw},
}

// linkOutputs checks names are unique and each from names an earlier output
// of a format it can be made from, filling from where there is one choice.
func (d *decoder) linkOutputs(ons []outputNode) []Output {
	out := make([]Output, 0, len(ons))
	byName := map[string]int{}
	for i := range ons {
		on := &ons[i]
		o := &on.out
		if on.seen == nil || o.Format == "" {
			out = append(out, *o)
			continue
		}
		at := on.node
		if k := on.seen["name"]; k != nil {
			at = k
		}
		if j, dup := byName[o.Name]; dup {
			d.fail(at, child(o.Field, "name"), "output name %q is already used by %s; give each output of the same format a name", o.Name, ons[j].out.Field)
		} else {
			byName[o.Name] = i
		}
		key := o.Format
		if o.Format == FormatOCI {
			key += "/" + o.Kind
		}
		from, ok := sources[key]
		if !ok {
			if k := on.seen["from"]; k != nil && o.Format != FormatOCI {
				d.fail(k, child(o.Field, "from"), "format %s is made from the tree and takes no from", o.Format)
			}
			out = append(out, *o)
			continue
		}
		if k := on.seen["from"]; k != nil {
			j, found := byName[o.From]
			switch {
			case !found || j >= i:
				d.fail(k, child(o.Field, "from"), "from %q must name an earlier output", o.From)
			case !oneOf(ons[j].out.Format, from...):
				d.fail(k, child(o.Field, "from"), "%s %q cannot be made from %s output %q (use %s)", o.Format, o.Name, ons[j].out.Format, o.From, strings.Join(from, " or "))
			}
		} else if o.Format != FormatPXE {
			// The nearest earlier output of a usable format is the obvious source.
			for j := i - 1; j >= 0; j-- {
				if oneOf(ons[j].out.Format, from...) {
					o.From = ons[j].out.Name
					break
				}
			}
			if o.From == "" {
				d.fail(on.node, child(o.Field, "from"), "%s needs an earlier %s output to be made from", describeOutput(o), strings.Join(from, " or "))
			}
		}
		out = append(out, *o)
	}
	return out
}

func describeOutput(o *Output) string {
	if o.Format == FormatOCI {
		return fmt.Sprintf("oci kind %s", o.Kind)
	}
	return o.Format
}
