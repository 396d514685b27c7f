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

// outputFormat is one output format as a recipe writes it. Adding a format
// to the schema is one line in outputFormats (and its keys' handlers in
// output, when it brings new keys).
type outputFormat struct {
	name string
	// keys are those that apply besides format and name; a key given to a
	// format that ignores it is an error rather than a silent no-op.
	keys []string
	// compressions are what the format's compression may be.
	compressions []string
	// defaultCompression is filled when the recipe gives none; "" leaves it
	// out.
	defaultCompression string
	// madeFrom lists, by kind ("" for a format of one kind), the formats an
	// output can be made from, nearest choice first; a kind it does not list
	// is made from the tree. The formats package keeps the same graph beside
	// its writers, and the conductor's tests hold the two together.
	madeFrom map[string][]string
	// fromOptional means an output with a madeFrom entry may still be made
	// from the tree when from is left out.
	fromOptional bool
	// defaults fills the format's own defaults and checks what depends on
	// more than one key.
	defaults func(d *decoder, on *outputNode)
}

// compressions are the whole-file codecs of archives.
var compressions = []string{"none", "gzip", "zstd", "xz"}

// outputFormats lists every output format in the order errors name them.
var outputFormats = []outputFormat{
	{name: FormatTar, keys: []string{"compression"}, compressions: compressions, defaultCompression: "none"},
	{name: FormatRaw, keys: []string{"size", "partitions", "boot", "freeSpace", "grow"}, defaults: (*decoder).rawDefaults},
	// qcow2 clusters hold zlib deflate or nothing.
	{name: FormatQcow2, keys: []string{"from", "compression"}, compressions: []string{"none", "zlib"},
		madeFrom: map[string][]string{"": {FormatRaw}}},
	// A fixed VHD is what Azure takes, so it is the default type.
	{name: FormatVHD, keys: []string{"from", "type"}, madeFrom: map[string][]string{"": {FormatRaw}}, defaults: (*decoder).vhdDefaults},
	// A stream-optimized VMDK is what vSphere and OVF packages import.
	{name: FormatVMDK, keys: []string{"from", "type"}, madeFrom: map[string][]string{"": {FormatRaw}}, defaults: (*decoder).vmdkDefaults},
	// An OVA holds its own stream-optimized VMDK of the raw disk.
	{name: FormatOVA, keys: []string{"from", "cpus", "memory", "firmware", "network"}, madeFrom: map[string][]string{"": {FormatRaw}},
		defaults: (*decoder).ovaDefaults},
	{name: FormatGCE, keys: []string{"from"}, madeFrom: map[string][]string{"": {FormatRaw}}},
	// A compressed raw is for provisioners that stream it onto a disk.
	{name: FormatCompressed, keys: []string{"from", "compression"}, compressions: []string{"zstd", "xz", "gzip"}, defaultCompression: "zstd",
		madeFrom: map[string][]string{"": {FormatRaw}}},
	// EROFS compresses inside, in LZ4 clusters the kernel reads.
	{name: FormatErofs, keys: []string{"compression"}, compressions: []string{"lz4", "lz4hc", "none"}, defaultCompression: "lz4"},
	// A live bundle's compression is its initramfs's; its root image is the
	// erofs output it is made from, or one it writes.
	{name: FormatLive, keys: []string{"compression", "from", "boot"}, compressions: compressions, defaultCompression: "zstd",
		madeFrom: map[string][]string{"": {FormatErofs}}, fromOptional: true},
	// An iso boots the live system from a CD or a disk; its compression is
	// its initramfs's when it makes its own.
	{name: FormatISO, keys: []string{"compression", "from", "boot"}, compressions: compressions, defaultCompression: "zstd",
		madeFrom: map[string][]string{"": {FormatLive}}, fromOptional: true, defaults: (*decoder).isoDefaults},
	{name: FormatCpio, keys: []string{"compression"}, compressions: compressions, defaultCompression: "zstd"},
	{name: FormatPXE, keys: []string{"compression", "from", "boot"}, compressions: compressions, defaultCompression: "zstd",
		madeFrom: map[string][]string{"": {FormatCpio}}, fromOptional: true},
	// An OCI layer's media types are tar+gzip, tar+zstd and tar; gzip is
	// the default because every registry and client reads it.
	{name: FormatOCI, keys: []string{"from", "kind", "layout", "compression", "entrypoint", "env", "labels"},
		compressions: []string{"gzip", "zstd", "none"}, defaultCompression: "gzip",
		madeFrom: map[string][]string{"containerdisk": {FormatQcow2, FormatRaw}, "disk": {FormatCompressed}}, defaults: (*decoder).ociDefaults},
}

