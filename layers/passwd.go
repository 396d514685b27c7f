package layers

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/accountdb"
)

// The account databases, as shadow-utils names them.
const (
	passwdPath      = accountdb.Passwd
	groupPath       = accountdb.Group
	shadowPath      = accountdb.Shadow
	gshadowPath     = accountdb.Gshadow
	loginDefsPath   = "/etc/login.defs"
	useraddDefsPath = "/etc/default/useradd"
)

// dbFile is one colon-separated account database kept as its lines, so that
// every line not edited is written back byte for byte, as shadow-utils'
// commonio does.
type dbFile struct {
	path    string // as named, e.g. /etc/passwd
	lines   []string
	entry   *rootfs.Entry // nil when the file does not exist yet
	changed bool
}

// readTreeContent returns the content of the regular file p in the tree,
// following symlinks as the image would, and its entry; a missing file gives
// nil, nil, nil.
func readTreeContent(t *rootfs.Tree, p string) ([]byte, *rootfs.Entry, error) {
	e, err := t.Lookup(p, true)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if e.Type != rootfs.TypeRegular {
		return nil, nil, fmt.Errorf("%s: is a %s, not a file", p, e.Type)
	}
	f, err := t.Open(e.Path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", p, err)
	}
	return b, e, nil
}

func loadDB(t *rootfs.Tree, p string) (*dbFile, error) {
	b, e, err := readTreeContent(t, p)
	if err != nil {
		return nil, err
	}
	d := &dbFile{path: p, entry: e}
	if len(b) > 0 {
		s := strings.TrimSuffix(string(b), "\n")
		d.lines = strings.Split(s, "\n")
	}
	return d, nil
}

// record splits line i into its fields, or returns nil for comments, blank
// lines and NIS compat entries ("+", "-"), which are kept but never matched.
func (d *dbFile) record(i int) []string {
	return accountdb.Fields(d.lines[i])
}

// find returns the index and fields of the record named name, or -1.
func (d *dbFile) find(name string) (int, []string) {
	for i := range d.lines {
		if f := d.record(i); f != nil && f[0] == name {
			return i, f
		}
	}
	return -1, nil
}

// ids returns the numeric ids in the given field of every record, in file order.
func (d *dbFile) ids(field int) []uint32 {
	var out []uint32
	for i := range d.lines {
		f := d.record(i)
		if len(f) <= field {
			continue
		}
		if id, err := strconv.ParseUint(f[field], 10, 32); err == nil {
			out = append(out, uint32(id))
		}
	}
	return out
}

// byID returns the name of the first record whose field holds id.
func (d *dbFile) byID(field int, id uint32) (string, bool) {
	want := strconv.FormatUint(uint64(id), 10)
	for i := range d.lines {
		if f := d.record(i); len(f) > field && f[field] == want {
			return f[0], true
		}
	}
	return "", false
}

// add inserts a record before the first NIS compat entry, or at the end, as
// shadow-utils does (KEEP_NIS_AT_END).
func (d *dbFile) add(fields ...string) {
	line := strings.Join(fields, ":")
	at := len(d.lines)
	for i, l := range d.lines {
		if l != "" && (l[0] == '+' || l[0] == '-') {
			at = i
			break
		}
	}
	d.lines = append(d.lines, "")
	copy(d.lines[at+1:], d.lines[at:])
	d.lines[at] = line
	d.changed = true
}

// addMember appends user to the comma-separated list in field of the record
// named name, keeping order and never listing anyone twice. It reports
// whether the record exists.
func (d *dbFile) addMember(name string, field int, user string) bool {
	i, f := d.find(name)
	if i < 0 {
		return false
	}
	for len(f) <= field {
		f = append(f, "")
	}
	var members []string
	for _, m := range strings.Split(f[field], ",") {
		if m == user {
			return true
		}
		if m != "" {
			members = append(members, m)
		}
	}
	f[field] = strings.Join(append(members, user), ",")
	d.lines[i] = strings.Join(f, ":")
	d.changed = true
	return true
}

