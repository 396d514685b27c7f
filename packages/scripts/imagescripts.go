package scripts

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
	"mvdan.cc/sh/v3/interp"
)

// Shell scripts of the image that maintainer scripts run (run-parts'
// directories, runit-helper, locale-gen, update-ca-certificates) are
// interpreted as the maintainer script is: their own logic runs as
// written and every command they run comes back through the table.

// cmdImageScript interprets a shell script of the image (runit-helper,
// locale-gen) as a maintainer script is interpreted: its own logic runs
// as written and every command it runs goes through the handlers.
func cmdImageScript(r *run, hc interp.HandlerContext, args []string) error {
	where, ok := r.lookPath(hc.Dir, args[0])
	if !ok {
		return r.notFound(hc, args[0])
	}
	body, err := r.readFile(r.treePath(hc.Dir, where))
	if err != nil {
		return err
	}
	return r.interpretImageScript(hc, where, body, args[1:])
}

// interpretImageScript is the one way a handler runs a shell script of
// the image: interpreted as a command of this script, named after it and
// the script's path in the image, with this script's exported variables.
func (r *run) interpretImageScript(hc interp.HandlerContext, where string, body []byte, args []string) error {
	return r.nested(r.ctx, hc, Script{Package: r.s.Package, Version: r.s.Version, Name: r.s.Name + ": " + where, Body: body}, args)
}

var runPartsName = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// cmdRunParts is debianutils' run-parts: every executable in the directory
// whose name is made of letters, digits, _ and -, in name order, each
// interpreted like a maintainer script with the --arg arguments.
func cmdRunParts(r *run, hc interp.HandlerContext, args []string) error {
	var runArgs []string
	exitOnError, report, test := false, false, false
	var dir string
	for i := 1; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--exit-on-error":
			exitOnError = true
		case a == "--report" || a == "-v" || a == "--verbose":
			report = true
		case a == "--test":
			test = true
		case strings.HasPrefix(a, "--arg="):
			runArgs = append(runArgs, strings.TrimPrefix(a, "--arg="))
		case (a == "-a" || a == "--arg") && i+1 < len(args):
			runArgs = append(runArgs, args[i+1])
			i++
		case a == "--":
			if i+1 < len(args) {
				dir = args[i+1]
			}
			i = len(args)
		case strings.HasPrefix(a, "-"):
			return r.unhandled(fmt.Sprintf("run-parts option %q", a))
		default:
			dir = a
		}
	}
	if dir == "" {
		fmt.Fprintln(hc.Stderr, "run-parts: missing operand")
		return exit(1)
	}
	t := r.env.Tree
	rd, err := t.Resolve(r.treePath(hc.Dir, dir), true)
	if err != nil {
		return err
	}
	if e := t.Get(rd); e == nil || e.Type != rootfs.TypeDir {
		fmt.Fprintf(hc.Stderr, "run-parts: failed to open directory %s: No such file or directory\n", dir)
		return exit(1)
	}
	var failed uint8
	for _, name := range t.Children(rd) {
		if !runPartsName.MatchString(name) {
			continue
		}
		e, err := t.Lookup(rd+"/"+name, true)
		if err != nil || e.Type != rootfs.TypeRegular || e.Perm&0o111 == 0 {
			continue
		}
		if test {
			fmt.Fprintf(hc.Stdout, "%s/%s\n", strings.TrimRight(dir, "/"), name)
			continue
		}
		body, err := r.readFile(e.Path)
		if err != nil {
			return err
		}
		if report {
			fmt.Fprintf(hc.Stdout, "%s/%s:\n", strings.TrimRight(dir, "/"), name)
		}
		err = r.interpretImageScript(hc, rd+"/"+name, body, runArgs)
		var se *ScriptError
		switch {
		case err == nil:
		case errors.As(err, &se):
			fmt.Fprintf(hc.Stderr, "run-parts: %s/%s exited with return code %d\n", dir, name, se.Status)
			failed = se.Status
			if exitOnError {
				return exit(int(se.Status))
			}
		default:
			return err
		}
	}
	if failed != 0 {
		return exit(1)
	}
	return nil
}
