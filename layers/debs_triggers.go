package layers

import (
	"fmt"
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
