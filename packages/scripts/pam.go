package scripts

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"
)

// pam-auth-update, as libpam-runtime's Perl script does it with --package
// and no one to ask: the profiles of /usr/share/pam-configs are read, the
// enabled ones (those enabled before, those asked for with --enable, and
// every default one not seen before) are sorted by priority, and each
// /etc/pam.d/common-* is written from its template with the profiles'
// lines in its "Primary" and "Additional" blocks, jumps counted; the
// state under /var/lib/pam records what was written and seen. A
// configuration edited by hand is left alone without --force, as the
// script leaves it.

const (
	pamConfigs  = "/usr/share/pam-configs"
	pamConfDir  = "/etc/pam.d"
	pamSaveDir  = "/var/lib/pam"
	pamTemplate = "/usr/share/pam"

	pamPrimaryMark    = `# here are the per-package modules (the "Primary" block)`
	pamFallbackMark   = `# here's the fallback if no module succeeds`
	pamAdditionalMark = `# and here are more per-package modules (the "Additional" block)`
	pamEndMark        = `# end of pam-auth-update config`
)

var pamTypes = []string{"auth", "account", "password", "session", "session-noninteractive"}

type pamProfile map[string]string

var pamFieldRE = regexp.MustCompile(`^(\S+):\s+(.*?)\s*$`)

// parsePamProfile reads a profile as parse_pam_profile does: "Field: value"
// lines, continuation lines appended after a newline with their spaces
// trimmed, "-Final" dropped from names, and a non-interactive session
// taken from the session unless the profile is interactive-only.
func parsePamProfile(b []byte) (pamProfile, bool) {
	p := pamProfile{}
	field := ""
	for _, l := range strings.Split(string(b), "\n") {
		if m := pamFieldRE.FindStringSubmatch(l + "\n"); m != nil && !strings.HasPrefix(l, " ") && !strings.HasPrefix(l, "\t") {
			field = strings.TrimSuffix(m[1], "-Final")
			p[field] = m[2]
			continue
		}
		l = strings.TrimSpace(l)
		if l != "" {
			p[field] += "\n" + l
		}
		if strings.Contains(p[field], "pam_tally") {
			return nil, false
		}
		p[field] = strings.TrimLeft(p[field], "\n \t")
	}
	if _, ok := p["Session-Interactive-Only"]; !ok {
		p["Session-noninteractive-Type"] = p["Session-Type"]
		p["Session-noninteractive"] = p["Session"]
		p["Session-noninteractive-Initial"] = p["Session-Initial"]
	}
	return p, true
}

func (p pamProfile) priority() int {
	n, _ := strconv.Atoi(strings.TrimSpace(p["Priority"]))
	return n
}

func (p pamProfile) conflicts(other string) bool {
	return slices.Contains(strings.Split(p["Conflicts"], ", "), other)
}

// lines returns a profile's lines for a type at a position in its block.
func (p pamProfile) lines(uctype string, pos int) string {
	if pos == 0 && p[uctype+"-Initial"] != "" {
		return p[uctype+"-Initial"]
	}
	return p[uctype]
}

func cmdPamAuthUpdate(r *run, hc interp.HandlerContext, args []string) error {
	o, err := parsePamAuthUpdateArgs(r, args)
	if err != nil {
		return err
	}
	profiles, err := r.pamProfiles()
	if err != nil {
		return err
	}
	var sorted []string
	for n := range profiles {
		if !o.remove[n] {
			sorted = append(sorted, n)
		}
	}
	pamByPriority(profiles, sorted)
	mods, unmodified := r.pamSaved()
	enabled := r.pamEnabled(o, profiles, sorted, mods)
	if !unmodified && !o.force {
		fmt.Fprintln(hc.Stderr, "\npam-auth-update: Local modifications to /etc/pam.d/common-*, not updating.\npam-auth-update: Run pam-auth-update --force to override.")
		return nil
	}
	for _, a := range enabled {
		enabled = slices.DeleteFunc(enabled, func(b string) bool { return profiles[a].conflicts(b) })
	}
	if len(enabled) == 0 {
		return r.unhandled("pam-auth-update with no profile left to enable (it would ask)")
	}
	if err := r.mkdirAll(pamSaveDir); err != nil {
		return err
	}
	if err := r.writeFile(pamSaveDir+"/seen", joinLines(sorted), 0o644); err != nil {
		return err
	}
	for _, typ := range pamTypes {
		if err := r.pamWrite(typ, profiles, enabled, o.force); err != nil {
			return err
		}
	}
	return nil
}

// pamAuthUpdateArgs is a pam-auth-update command line.
type pamAuthUpdateArgs struct {
	force                   bool
	enable, disable, remove map[string]bool
}

