package scripts

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs"
)

// diversionsPath is dpkg's diversion database: three lines per diversion,
// the diverted path, where it goes, and the package that owns it (":" for
// a local diversion).
const diversionsPath = "/var/lib/dpkg/diversions"

type diversion struct{ from, to, pkg string }

func (d diversion) String() string {
	if d.pkg == ":" {
		return fmt.Sprintf("local diversion of %s to %s", d.from, d.to)
	}
	return fmt.Sprintf("diversion of %s to %s by %s", d.from, d.to, d.pkg)
}

// describe names a diversion as asked for, where the target may be
// missing, as dpkg-divert's messages do.
func (d diversion) describe() string {
	s := "diversion of " + d.from
	if d.to != "" {
		s += " to " + d.to
	}
	if d.pkg == ":" {
		return "local " + s
	}
	return s + " by " + d.pkg
}

func (r *run) diversions() ([]diversion, error) {
	b, err := r.readFile(diversionsPath)
	if err != nil {
		return nil, nil
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines)%3 != 0 {
		return nil, fmt.Errorf("%s: %d lines, not three per diversion", diversionsPath, len(lines))
	}
	var out []diversion
	for i := 0; i+2 < len(lines); i += 3 {
		out = append(out, diversion{lines[i], lines[i+1], lines[i+2]})
	}
	return out, nil
}

// writeDiversions writes the database in dpkg-divert's order: that of
// dpkg's file name hash table, bucket by bucket, the bucket being the
// FNV-1a hash of the path without its leading slashes modulo 262139.
func (r *run) writeDiversions(ds []diversion) error {
	slices.SortStableFunc(ds, func(a, b diversion) int { return cmp.Compare(dpkgHashBin(a.from), dpkgHashBin(b.from)) })
	var b strings.Builder
	for _, d := range ds {
		fmt.Fprintf(&b, "%s\n%s\n%s\n", d.from, d.to, d.pkg)
	}
	if r.env.Tree.Get(diversionsPath) == nil {
		// dpkg-divert makes the database 0644.
		if err := r.writeFile(diversionsPath, nil, 0o644); err != nil {
			return err
		}
	}
	return r.writeFile(diversionsPath, []byte(b.String()), 0o644)
}

// dpkgHashBin is the bucket of dpkg's file name hash table (lib/dpkg's
// fsys hash: FNV-1a, 262139 buckets) that a path falls in.
func dpkgHashBin(p string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(strings.TrimLeft(p, "/")))
	return h.Sum32() % 262139
}

// cmdDpkgDivert is dpkg-divert's --add, --remove, --list, --listpackage
// and --truename on the tree's diversion database, with --rename moving
// the diverted file as dpkg-divert does.
func cmdDpkgDivert(r *run, hc interp.HandlerContext, args []string) error {
	o, err := parseDivertArgs(r, args)
	if err != nil {
		return err
	}
	ds, err := r.diversions()
	if err != nil {
		return err
	}
	switch o.action {
	case "--list", "--listpackage", "--truename":
		divertQuery(hc, o, ds)
		return nil
	}
	file := o.files[0]
	if !strings.HasPrefix(file, "/") {
		fmt.Fprintf(hc.Stderr, "dpkg-divert: error: filename \"%s\" is not absolute\n", file)
		return exit(2)
	}
	if o.pkg == "" {
		o.pkg = ":"
	}
	if o.action == "--remove" {
		return r.divertRemove(hc, o, ds)
	}
	return r.divertAdd(hc, o, ds)
}

// divertArgs is a dpkg-divert command line.
type divertArgs struct {
	action, pkg, to string
	rename, quiet   bool
	files           []string
}

func parseDivertArgs(r *run, args []string) (*divertArgs, error) {
	o := &divertArgs{}
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--add" || a == "--remove" || a == "--list" || a == "--listpackage" || a == "--truename":
			o.action = a
		case (a == "--package" || a == "--divert" || a == "--admindir" || a == "--instdir" || a == "--root") && i+1 < len(args):
			switch a {
			case "--package":
				o.pkg = args[i+1]
			case "--divert":
				o.to = args[i+1]
			case "--admindir", "--instdir", "--root":
				if args[i+1] != "" && args[i+1] != "/" && args[i+1] != "/var/lib/dpkg" {
					return nil, r.unhandledCommand(args, "another root")
				}
			}
			i++
		case a == "--local":
			o.pkg = ":"
		case a == "--rename":
			o.rename = true
		case a == "--no-rename":
			o.rename = false
		case a == "--quiet":
			o.quiet = true
		case strings.HasPrefix(a, "-"):
			return nil, r.unhandled(fmt.Sprintf("dpkg-divert option %s", a))
		default:
			o.files = append(o.files, a)
		}
	}
	if o.action == "" {
		o.action = "--add"
	}
	if o.action != "--list" && len(o.files) != 1 {
		return nil, r.unhandledCommand(args)
	}
	return o, nil
}

