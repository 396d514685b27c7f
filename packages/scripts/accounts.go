package scripts

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs/accountdb"
)

func (r *run) needAccounts(args []string) error {
	if r.env.AddUser == nil || r.env.AddGroup == nil {
		return r.unhandledCommand(args)
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
		if f := accountdb.Fields(l); len(f) > 2 {
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
		return r.unhandledCommand(args, "only addgroup --system NAME is")
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
		return r.unhandledCommand(args, "only adduser --system is")
	}
	if a.group && len(a.names) == 1 && path0(args) == "addgroup" {
		return r.addSystemGroup(a.names[0], a.gid)
	}
	if len(a.names) != 1 {
		return r.unhandledCommand(args)
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

// accountID looks a name (or number) up in the tree's passwd or group.
func (r *run) accountID(db, name string) (uint32, bool) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return uint32(n), true
	}
	f := r.lookupAccount(db, name)
	if len(f) < 3 {
		return 0, false
	}
	n, err := strconv.ParseUint(f[2], 10, 32)
	return uint32(n), err == nil
}

// lookupAccount returns the fields of the record named name, or nil.
func (r *run) lookupAccount(db, name string) []string {
	return r.findAccount(db, func(f []string) bool { return f[0] == name })
}

// accountName is the name of id in the tree's passwd or group, or the
// number when it has none.
func (r *run) accountName(db string, id uint32) string {
	n := strconv.FormatUint(uint64(id), 10)
	if f := r.findAccount(db, func(f []string) bool { return f[2] == n }); f != nil {
		return f[0]
	}
	return n
}

// findAccount returns the fields of the first record of db that match.
func (r *run) findAccount(db string, match func(f []string) bool) []string {
	b, err := r.readFile(db)
	if err != nil {
		return nil
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := accountdb.Fields(l); len(f) > 2 && match(f) {
			return f
		}
	}
	return nil
}

func cmdGetent(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) < 3 {
		return r.unhandledCommand(args)
	}
	db := map[string]string{"passwd": "/etc/passwd", "group": "/etc/group", "shadow": "/etc/shadow", "gshadow": "/etc/gshadow"}[args[1]]
	if db == "" {
		return r.unhandledCommand(args)
	}
	code := 0
	for _, k := range args[2:] {
		b, err := r.readFile(db)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		found := false
		for _, l := range strings.Split(string(b), "\n") {
			if f := accountdb.Fields(l); len(f) > 2 && (f[0] == k || f[2] == k) {
				fmt.Fprintln(hc.Stdout, l)
				found = true
				break
			}
		}
		if !found {
			code = 2
		}
	}
	return exit(code)
}

// cmdID is id: scripts run as root, as under dpkg; a user operand is
// looked up in the tree's passwd.
func cmdID(r *run, hc interp.HandlerContext, args []string) error {
	flags, ops := splitFlags(args[1:])
	if len(ops) > 1 {
		return r.unhandledCommand(args)
	}
	uid, gid, user := "0", "0", r.accountName("/etc/passwd", 0)
	if len(ops) == 1 {
		f := r.lookupAccount("/etc/passwd", ops[0])
		if len(f) < 4 {
			fmt.Fprintf(hc.Stderr, "id: '%s': no such user\n", ops[0])
			return exit(1)
		}
		uid, gid, user = f[2], f[3], f[0]
	}
	name := flags["-n"] || flags["--name"]
	switch {
	case flags["-u"] || flags["--user"]:
		if name {
			fmt.Fprintln(hc.Stdout, user)
		} else {
			fmt.Fprintln(hc.Stdout, uid)
		}
	case flags["-g"] || flags["--group"]:
		if name {
			n, _ := strconv.ParseUint(gid, 10, 32)
			fmt.Fprintln(hc.Stdout, r.accountName("/etc/group", uint32(n)))
		} else {
			fmt.Fprintln(hc.Stdout, gid)
		}
	case len(flags) == 0 && len(ops) == 0:
		g := r.accountName("/etc/group", 0)
		fmt.Fprintf(hc.Stdout, "uid=0(%s) gid=0(%s) groups=0(%s)\n", user, g, g)
	default:
		return r.unhandledCommand(args)
	}
	return nil
}

// cmdWhoami is whoami: root, by the image's passwd.
func cmdWhoami(r *run, hc interp.HandlerContext, args []string) error {
	fmt.Fprintln(hc.Stdout, r.accountName("/etc/passwd", 0))
	return nil
}

