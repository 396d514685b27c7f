package layers

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
)

// User is one account to create, as `useradd --root` would.
type User struct {
	Name string
	// UID is fixed when set; otherwise the next free id is chosen as useradd does.
	UID *uint32
	// Group names the primary group, which must exist (or come earlier in
	// the same layer). Without it the primary group is the group with GID,
	// or else a user-private group named like the user.
	Group string
	GID   *uint32
	// Groups are supplementary groups; each must exist.
	Groups  []string
	Home    string // default HOME from /etc/default/useradd (or /home) + "/" + Name
	Shell   string // default SHELL from /etc/default/useradd, or /bin/bash as useradd
	Comment string
	// System picks ids from the SYS_ ranges, downward, and leaves password
	// aging empty, as useradd -r does.
	System bool
	// Password is a crypt(3) hash written to /etc/shadow as is; empty locks
	// the account ("!").
	Password string
	// CreateHome defaults to true for regular users and false for system ones.
	CreateHome *bool
}

// Users edits /etc/passwd, /etc/group, /etc/shadow and /etc/gshadow in the
// tree and makes home directories from /etc/skel. A user that already exists
// with the same name (and uid, when one is given) is kept as it is apart from
// missing supplementary memberships, so applying the layer twice changes
// nothing.
type Users struct {
	Users []User
}

// Kind implements Layer.
func (*Users) Kind() string { return "users" }

// Apply implements Layer.
func (l *Users) Apply(ctx context.Context, env *Env) error {
	a, err := loadAccounts(env.Tree)
	if err != nil {
		return fmt.Errorf("%s: %w", env.Label, err)
	}
	var homes []homeDir
	for _, u := range l.Users {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := a.applyUser(u, env)
		if err != nil {
			return fmt.Errorf("%s: user %q: %w", env.Label, u.Name, err)
		}
		if h != nil {
			homes = append(homes, *h)
		}
	}
	if err := a.save(env); err != nil {
		return fmt.Errorf("%s: %w", env.Label, err)
	}
	for _, h := range homes {
		if err := makeHome(env, h, a.login); err != nil {
			return fmt.Errorf("%s: user %q: home %s: %w", env.Label, h.user, h.dir, err)
		}
	}
	return nil
}

// home is a home directory to make once the databases are written.
type homeDir struct {
	user     string
	dir      string
	uid, gid uint32
}

func (a *accounts) applyUser(u User, env *Env) (*homeDir, error) {
	if err := validAccountName(u.Name); err != nil {
		return nil, err
	}
	for _, f := range [][2]string{{"comment", u.Comment}, {"home", u.Home}, {"shell", u.Shell}, {"password", u.Password}} {
		if err := validAccountField(f[0], f[1]); err != nil {
			return nil, err
		}
	}
	if i, f := a.passwd.find(u.Name); i >= 0 {
		if len(f) < 4 {
			return nil, fmt.Errorf("malformed %s line %d", passwdPath, i+1)
		}
		if u.UID != nil && f[2] != strconv.FormatUint(uint64(*u.UID), 10) {
			return nil, fmt.Errorf("exists with uid %s, not %d", f[2], *u.UID)
		}
		if u.GID != nil && f[3] != strconv.FormatUint(uint64(*u.GID), 10) {
			return nil, fmt.Errorf("exists with gid %s, not %d", f[3], *u.GID)
		}
		return nil, a.addGroups(u)
	}

	var uid uint32
	if u.UID != nil {
		if other, ok := a.passwd.byID(2, *u.UID); ok {
			return nil, fmt.Errorf("uid %d is taken by user %q", *u.UID, other)
		}
		uid = *u.UID
	} else {
		lo, hi := a.idRange("UID", u.System)
		var err error
		if uid, err = nextFreeID(a.passwd.ids(2), lo, hi, u.System, nil); err != nil {
			return nil, err
		}
	}
	gid, err := a.primaryGroup(u, uid)
	if err != nil {
		return nil, err
	}

	dir := u.Home
	if dir == "" {
		base := a.useradd["HOME"]
		if base == "" {
			base = "/home"
		}
		dir = path.Join(base, u.Name)
	}
	if !path.IsAbs(dir) {
		return nil, fmt.Errorf("home %q is not absolute", dir)
	}
	shell := u.Shell
	if shell == "" {
		shell = a.useradd["SHELL"]
	}
	if shell == "" {
		shell = "/bin/bash"
	}
	ids := func(n uint32) string { return strconv.FormatUint(uint64(n), 10) }
	a.passwd.add(u.Name, "x", ids(uid), ids(gid), u.Comment, dir, shell)
	a.shadow.add(a.shadowFields(u, env)...)
	if err := a.addGroups(u); err != nil {
		return nil, err
	}

	create := !u.System
	if u.CreateHome != nil {
		create = *u.CreateHome
	}
	if !create {
		return nil, nil
	}
	return &homeDir{user: u.Name, dir: dir, uid: uid, gid: gid}, nil
}