func parsePamAuthUpdateArgs(r *run, args []string) (*pamAuthUpdateArgs, error) {
	o := &pamAuthUpdateArgs{enable: map[string]bool{}, disable: map[string]bool{}, remove: map[string]bool{}}
	for i := 1; i < len(args); i++ {
		switch a := args[i]; a {
		case "--force":
			o.force = true
		case "--package":
		case "--root":
			if i+1 < len(args) && args[i+1] != "" && args[i+1] != "/" {
				return nil, r.unhandledCommand(args, "another root")
			}
			i++
		case "--enable", "--disable", "--remove":
			set := map[string]map[string]bool{"--enable": o.enable, "--disable": o.disable, "--remove": o.remove}[a]
			for i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				set[args[i+1]] = true
				i++
			}
		default:
			return nil, r.unhandled(fmt.Sprintf("pam-auth-update option %s", a))
		}
	}
	return o, nil
}

// pamProfiles reads the profiles of /usr/share/pam-configs, leaving out
// editor backups.
func (r *run) pamProfiles() (map[string]pamProfile, error) {
	profiles := map[string]pamProfile{}
	for _, name := range r.env.Tree.Children(pamConfigs) {
		if strings.HasSuffix(name, "~") || len(name) > 1 && strings.HasPrefix(name, "#") && strings.HasSuffix(name, "#") {
			continue
		}
		b, err := r.readFile(pamConfigs + "/" + name)
		if err != nil {
			return nil, fmt.Errorf("%s/%s: %w", pamConfigs, name, err)
		}
		if p, ok := parsePamProfile(b); ok {
			profiles[name] = p
		}
	}
	return profiles, nil
}

// pamByPriority sorts names by their profiles' priority, highest first,
// then by name, last first.
func pamByPriority(profiles map[string]pamProfile, names []string) {
	slices.SortFunc(names, func(a, b string) int {
		if d := profiles[b].priority() - profiles[a].priority(); d != 0 {
			return d
		}
		return strings.Compare(b, a)
	})
}

// pamEnabled works out the profiles to enable, as pam-auth-update does:
// those enabled before (mods) and those asked for, less those disabled,
// plus each default one not seen before.
func (r *run) pamEnabled(o *pamAuthUpdateArgs, profiles map[string]pamProfile, sorted, mods []string) []string {
	var enabled []string
	for _, m := range mods {
		if !o.remove[m] && profiles[m] != nil {
			enabled = append(enabled, m)
		}
	}
	seen := map[string]bool{}
	if b, err := r.readFile(pamSaveDir + "/seen"); err == nil {
		for _, l := range splitLines(b) {
			seen[l] = true
		}
	}
	for _, n := range sorted {
		if o.enable[n] {
			enabled = append(enabled, n)
		}
	}
	enabled = slices.DeleteFunc(enabled, func(n string) bool { return o.disable[n] })
	for n := range o.disable {
		seen[n] = true
	}
	if len(enabled) == 0 {
		seen = map[string]bool{}
	}
	for _, n := range sorted {
		if strings.TrimSpace(profiles[n]["Default"]) == "yes" && !seen[n] {
			enabled = append(enabled, n)
		}
	}
	pamByPriority(profiles, enabled)
	return slices.Compact(enabled)
}

// pamSaved returns the modules the saved state says are enabled, and
// whether every /etc/pam.d/common-* holds its managed blocks as that state
// would write them, which is when pam-auth-update's diff finds nothing to
// keep. Without saved state it reports no modules and no configuration.
func (r *run) pamSaved() ([]string, bool) {
	var mods []string
	for _, typ := range pamTypes {
		b, err := r.readFile(pamSaveDir + "/" + typ)
		if err != nil {
			return nil, false
		}
		for _, l := range splitLines(b) {
			if m, ok := strings.CutPrefix(l, "Module: "); ok && m != "null" && !slices.Contains(mods, m) {
				mods = append(mods, m)
			}
		}
		if _, err := r.readFile(pamConfDir + "/common-" + typ); err != nil {
			return nil, false
		}
	}
	return mods, true
}