// save writes the database back if it changed. An existing file keeps its
// permissions and owner; a new one gets perm and uid:gid.
func (d *dbFile) save(env *Env, perm, uid, gid uint32) error {
	if !d.changed {
		return nil
	}
	var buf bytes.Buffer
	for _, l := range d.lines {
		buf.WriteString(l)
		buf.WriteByte('\n')
	}
	var target string
	if d.entry != nil {
		target = d.entry.Path
		perm, uid, gid = d.entry.Perm, d.entry.UID, d.entry.GID
	} else {
		rp, err := env.Tree.Resolve(d.path, true)
		if err != nil {
			return err
		}
		target = rp
	}
	h := rootfs.Header{Type: rootfs.TypeRegular, Perm: perm, UID: uid, GID: gid, MTime: env.Epoch, Origin: env.Origin("", "")}
	e, err := env.Tree.Create(target, h, &buf)
	if err != nil {
		return fmt.Errorf("%s: %w", d.path, err)
	}
	d.entry, d.changed = e, false
	return nil
}

// defsFile is a KEY VALUE file such as login.defs, or KEY=VALUE such as
// /etc/default/useradd.
type defsFile map[string]string

func loadDefs(t *rootfs.Tree, p string, sep string) (defsFile, error) {
	b, _, err := readTreeContent(t, p)
	if err != nil {
		return nil, err
	}
	d := defsFile{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || l[0] == '#' {
			continue
		}
		var k, v string
		if sep == "" {
			kv := strings.Fields(l)
			if len(kv) < 2 {
				continue
			}
			k, v = kv[0], kv[1]
		} else {
			var ok bool
			if k, v, ok = strings.Cut(l, sep); !ok {
				continue
			}
			v = strings.Trim(strings.TrimSpace(v), `"`)
		}
		d[strings.TrimSpace(k)] = v
	}
	return d, nil
}

// num reads a number the way shadow-utils' getdef_num does (base prefix
// allowed, so HOME_MODE 0700 is octal), or def when unset or malformed.
func (d defsFile) num(key string, def uint64) uint64 {
	v, ok := d[key]
	if !ok {
		return def
	}
	n, err := strconv.ParseUint(v, 0, 32)
	if err != nil {
		return def
	}
	return n
}

// accounts is the four databases plus the settings that steer id choice.
type accounts struct {
	passwd, group, shadow, gshadow *dbFile
	login                          defsFile
	useradd                        defsFile
}

func loadAccounts(t *rootfs.Tree) (*accounts, error) {
	a := &accounts{}
	var err error
	for _, p := range []struct {
		d    **dbFile
		path string
	}{{&a.passwd, passwdPath}, {&a.group, groupPath}, {&a.shadow, shadowPath}, {&a.gshadow, gshadowPath}} {
		if *p.d, err = loadDB(t, p.path); err != nil {
			return nil, err
		}
	}
	if a.login, err = loadDefs(t, loginDefsPath, ""); err != nil {
		return nil, err
	}
	if a.useradd, err = loadDefs(t, useraddDefsPath, "="); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *accounts) save(env *Env) error {
	// The shadow files are readable by group shadow when it exists, as
	// Debian's base-passwd sets them up.
	var shadowGID uint32
	if _, f := a.group.find("shadow"); len(f) > 2 {
		if id, err := strconv.ParseUint(f[2], 10, 32); err == nil {
			shadowGID = uint32(id)
		}
	}
	if err := a.passwd.save(env, 0o644, 0, 0); err != nil {
		return err
	}
	if err := a.group.save(env, 0o644, 0, 0); err != nil {
		return err
	}
	if err := a.shadow.save(env, 0o640, 0, shadowGID); err != nil {
		return err
	}
	return a.gshadow.save(env, 0o640, 0, shadowGID)
}

// idRange is where new ids come from, read from login.defs with
// shadow-utils' defaults.
func (a *accounts) idRange(kind string, system bool) (lo, hi uint32) {
	min := uint32(a.login.num(kind+"_MIN", 1000))
	if system {
		return uint32(a.login.num("SYS_"+kind+"_MIN", 101)), uint32(a.login.num("SYS_"+kind+"_MAX", uint64(min)-1))
	}
	return min, uint32(a.login.num(kind+"_MAX", 60000))
}

