package layers

import (
	"fmt"
	"slices"
	"strings"

	"github.com/stamp-dev/stamp/packages/dpkg"
	"github.com/stamp-dev/stamp/packages/ldcache"
)

// ldconfigTrigger is the one dpkg trigger processed offline. Packages that
// ship shared libraries declare "activate-noawait ldconfig"; libc-bin is
// interested in it, and when dpkg finishes a run that activated it,
// libc-bin's postinst runs ldconfig once. Offline, packages/ldcache writes
// the same /etc/ld.so.cache, under the same conditions: someone installed is
// interested (dpkg's record in /var/lib/dpkg/triggers, or a package of this
// run that declares the interest) and a package of this run activated it.
const ldconfigTrigger = "ldconfig"

func (l *Debs) processTriggers(env *Env, pkgs []*debPackage) error {
	interested := false
	if b, _, err := readTreeContent(env.Tree, "/var/lib/dpkg/triggers/"+ldconfigTrigger); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if name, _, _ := strings.Cut(strings.TrimSpace(line), "/"); name != "" {
				interested = true
			}
		}
	}
	activated := false
	for _, p := range pkgs {
		if p.state != dpkg.StateInstalled {
			continue
		}
		for _, d := range triggerDirectives(p.control.Files["triggers"]) {
			switch {
			case d[1] != ldconfigTrigger:
			case strings.HasPrefix(d[0], "interest"):
				interested = true
			case strings.HasPrefix(d[0], "activate"):
				activated = true
			}
		}
	}
	if !interested || !activated {
		return nil
	}
	cache, err := ldcache.Build(env.Tree, env.Arch)
	if err != nil {
		return fmt.Errorf("ldconfig trigger: %w", err)
	}
	env.Log.Debugf("%s: ldconfig trigger: wrote /etc/ld.so.cache (%d bytes)", env.Label, len(cache))
	return writeTreeFile(env, ldcache.CachePath, cache, 0o644, env.Origin("", "ldconfig trigger"))
}

// triggerDirectives reads a control "triggers" file: one directive and its
// trigger name per line, comments and blank lines skipped.
func triggerDirectives(b []byte) [][2]string {
	var out [][2]string
	for _, line := range strings.Split(string(b), "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) >= 2 {
			out = append(out, [2]string{f[0], f[1]})
		}
	}
	return out
}

// triggersDir is dpkg's trigger interest database.
const triggersDir = "/var/lib/dpkg/triggers"

// recordInterests writes the trigger interests of the packages of this
// run where dpkg keeps them, so that a dpkg run later in the image's life
// knows who awaits what: a file trigger as "PATH PKG" in triggers/File,
// an explicit one as "PKG" in triggers/NAME, "/noawait" appended for
// interest-noawait. Lines already there stay, in their order.
func recordInterests(env *Env, pkgs []*debPackage) error {
	adds := map[string][]string{}
	var files []string
	for _, p := range pkgs {
		name := p.pkg.Name
		if p.control.Paragraph.Get("Multi-Arch") == "same" {
			name += ":" + p.pkg.Arch
		}
		for _, d := range triggerDirectives(p.control.Files["triggers"]) {
			if !strings.HasPrefix(d[0], "interest") {
				continue
			}
			who := name
			if d[0] == "interest-noawait" {
				who += "/noawait"
			}
			file, line := d[1], who
			if strings.HasPrefix(d[1], "/") {
				file, line = "File", d[1]+" "+who
			}
			if adds[file] == nil {
				files = append(files, file)
			}
			adds[file] = append(adds[file], line)
		}
	}
	for _, f := range files {
		p := triggersDir + "/" + f
		old, _, err := readTreeContent(env.Tree, p)
		if err != nil {
			return err
		}
		lines := strings.Split(strings.TrimSuffix(string(old), "\n"), "\n")
		if len(old) == 0 {
			lines = nil
		}
		for _, l := range adds[f] {
			if !slices.Contains(lines, l) {
				lines = append(lines, l)
			}
		}
		if err := writeTreeFile(env, p, []byte(strings.Join(lines, "\n")+"\n"), 0o644, env.Origin("", "dpkg trigger interests")); err != nil {
			return err
		}
	}
	return nil
}
