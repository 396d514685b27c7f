package layers

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/rootfstest"
	"github.com/stamp-dev/stamp/test/harness"
)

// A Debian bookworm base, as base-passwd and a few packages leave it.
const (
	fixPasswd = `root:x:0:0:root:/root:/bin/bash
daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin
bin:x:2:2:bin:/bin:/usr/sbin/nologin
sys:x:3:3:sys:/dev:/usr/sbin/nologin
sync:x:4:65534:sync:/bin:/bin/sync
_apt:x:42:65534::/nonexistent:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
cloudsdk:x:1000:1000::/home/cloudsdk:/bin/bash
systemd-network:x:998:998:systemd Network Management:/:/usr/sbin/nologin
systemd-timesync:x:997:997:systemd Time Synchronization:/:/usr/sbin/nologin
messagebus:x:100:102::/nonexistent:/usr/sbin/nologin
polkitd:x:996:996:polkit:/nonexistent:/usr/sbin/nologin
postgres:x:101:104:PostgreSQL administrator,,,:/var/lib/postgresql:/bin/bash
`
	fixGroup = `root:x:0:
daemon:x:1:
adm:x:4:
sudo:x:27:
shadow:x:42:
users:x:100:
nogroup:x:65534:
cloudsdk:x:1000:
_ssh:x:101:
systemd-journal:x:999:
systemd-network:x:998:
systemd-timesync:x:997:
messagebus:x:102:
polkitd:x:996:
ssl-cert:x:103:postgres
postgres:x:104:
`
	fixShadow = `root:*:20228:0:99999:7:::
daemon:*:20228:0:99999:7:::
bin:*:20228:0:99999:7:::
sys:*:20228:0:99999:7:::
sync:*:20228:0:99999:7:::
_apt:*:20228:0:99999:7:::
nobody:*:20228:0:99999:7:::
cloudsdk:!:20263::::::
systemd-network:!*:20263::::::
systemd-timesync:!*:20263::::::
messagebus:!:20263::::::
polkitd:!*:20582::::::
postgres:!:20593::::::
`
	fixGshadow = `root:*::
daemon:*::
adm:*::
sudo:*::
shadow:*::
users:*::
nogroup:*::
cloudsdk:!::
_ssh:!::
systemd-journal:!*::
systemd-network:!*::
systemd-timesync:!*::
messagebus:!::
polkitd:!*::
ssl-cert:!::postgres
postgres:!::
`
	fixLoginDefs = `# /etc/login.defs - Configuration control definitions for the login package.
MAIL_DIR        /var/mail
UMASK		022
HOME_MODE	0700
PASS_MAX_DAYS	99999
PASS_MIN_DAYS	0
PASS_WARN_AGE	7
UID_MIN			 1000
UID_MAX			60000
#SYS_UID_MIN		  100
#SYS_UID_MAX		  999
GID_MIN			 1000
GID_MAX			60000
USERGROUPS_ENAB yes
ENCRYPT_METHOD SHA512
`
)

var acctEpoch = time.Unix(1700000000, 0).UTC() // day 19675

func acctTestEnv(t *testing.T) *Env {
	t.Helper()
	tree := rootfstest.New(t, acctEpoch)
	log := logrus.New()
	log.SetOutput(io.Discard)
	return &Env{Tree: tree, Log: log, Epoch: acctEpoch, Label: "customize[0].test"}
}

func acctPutFile(t *testing.T, env *Env, p, content string, perm, uid, gid uint32) {
	t.Helper()
	h := rootfs.Header{Type: rootfs.TypeRegular, Perm: perm, UID: uid, GID: gid, MTime: time.Unix(1600000000, 0)}
	if _, err := env.Tree.Create(p, h, strings.NewReader(content)); err != nil {
		t.Fatal(err)
	}
}

func acctReadFile(t *testing.T, env *Env, p string) string {
	t.Helper()
	b, e, err := readTreeContent(env.Tree, p)
	if err != nil || e == nil {
		t.Fatalf("read %s: %v (entry %v)", p, err, e)
	}
	return string(b)
}

