package scripts

import (
	"fmt"
	"strings"

	"github.com/stamp-dev/stamp/packages/deb"
	"mvdan.cc/sh/v3/interp"
)

func cmdDpkg(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) < 2 {
		return r.unhandled("dpkg without arguments")
	}
	switch args[1] {
	case "--compare-versions":
		if len(args) != 5 {
			return exit(2)
		}
		ok, err := compareVersions(args[2], args[3], args[4])
		if err != nil {
			fmt.Fprintln(hc.Stderr, "dpkg:", err)
			return exit(2)
		}
		if ok {
			return nil
		}
		return exit(1)
	case "--print-architecture":
		fmt.Fprintln(hc.Stdout, r.env.Arch)
		return nil
	case "-L", "--listfiles", "-s", "--status":
		return r.dpkgQuery(hc, args[1], args[2:])
	case "-S", "--search":
		return r.dpkgSearch(hc, args[2:])
	case "-l", "--list":
		return r.dpkgList(hc, args[2:])
	case "--assert-support-predepends", "--assert-working-epoch", "--assert-long-filenames",
		"--assert-multi-conrep", "--assert-multi-arch", "--assert-versioned-provides",
		"--assert-protected-field":
		return nil
	}
	return r.unhandledCommand(args)
}

// compareVersions is dpkg --compare-versions, with the -nl operators that
// take an empty version as later than any other.
func compareVersions(a, op, b string) (bool, error) {
	nl := strings.HasSuffix(op, "-nl")
	op = strings.TrimSuffix(op, "-nl")
	var c int
	switch {
	case a == "" && b == "":
		c = 0
	case a == "":
		c = -1
		if nl {
			c = 1
		}
	case b == "":
		c = 1
		if nl {
			c = -1
		}
	default:
		for _, v := range []string{a, b} {
			if _, err := deb.ParseVersion(v); err != nil {
				return false, err
			}
		}
		c = deb.CompareVersions(a, b)
	}
	switch op {
	case "lt", "<<", "<":
		return c < 0, nil
	case "le", "<=":
		return c <= 0, nil
	case "eq", "=":
		return c == 0, nil
	case "ne":
		return c != 0, nil
	case "ge", ">=":
		return c >= 0, nil
	case "gt", ">>", ">":
		return c > 0, nil
	}
	return false, fmt.Errorf("unknown operator %q", op)
}

// cmdMaintscriptHelper is dpkg-maintscript-helper. Every command acts only
// on upgrades from older versions; on a fresh install (preinst install,
// postinst configure with no old version) it does nothing.
func cmdMaintscriptHelper(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) >= 2 && args[1] == "supports" {
		return nil
	}
	var script []string
	for i, a := range args {
		if a == "--" {
			script = args[i+1:]
			break
		}
	}
	fresh := len(script) == 0 || (script[0] == "install" || script[0] == "configure") && (len(script) < 2 || script[1] == "")
	if fresh {
		return nil
	}
	return r.unhandledCommand(args)
}
