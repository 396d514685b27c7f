package scripts

import (
	"fmt"
	"strings"

	"mvdan.cc/sh/v3/interp"
)

// cmdNoService stands for a policy-rc.d that forbids starting services, as
// in any image build: deb-systemd-invoke and invoke-rc.d do nothing.
func cmdNoService(r *run, _ interp.HandlerContext, args []string) error {
	r.logf("%s %s: not running %s (services are not started in an image build)", r.s.Package, r.s.Name, strings.Join(args, " "))
	return nil
}

// cmdUpdateRcd is init-system-helpers' update-rc.d without insserv: remove
// drops the rc links, defaults (and defaults-disabled) make S01/K01 links
// from the script's LSB header; the systemd half only reloads a running
// systemd, which an image build has not.
func cmdUpdateRcd(r *run, hc interp.HandlerContext, args []string) error {
	var rest []string
	for _, a := range args[1:] {
		if a != "-f" {
			rest = append(rest, a)
		}
	}
	if len(rest) < 2 {
		return exit(1)
	}
	if r.exists("/sbin/insserv") || r.exists("/usr/sbin/insserv") || r.exists("/sbin/openrc") {
		return r.unhandled(fmt.Sprintf("command %q with insserv or openrc in the tree", strings.Join(args, " ")))
	}
	name, action := rest[0], rest[1]
	links := func() []string {
		var out []string
		for _, lvl := range []string{"0", "1", "2", "3", "4", "5", "6", "S"} {
			dir := "/etc/rc" + lvl + ".d"
			for _, c := range r.env.Tree.Children(dir) {
				if len(c) > 3 && (c[0] == 'S' || c[0] == 'K') && isDigit(c[1]) && isDigit(c[2]) && c[3:] == name {
					out = append(out, dir+"/"+c)
				}
			}
		}
		return out
	}
	switch action {
	case "remove":
		for _, l := range links() {
			if err := r.env.Tree.Remove(l); err != nil {
				return err
			}
		}
		return nil
	case "defaults", "defaults-disabled":
		if len(links()) > 0 {
			return nil
		}
		b, err := r.readFile("/etc/init.d/" + name)
		if err != nil {
			fmt.Fprintf(hc.Stderr, "update-rc.d: error: unable to read /etc/init.d/%s\n", name)
			return exit(1)
		}
		start, stop := lsbLevels(string(b))
		kind := "S"
		if action == "defaults-disabled" {
			kind = "K"
		}
		for _, set := range []struct {
			kind   string
			levels []string
		}{{kind, start}, {"K", stop}} {
			for _, lvl := range set.levels {
				l := "/etc/rc" + lvl + ".d/" + set.kind + "01" + name
				if _, err := r.env.Tree.Lookup(l, false); err == nil {
					continue
				}
				if err := r.symlink("../init.d/"+name, l); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return r.unhandledCommand(args)
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// lsbLevels reads Default-Start and Default-Stop from an init script's
// LSB header, as update-rc.d's parse_def_start_stop does.
func lsbLevels(script string) (start, stop []string) {
	in := false
	for _, l := range strings.Split(script, "\n") {
		switch {
		case strings.TrimRight(l, " \t") == "### BEGIN INIT INFO":
			in = true
		case strings.TrimRight(l, " \t") == "### END INIT INFO":
			return start, stop
		case in && strings.HasPrefix(l, "# Default-Start:"):
			start = strings.Fields(strings.TrimPrefix(l, "# Default-Start:"))
		case in && strings.HasPrefix(l, "# Default-Stop:"):
			stop = strings.Fields(strings.TrimPrefix(l, "# Default-Stop:"))
		}
	}
	return start, stop
}

// cmdChronydConfig is chronyd -p: the directives of chrony.conf and of
// the confdir and sourcedir files it names, without comments, as chronyd
// prints its configuration. Running the daemon any other way is
// unhandled.
func cmdChronydConfig(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) != 2 || args[1] != "-p" {
		return r.unhandledCommand(args)
	}
	var print func(p string)
	print = func(p string) {
		b, err := r.readFile(p)
		if err != nil {
			return
		}
		for _, l := range lines(b) {
			l = strings.TrimSpace(l)
			if l == "" || strings.IndexByte("#;%!", l[0]) >= 0 {
				continue
			}
			f := strings.Fields(l)
			if (f[0] == "confdir" || f[0] == "sourcedir") && len(f) > 1 {
				suffix := ".conf"
				if f[0] == "sourcedir" {
					suffix = ".sources"
				}
				for _, d := range f[1:] {
					rd, err := r.env.Tree.Resolve(d, true)
					if err != nil {
						continue
					}
					for _, c := range r.env.Tree.Children(rd) {
						if strings.HasSuffix(c, suffix) {
							print(rd + "/" + c)
						}
					}
				}
			}
			fmt.Fprintln(hc.Stdout, strings.Join(f, " "))
		}
	}
	print("/etc/chrony/chrony.conf")
	return nil
}
