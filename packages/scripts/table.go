package scripts

import (
	"context"
	"fmt"
	"path"
	"slices"
	"strings"

	"mvdan.cc/sh/v3/interp"
)

// command is a built-in handler for one external command.
type command func(r *run, hc interp.HandlerContext, args []string) error

// handler is one line of the table: a command's base name and what runs
// in its place.
type handler struct {
	name string
	run  command
}

// table is every command a script may run, sorted by name (as busybox
// keeps its applets), so one binary search finds a handler and a test
// finds a table out of order or an entry no test case runs. A command
// that is not here fails as the image would fail it when the image lacks
// it, and stops the script as unhandled when the image has it. The
// stamp-* names are the rewrite's (rewrite.go, scripts.go's call): they
// stand for builtins that would see the host, and are never a path in the
// image.
//
// It is filled in init because run-parts, stamp-debconf and the image's
// own shell scripts run scripts, whose commands come back through the
// table: a package variable initialised with them would refer to itself,
// which Go refuses.
var table []handler

func init() {
	table = []handler{
		{"add-shell", cmdAddShell},
		{"addgroup", cmdAddgroup},
		{"adduser", cmdAdduser},
		{"augenrules", cmdAugenrules},
		{"awk", cmdAwk},
		{"basename", cmdBasename},
		{"cat", cmdCat},
		{"chgrp", cmdChown},
		{"chmod", cmdChmod},
		{"chown", cmdChown},
		{"chronyd", cmdChronydConfig},
		{"cmp", cmdCmp},
		{"cp", cmdCp},
		{"date", cmdDate},
		{"dbus-uuidgen", cmdDbusUUIDGen},
		{"deb-systemd-helper", cmdDebSystemdHelper},
		{"deb-systemd-invoke", cmdNoService},
		{"depmod", cmdDepmod},
		{"dirname", cmdDirname},
		{"dpkg", cmdDpkg},
		{"dpkg-divert", cmdDpkgDivert},
		{"dpkg-maintscript-helper", cmdMaintscriptHelper},
		{"dpkg-query", cmdDpkgQuery},
		{"dpkg-realpath", cmdDpkgRealpath},
		{"dpkg-statoverride", cmdDpkgStatoverride},
		{"dpkg-trigger", cmdTrue},
		{"egrep", cmdGrep},
		{"expr", cmdExpr},
		{"false", cmdFalse},
		{"fgrep", cmdGrep},
		{"find", cmdFind},
		{"getcap", cmdGetcap},
		{"getent", cmdGetent},
		{"grep", cmdGrep},
		{"groupadd", cmdGroupadd},
		{"head", cmdHead},
		{"id", cmdID},
		{"install", cmdInstall},
		{"invoke-rc.d", cmdNoService},
		{"ischroot", cmdIschroot},
		{"journalctl", cmdJournalctl},
		{"ldconfig", cmdLdconfig},
		{"linux-update-symlinks", cmdLinuxUpdateSymlinks},
		{"ln", cmdLn},
		{"locale-gen", cmdImageScript},
		{"ls", cmdLs},
		{"mawk", cmdAwk},
		{"mkdir", cmdMkdir},
		{"mktemp", cmdMktemp},
		{"mv", cmdMv},
		{"openssl", cmdOpenssl},
		{"pam-auth-update", cmdPamAuthUpdate},
		{"py3clean", cmdPy3clean},
		{"py3compile", cmdPy3compile},
		{"python3.11", cmdPython},
		{"python3.12", cmdPython},
		{"python3.13", cmdPython},
		{"readlink", cmdReadlink},
		{"remove-shell", cmdRemoveShell},
		{"rm", cmdRm},
		{"rmdir", cmdRmdir},
		{"run-parts", cmdRunParts},
		{"runit-helper", cmdImageScript},
		{"sed", cmdSed},
		{"seq", cmdSeq},
		{"shadowconfig", cmdShadowconfig},
		{"sleep", cmdTrue},
		{"sort", cmdSort},
		{"ssh-keygen", cmdSshKeygen},
		{"stamp-[", cmdTest},
		{"stamp-command-v", cmdCommandV},
		{"stamp-debconf", cmdDebconf},
		{"stamp-fd", cmdFd},
		{"stamp-filetest", cmdFileTest},
		{"stamp-procsubst", cmdProcSubst},
		{"stamp-pwd", cmdPwd},
		{"stamp-refuse", cmdRefuse},
		{"stamp-test", cmdTest},
		{"stamp-umask", cmdUmask},
		{"stamp-var", cmdVar},
		{"stat", cmdStat},
		{"systemctl", cmdSystemctl},
		{"systemd-hwdb", cmdSystemdHwdb},
		{"systemd-machine-id-setup", cmdMachineIDSetup},
		{"systemd-sysusers", cmdSysusers},
		{"systemd-tmpfiles", cmdSystemdTmpfiles},
		{"touch", cmdTouch},
		{"tr", cmdTr},
		{"true", cmdTrue},
		{"ucf", cmdUcf},
		{"ucfr", cmdUcfr},
		{"udevadm", cmdUdevadm},
		{"uname", cmdUname},
		{"uniq", cmdUniq},
		{"update-alternatives", cmdUpdateAlternatives},
		{"update-ca-certificates", cmdImageScript},
		{"update-locale", cmdUpdateLocale},
		{"update-rc.d", cmdUpdateRcd},
		{"update-shells", cmdUpdateShells},
		{"useradd", cmdUseradd},
		{"wc", cmdWc},
		{"which", cmdWhich},
		{"whoami", cmdWhoami},
	}
}