// outputFormatNamed returns the schema of a format, nil for an unknown one.
func outputFormatNamed(name string) *outputFormat {
	for i := range outputFormats {
		if outputFormats[i].name == name {
			return &outputFormats[i]
		}
	}
	return nil
}

// allCompressions is every compression some format takes, for the first
// check of the key; the format's own set is checked once the format is known.
func allCompressions() []string {
	var out []string
	for _, f := range outputFormats {
		for _, c := range f.compressions {
			if !oneOf(c, out...) {
				out = append(out, c)
			}
		}
	}
	return out
}

// Formats lists the output formats a recipe may name, in the order errors
// name them.
func Formats() []string {
	out := make([]string, len(outputFormats))
	for i, f := range outputFormats {
		out[i] = f.name
	}
	return out
}

// MadeFrom says, by kind ("" for a format of one kind), which formats an
// output of format can be made from; nil for a format always made from the
// tree. The conductor's tests hold it against formats.Table.
func MadeFrom(format string) map[string][]string {
	f := outputFormatNamed(format)
	if f == nil || f.madeFrom == nil {
		return nil
	}
	out := make(map[string][]string, len(f.madeFrom))
	for k, v := range f.madeFrom {
		out[k] = append([]string(nil), v...)
	}
	return out
}

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

// size reads a size once, into bytes (0 for auto), so nothing after the
// schema parses it again.
func (d *decoder) size(n *yaml.Node, field string, auto bool) int64 {
	s := d.str(n, field)
	if d.failed(n) {
		return 0
	}
	b, err := ParseSize(s)
	if err != nil {
		d.fail(d.resolveQuiet(n), field, "%s", err.Error())
	} else if s == "auto" && !auto {
		d.fail(d.resolveQuiet(n), field, "size must be a number here, not auto")
	}
	return b
}

