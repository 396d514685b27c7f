package scripts

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/interp"

	"github.com/stamp-dev/stamp/rootfs/accountdb"
)

// cmdSysusers is systemd-sysusers (as of Debian 12's 252) applied to the
// tree: the sysusers.d files named, or all of them, read whole first;
// every group ('g' lines, then those 'm' lines imply) made before any user,
// each user then with its own group unless it names one; ids suggested
// when free, else a user's group's id, else the next free id counting down
// from the top of the system range, one search for users and groups alike;
// and the four databases written as sysusers writes them: what is there
// kept line for line, the new entries appended (before NIS entries), new
// shadow entries locked ("!*") and dated from the build's epoch, a
// database that did not exist made (the shadow ones mode 0000).
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
		for _, d := range []string{"/usr/lib/sysusers.d", "/usr/local/lib/sysusers.d", "/run/sysusers.d", "/etc/sysusers.d"} {
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
	s := &sysusers{r: r, users: map[string]*sysItem{}, groups: map[string]*sysItem{}, members: map[string][]string{}}
	for _, f := range files {
		p := f
		if !strings.HasPrefix(p, "/") {
			p = "/usr/lib/sysusers.d/" + f
			for _, d := range []string{"/usr/local/lib/sysusers.d/", "/run/sysusers.d/", "/etc/sysusers.d/"} {
				if r.exists(d + f) {
					p = d + f
				}
			}
		}
		b, err := r.readFile(p)
		if err != nil {
			return fmt.Errorf("systemd-sysusers: %s: %w", p, err)
		}
		if err := s.parse(p, string(b)); err != nil {
			return err
		}
	}
	return s.apply()
}

// sysItem is a 'u' or 'g' line.
type sysItem struct {
	user                   bool
	name, groupName        string
	uidPath, gidPath       string
	desc, home, shell      string
	uid, gid               uint32
	uidSet, gidSet, strict bool
	todoUser, todoGroup    bool
}

// sysusers is one run: its items in the order first given, and the
// databases as it read them.
type sysusers struct {
	r                  *run
	users, groups      map[string]*sysItem
	userOrder          []string
	groupOrder         []string
	members            map[string][]string
	memberOrder        []string
	ranges             [][2]uint32
	byUID, byGID       map[uint32]string
	userIDs, groupIDs  map[string]uint32
	todoUIDs, todoGIDs []*sysItem
	search             uint32
	searched           bool
}