// cmdShadowconfig is passwd's shadowconfig on, as its postinst runs it on
// a first install: pwconv and grpconv move the passwords of /etc/passwd
// and /etc/group into /etc/shadow and /etc/gshadow (new records aged from
// the build's epoch, with login.defs' PASS_* limits), then the shadow
// files become root:shadow 0640. pwck and grpck only read, and so are not
// run. The backups shadow-utils keeps (passwd-, group-) are not made.
func cmdShadowconfig(r *run, hc interp.HandlerContext, args []string) error {
	if len(args) != 2 || args[1] != "on" {
		return r.unhandledCommand(args)
	}
	defs := r.loginDefs()
	lastchg := ""
	if days := r.env.Epoch.Unix() / 86400; days > 0 {
		lastchg = strconv.FormatInt(days, 10)
	}
	if err := r.shadowConvert("/etc/passwd", "/etc/shadow", func(f []string) []string {
		return []string{f[0], f[1], lastchg, defs["PASS_MIN_DAYS"], defs["PASS_MAX_DAYS"], defs["PASS_WARN_AGE"], "", "", ""}
	}); err != nil {
		return err
	}
	if err := r.shadowConvert("/etc/group", "/etc/gshadow", func(f []string) []string {
		members := ""
		if len(f) > 3 {
			members = f[3]
		}
		return []string{f[0], f[1], "", members}
	}); err != nil {
		return err
	}
	var shadowGID uint32
	if b, err := r.readFile("/etc/group"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := accountdb.Fields(l); len(f) > 2 && f[0] == "shadow" {
				if id, err := strconv.ParseUint(f[2], 10, 32); err == nil {
					shadowGID = uint32(id)
				}
			}
		}
	}
	for _, o := range []struct {
		path string
		perm uint32
		gid  uint32
	}{{"/etc/passwd", 0o644, 0}, {"/etc/group", 0o644, 0}, {"/etc/shadow", 0o640, shadowGID}, {"/etc/gshadow", 0o640, shadowGID}} {
		if err := r.setOwnerMode(o.path, 0, o.gid, o.perm); err != nil {
			return err
		}
	}
	return nil
}

// shadowConvert is pwconv (or grpconv): every record of db whose password
// is not "x" gets it moved into shadow, a record for each name shadow
// lacks is appended as record makes it, and shadow records of names db
// does not have go.
func (r *run) shadowConvert(db, shadow string, record func(f []string) []string) error {
	b, err := r.readFile(db)
	if err != nil {
		return fmt.Errorf("%s: %w", db, err)
	}
	sb, _ := r.readFile(shadow)
	dbLines := splitLines(b)
	shLines := splitLines(sb)
	names := map[string]bool{}
	index := map[string]int{}
	for i, l := range shLines {
		if f := strings.Split(l, ":"); len(f) > 1 {
			index[f[0]] = i
		}
	}
	for i, l := range dbLines {
		f := accountdb.Fields(l)
		if len(f) < 3 {
			continue
		}
		names[f[0]] = true
		j, ok := index[f[0]]
		switch {
		case !ok:
			shLines = append(shLines, strings.Join(record(f), ":"))
		case f[1] != "x":
			sf := strings.Split(shLines[j], ":")
			sf[1] = f[1]
			shLines[j] = strings.Join(sf, ":")
		}
		f[1] = "x"
		dbLines[i] = strings.Join(f, ":")
	}
	kept := shLines[:0]
	for _, l := range shLines {
		if f := strings.Split(l, ":"); len(f) > 1 && !names[f[0]] {
			continue
		}
		kept = append(kept, l)
	}
	if err := r.writeFile(db, joinLines(dbLines), 0o644); err != nil {
		return err
	}
	return r.writeFile(shadow, joinLines(kept), 0o640)
}

// loginDefs reads the PASS_* aging defaults of /etc/login.defs, with
// shadow-utils' fallbacks (no limit: empty fields).
func (r *run) loginDefs() map[string]string {
	out := map[string]string{"PASS_MIN_DAYS": "", "PASS_MAX_DAYS": "", "PASS_WARN_AGE": ""}
	b, err := r.readFile("/etc/login.defs")
	if err != nil {
		return out
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && !strings.HasPrefix(f[0], "#") {
			if _, ok := out[f[0]]; ok {
				if n, err := strconv.ParseInt(f[1], 0, 64); err == nil && n >= 0 {
					out[f[0]] = strconv.FormatInt(n, 10)
				}
			}
		}
	}
	return out
}