// debianAccounts fills env's tree with the fixture and returns the files as
// a map from tree path to content, for writing the same into an oracle root.
func debianAccounts(t *testing.T, env *Env) map[string]string {
	files := map[string]string{passwdPath: fixPasswd, groupPath: fixGroup, shadowPath: fixShadow, gshadowPath: fixGshadow, loginDefsPath: fixLoginDefs}
	acctPutFile(t, env, passwdPath, fixPasswd, 0o644, 0, 0)
	acctPutFile(t, env, groupPath, fixGroup, 0o644, 0, 0)
	acctPutFile(t, env, shadowPath, fixShadow, 0o640, 0, 42)
	acctPutFile(t, env, gshadowPath, fixGshadow, 0o640, 0, 42)
	acctPutFile(t, env, loginDefsPath, fixLoginDefs, 0o644, 0, 0)
	return files
}

func acctU32(n uint32) *uint32 { return &n }
func acctBool(b bool) *bool    { return &b }

func acctApply(t *testing.T, env *Env, l Layer) {
	t.Helper()
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
}

// The oracle is shadow-utils itself: useradd/groupadd --prefix on a plain
// directory holding the same files must write the same bytes.
func TestUsersMatchUseradd(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("useradd --prefix needs root")
	}
	harness.RequireTools(t, "useradd", "groupadd")
	env := acctTestEnv(t)
	files := debianAccounts(t, env)
	oracle := t.TempDir()
	for p, c := range files {
		if err := os.MkdirAll(filepath.Join(oracle, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(oracle, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command(args[0], append([]string{"--prefix", oracle}, args[1:]...)...)
		cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(acctEpoch.Unix(), 10))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	// Home directories are left out of the oracle run: useradd --prefix
	// copies the host's /etc/skel, not the prefix's.
	run("useradd", "-G", "sudo,users", "capi")
	acctApply(t, env, &Users{Users: []User{{Name: "capi", Groups: []string{"sudo", "users"}, CreateHome: acctBool(false)}}})
	run("useradd", "-r", "svc")
	run("useradd", "-r", "-s", "/bin/false", "-c", "Service two", "svc2")
	acctApply(t, env, &Users{Users: []User{{Name: "svc", System: true}, {Name: "svc2", System: true, Shell: "/bin/false", Comment: "Service two"}}})
	run("groupadd", "docker")
	run("groupadd", "-r", "sysg")
	acctApply(t, env, &Groups{Groups: []Group{{Name: "docker"}, {Name: "sysg", System: true}}})
	run("useradd", "-p", "$6$salt$hash", "-G", "docker", "bob")
	run("useradd", "-u", "1500", "-g", "users", "-d", "/srv/carol", "carol")
	run("useradd", "-r", "-u", "120", "-G", "docker,sudo", "sysx")
	acctApply(t, env, &Users{Users: []User{
		{Name: "bob", Password: "$6$salt$hash", Groups: []string{"docker"}, CreateHome: acctBool(false)},
		{Name: "carol", UID: acctU32(1500), Group: "users", Home: "/srv/carol", CreateHome: acctBool(false)},
		{Name: "sysx", UID: acctU32(120), System: true, Groups: []string{"docker", "sudo"}},
	}})
	run("useradd", "dave")
	acctApply(t, env, &Users{Users: []User{{Name: "dave", CreateHome: acctBool(false)}}})

	for _, p := range []string{passwdPath, groupPath, shadowPath, gshadowPath} {
		want, err := os.ReadFile(filepath.Join(oracle, p))
		if err != nil {
			t.Fatal(err)
		}
		if got := acctReadFile(t, env, p); got != string(want) {
			t.Errorf("%s differs from useradd's:\n--- got\n%s--- want\n%s", p, got, want)
		}
	}
}

func TestUsersExactFiles(t *testing.T) {
	env := acctTestEnv(t)
	debianAccounts(t, env)
	acctPutFile(t, env, "/etc/skel/.bashrc", "# bashrc\n", 0o644, 0, 0)
	if _, err := env.Tree.Create("/etc/skel/.config", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o755}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Tree.Create("/etc/skel/.config/link", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "../.bashrc"}, nil); err != nil {
		t.Fatal(err)
	}
	layer := &Users{Users: []User{
		{Name: "capi", UID: acctU32(1000 + 500), Groups: []string{"sudo"}, Shell: "/bin/bash", Comment: "Cluster API"},
		{Name: "runner", System: true},
	}}
	acctApply(t, env, layer)

	wantTail := map[string]string{
		passwdPath:  "capi:x:1500:1500:Cluster API:/home/capi:/bin/bash\nrunner:x:999:995::/home/runner:/bin/bash\n",
		groupPath:   "capi:x:1500:\nrunner:x:995:\n",
		shadowPath:  "capi:!:19675:0:99999:7:::\nrunner:!:19675::::::\n",
		gshadowPath: "capi:!::\nrunner:!::\n",
	}
	fixtures := map[string]string{passwdPath: fixPasswd, groupPath: strings.Replace(fixGroup, "sudo:x:27:\n", "sudo:x:27:capi\n", 1),
		shadowPath: fixShadow, gshadowPath: strings.Replace(fixGshadow, "sudo:*::\n", "sudo:*::capi\n", 1)}
	for _, p := range []string{passwdPath, groupPath, shadowPath, gshadowPath} {
		if got, want := acctReadFile(t, env, p), fixtures[p]+wantTail[p]; got != want {
			t.Errorf("%s:\n--- got\n%s--- want\n%s", p, got, want)
		}
	}
	// Replaced files keep their mode and owner and take the epoch.
	sh := env.Tree.Get(shadowPath)
	if sh.Perm != 0o640 || sh.UID != 0 || sh.GID != 42 || !sh.MTime.Equal(acctEpoch) {
		t.Errorf("shadow: perm %o owner %d:%d mtime %v", sh.Perm, sh.UID, sh.GID, sh.MTime)
	}

	// The home of the regular user, with skel owned by them; none for the system user.
	for _, c := range []struct {
		path     string
		typ      rootfs.Type
		perm     uint32
		uid, gid uint32
		target   string
	}{
		{"/home", rootfs.TypeDir, 0o755, 0, 0, ""},
		{"/home/capi", rootfs.TypeDir, 0o700, 1500, 1500, ""},
		{"/home/capi/.bashrc", rootfs.TypeRegular, 0o644, 1500, 1500, ""},
		{"/home/capi/.config", rootfs.TypeDir, 0o755, 1500, 1500, ""},
		{"/home/capi/.config/link", rootfs.TypeSymlink, 0o777, 1500, 1500, "../.bashrc"},
	} {
		e := env.Tree.Get(c.path)
		if e == nil {
			t.Errorf("%s missing", c.path)
			continue
		}
		if e.Type != c.typ || e.Perm != c.perm || e.UID != c.uid || e.GID != c.gid || e.Target != c.target {
			t.Errorf("%s: %v %o %d:%d %q, want %v %o %d:%d %q", c.path, e.Type, e.Perm, e.UID, e.GID, e.Target, c.typ, c.perm, c.uid, c.gid, c.target)
		}
	}
	if got := acctReadFile(t, env, "/home/capi/.bashrc"); got != "# bashrc\n" {
		t.Errorf(".bashrc = %q", got)
	}
	if env.Tree.Get("/home/runner") != nil {
		t.Error("system user got a home directory")
	}

	// Applying the same layer again changes nothing, not even mtimes.
	before := acctSnapshot(env)
	acctApply(t, env, layer)
	if after := acctSnapshot(env); after != before {
		t.Errorf("second apply changed the tree:\n%s\n---\n%s", before, after)
	}
}

// snapshot prints every entry's metadata, for comparing trees.
func acctSnapshot(env *Env) string {
	var b bytes.Buffer
	env.Tree.Walk(func(e *rootfs.Entry) error {
		b.WriteString(e.Path + " " + e.Type.String() + " " + strconv.FormatUint(uint64(e.Perm), 8) + " " +
			strconv.Itoa(int(e.UID)) + ":" + strconv.Itoa(int(e.GID)) + " " + e.MTime.String() + " " + e.Digest + " " + e.Target + "\n")
		return nil
	})
	return b.String()
}

func TestUsersEmptyTree(t *testing.T) {
	env := acctTestEnv(t)
	acctApply(t, env, &Groups{Groups: []Group{{Name: "shadow", GID: acctU32(42)}}})
	acctApply(t, env, &Users{Users: []User{{Name: "a", CreateHome: acctBool(false)}, {Name: "b", System: true, UID: acctU32(500)}}})
	want := map[string]string{
		passwdPath:  "a:x:1000:1000::/home/a:/bin/bash\nb:x:500:500::/home/b:/bin/bash\n",
		groupPath:   "shadow:x:42:\na:x:1000:\nb:x:500:\n",
		shadowPath:  "a:!:19675::::::\nb:!:19675::::::\n",
		gshadowPath: "shadow:!::\na:!::\nb:!::\n",
	}
	for p, perm := range map[string]uint32{passwdPath: 0o644, groupPath: 0o644, shadowPath: 0o640, gshadowPath: 0o640} {
		if got := acctReadFile(t, env, p); got != want[p] {
			t.Errorf("%s:\n--- got\n%s--- want\n%s", p, got, want[p])
		}
		e := env.Tree.Get(p)
		wantGID := uint32(0)
		if p == shadowPath || p == gshadowPath {
			wantGID = 42
		}
		if e.Perm != perm || e.UID != 0 || e.GID != wantGID {
			t.Errorf("%s: perm %o owner %d:%d", p, e.Perm, e.UID, e.GID)
		}
	}
}

// Lines that are not records (comments, blanks, NIS) stay where they are,
// new records go before NIS entries, and a missing final newline is mended.
func TestUsersKeepsOddLines(t *testing.T) {
	env := acctTestEnv(t)
	acctPutFile(t, env, passwdPath, "# local users\nroot:x:0:0:root:/root:/bin/bash\n\n+@netgroup::::::", 0o644, 0, 0)
	acctPutFile(t, env, groupPath, "root:x:0:\nwheel:x:10:root,,ops", 0o644, 0, 0)
	acctApply(t, env, &Users{Users: []User{{Name: "ops", Groups: []string{"wheel"}, CreateHome: acctBool(false), Shell: "/bin/sh"}}})
	if got, want := acctReadFile(t, env, passwdPath), "# local users\nroot:x:0:0:root:/root:/bin/bash\n\nops:x:1000:1000::/home/ops:/bin/sh\n+@netgroup::::::\n"; got != want {
		t.Errorf("passwd:\n%q\nwant\n%q", got, want)
	}
	// ops was already listed in wheel: no duplicate; root stays first.
	if got, want := acctReadFile(t, env, groupPath), "root:x:0:\nwheel:x:10:root,,ops\nops:x:1000:\n"; got != want {
		t.Errorf("group:\n%q\nwant\n%q", got, want)
	}
}

func TestUsersFollowsSymlinkedEtc(t *testing.T) {
	env := acctTestEnv(t)
	acctPutFile(t, env, "/usr/share/base/passwd", "root:x:0:0:root:/root:/bin/bash\n", 0o600, 0, 0)
	if _, err := env.Tree.Create(passwdPath, rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "../usr/share/base/passwd"}, nil); err != nil {
		t.Fatal(err)
	}
	acctApply(t, env, &Users{Users: []User{{Name: "x", UID: acctU32(2000), GID: acctU32(2000), CreateHome: acctBool(false)}}})
	if e := env.Tree.Get(passwdPath); e.Type != rootfs.TypeSymlink {
		t.Errorf("/etc/passwd replaced: %v", e.Type)
	}
	if got := acctReadFile(t, env, "/usr/share/base/passwd"); got != "root:x:0:0:root:/root:/bin/bash\nx:x:2000:2000::/home/x:/bin/bash\n" {
		t.Errorf("passwd = %q", got)
	}
	if e := env.Tree.Get("/usr/share/base/passwd"); e.Perm != 0o600 {
		t.Errorf("perm %o", e.Perm)
	}
}

