package scripts

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"
)

func (r *run) needAccounts(args []string) error {
	if r.env.AddUser == nil || r.env.AddGroup == nil {
		return r.unhandled(fmt.Sprintf("command %q", strings.Join(args, " ")))
	}
	return nil
}

// adduserConf reads a numeric setting of /etc/adduser.conf.
func (r *run) adduserConf(key string, def uint32) uint32 {
	b, err := r.readFile("/etc/adduser.conf")
	if err != nil {
		return def
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if ok && strings.TrimSpace(k) == key {
			if n, err := strconv.ParseUint(strings.Trim(strings.TrimSpace(v), `"`), 10, 32); err == nil {
				return uint32(n)
			}
		}
	}
	return def
}

// firstFree is the lowest id in [lo, hi] no record of db uses, as adduser
// allocates system ids (upwards, unlike useradd -r).
func (r *run) firstFree(db string, lo, hi uint32) (uint32, error) {
	b, _ := r.readFile(db)
	used := map[uint32]bool{}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Split(l, ":")
		if len(f) > 2 {
			if n, err := strconv.ParseUint(f[2], 10, 32); err == nil {
				used[uint32(n)] = true
			}
		}
	}
	for id := lo; id <= hi; id++ {
		if !used[id] {
			return id, nil
		}
	}
	return 0, fmt.Errorf("no free id in %d-%d in %s", lo, hi, db)
}

// adduserArgs parses Debian adduser/addgroup options.
type adduserArgs struct {
	system, group, noCreateHome bool
	home, shell, ingroup, gecos string
	uid, gid                    *uint32
	names                       []string
}

func parseAdduser(r *run, args []string) (*adduserArgs, error) {
	a := &adduserArgs{}
	for i := 1; i < len(args); i++ {
		v := args[i]
		opt, val, hasVal := strings.Cut(v, "=")
		takes := func() (string, error) {
			if hasVal {
				return val, nil
			}
			if i+1 >= len(args) {
				return "", fmt.Errorf("%s needs a value", opt)
			}
			i++
			return args[i], nil
		}
		num := func() (*uint32, error) {
			s, err := takes()
			if err != nil {
				return nil, err
			}
			n, err := strconv.ParseUint(s, 10, 32)
			if err != nil {
				return nil, fmt.Errorf("%s %q is not a number", opt, s)
			}
			u := uint32(n)
			return &u, nil
		}
		var err error
		switch opt {
		case "--system":
			a.system = true
		case "--group":
			a.group = true
		case "--no-create-home":
			a.noCreateHome = true
		case "--quiet", "-q", "--disabled-password", "--disabled-login", "--force-badname", "--allow-badname", "--debug":
		case "--home":
			a.home, err = takes()
		case "--shell":
			a.shell, err = takes()
		case "--ingroup":
			a.ingroup, err = takes()
		case "--gecos", "--comment":
			a.gecos, err = takes()
		case "--uid":
			a.uid, err = num()
		case "--gid":
			a.gid, err = num()
		default:
			if strings.HasPrefix(v, "-") {
				return nil, r.unhandled(fmt.Sprintf("adduser option %s", v))
			}
			a.names = append(a.names, v)
		}
		if err != nil {
			return nil, err
		}
	}
	return a, nil
}

func cmdAddgroup(r *run, hc interp.HandlerContext, args []string) error {
	if err := r.needAccounts(args); err != nil {
		return err
	}
	a, err := parseAdduser(r, args)
	if err != nil {
		return err
	}
	if !a.system || len(a.names) != 1 {
		return r.unhandled(fmt.Sprintf("command %q (only addgroup --system NAME is)", strings.Join(args, " ")))
	}
	return r.addSystemGroup(a.names[0], a.gid)
}