// say prints what dpkg-divert says unless --quiet.
func (o *divertArgs) say(hc interp.HandlerContext, format string, a ...any) {
	if !o.quiet {
		fmt.Fprintf(hc.Stdout, format, a...)
	}
}

// findDiversion is the index of the diversion of f, or -1.
func findDiversion(ds []diversion, f string) int {
	for i, d := range ds {
		if d.from == f {
			return i
		}
	}
	return -1
}

// divertQuery answers --list, --listpackage and --truename.
func divertQuery(hc interp.HandlerContext, o *divertArgs, ds []diversion) {
	switch o.action {
	case "--list":
		for _, d := range ds {
			if len(o.files) == 0 || rootfs.Match(o.files[0], d.from) {
				fmt.Fprintln(hc.Stdout, d)
			}
		}
	case "--listpackage":
		if i := findDiversion(ds, o.files[0]); i >= 0 {
			if ds[i].pkg == ":" {
				fmt.Fprintln(hc.Stdout, "LOCAL")
			} else {
				fmt.Fprintln(hc.Stdout, ds[i].pkg)
			}
		}
	case "--truename":
		if i := findDiversion(ds, o.files[0]); i >= 0 {
			fmt.Fprintln(hc.Stdout, ds[i].to)
		} else {
			fmt.Fprintln(hc.Stdout, o.files[0])
		}
	}
}

// divertRemove is --remove: the package's diversion of the file goes,
// and with --rename the diverted file comes back.
func (r *run) divertRemove(hc interp.HandlerContext, o *divertArgs, ds []diversion) error {
	file := o.files[0]
	i := findDiversion(ds, file)
	if i < 0 {
		asked := diversion{from: file, to: o.to, pkg: o.pkg}
		o.say(hc, "No diversion '%s', none removed.\n", asked.describe())
		return nil
	}
	d := ds[i]
	if d.pkg != o.pkg || o.to != "" && d.to != o.to {
		fmt.Fprintf(hc.Stderr, "dpkg-divert: error: mismatch on package\n  when removing '%s'\n  found '%s'\n", file, d)
		return exit(2)
	}
	if o.rename {
		if err := r.renameIfThere(hc.Dir, d.to, d.from); err != nil {
			return err
		}
	}
	o.say(hc, "Removing '%s'\n", d)
	return r.writeDiversions(append(ds[:i:i], ds[i+1:]...))
}

// divertAdd is --add: a new diversion (the same one again is left), and
// with --rename the file moves to where it is diverted.
func (r *run) divertAdd(hc interp.HandlerContext, o *divertArgs, ds []diversion) error {
	file, to := o.files[0], o.to
	if to == "" {
		to = file + ".distrib"
	}
	d := diversion{file, to, o.pkg}
	if i := findDiversion(ds, file); i >= 0 {
		if ds[i] == d {
			o.say(hc, "Leaving '%s'\n", d)
			return nil
		}
		fmt.Fprintf(hc.Stderr, "dpkg-divert: error: '%s' clashes with '%s'\n", d, ds[i])
		return exit(2)
	}
	if o.rename {
		if err := r.renameIfThere(hc.Dir, file, to); err != nil {
			return err
		}
	}
	o.say(hc, "Adding '%s'\n", d)
	return r.writeDiversions(append(ds, d))
}

// renameIfThere moves from to to in the tree when from exists and to does
// not, as dpkg-divert --rename does.
func (r *run) renameIfThere(cwd, from, to string) error {
	t := r.env.Tree
	src, err := t.Lookup(r.treePath(cwd, from), false)
	if err != nil {
		return nil
	}
	if _, err := t.Lookup(r.treePath(cwd, to), false); err == nil {
		return nil
	}
	if src.Type == rootfs.TypeDir {
		return r.unhandled(fmt.Sprintf("dpkg-divert --rename of the directory %s", from))
	}
	if err := r.copyEntry(src, r.treePath(cwd, to), true); err != nil {
		return err
	}
	return t.Remove(src.Path)
}
