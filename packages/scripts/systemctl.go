package scripts

import (
	"fmt"
	"strings"

	"github.com/stamp-dev/stamp/packages/journalcatalog"
	"github.com/stamp-dev/stamp/rootfs"
	"mvdan.cc/sh/v3/interp"
)

func cmdSystemctl(r *run, hc interp.HandlerContext, args []string) error {
	var verb string
	var units []string
	for _, a := range args[1:] {
		switch {
		case strings.HasPrefix(a, "-"):
		case verb == "":
			verb = a
		default:
			units = append(units, a)
		}
	}
	switch verb {
	case "daemon-reload", "daemon-reexec", "start", "stop", "restart", "try-restart", "reload",
		"reload-or-restart", "try-reload-or-restart", "condrestart", "reset-failed":
		return nil
	case "is-active", "is-failed":
		return exit(3)
	case "is-system-running":
		fmt.Fprintln(hc.Stdout, "offline")
		return exit(1)
	case "enable", "disable", "mask", "unmask", "preset", "reenable":
		if r.env.Systemctl == nil {
			break
		}
		if err := r.env.Systemctl(r.ctx, verb, units); err != nil {
			return fmt.Errorf("%s %s: systemctl %s: %w", r.s.Package, r.s.Name, verb, err)
		}
		return nil
	}
	return r.unhandledCommand(args)
}

// cmdJournalctl is journalctl --update-catalog: the message catalog's
// database, written by packages/journalcatalog from the tree's catalog
// files as the image's journalctl writes it; no database when they hold no
// entry, as journalctl leaves it.
func cmdJournalctl(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) != 2 || args[1] != "--update-catalog" {
		return r.unhandledCommand(args)
	}
	t := r.env.Tree
	if _, ok := r.lookPath("/", "journalctl"); !ok {
		return r.notFound(hc, "journalctl")
	}
	paths := journalcatalog.Choose(func(dir string) []string {
		e, err := t.Lookup(dir, true)
		if err != nil || e.Type != rootfs.TypeDir {
			return nil
		}
		return t.Children(e.Path)
	})
	var files []journalcatalog.File
	for _, p := range paths {
		b, err := r.readFile(p)
		if err != nil {
			fmt.Fprintf(hc.Stderr, "Failed to import file '%s': %v\n", p, err)
			return exit(1)
		}
		files = append(files, journalcatalog.File{Path: p, Data: b})
	}
	db, err := journalcatalog.Build(files)
	if err != nil {
		fmt.Fprintf(hc.Stderr, "Failed to import file: %v\n", err)
		return exit(1)
	}
	if db == nil {
		fmt.Fprintln(hc.Stderr, "No items in catalog.")
		return nil
	}
	return r.createFile(journalcatalog.Database, db, 0o644)
}