func (r *run) addSystemGroup(name string, gid *uint32) error {
	if r.lookupAccount("/etc/group", name) != nil {
		return nil
	}
	if gid == nil {
		id, err := r.firstFree("/etc/group", r.adduserConf("FIRST_SYSTEM_GID", 100), r.adduserConf("LAST_SYSTEM_GID", 999))
		if err != nil {
			return err
		}
		gid = &id
	}
	return r.env.AddGroup(r.ctx, Group{Name: name, GID: gid, System: true})
}

func cmdAdduser(r *run, hc interp.HandlerContext, args []string) error {
	if err := r.needAccounts(args); err != nil {
		return err
	}
	a, err := parseAdduser(r, args)
	if err != nil {
		return err
	}
	if !a.system {
		if len(a.names) == 2 && !a.group {
			// adduser USER GROUP: a membership.
			return r.env.AddUser(r.ctx, User{Name: a.names[0], Groups: []string{a.names[1]}, System: true})
		}
		return r.unhandled(fmt.Sprintf("command %q (only adduser --system is)", strings.Join(args, " ")))
	}
	if a.group && len(a.names) == 1 && path0(args) == "addgroup" {
		return r.addSystemGroup(a.names[0], a.gid)
	}
	if len(a.names) != 1 {
		return r.unhandled(fmt.Sprintf("command %q", strings.Join(args, " ")))
	}
	name := a.names[0]
	if r.lookupAccount("/etc/passwd", name) != nil {
		return nil
	}
	u := User{Name: name, System: true, Home: a.home, Shell: a.shell, Comment: chfnGecos(a.gecos), UID: a.uid}
	if u.Home == "" {
		u.Home = "/nonexistent"
	}
	if u.Shell == "" {
		u.Shell = "/usr/sbin/nologin"
	}
	u.CreateHome = !a.noCreateHome && u.Home != "/nonexistent"
	if u.UID == nil {
		id, err := r.firstFree("/etc/passwd", r.adduserConf("FIRST_SYSTEM_UID", 100), r.adduserConf("LAST_SYSTEM_UID", 999))
		if err != nil {
			return err
		}
		u.UID = &id
	}
	switch {
	case a.group:
		gid := a.gid
		if gid == nil && r.lookupAccount("/etc/group", name) == nil {
			// adduser --system --group takes the uid as gid when free.
			if g, err := r.firstFree("/etc/group", *u.UID, *u.UID); err == nil {
				gid = &g
			}
		}
		if err := r.addSystemGroup(name, gid); err != nil {
			return err
		}
		u.Group = name
	case a.ingroup != "":
		u.Group = a.ingroup
	case a.gid != nil:
		u.GID = a.gid
	default:
		u.Group = "nogroup"
	}
	return r.env.AddUser(r.ctx, u)
}

func path0(args []string) string {
	s := args[0]
	if i := strings.LastIndexByte(s, '/'); i >= 0 {
		s = s[i+1:]
	}
	return s
}

func cmdGroupadd(r *run, hc interp.HandlerContext, args []string) error {
	if err := r.needAccounts(args); err != nil {
		return err
	}
	g := Group{}
	force := false
	for i := 1; i < len(args); i++ {
		switch args[i] {
		case "-r", "--system":
			g.System = true
		case "-f", "--force":
			force = true
		case "-g", "--gid":
			if i+1 >= len(args) {
				return exit(2)
			}
			n, err := strconv.ParseUint(args[i+1], 10, 32)
			if err != nil {
				return exit(3)
			}
			id := uint32(n)
			g.GID = &id
			i++
		default:
			if strings.HasPrefix(args[i], "-") {
				return r.unhandled(fmt.Sprintf("groupadd option %s", args[i]))
			}
			g.Name = args[i]
		}
	}
	if r.lookupAccount("/etc/group", g.Name) != nil {
		if force {
			return nil
		}
		fmt.Fprintf(hc.Stderr, "groupadd: group '%s' already exists\n", g.Name)
		return exit(9)
	}
	return r.env.AddGroup(r.ctx, g)
}