func (d *decoder) output(n *yaml.Node, field string) outputNode {
	o := Output{Line: line(n), Field: field}
	seen := d.mapping(n, field, map[string]handler{
		whenKey:  func(*yaml.Node, string) {}, // evaluated before substitution (conditions)
		"format": func(v *yaml.Node, f string) { o.Format = d.enum(v, f, "format", Formats()...) },
		"name": func(v *yaml.Node, f string) {
			o.Name = d.str(v, f)
			if !d.failed(v) && !nameRE.MatchString(o.Name) {
				d.fail(d.resolveQuiet(v), f, "name %q must match [a-z0-9][a-z0-9._-]*", o.Name)
			}
		},
		"compression": func(v *yaml.Node, f string) {
			o.Compression = d.enum(v, f, "compression", allCompressions()...)
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
		"boot":   func(v *yaml.Node, f string) { b := d.boot(v, f); o.Boot = &b },
		"from":   func(v *yaml.Node, f string) { o.From = d.str(v, f) },
		"kind":   func(v *yaml.Node, f string) { o.Kind = d.enum(v, f, "kind", "rootfs", "containerdisk", "disk") },
		"layout": func(v *yaml.Node, f string) { o.Layout = d.enum(v, f, "layout", "dir", "archive") },
		// The types depend on the format; its defaults check them.
		"type": func(v *yaml.Node, f string) { o.Type = d.str(v, f) },
		"cpus": func(v *yaml.Node, f string) {
			n, _ := d.integer(v, f, 1, 768)
			o.CPUs = int(n)
		},
		"memory":     func(v *yaml.Node, f string) { o.Memory = d.size(v, f, false) },
		"firmware":   func(v *yaml.Node, f string) { o.Firmware = d.enum(v, f, "firmware", "efi", "bios") },
		"network":    func(v *yaml.Node, f string) { o.Network = d.str(v, f) },
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
		d.fail(on.node, child(field, "format"), "format is required (one of %s)", strings.Join(Formats(), ", "))
		return on
	}
	of := outputFormatNamed(o.Format)
	if of == nil {
		return on
	}
	allowed := of.keys
	// Report keys in document order.
	for i := 0; i+1 < len(on.node.Content); i += 2 {
		k := on.node.Content[i].Value
		if k != "format" && k != "name" && !oneOf(k, allowed...) && seen[k] == on.node.Content[i] {
			if _, known := keyFormats(k); known {
				d.fail(on.node.Content[i], child(field, k), "%s does not apply to format %s", k, o.Format)
			}
		}
	}
	d.outputDefaults(&on, of)
	return on
}

// keyFormats reports whether k is a key some format uses.
func keyFormats(k string) ([]string, bool) {
	var fs []string
	for _, f := range outputFormats {
		if oneOf(k, f.keys...) {
			fs = append(fs, f.name)
		}
	}
	return fs, len(fs) > 0
}

func (d *decoder) outputDefaults(on *outputNode, of *outputFormat) {
	o := &on.out
	if o.Name == "" {
		o.Name = o.Format
	}
	if c := on.seen["compression"]; c != nil && o.Compression != "" && len(of.compressions) > 0 && !oneOf(o.Compression, of.compressions...) {
		d.fail(c, child(o.Field, "compression"), "compression %q must be one of %s for format %s", o.Compression, strings.Join(of.compressions, ", "), o.Format)
	}
	if o.Compression == "" {
		o.Compression = of.defaultCompression
	}
	if of.defaults != nil {
		of.defaults(d, on)
	}
}

func (d *decoder) ociDefaults(on *outputNode) {
	o := &on.out
	if o.Kind == "" {
		o.Kind = "rootfs"
	}
	if o.Layout == "" {
		o.Layout = "dir"
	}
	if o.Kind == "rootfs" && on.seen["from"] != nil {
		d.fail(on.seen["from"], child(o.Field, "from"), "an oci rootfs is made from the tree; from applies to kinds containerdisk and disk")
	}
	if o.Kind == "disk" {
		// The layer is the compressed raw as it is, under ORAS's empty
		// config: there is no layer codec, command or environment.
		for _, k := range []string{"compression", "entrypoint", "env", "labels"} {
			if n := on.seen[k]; n != nil {
				d.fail(n, child(o.Field, k), "%s does not apply to an oci disk artifact, which holds the compressed raw as it is", k)
			}
		}
		o.Compression = ""
	}
}

func (d *decoder) isoDefaults(on *outputNode) {
	o := &on.out
	if o.Boot != nil && o.Boot.Loader != "systemd-boot" {
		d.fail(on.seen["boot"], child(o.Field, "boot.loader"), "an iso boots by systemd-boot (and GRUB with bios: true), not %s", o.Boot.Loader)
	}
	if on.seen["from"] != nil && on.seen["compression"] != nil {
		d.fail(on.seen["compression"], child(o.Field, "compression"), "an iso made from a live output boots its initramfs; compression applies when it makes its own")
	}
}

func (d *decoder) vhdDefaults(on *outputNode) { d.outputType(on, "fixed", "dynamic") }

func (d *decoder) vmdkDefaults(on *outputNode) {
	d.outputType(on, "streamOptimized", "monolithicSparse")
}

// outputType checks a format's type against its set, the first of which
// is the default.
func (d *decoder) outputType(on *outputNode, set ...string) {
	o := &on.out
	if n := on.seen["type"]; n != nil && !d.failed(n) && !oneOf(o.Type, set...) {
		d.fail(d.resolveQuiet(n), child(o.Field, "type"), "type %q must be one of %s", o.Type, strings.Join(set, ", "))
	}
	if o.Type == "" {
		o.Type = set[0]
	}
}

// mib is the unit an OVF states memory in.
const mib = 1 << 20

func (d *decoder) ovaDefaults(on *outputNode) {
	o := &on.out
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	if on.seen["memory"] == nil {
		o.Memory = 4 << 30
	} else if m := on.seen["memory"]; !d.failed(m) && (o.Memory < mib || o.Memory%mib != 0) {
		d.fail(d.resolveQuiet(m), child(o.Field, "memory"), "memory must be a whole number of MiB, at least 1MiB")
	}
	if o.Firmware == "" {
		o.Firmware = "efi"
	}
	if o.Network == "" {
		o.Network = "VM Network"
	}
}

func (d *decoder) rawDefaults(on *outputNode) {
	o := &on.out
	if on.seen["partitions"] == nil {
		o.Partitions = []Partition{
			{Name: "esp", Type: "esp", Size: 256 << 20, Filesystem: "vfat"},
			{Name: "root", Type: "root", Filesystem: "ext4"},
		}
		if o.Boot != nil && o.Boot.BIOS {
			o.Partitions = append([]Partition{biosPartition}, o.Partitions...)
		}
	}
	d.checkPartitions(on)
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
	case count["usr"] > 1 || count["usr-verity"] > 1:
		d.fail(at, field, "a raw disk may have one usr and one usr-verity partition, got %d and %d", count["usr"], count["usr-verity"])
	case count["usr-verity"] == 1 && count["usr"] == 0:
		d.fail(at, field, "a usr-verity partition holds the hash tree of a usr partition, and there is none")
	case count["usr"] == 1 && (o.Boot == nil || o.Boot.Loader != "uki"):
		d.fail(at, field, "/usr on a partition of its own needs boot.loader uki, whose initramfs mounts it")
	}
	if o.Boot != nil && (o.Boot.Loader == "systemd-boot" || o.Boot.Loader == "shim" || o.Boot.Loader == "uki") && count["esp"] == 0 {
		d.fail(on.seen["boot"], child(o.Field, "boot.loader"), "%s needs a partition of type esp", o.Boot.Loader)
	}
	if o.Boot != nil && o.Boot.BIOS && count["bios"] == 0 {
		d.fail(on.seen["boot"], child(o.Field, "boot.bios"), "BIOS boot needs a partition of type bios (1MiB) for GRUB's core.img")
	}
}

var partitionTypes = []string{"esp", "root", "usr", "usr-verity", "xbootldr", "swap", "linux", "bios"}

// defaultFilesystem is each partition type's file system, and the only one it may have
// where the type fixes it.
var defaultFilesystem = map[string]string{
	"esp": "vfat", "root": "ext4", "usr": "ext4", "usr-verity": "none", "xbootldr": "vfat", "swap": "swap", "linux": "ext4", "bios": "none",
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
	want, ok := defaultFilesystem[p.Type]
	if !ok {
		return p
	}
	if p.Filesystem == "" {
		p.Filesystem = want
	}
	fixed := map[string]bool{"esp": true, "xbootldr": true, "swap": true, "bios": true, "usr-verity": true}
	if fixed[p.Type] && p.Filesystem != want && seen["filesystem"] != nil && !d.failed(seen["filesystem"]) {
		d.fail(seen["filesystem"], child(field, "filesystem"), "a partition of type %s has filesystem %s", p.Type, want)
	}
	if (p.Type == "root" || p.Type == "usr") && p.Filesystem != "ext4" && seen["filesystem"] != nil {
		d.fail(seen["filesystem"], child(field, "filesystem"), "the %s partition is ext4", p.Type)
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
		"loader": func(v *yaml.Node, f string) {
			b.Loader = d.enum(v, f, "loader", "systemd-boot", "shim", "uki", "grub", "none")
		},
		"cmdline":     func(v *yaml.Node, f string) { b.Cmdline = d.str(v, f) },
		"bios":        func(v *yaml.Node, f string) { b.BIOS = d.boolean(v, f) },
		"systemdBoot": func(v *yaml.Node, f string) { sb := d.boolean(v, f); b.SystemdBoot = &sb },
		"secureBoot": func(v *yaml.Node, f string) {
			var sb SecureBoot
			seen := d.mapping(v, f, map[string]handler{
				"key":  func(v *yaml.Node, f string) { sb.Key = d.hostPath(v, f) },
				"cert": func(v *yaml.Node, f string) { sb.Cert = d.hostPath(v, f) },
			})
			d.required(v, f, seen, "key", "cert")
			b.SecureBoot = &sb
		},
	})
	if seen != nil && b.BIOS && b.Loader != "systemd-boot" && b.Loader != "shim" {
		d.fail(seen["bios"], child(field, "bios"), biosLoaderMsg, b.Loader)
	}
	for _, k := range []string{"systemdBoot", "secureBoot"} {
		if seen != nil && seen[k] != nil && b.Loader != "uki" {
			d.fail(seen[k], child(field, k), "%s applies to loader uki, not %s", k, b.Loader)
		}
	}
	return b
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
		of := outputFormatNamed(o.Format)
		var from []string
		if of != nil {
			kind := ""
			if oneOf("kind", of.keys...) {
				kind = o.Kind
			}
			from = of.madeFrom[kind]
		}
		if len(from) == 0 {
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
		} else if !of.fromOptional {
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
	d.checkFirmware(ons, out)
	return out
}

func describeOutput(o *Output) string {
	if o.Format == FormatOCI {
		return fmt.Sprintf("oci kind %s", o.Kind)
	}
	return o.Format
}
