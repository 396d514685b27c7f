package scripts

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
	"mvdan.cc/sh/v3/interp"
)

// cmdSshKeygen covers openssh-server's host keys: ssh-keygen -q -f FILE
// -N "" -t TYPE [-b BITS], then ssh-keygen -l -f FILE.pub. Host keys are
// machine state: the seal would remove them from every output, and each
// machine makes its own on first boot (cloud-init's ssh module, or a unit
// running ssh-keygen -A), so none is made here and no program of the image
// runs; the log says so. The fingerprint of a key not made is not shown.
func cmdSshKeygen(r *run, hc interp.HandlerContext, args []string) error {
	var file, typ string
	list, pass := false, false
	for i := 1; i < len(args); i++ {
		a := args[i]
		val := func() string {
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch a {
		case "-q":
		case "-l":
			list = true
		case "-f":
			file = val()
		case "-t":
			typ = val()
		case "-b", "-C":
			val()
		case "-N":
			if val() != "" {
				return r.unhandled("ssh-keygen with a passphrase")
			}
			pass = true
		default:
			return r.unhandledCommand(args)
		}
	}
	if file == "" || list == (typ != "") || !list && !pass {
		return r.unhandledCommand(args)
	}
	if _, ok := r.lookPath("/", "ssh-keygen"); !ok {
		return r.notFound(hc, "ssh-keygen")
	}
	p := r.treePath(hc.Dir, file)
	if list {
		if r.env.skippedKey(strings.TrimSuffix(p, ".pub")) {
			return nil
		}
		return r.unhandledCommand(args, "it shows a key the build did not skip")
	}
	r.env.skipKey(p)
	r.logf("%s %s: not making the SSH host key %s (%s): host keys are each machine's own, made on its first boot", r.s.Package, r.s.Name, p, typ)
	return nil
}

// skipKey records an SSH host key the build did not make.
func (e *Env) skipKey(p string) {
	if e.skippedKeys == nil {
		e.skippedKeys = map[string]bool{}
	}
	e.skippedKeys[p] = true
}

// skippedKey reports whether the key at p was one not made.
func (e *Env) skippedKey(p string) bool { return e.skippedKeys[p] }

var machineIDRE = regexp.MustCompile(`^[0-9a-f]{32}\n?$`)

// cmdMachineIDSetup is systemd-machine-id-setup in a tree that is not
// booted: a valid /etc/machine-id stays; otherwise a random one is made,
// as systemd does. The seal empties it in every output, so each machine
// gets its own on first boot.
func cmdMachineIDSetup(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) > 1 {
		return r.unhandledCommand(args)
	}
	const p = "/etc/machine-id"
	if b, err := r.readFile(p); err == nil && machineIDRE.Match(b) {
		return nil
	}
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		return err
	}
	id[6] = id[6]&0x0f | 0x40
	id[8] = id[8]&0x3f | 0x80
	fmt.Fprintln(hc.Stdout, "Initializing machine ID from random generator.")
	if err := r.writeFile(p, []byte(hex.EncodeToString(id[:])+"\n"), 0o444); err != nil {
		return err
	}
	rp, err := r.env.Tree.Resolve(p, true)
	if err != nil {
		return err
	}
	return r.env.Tree.Update(rp, func(in *rootfs.Inode) { in.Perm = 0o444 })
}

// cmdDbusUUIDGen is dbus-uuidgen --ensure[=FILE], which dbus-daemon's
// postinst runs: the file (D-Bus's machine ID, /var/lib/dbus/machine-id by
// default) is left alone when it holds a valid ID; otherwise, as dbus does
// for the default file, it takes /etc/machine-id's ID when that is valid,
// and a random one when not. The seal removes the file from every output,
// so a booted node's D-Bus reads systemd's machine ID.
func cmdDbusUUIDGen(r *run, hc interp.HandlerContext, args []string) error {
	p, custom := "/var/lib/dbus/machine-id", false
	switch {
	case len(args) == 2 && args[1] == "--ensure":
	case len(args) == 2 && strings.HasPrefix(args[1], "--ensure="):
		p, custom = strings.TrimPrefix(args[1], "--ensure="), true
	default:
		return r.unhandledCommand(args)
	}
	if b, err := r.readFile(p); err == nil && machineIDRE.Match(b) {
		return nil
	}
	id := ""
	if b, err := r.readFile("/etc/machine-id"); err == nil && machineIDRE.Match(b) && !custom {
		id = strings.TrimSpace(string(b))
	} else {
		var raw [16]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return err
		}
		id = hex.EncodeToString(raw[:])
	}
	return r.writeFile(p, []byte(id+"\n"), 0o644)
}