func (s *sysusers) parse(file, text string) error {
	for n, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(l)
		if l == "" || l[0] == '#' {
			continue
		}
		f := sysusersFields(l)
		for len(f) < 6 {
			f = append(f, "-")
		}
		dash := func(v string) string {
			if v == "-" {
				return ""
			}
			return v
		}
		name, id := dash(f[1]), dash(f[2])
		switch f[0] {
		case "r":
			lo, hi, ok := strings.Cut(id, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.ParseUint(lo, 10, 32)
			b, err2 := strconv.ParseUint(hi, 10, 32)
			if err1 != nil || err2 != nil || b < a {
				return fmt.Errorf("%s line %d: bad range %q", file, n+1, id)
			}
			s.ranges = append(s.ranges, [2]uint32{uint32(a), uint32(b)})
		case "m":
			if _, ok := s.members[id]; !ok {
				s.memberOrder = append(s.memberOrder, id)
			}
			if !slices.Contains(s.members[id], name) {
				s.members[id] = append(s.members[id], name)
			}
		case "u":
			it := &sysItem{user: true, name: name, desc: dash(f[3]), home: dash(f[4]), shell: dash(f[5])}
			switch {
			case strings.HasPrefix(id, "/"):
				it.uidPath = id
			case id != "":
				uid, g, hasGroup := strings.Cut(id, ":")
				if hasGroup {
					if v, err := strconv.ParseUint(g, 10, 32); err == nil {
						it.gid, it.gidSet, it.strict = uint32(v), true, true
					} else {
						it.groupName = g
					}
				}
				if uid != "-" {
					v, err := strconv.ParseUint(uid, 10, 32)
					if err != nil {
						return fmt.Errorf("%s line %d: bad uid %q", file, n+1, uid)
					}
					it.uid, it.uidSet = uint32(v), true
				}
			}
			if _, dup := s.users[name]; !dup {
				s.users[name] = it
				s.userOrder = append(s.userOrder, name)
			}
		case "g":
			it := &sysItem{name: name}
			switch {
			case strings.HasPrefix(id, "/"):
				it.gidPath = id
			case id != "":
				v, err := strconv.ParseUint(id, 10, 32)
				if err != nil {
					return fmt.Errorf("%s line %d: bad gid %q", file, n+1, id)
				}
				it.gid, it.gidSet = uint32(v), true
			}
			if _, dup := s.groups[name]; !dup {
				s.groups[name] = it
				s.groupOrder = append(s.groupOrder, name)
			}
		default:
			return s.r.unhandled(fmt.Sprintf("%s line %d: sysusers type %q", file, n+1, f[0]))
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

// loadDatabases reads who has which id now.
func (s *sysusers) loadDatabases() {
	s.byUID, s.byGID = map[uint32]string{}, map[uint32]string{}
	s.userIDs, s.groupIDs = map[string]uint32{}, map[string]uint32{}
	for _, db := range []struct {
		path  string
		byID  map[uint32]string
		names map[string]uint32
	}{{"/etc/passwd", s.byUID, s.userIDs}, {"/etc/group", s.byGID, s.groupIDs}} {
		b, _ := s.r.readFile(db.path)
		for _, l := range splitLines(b) {
			f := accountdb.Fields(l)
			if len(f) < 3 {
				continue
			}
			id, err := strconv.ParseUint(f[2], 10, 32)
			if err != nil {
				continue
			}
			if _, ok := db.names[f[0]]; !ok {
				db.names[f[0]] = uint32(id)
			}
			if _, ok := db.byID[uint32(id)]; !ok {
				db.byID[uint32(id)] = f[0]
			}
		}
	}
}

// defaultRange is the system range sysusers allocates from without 'r'
// lines: from login.defs' SYS_UID_MIN (1 when unset, as Debian builds
// it) to the lowest of 999 and login.defs' SYS_UID_MAX and SYS_GID_MAX.
func (s *sysusers) defaultRange() [2]uint32 {
	defs := map[string]uint32{"SYS_UID_MIN": 1, "SYS_UID_MAX": 999, "SYS_GID_MAX": 999}
	if b, err := s.r.readFile("/etc/login.defs"); err == nil {
		for _, l := range splitLines(b) {
			f := strings.Fields(l)
			if len(f) < 2 || strings.HasPrefix(f[0], "#") {
				continue
			}
			if _, ok := defs[f[0]]; ok {
				if v, err := strconv.ParseUint(f[1], 0, 32); err == nil {
					defs[f[0]] = uint32(v)
				}
			}
		}
	}
	end := min(uint32(999), defs["SYS_UID_MAX"], defs["SYS_GID_MAX"])
	return [2]uint32{defs["SYS_UID_MIN"], end}
}

// nextLower is uid_range_next_lower: the next id down from the last one
// searched, skipping to the top of the next range below.
func (s *sysusers) nextLower() (uint32, bool) {
	candidate := s.search - 1
	if !s.searched {
		candidate = ^uint32(0) - 1
	}
	closest, found := uint32(0), false
	for _, rg := range s.ranges {
		if candidate >= rg[0] && candidate <= rg[1] {
			s.search, s.searched = candidate, true
			return candidate, true
		}
		if rg[1] < candidate && (!found || rg[1] > closest) {
			closest, found = rg[1], true
		}
	}
	if !found {
		return 0, false
	}
	s.search, s.searched = closest, true
	return closest, true
}

func (s *sysusers) todoUID(id uint32) *sysItem {
	for _, it := range s.todoUIDs {
		if it.uid == id {
			return it
		}
	}
	return nil
}

func (s *sysusers) todoGID(id uint32) *sysItem {
	for _, it := range s.todoGIDs {
		if it.gid == id {
			return it
		}
	}
	return nil
}

func (s *sysusers) uidOK(id uint32, name string, checkGID bool) bool {
	if s.todoUID(id) != nil {
		return false
	}
	if checkGID {
		if g := s.todoGID(id); g != nil && g.name != name {
			return false
		}
	}
	if _, ok := s.byUID[id]; ok {
		return false
	}
	if checkGID {
		if n, ok := s.byGID[id]; ok && n != name {
			return false
		}
	}
	return true
}

func (s *sysusers) gidOK(id uint32, name string, checkUID bool) bool {
	if s.todoGID(id) != nil {
		return false
	}
	if checkUID {
		if u := s.todoUID(id); u != nil && u.name != name {
			return false
		}
	}
	if _, ok := s.byGID[id]; ok {
		return false
	}
	if checkUID {
		if n, ok := s.byUID[id]; ok && n != name {
			return false
		}
	}
	return true
}

// idFromPath is read_id_from_file: the owner of a path in the tree.
func (s *sysusers) idFromPath(p string, group bool) (uint32, bool) {
	if p == "" {
		return 0, false
	}
	e, err := s.r.env.Tree.Lookup(p, true)
	if err != nil {
		return 0, false
	}
	if group {
		return e.GID, true
	}
	return e.UID, true
}

func (s *sysusers) inRange(id uint32) bool {
	for _, rg := range s.ranges {
		if id >= rg[0] && id <= rg[1] {
			return true
		}
	}
	return false
}

func (s *sysusers) addGroup(it *sysItem) error {
	if id, ok := s.groupIDs[it.name]; ok {
		it.gid, it.gidSet = id, true
		return nil
	}
	if it.gidSet {
		ok := s.gidOK(it.gid, it.name, false)
		if it.strict {
			if ok {
				return fmt.Errorf("systemd-sysusers: %s: please create GID %d", it.name, it.gid)
			}
			return nil
		}
		if !ok {
			it.gidSet = false
		}
	}
	if !it.gidSet && it.uidSet && s.gidOK(it.uid, it.name, true) {
		it.gid, it.gidSet = it.uid, true
	}
	if !it.gidSet {
		path := it.gidPath
		if path == "" {
			path = it.uidPath
		}
		if c, ok := s.idFromPath(path, true); ok && c > 0 && s.inRange(c) && s.gidOK(c, it.name, true) {
			it.gid, it.gidSet = c, true
		}
	}
	for !it.gidSet {
		id, ok := s.nextLower()
		if !ok {
			return fmt.Errorf("systemd-sysusers: no free group ID for %s", it.name)
		}
		if s.gidOK(id, it.name, true) {
			it.gid, it.gidSet = id, true
		}
	}
	it.todoGroup = true
	s.todoGIDs = append(s.todoGIDs, it)
	return nil
}

func (s *sysusers) addUser(it *sysItem) error {
	if id, ok := s.userIDs[it.name]; ok {
		it.uid, it.uidSet = id, true
		return nil
	}
	if it.uidSet && !s.uidOK(it.uid, it.name, !it.strict) {
		it.uidSet = false
	}
	if !it.uidSet {
		path := it.uidPath
		if path == "" {
			path = it.gidPath
		}
		if c, ok := s.idFromPath(path, it.uidPath == ""); ok && c > 0 && s.inRange(c) && s.uidOK(c, it.name, true) {
			it.uid, it.uidSet = c, true
		}
	}
	if !it.uidSet && it.gidSet && s.uidOK(it.gid, it.name, true) {
		it.uid, it.uidSet = it.gid, true
	}
	for !it.uidSet {
		id, ok := s.nextLower()
		if !ok {
			return fmt.Errorf("systemd-sysusers: no free user ID for %s", it.name)
		}
		if s.uidOK(id, it.name, true) {
			it.uid, it.uidSet = id, true
		}
	}
	it.todoUser = true
	s.todoUIDs = append(s.todoUIDs, it)
	return nil
}

func (s *sysusers) apply() error {
	if len(s.ranges) == 0 {
		if rg := s.defaultRange(); rg[0] < rg[1] {
			s.ranges = [][2]uint32{rg}
		}
	}
	// add_implicit: the users and groups 'm' lines name.
	for _, g := range s.memberOrder {
		for _, u := range s.members[g] {
			if s.users[u] == nil {
				s.users[u] = &sysItem{user: true, name: u}
				s.userOrder = append(s.userOrder, u)
			}
		}
		if s.users[g] == nil && s.groups[g] == nil {
			s.groups[g] = &sysItem{name: g}
			s.groupOrder = append(s.groupOrder, g)
		}
	}
	s.loadDatabases()
	for _, n := range s.groupOrder {
		if err := s.addGroup(s.groups[n]); err != nil {
			return err
		}
	}
	for _, n := range s.userOrder {
		it := s.users[n]
		var j *sysItem
		if !it.gidSet {
			gn := it.groupName
			if gn == "" {
				gn = it.name
			}
			j = s.groups[gn]
		}
		switch {
		case j != nil && j.todoGroup:
			it.gid, it.gidSet, it.strict = j.gid, j.gidSet, true
		case it.groupName != "":
			id, ok := s.groupIDs[it.groupName]
			if !ok {
				return fmt.Errorf("systemd-sysusers: group %s not found", it.groupName)
			}
			it.gid, it.gidSet, it.strict = id, true, true
		default:
			if err := s.addGroup(it); err != nil {
				return err
			}
		}
		if err := s.addUser(it); err != nil {
			return err
		}
	}
	return s.write()
}

// write is write_files: group, gshadow, passwd, shadow.
func (s *sysusers) write() error {
	lstchg := strconv.FormatInt(s.r.env.Epoch.Unix()/86400, 10)
	if len(s.todoGIDs) > 0 || len(s.members) > 0 {
		var added []string
		for _, it := range s.todoGIDs {
			added = append(added, it.name+":x:"+strconv.FormatUint(uint64(it.gid), 10)+":")
		}
		if err := s.writeDB("/etc/group", added, 3, true, 0o644); err != nil {
			return err
		}
		added = added[:0]
		for _, it := range s.todoGIDs {
			added = append(added, it.name+":!*::")
		}
		if err := s.writeDB("/etc/gshadow", added, 3, false, 0); err != nil {
			return err
		}
	}
	if len(s.todoUIDs) == 0 {
		return nil
	}
	var added []string
	for _, it := range s.todoUIDs {
		home, shell := it.home, it.shell
		if home == "" {
			home = "/"
		}
		if shell == "" {
			shell = "/usr/sbin/nologin"
			if it.uid == 0 {
				shell = "/bin/sh"
			}
		}
		added = append(added, strings.Join([]string{it.name, "x", strconv.FormatUint(uint64(it.uid), 10),
			strconv.FormatUint(uint64(it.gid), 10), it.desc, home, shell}, ":"))
	}
	if err := s.writeDB("/etc/passwd", added, -1, true, 0o644); err != nil {
		return err
	}
	// A user whose shadow entry exists already gets it re-dated instead.
	b, _ := s.r.readFile("/etc/shadow")
	have := map[string]bool{}
	for _, l := range splitLines(b) {
		have[strings.SplitN(l, ":", 2)[0]] = true
	}
	added = added[:0]
	for _, it := range s.todoUIDs {
		if !have[it.name] {
			added = append(added, it.name+":!*:"+lstchg+"::::::")
		}
	}
	return s.writeDB("/etc/shadow", added, -1, true, 0, func(f []string) []string {
		if u := s.users[f[0]]; u != nil && u.todoUser && len(f) > 2 {
			f[2] = lstchg
		}
		return f
	})
}

// writeDB rewrites an account database: its lines (with the members 'm'
// lines add, in the member field, when member >= 0), then the added ones
// (with their members), before any NIS entries when nisLast; a file that
// did not exist is made with perm.
func (s *sysusers) writeDB(p string, added []string, member int, nisLast bool, perm uint32, edit ...func([]string) []string) error {
	b, err := s.r.readFile(p)
	existed := err == nil
	var out, nis []string
	changed := len(added) > 0
	withMembers := func(l string) string {
		if member < 0 {
			return l
		}
		f := strings.Split(l, ":")
		for len(f) <= member {
			f = append(f, "")
		}
		want, ok := s.members[f[0]]
		if !ok {
			return l
		}
		var ms []string
		if f[member] != "" {
			ms = strings.Split(f[member], ",")
		}
		grew := false
		for _, m := range want {
			if !slices.Contains(ms, m) {
				ms = append(ms, m)
				grew = true
			}
		}
		if !grew {
			return l
		}
		sort.Strings(ms)
		ms = slices.Compact(ms)
		f[member] = strings.Join(ms, ",")
		changed = true
		return strings.Join(f, ":")
	}
	lines := splitLines(b)
	for i, l := range lines {
		if nisLast && l != "" && (l[0] == '+' || l[0] == '-') {
			nis = lines[i:]
			break
		}
		if len(edit) > 0 {
			if f := strings.Split(l, ":"); len(f) > 1 {
				if nl := strings.Join(edit[0](f), ":"); nl != l {
					l, changed = nl, true
				}
			}
		}
		out = append(out, withMembers(l))
	}
	for _, l := range added {
		out = append(out, withMembers(l))
	}
	out = append(out, nis...)
	if !changed {
		return nil
	}
	if err := s.r.writeFile(p, joinLines(out), perm); err != nil {
		return err
	}
	if !existed {
		return s.r.setOwnerMode(p, 0, 0, perm)
	}
	return nil
}
