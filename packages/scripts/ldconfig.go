package scripts

import (
	"fmt"
	"strings"

	"github.com/stamp-dev/stamp/packages/ldcache"
	"mvdan.cc/sh/v3/interp"
)

// cmdLdconfig writes /etc/ld.so.cache as the image's ldconfig would, without
// running it. -r / (libc-bin's postinst passes "$DPKG_ROOT/") is the tree
// itself; -p, another root, cache or configuration ask for something else.
func cmdLdconfig(r *run, hc interp.HandlerContext, args []string) error {
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-r" && i+1 < len(args) && (args[i+1] == "/" || args[i+1] == ""):
			i++
		case a == "-p" || a == "--print-cache" || strings.HasPrefix(a, "-r") || strings.HasPrefix(a, "-C") || strings.HasPrefix(a, "-f"):
			return r.unhandledCommand(args)
		}
	}
	if _, found := r.lookPath("/", "ldconfig"); !found {
		return r.notFound(hc, "ldconfig")
	}
	b, err := ldcache.Build(r.env.Tree, r.env.Arch)
	if err != nil {
		return fmt.Errorf("ldconfig: %w", err)
	}
	return r.writeFile(ldcache.CachePath, b, 0o644)
}