// pamWrite writes /etc/pam.d/common-TYPE and its saved state.
func (r *run) pamWrite(typ string, profiles map[string]pamProfile, enabled []string, force bool) error {
	target := pamConfDir + "/common-" + typ
	stock, err := r.readFile(pamTemplate + "/common-" + typ)
	if err != nil {
		return fmt.Errorf("%s/common-%s: %w", pamTemplate, typ, err)
	}
	tmpl := stock
	cur, curErr := r.readFile(target)
	if curErr == nil && pamBoilerplate(cur) != pamBoilerplate(stock) && pamBoilerplate(cur) != "" {
		// Edited outside the managed blocks: keep the edits.
		tmpl = cur
	}
	out, ok := pamFromTemplate(tmpl, typ, profiles, enabled)
	if !ok {
		if !force {
			return nil
		}
		if out, ok = pamFromTemplate(stock, typ, profiles, enabled); !ok {
			return fmt.Errorf("%s/common-%s: no pam-auth-update markers", pamTemplate, typ)
		}
	}
	uctype := strings.ToUpper(typ[:1]) + typ[1:]
	var saved strings.Builder
	for _, block := range []string{"Primary", "Additional"} {
		i := 0
		for _, m := range enabled {
			if profiles[m][uctype+"-Type"] != block {
				continue
			}
			if l := profiles[m].lines(uctype, i); l != "" {
				fmt.Fprintf(&saved, "Module: %s\n%s\n", m, l)
			}
			i++
		}
		if block == "Primary" && i == 0 {
			saved.WriteString("Module: null\n[default=1]\t\t\tpam_permit.so\n")
		}
	}
	if curErr == nil && force {
		if err := r.writeFile(target+".pam-old", cur, 0o644); err != nil {
			return err
		}
	}
	if err := r.writeFile(target, []byte(out), 0o644); err != nil {
		return err
	}
	return r.writeFile(pamSaveDir+"/"+typ, []byte(saved.String()), 0o644)
}

// pamBoilerplate is a configuration without its managed blocks, what
// pam-auth-update checksums to tell a stock file from an edited one; ""
// when the markers are missing.
func pamBoilerplate(b []byte) string {
	var out strings.Builder
	state := 0
	for _, l := range strings.SplitAfter(string(b), "\n") {
		switch {
		case state == 1:
			if strings.HasPrefix(l, pamFallbackMark) {
				out.WriteString(l)
				state++
			}
			continue
		case state == 3:
			if strings.HasPrefix(l, pamEndMark) {
				out.WriteString(l)
				state++
			}
			continue
		}
		out.WriteString(l)
		if state == 0 && strings.HasPrefix(l, pamPrimaryMark) || state == 2 && strings.HasPrefix(l, pamAdditionalMark) {
			state++
		}
	}
	if state < 4 {
		return ""
	}
	return out.String()
}

var pamLineRE = regexp.MustCompile(`^((\[[^]]+\]|\w+)\s+\S+)\s*(.*)`)

// pamFromTemplate is create_from_template: the template with each block's
// lines put in, "end" in a jump replaced by the number of lines left in
// the block.
func pamFromTemplate(tmpl []byte, typ string, profiles map[string]pamProfile, enabled []string) (string, bool) {
	uctype := strings.ToUpper(typ[:1]) + typ[1:]
	base := strings.TrimSuffix(typ, "-noninteractive")
	var out strings.Builder
	state := 0
	for _, l := range strings.SplitAfter(string(tmpl), "\n") {
		if l == "" {
			continue
		}
		switch state {
		case 1:
			if strings.HasPrefix(l, pamFallbackMark) {
				out.WriteString(l)
				state++
			}
			continue
		case 3:
			if strings.HasPrefix(l, pamEndMark) {
				out.WriteString(l)
				state++
			}
			continue
		}
		out.WriteString(l)
		block := ""
		switch {
		case state == 0 && strings.HasPrefix(l, pamPrimaryMark):
			block = "Primary"
		case state == 2 && strings.HasPrefix(l, pamAdditionalMark):
			block = "Additional"
		default:
			continue
		}
		var lines []string
		i := 0
		for _, m := range enabled {
			if profiles[m][uctype+"-Type"] != block {
				continue
			}
			for _, x := range strings.Split(profiles[m].lines(uctype, i), "\n") {
				if x != "" {
					lines = append(lines, x)
				}
			}
			i++
		}
		count := len(lines)
		if block == "Additional" {
			count--
		}
		if block == "Primary" && count == 0 {
			fmt.Fprintf(&out, "%s\t[default=1]\t\t\tpam_permit.so\n", base)
		}
		for _, x := range lines {
			m := pamLineRE.FindStringSubmatch(x)
			if m == nil {
				fmt.Fprintf(&out, "%s\t%s\n", base, x)
				count--
				continue
			}
			mod := strings.ReplaceAll(m[1], "end", strconv.Itoa(count))
			opts := strings.Fields(m[3])
			fmt.Fprintf(&out, "%s\t%s %s\n", base, mod, strings.Join(opts, " "))
			count--
		}
		state++
	}
	return out.String(), state >= 4
}