// nextFreeID picks a free id the way shadow-utils' find_new_uid/find_new_gid
// do, looking only at the tree: regular ids go above the highest one used
// in the range, system ids below the lowest one used, and only when that
// runs off the end of the range are gaps reused. A preferred id is taken
// when it is free and in range.
func nextFreeID(used []uint32, lo, hi uint32, system bool, preferred *uint32) (uint32, error) {
	taken := map[uint32]bool{}
	for _, id := range used {
		taken[id] = true
	}
	if preferred != nil && *preferred >= lo && *preferred <= hi && !taken[*preferred] {
		return *preferred, nil
	}
	if lo > hi {
		return 0, fmt.Errorf("empty id range %d-%d", lo, hi)
	}
	// Same scan as shadow-utils, in file order, including its habit of
	// moving the bound one past each id it meets.
	highest, lowest := int64(lo), int64(hi)
	for _, id := range used {
		if int64(id) <= lowest && id >= lo {
			lowest = int64(id) - 1
		}
		if int64(id) >= highest && id <= hi {
			highest = int64(id) + 1
		}
	}
	if system {
		for id := lowest; id >= int64(lo); id-- {
			if !taken[uint32(id)] {
				return uint32(id), nil
			}
		}
		for id := int64(hi); id >= int64(lo); id-- {
			if !taken[uint32(id)] {
				return uint32(id), nil
			}
		}
	} else {
		for id := highest; id <= int64(hi); id++ {
			if !taken[uint32(id)] {
				return uint32(id), nil
			}
		}
		for id := int64(lo); id <= int64(hi); id++ {
			if !taken[uint32(id)] {
				return uint32(id), nil
			}
		}
	}
	return 0, fmt.Errorf("no free id in %d-%d", lo, hi)
}

// groupID returns the gid of the group named name.
func (a *accounts) groupID(name string) (uint32, bool) {
	_, f := a.group.find(name)
	if len(f) < 3 {
		return 0, false
	}
	id, err := strconv.ParseUint(f[2], 10, 32)
	return uint32(id), err == nil
}

// ensureGroup makes the group name exist with gid (or a free one chosen as
// groupadd would, preferring *preferred) and returns its gid. An existing
// group with that name is kept when gid is nil or matches.
func (a *accounts) ensureGroup(name string, gid, preferred *uint32, system bool) (uint32, error) {
	if have, ok := a.groupID(name); ok {
		if gid != nil && *gid != have {
			return 0, fmt.Errorf("exists with gid %d, not %d", have, *gid)
		}
		return have, nil
	}
	if gid != nil {
		if other, ok := a.group.byID(2, *gid); ok {
			return 0, fmt.Errorf("gid %d is taken by group %q", *gid, other)
		}
	}
	id := uint32(0)
	if gid != nil {
		id = *gid
	} else {
		lo, hi := a.idRange("GID", system)
		var err error
		if id, err = nextFreeID(a.group.ids(2), lo, hi, system, preferred); err != nil {
			return 0, err
		}
	}
	a.group.add(name, "x", strconv.FormatUint(uint64(id), 10), "")
	a.gshadow.add(name, "!", "", "")
	return id, nil
}

// addMember puts user into the member lists of group in /etc/group and, if
// the group has an entry there, /etc/gshadow.
func (a *accounts) addMember(group, user string) error {
	if !a.group.addMember(group, 3, user) {
		return fmt.Errorf("group %q does not exist", group)
	}
	a.gshadow.addMember(group, 3, user)
	return nil
}

// validAccountName accepts what shadow-utils accepts for user and group names in
// its relaxed (Debian) mode: no separators, no whitespace, not purely
// numeric, not starting with a sign or tilde.
func validAccountName(s string) error {
	if s == "" || s == "." || s == ".." || len(s) > 32 {
		return fmt.Errorf("invalid name %q", s)
	}
	if strings.ContainsAny(s, ":,/ \t\n\r") || strings.ContainsAny(s[:1], "-+~") {
		return fmt.Errorf("invalid name %q", s)
	}
	if _, err := strconv.ParseUint(s, 10, 64); err == nil {
		return fmt.Errorf("invalid name %q: purely numeric", s)
	}
	return nil
}

// validAccountField rejects values that would break a colon-separated record.
func validAccountField(what, s string) error {
	if strings.ContainsAny(s, ":\n") {
		return fmt.Errorf("%s %q contains ':' or a newline", what, s)
	}
	return nil
}