func TestUsersConflicts(t *testing.T) {
	for _, c := range []struct {
		name string
		user User
		want string
	}{
		{"uid differs", User{Name: "cloudsdk", UID: acctU32(1001)}, `user "cloudsdk": exists with uid 1000, not 1001`},
		{"uid taken", User{Name: "new", UID: acctU32(1000)}, `user "new": uid 1000 is taken by user "cloudsdk"`},
		{"no group", User{Name: "new", Group: "nosuch"}, `user "new": primary group "nosuch" does not exist`},
		{"no supplementary", User{Name: "new", Groups: []string{"sudo", "nosuch"}}, `user "new": group "nosuch" does not exist`},
		{"gid mismatch", User{Name: "new", Group: "sudo", GID: acctU32(28)}, `primary group "sudo" has gid 27, not 28`},
		{"gid of an existing group", User{Name: "new", GID: acctU32(27)}, ``},
		{"bad name", User{Name: "a:b"}, `invalid name "a:b"`},
		{"bad shell", User{Name: "ok", Shell: "/bin/sh\nroot::0:0"}, `shell`},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := acctTestEnv(t)
			debianAccounts(t, env)
			before := acctSnapshot(env)
			err := (&Users{Users: []User{c.user}}).Apply(context.Background(), env)
			if c.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), env.Label+": ") {
				t.Fatalf("error %v, want one starting with the label and containing %q", err, c.want)
			}
			if after := acctSnapshot(env); after != before {
				t.Error("a failed layer changed the tree")
			}
		})
	}
}