func cmdUseradd(r *run, hc interp.HandlerContext, args []string) error {
	if err := r.needAccounts(args); err != nil {
		return err
	}
	u := User{}
	userGroup := false
	for i := 1; i < len(args); i++ {
		val := func() string {
			if i+1 < len(args) {
				i++
				return args[i]
			}
			return ""
		}
		switch args[i] {
		case "-r", "--system":
			u.System = true
		case "-M", "--no-create-home":
			u.CreateHome = false
		case "-m", "--create-home":
			u.CreateHome = true
		case "-U", "--user-group":
			userGroup = true
		case "-N", "--no-user-group":
		case "-d", "--home-dir", "--home":
			u.Home = val()
		case "-s", "--shell":
			u.Shell = val()
		case "-c", "--comment":
			u.Comment = val()
		case "-g", "--gid":
			u.Group = val()
		case "-G", "--groups":
			u.Groups = strings.Split(val(), ",")
		case "-u", "--uid":
			n, err := strconv.ParseUint(val(), 10, 32)
			if err != nil {
				return exit(3)
			}
			id := uint32(n)
			u.UID = &id
		default:
			if strings.HasPrefix(args[i], "-") {
				return r.unhandled(fmt.Sprintf("useradd option %s", args[i]))
			}
			u.Name = args[i]
		}
	}
	_ = userGroup // a user-private group is the layers' default anyway
	if r.lookupAccount("/etc/passwd", u.Name) != nil {
		fmt.Fprintf(hc.Stderr, "useradd: user '%s' already exists\n", u.Name)
		return exit(9)
	}
	return r.env.AddUser(r.ctx, u)
}

// cmdSysusers applies sysusers.d files (those named, or all of them) as
// systemd-sysusers does for u, g and m lines.
func cmdSysusers(r *run, hc interp.HandlerContext, args []string) error {
	if err := r.needAccounts(args); err != nil {
		return err
	}
	var files []string
	for _, a := range args[1:] {
		switch {
		case strings.HasPrefix(a, "--root"), a == "--":
		case strings.HasPrefix(a, "-"):
			return r.unhandled(fmt.Sprintf("systemd-sysusers option %s", a))
		default:
			files = append(files, a)
		}
	}
	if len(files) == 0 {
		seen := map[string]string{}
		for _, d := range []string{"/usr/lib/sysusers.d", "/run/sysusers.d", "/etc/sysusers.d"} {
			for _, c := range r.env.Tree.Children(d) {
				if strings.HasSuffix(c, ".conf") {
					seen[c] = d + "/" + c
				}
			}
		}
		names := make([]string, 0, len(seen))
		for n := range seen {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			files = append(files, seen[n])
		}
	}
	for _, f := range files {
		p := f
		if !strings.HasPrefix(p, "/") {
			p = "/usr/lib/sysusers.d/" + f
			for _, d := range []string{"/etc/sysusers.d/", "/run/sysusers.d/"} {
				if r.exists(d + f) {
					p = d + f
				}
			}
		}
		b, err := r.readFile(p)
		if err != nil {
			return fmt.Errorf("systemd-sysusers: %s: %w", p, err)
		}
		if err := r.applySysusers(p, string(b)); err != nil {
			return err
		}
	}
	return nil
}

// sysusersFields splits a sysusers.d line, honouring double quotes.
func sysusersFields(l string) []string {
	var out []string
	var cur strings.Builder
	inQ, have := false, false
	for _, c := range l {
		switch {
		case c == '"':
			inQ, have = !inQ, true
		case (c == ' ' || c == '\t') && !inQ:
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(c)
			have = true
		}
	}
	if have {
		out = append(out, cur.String())
	}
	return out
}

