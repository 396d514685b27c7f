package scripts

import (
	"bytes"
	"cmp"
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/packages/dpkg"
)

// dpkgList is dpkg-query -l (and dpkg -l) written to a pipe, as dpkg
// 1.21 writes it: the legend, then one line per matching package, columns
// as wide as the widest entry (at least 14, 12, 12 and 33). libc6's
// postinst reads versions out of it with sed, so the layout matters.
func (r *run) dpkgList(hc interp.HandlerContext, pats []string) error {
	// No database reads as an empty one, as it does to statusOf.
	b, _ := r.readFile(dpkg.StatusPath)
	var all []*deb.Paragraph
	if len(b) > 0 {
		var err error
		if all, err = deb.ParseControl(bytes.NewReader(b)); err != nil {
			return fmt.Errorf("%s: %w", dpkg.StatusPath, err)
		}
	}
	found := make([]bool, len(pats))
	var rows []*deb.Paragraph
	for _, p := range all {
		if len(pats) == 0 {
			// Without a pattern dpkg lists what is or was installed.
			if st := strings.Fields(p.Get("Status")); len(st) == 3 && st[2] == "not-installed" {
				continue
			}
			rows = append(rows, p)
			continue
		}
		for i, pat := range pats {
			name, _, _ := strings.Cut(pat, ":")
			if ok, _ := path.Match(name, p.Get("Package")); ok {
				found[i] = true
				rows = append(rows, p)
				break
			}
		}
	}
	code := 0
	for i, ok := range found {
		if !ok {
			fmt.Fprintf(hc.Stderr, "dpkg-query: no packages found matching %s\n", pats[i])
			code = 1
		}
	}
	if len(rows) == 0 {
		return exit(code)
	}
	slices.SortStableFunc(rows, func(a, b *deb.Paragraph) int {
		return cmp.Or(strings.Compare(a.Get("Package"), b.Get("Package")), strings.Compare(a.Get("Architecture"), b.Get("Architecture")))
	})
	type row struct{ abbrev, name, version, arch, desc string }
	out := make([]row, len(rows))
	nw, vw, aw, dw := 14, 12, 12, 33
	for i, p := range rows {
		name := p.Get("Package")
		// Qualified where the bare name could mean another package, as
		// dpkg's nonambiguous names are.
		if a := p.Get("Architecture"); p.Get("Multi-Arch") == "same" || a != "all" && a != r.env.Arch {
			name += ":" + p.Get("Architecture")
		}
		desc, _, _ := strings.Cut(p.Get("Description"), "\n")
		out[i] = row{statusAbbrev(p.Get("Status")), name, p.Get("Version"), p.Get("Architecture"), desc}
		nw = max(nw, utf8.RuneCountInString(name))
		vw = max(vw, utf8.RuneCountInString(out[i].version))
		aw = max(aw, utf8.RuneCountInString(out[i].arch))
		dw = max(dw, utf8.RuneCountInString(desc))
	}
	w := hc.Stdout
	fmt.Fprint(w, "Desired=Unknown/Install/Remove/Purge/Hold\n"+
		"| Status=Not/Inst/Conf-files/Unpacked/halF-conf/Half-inst/trig-aWait/Trig-pend\n"+
		"|/ Err?=(none)/Reinst-required (Status,Err: uppercase=bad)\n")
	fmt.Fprintf(w, "||/ %-*s %-*s %-*s %s\n", nw, "Name", vw, "Version", aw, "Architecture", "Description")
	fmt.Fprintf(w, "+++-%s-%s-%s-%s\n", strings.Repeat("=", nw), strings.Repeat("=", vw), strings.Repeat("=", aw), strings.Repeat("=", dw))
	for _, o := range out {
		fmt.Fprintf(w, "%s %-*s %-*s %-*s %s\n", o.abbrev, nw, o.name, vw, o.version, aw, o.arch, o.desc)
	}
	return exit(code)
}

// statusAbbrev is the three letters dpkg-query -l shows for a Status
// field: want, status and error flag (a space when there is none).
func statusAbbrev(status string) string {
	f := strings.Fields(status)
	for len(f) < 3 {
		f = append(f, "")
	}
	want := map[string]byte{"unknown": 'u', "install": 'i', "hold": 'h', "deinstall": 'r', "purge": 'p'}
	stat := map[string]byte{"not-installed": 'n', "config-files": 'c', "half-installed": 'H', "unpacked": 'U',
		"half-configured": 'F', "triggers-awaited": 'W', "triggers-pending": 't', "installed": 'i'}
	eflag := map[string]byte{"ok": ' ', "reinstreq": 'R'}
	pick := func(m map[string]byte, k string) byte {
		if c, ok := m[k]; ok {
			return c
		}
		return '?'
	}
	return string([]byte{pick(want, f[0]), pick(stat, f[2]), pick(eflag, f[1])})
}

// cmdDpkgRealpath is dpkg-realpath: the canonical path of a file in the
// image, symlinks resolved inside it (DPKG_ROOT is the image's root here).
func cmdDpkgRealpath(r *run, hc interp.HandlerContext, args []string) error {
	var ops []string
	zero := false
	for i := 1; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-z" || a == "--zero":
			zero = true
		case a == "--root" && i+1 < len(args):
			i++ // the image is the root
		case strings.HasPrefix(a, "--root="):
		case strings.HasPrefix(a, "-") && a != "-":
			return r.unhandled(fmt.Sprintf("dpkg-realpath option %s", a))
		default:
			ops = append(ops, a)
		}
	}
	if len(ops) != 1 {
		return r.unhandledCommand(args)
	}
	rp, err := r.env.Tree.Resolve(r.treePath(hc.Dir, ops[0]), true)
	if err != nil {
		fmt.Fprintf(hc.Stderr, "dpkg-realpath: %s: %v\n", ops[0], err)
		return exit(1)
	}
	end := "\n"
	if zero {
		end = "\x00"
	}
	fmt.Fprint(hc.Stdout, rp+end)
	return nil
}