// primaryGroup finds or creates the user's primary group and returns its gid.
func (a *accounts) primaryGroup(u User, uid uint32) (uint32, error) {
	if u.Group != "" {
		gid, ok := a.groupID(u.Group)
		if !ok {
			return 0, fmt.Errorf("primary group %q does not exist", u.Group)
		}
		if u.GID != nil && *u.GID != gid {
			return 0, fmt.Errorf("primary group %q has gid %d, not %d", u.Group, gid, *u.GID)
		}
		return gid, nil
	}
	if u.GID != nil {
		if _, ok := a.group.byID(2, *u.GID); ok {
			return *u.GID, nil
		}
		gid, err := a.ensureGroup(u.Name, u.GID, nil, u.System)
		if err != nil {
			return 0, fmt.Errorf("private group %q: %w", u.Name, err)
		}
		return gid, nil
	}
	// useradd -U refuses a group named like the user; reusing it is what a
	// recipe that declares the group first means.
	if gid, ok := a.groupID(u.Name); ok {
		return gid, nil
	}
	gid, err := a.ensureGroup(u.Name, nil, &uid, u.System)
	if err != nil {
		return 0, fmt.Errorf("private group %q: %w", u.Name, err)
	}
	return gid, nil
}

func (a *accounts) addGroups(u User) error {
	for _, g := range u.Groups {
		if err := a.addMember(g, u.Name); err != nil {
			return err
		}
	}
	return nil
}

// shadowFields is the /etc/shadow record useradd writes: aging from
// login.defs for regular users, none for system users.
func (a *accounts) shadowFields(u User, env *Env) []string {
	pw := u.Password
	if pw == "" {
		pw = "!"
	}
	lastchg := ""
	if days := env.Epoch.Unix() / 86400; days > 0 {
		lastchg = strconv.FormatInt(days, 10)
	}
	f := []string{u.Name, pw, lastchg, "", "", "", "", "", ""}
	if !u.System {
		f[3] = a.login["PASS_MIN_DAYS"]
		f[4] = a.login["PASS_MAX_DAYS"]
		f[5] = a.login["PASS_WARN_AGE"]
		if in := a.useradd["INACTIVE"]; in != "-1" {
			f[6] = in
		}
		f[7] = a.useradd["EXPIRE"]
	}
	return f
}

// makeHome creates the home directory and copies /etc/skel into it, unless
// it exists already (useradd leaves an existing home alone too).
func makeHome(env *Env, h homeDir, login defsFile) error {
	t := env.Tree
	dir, err := t.Resolve(h.dir, true)
	if err != nil {
		return err
	}
	if t.Get(dir) != nil {
		return nil
	}
	origin := env.Origin("", "")
	if _, err := t.MkdirAll(path.Dir(dir), rootfs.Header{Perm: 0o755, MTime: env.Epoch, Origin: origin}); err != nil {
		return err
	}
	// HOME_MODE as useradd reads it; without it 0700 (Debian's adduser
	// default) rather than useradd's umask-derived 0755.
	mode := uint32(login.num("HOME_MODE", 0o700))
	if _, err := t.Create(dir, rootfs.Header{Type: rootfs.TypeDir, Perm: mode, UID: h.uid, GID: h.gid, MTime: env.Epoch, Origin: origin}, nil); err != nil {
		return err
	}
	skel, err := t.Lookup("/etc/skel", true)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if skel.Type != rootfs.TypeDir {
		return nil
	}
	// Copy the list first: creating entries changes the tree's path cache.
	var src []string
	for _, p := range t.Paths() {
		if strings.HasPrefix(p, skel.Path+"/") {
			src = append(src, p)
		}
	}
	for _, p := range src {
		e := t.Get(p)
		dst := dir + strings.TrimPrefix(p, skel.Path)
		hd := rootfs.Header{Type: e.Type, Perm: e.Perm, UID: h.uid, GID: h.gid, MTime: env.Epoch,
			Target: e.Target, Major: e.Major, Minor: e.Minor, Xattrs: e.Xattrs,
			Origin: env.Origin("", p)}
		if e.Type != rootfs.TypeRegular {
			if _, err := t.Create(dst, hd, nil); err != nil {
				return err
			}
			continue
		}
		f, err := t.Open(p)
		if err != nil {
			return err
		}
		_, err = t.Create(dst, hd, f)
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