// lookup finds name's handler in the table.
func lookup(name string) (command, bool) {
	i, ok := slices.BinarySearchFunc(table, name, func(h handler, name string) int { return strings.Compare(h.name, name) })
	if !ok {
		return nil, false
	}
	return table[i].run, true
}

// exec runs a command through its handler; no program of the host ever runs.
func (r *run) exec(ctx context.Context, args []string) error {
	hc := interp.HandlerCtx(ctx)
	if hc.Stdin == nil {
		// Closed (<&-): a handler that reads it reads nothing.
		hc.Stdin = strings.NewReader("")
	}
	name := path.Base(args[0])
	if strings.HasPrefix(name, "stamp-") && strings.Contains(args[0], "/") {
		name = "" // stamp's own handlers are never a path in the image
	}
	h, ok := lookup(name)
	if !ok {
		return r.notHandled(hc, args)
	}
	if r.env.dispatched != nil {
		r.env.dispatched(name)
	}
	return h(r, hc, args)
}

// notHandled is a command no handler covers: missing from the image, it
// fails as it would there; present, it goes to Env.Defer or stops the
// script as unhandled.
func (r *run) notHandled(hc interp.HandlerContext, args []string) error {
	where, found := r.lookPath(hc.Dir, args[0])
	if !found {
		return r.notFound(hc, args[0])
	}
	if r.env.Defer != nil && r.env.Defer(r.s.Package, append([]string{where}, args[1:]...)) {
		r.logf("%s %s: %s deferred to first boot", r.s.Package, r.s.Name, strings.Join(args, " "))
		return nil
	}
	return r.unhandledCommand(args)
}

// notFound is the shell's answer to a command the image does not have.
func (r *run) notFound(hc interp.HandlerContext, name string) error {
	fmt.Fprintf(hc.Stderr, "%s: %s: not found\n", r.s.Name, name)
	return exit(127)
}

func exit(code int) error {
	if code == 0 {
		return nil
	}
	return interp.NewExitStatus(uint8(code))
}

func cmdTrue(*run, interp.HandlerContext, []string) error { return nil }

func cmdFalse(*run, interp.HandlerContext, []string) error { return exit(1) }

// splitFlags separates flags from operands; "--" ends the flags.
func splitFlags(args []string) (flags map[string]bool, ops []string) {
	flags = map[string]bool{}
	done := false
	for _, a := range args {
		switch {
		case done || !strings.HasPrefix(a, "-") || a == "-":
			ops = append(ops, a)
		case a == "--":
			done = true
		case strings.HasPrefix(a, "--"):
			flags[a] = true
		default:
			for _, c := range a[1:] {
				flags["-"+string(c)] = true
			}
		}
	}
	return flags, ops
}
