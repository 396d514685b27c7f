package layers

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// runEnv is a tree holding the test base (a real Debian minbase).
func runEnv(t *testing.T) *Env {
	t.Helper()
	return baseEnv(t, harness.TempDirFor65534(t), "provision.layers[2].run", harness.Base(t))
}

// A run step's additions, removals, modes and chowns reach the index. As
// root it may chown to anyone; in a user namespace (a build that is not
// root) only to root, the one id mapped there.
func TestRunFoldsBackWithOwners(t *testing.T) {
	harness.RequireTools(t, "unshare", "chroot", "mount")
	env := runEnv(t)
	if err := (&Files{Items: []File{{Path: "/etc/doomed", Content: ptrTo("x")}}}).Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	owner := "1000:1001"
	if os.Geteuid() != 0 {
		owner = "0:0"
	}
	l := &Run{Command: []string{"/bin/sh", "-c", `set -e
mkdir -p /opt/app
printf '%s %s\n' "$GREETING" "$SOURCE_DATE_EPOCH" > /opt/app/greeting
chmod 0640 /opt/app/greeting
chown ` + owner + ` /opt/app/greeting
rm /etc/doomed`}, Env: map[string]string{"GREETING": "hello"}}
	if err := l.Precheck(runtime.GOARCH); err != nil {
		t.Fatalf("Precheck on a machine that can run it: %v", err)
	}
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	e := env.Tree.Get("/opt/app/greeting")
	if e == nil {
		t.Fatal("/opt/app/greeting not in the index")
	}
	wantUID, wantGID := uint32(1000), uint32(1001)
	if os.Geteuid() != 0 {
		wantUID, wantGID = 0, 0
	}
	if e.UID != wantUID || e.GID != wantGID || e.Perm != 0o640 {
		t.Errorf("greeting: %d:%d %o, want %d:%d 640", e.UID, e.GID, e.Perm, wantUID, wantGID)
	}
	if e.Origin.Layer != env.Label || !strings.HasPrefix(e.Origin.Member, "/bin/sh -c") {
		t.Errorf("origin %+v", e.Origin)
	}
	b, _, err := readTreeContent(env.Tree, "/opt/app/greeting")
	if err != nil || string(b) != "hello 1700000000\n" {
		t.Errorf("greeting %q (%v)", b, err)
	}
	if d := env.Tree.Get("/opt/app"); d == nil || d.Perm != 0o755 || d.UID != 0 {
		t.Errorf("/opt/app: %+v", d)
	}
	if env.Tree.Get("/etc/doomed") != nil {
		t.Error("/etc/doomed is still in the index")
	}
}

// A failing program fails the step, naming it, with the program's status
// and output.
func TestRunFailureNamesStep(t *testing.T) {
	harness.RequireTools(t, "unshare", "chroot", "mount")
	env := runEnv(t)
	err := (&Run{Command: []string{"/bin/sh", "-c", "echo cannot >&2; exit 7"}}).Apply(context.Background(), env)
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"provision.layers[2].run", "/bin/sh exited with status 7", "cannot"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// As root the program sees the owners the index holds, and a chown it
// makes back to root is kept; paths it does not touch keep their origin.
// In a user namespace every path looks root's to it, and the index keeps
// what it had (the limit the README states).
func TestRunSeesIndexOwners(t *testing.T) {
	harness.RequireTools(t, "unshare", "chroot", "mount")
	env := runEnv(t)
	env.Label = "customize.layers[0].files"
	files := &Files{Items: []File{
		{Path: "/srv/owned", Content: ptrTo("x"), Owner: Owner{User: "1000", Group: "1001"}},
		{Path: "/srv/kept", Content: ptrTo("y"), Owner: Owner{User: "1002", Group: "1003"}, Mode: ptrTo(uint32(0o4755))},
	}}
	if err := files.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	env.Label = "provision.layers[2].run"
	l := &Run{Command: []string{"/bin/sh", "-c", "stat -c %u:%g /srv/owned /srv/kept > /srv/seen; chown 0:0 /srv/owned"}}
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	b, _, err := readTreeContent(env.Tree, "/srv/seen")
	if err != nil {
		t.Fatal(err)
	}
	owned, kept := env.Tree.Get("/srv/owned"), env.Tree.Get("/srv/kept")
	if os.Geteuid() == 0 {
		if string(b) != "1000:1001\n1002:1003\n" {
			t.Errorf("the program saw owners %q, want the index's", b)
		}
		if owned.UID != 0 || owned.GID != 0 || owned.Origin.Layer != env.Label {
			t.Errorf("/srv/owned after chown 0:0: %d:%d from %q", owned.UID, owned.GID, owned.Origin.Layer)
		}
	} else {
		if string(b) != "0:0\n0:0\n" {
			t.Errorf("in a user namespace the program saw %q", b)
		}
		if owned.UID != 1000 || owned.GID != 1001 {
			t.Errorf("/srv/owned: %d:%d", owned.UID, owned.GID)
		}
	}
	if kept.UID != 1002 || kept.GID != 1003 || kept.Perm != 0o4755 || kept.Origin.Layer != "customize.layers[0].files" {
		t.Errorf("/srv/kept: %d:%d %o from %q, want 1002:1003 4755 from the files layer", kept.UID, kept.GID, kept.Perm, kept.Origin.Layer)
	}
}