func (r *run) applySysusers(file, text string) error {
	for n, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' {
			continue
		}
		f := sysusersFields(l)
		for len(f) < 6 {
			f = append(f, "-")
		}
		dash := func(s string) string {
			if s == "-" {
				return ""
			}
			return s
		}
		var id *uint32
		idStr, idGroup, _ := strings.Cut(f[2], ":")
		if v, err := strconv.ParseUint(idStr, 10, 32); err == nil {
			u := uint32(v)
			id = &u
		}
		switch f[0] {
		case "g":
			if r.lookupAccount("/etc/group", f[1]) != nil {
				continue
			}
			if err := r.env.AddGroup(r.ctx, Group{Name: f[1], GID: id, System: true}); err != nil {
				return err
			}
			if err := r.lockInvalid("/etc/gshadow", f[1]); err != nil {
				return err
			}
		case "u":
			if r.lookupAccount("/etc/passwd", f[1]) != nil {
				continue
			}
			u := User{Name: f[1], UID: id, System: true, Comment: dash(f[3]), Home: dash(f[4]), Shell: dash(f[5])}
			reuseGID := id == nil && idGroup == ""
			if u.Home == "" {
				u.Home = "/"
			}
			if u.Shell == "" {
				u.Shell = "/usr/sbin/nologin"
			}
			if idGroup != "" {
				u.Group = idGroup
			} else if r.lookupAccount("/etc/group", f[1]) == nil {
				if err := r.env.AddGroup(r.ctx, Group{Name: f[1], GID: id, System: true}); err != nil {
					return err
				}
				if err := r.lockInvalid("/etc/gshadow", f[1]); err != nil {
					return err
				}
				u.Group = f[1]
			} else {
				u.Group = f[1]
			}
			if reuseGID {
				// sysusers first tries the UID equal to the GID of the
				// user's own group.
				if g := r.lookupAccount("/etc/group", f[1]); g != nil && r.uidFree(g[2]) {
					if v, err := strconv.ParseUint(g[2], 10, 32); err == nil {
						uid := uint32(v)
						u.UID = &uid
					}
				}
			}
			if err := r.env.AddUser(r.ctx, u); err != nil {
				return err
			}
			if err := r.lockInvalid("/etc/shadow", f[1]); err != nil {
				return err
			}
		case "m":
			if err := r.env.AddUser(r.ctx, User{Name: f[1], Groups: []string{f[2]}, System: true}); err != nil {
				return err
			}
		case "r":
		default:
			return r.unhandled(fmt.Sprintf("%s line %d: sysusers type %q", file, n+1, f[0]))
		}
	}
	return nil
}

// uidFree reports whether no account of the tree has the UID id.
func (r *run) uidFree(id string) bool {
	b, _ := r.readFile("/etc/passwd")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Split(l, ":"); len(f) > 2 && f[2] == id {
			return false
		}
	}
	return true
}

// lockInvalid sets the password field of name in a shadow file to "!*",
// which systemd-sysusers writes for the accounts it makes (locked, and no
// password could ever match), where useradd and groupadd write "!".
func (r *run) lockInvalid(db, name string) error {
	b, err := r.readFile(db)
	if err != nil {
		return nil
	}
	ls := strings.Split(string(b), "\n")
	for i, l := range ls {
		if f := strings.Split(l, ":"); len(f) > 2 && f[0] == name && f[1] == "!" {
			f[1] = "!*"
			ls[i] = strings.Join(f, ":")
			return r.writeFile(db, []byte(strings.Join(ls, "\n")), 0o640)
		}
	}
	return nil
}

// chfnGecos is the GECOS field adduser --gecos leaves: it runs chfn -f
// (and -r, -w, -h, -o for comma-separated parts), and chfn writes the
// full name, room, work and home phone fields, empty ones included.
func chfnGecos(g string) string {
	if g == "" {
		return ""
	}
	f := strings.Split(g, ",")
	for len(f) < 4 {
		f = append(f, "")
	}
	if len(f) > 5 {
		f = f[:5]
	}
	return strings.Join(f, ",")
}