// A user may name a group made earlier in the same layer sequence, and the
// existing user is kept while gaining memberships.
func TestUsersExistingGetsGroups(t *testing.T) {
	env := acctTestEnv(t)
	debianAccounts(t, env)
	acctApply(t, env, &Groups{Groups: []Group{{Name: "docker", GID: acctU32(990)}}})
	acctApply(t, env, &Users{Users: []User{{Name: "cloudsdk", UID: acctU32(1000), Groups: []string{"docker"}}}})
	if got := acctReadFile(t, env, passwdPath); got != fixPasswd {
		t.Errorf("passwd changed:\n%s", got)
	}
	if got := acctReadFile(t, env, groupPath); !strings.HasSuffix(got, "postgres:x:104:\ndocker:x:990:cloudsdk\n") {
		t.Errorf("group:\n%s", got)
	}
	if env.Tree.Get("/home/cloudsdk") != nil {
		t.Error("an existing user got a new home")
	}
}

func TestNextFreeID(t *testing.T) {
	for _, c := range []struct {
		used      []uint32
		lo, hi    uint32
		system    bool
		preferred *uint32
		want      uint32
	}{
		{nil, 1000, 60000, false, nil, 1000},
		{[]uint32{0, 1000, 1005, 65534}, 1000, 60000, false, nil, 1006},
		{[]uint32{60000}, 1000, 60000, false, nil, 1000}, // wraps to reuse gaps
		{nil, 101, 999, true, nil, 999},
		{[]uint32{999, 998}, 101, 999, true, nil, 997},
		{[]uint32{999, 500}, 101, 999, true, nil, 499},
		{[]uint32{101, 999}, 101, 999, true, nil, 998}, // lowest at the bottom: wrap to the top
		{[]uint32{1000}, 1000, 60000, false, acctU32(1000), 1001},
		{[]uint32{1000}, 1000, 60000, false, acctU32(1200), 1200},
		{[]uint32{1000}, 1000, 60000, false, acctU32(5), 1001}, // out of range
	} {
		got, err := nextFreeID(c.used, c.lo, c.hi, c.system, c.preferred)
		if err != nil || got != c.want {
			t.Errorf("nextFreeID(%v, %d, %d, %v) = %d, %v; want %d", c.used, c.lo, c.hi, c.system, got, err, c.want)
		}
	}
	if _, err := nextFreeID([]uint32{1, 2}, 1, 2, false, nil); err == nil {
		t.Error("full range: no error")
	}
}
