package layers

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/packages/scripts"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// debsEnv is a tree holding the dpkg base, and a cache.
func debsEnv(t *testing.T) *Env {
	t.Helper()
	base := harness.DpkgBaseFor(t)
	return baseEnv(t, "", "provision.layers[0].debs", base.Tarball, base.DB)
}

func debsLayer(t *testing.T, env *Env, repo *harness.DebRepo, pkgs ...string) *Debs {
	t.Helper()
	l := NewDebs(repo.FileURL(), []string{repo.Suite}, repo.Keyring, false)
	l.Components, l.Packages = []string{repo.Component}, pkgs
	for _, in := range l.Inputs() {
		d, err := env.Cache.Fetch(context.Background(), in.URI, "")
		if err != nil {
			t.Fatal(err)
		}
		in.Digest = d
	}
	return l
}

func TestDebsOriginsAndExclude(t *testing.T) {
	repo := harness.DebRepoFor(t)
	env := debsEnv(t)
	l := debsLayer(t, env, repo, "socat")
	l.Exclude = []string{"/usr/share/doc", "/usr/share/man/**"}
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	e := env.Tree.Get("/usr/bin/socat")
	if e == nil {
		t.Fatal("no /usr/bin/socat")
	}
	if e.Origin.Member != "socat_1.7.4.4-2_amd64:/usr/bin/socat" || !strings.HasPrefix(e.Origin.Input, "sha256:") || e.Origin.Layer != env.Label {
		t.Errorf("origin = %+v", e.Origin)
	}
	for _, p := range env.Tree.Paths() {
		if strings.HasPrefix(p, "/usr/share/doc/socat") || strings.HasPrefix(p, "/usr/share/man/man1/socat") {
			t.Errorf("%s was not excluded", p)
		}
	}
	b, _, err := readTreeContent(env.Tree, "/var/lib/dpkg/info/socat.list")
	if err != nil || strings.Contains(string(b), "/usr/share/doc\n") || strings.Contains(string(b), "/usr/share/doc/") || !strings.HasPrefix(string(b), "/.\n") {
		t.Errorf("socat.list: %v\n%s", err, b)
	}
	b, _, _ = readTreeContent(env.Tree, "/var/lib/dpkg/info/socat.md5sums")
	if strings.Contains(string(b), "usr/share/doc/") || strings.Contains(string(b), "usr/share/man/") || !strings.Contains(string(b), "  usr/bin/socat\n") {
		t.Errorf("socat.md5sums:\n%s", b)
	}
}

// TestDebsDeferScripts installs anacron into a tree that has insserv,
// with which update-rc.d (anacron's postinst runs it) orders init
// scripts by their dependencies, which no offline handler does: the build
// fails naming the package and script, unless scripts may be deferred to
// first boot.
func TestDebsDeferScripts(t *testing.T) {
	repo := harness.DebRepoFor(t)
	withInsserv := func() *Env {
		env := debsEnv(t)
		if err := writeTreeFile(env, "/usr/sbin/insserv", []byte("#!/bin/sh\n"), 0o755, env.Origin("", "test")); err != nil {
			t.Fatal(err)
		}
		return env
	}
	env := withInsserv()
	err := debsLayer(t, env, repo, "anacron").Apply(context.Background(), env)
	var ue *scripts.UnhandledError
	if !errors.As(err, &ue) || ue.Package != "anacron" {
		t.Fatalf("err = %v, want an UnhandledError", err)
	}
	if !strings.Contains(err.Error(), "postinst") || !strings.Contains(err.Error(), "deferScripts") {
		t.Errorf("message does not say what to do: %v", err)
	}
	t.Log(err)

	env = withInsserv()
	l := debsLayer(t, env, repo, "anacron")
	l.DeferScripts = true
	if err := l.Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	st, err := readStatus(env.Tree)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Get("anacron").Get("Status"); got != "install ok unpacked" {
		t.Errorf("anacron: %q, want install ok unpacked", got)
	}
	if e := env.Tree.Get("/etc/systemd/system/multi-user.target.wants/stamp-dpkg-configure.service"); e == nil {
		t.Error("first-boot unit not enabled")
	}
}

// TestDebsUpgrade makes the tree claim an older socat that owned one more
// file: requesting socat upgrades it, runs the scripts with the old
// version, removes the file only the old version had and records the new
// version.
func TestDebsUpgrade(t *testing.T) {
	repo := harness.DebRepoFor(t)
	env := debsEnv(t)
	if err := debsLayer(t, env, repo, "socat").Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	st, err := readStatus(env.Tree)
	if err != nil {
		t.Fatal(err)
	}
	para := st.Get("socat")
	para.Set("Version", "1.7.4.1-1")
	if err := writeTreeFile(env, "/var/lib/dpkg/status", st.Bytes(), 0o644, rootfs.Origin{}); err != nil {
		t.Fatal(err)
	}
	list, _, _ := readTreeContent(env.Tree, "/var/lib/dpkg/info/socat.list")
	if err := writeTreeFile(env, "/var/lib/dpkg/info/socat.list", append(list, "/usr/bin/socat-old\n"...), 0o644, rootfs.Origin{}); err != nil {
		t.Fatal(err)
	}
	if err := writeTreeFile(env, "/usr/bin/socat-old", []byte("old"), 0o755, rootfs.Origin{}); err != nil {
		t.Fatal(err)
	}
	if err := writeTreeFile(env, "/var/lib/dpkg/info/socat.postrm", []byte("#!/bin/sh\nset -e\n[ \"$1\" = upgrade ] && [ \"$2\" = 1.7.4.4-2 ] && touch /var/lib/socat-postrm-ran\n"), 0o755, rootfs.Origin{}); err != nil {
		t.Fatal(err)
	}
	if err := debsLayer(t, env, repo, "socat").Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	if env.Tree.Get("/usr/bin/socat-old") != nil {
		t.Error("the file only the old version had is still there")
	}
	if env.Tree.Get("/var/lib/socat-postrm-ran") == nil {
		t.Error("the old postrm did not run with upgrade NEWVERSION")
	}
	if env.Tree.Get("/usr/bin/socat") == nil {
		t.Error("/usr/bin/socat is gone")
	}
	st, _ = readStatus(env.Tree)
	if v := st.Get("socat").Get("Version"); v != "1.7.4.4-2" {
		t.Errorf("status says socat %s", v)
	}
}

// TestDebsOnBaseWithoutDpkgDatabase installs onto harness.Base, which has
// no /var/lib/dpkg/status: everything counts as not installed, so the C
// library and the rest come from the repository too, with their scripts.
func TestDebsOnBaseWithoutDpkgDatabase(t *testing.T) {
	repo := harness.DebRepoFor(t)
	env := baseEnv(t, "", "provision.layers[0].debs", harness.Base(t))
	tree := env.Tree
	if tree.Get("/var/lib/dpkg/status") != nil {
		t.Fatal("harness.Base has a dpkg status now; this test is about a base without one")
	}
	if err := debsLayer(t, env, repo, "iptables", "socat").Apply(context.Background(), env); err != nil {
		t.Fatal(err)
	}
	st, err := readStatus(tree)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"iptables", "socat", "libc6"} {
		if got := st.Get(p).Get("Status"); got != "install ok installed" {
			t.Errorf("%s: %q", p, got)
		}
	}
	if e := tree.Get("/etc/alternatives/iptables"); e == nil || e.Target != "/usr/sbin/iptables-nft" {
		t.Errorf("/etc/alternatives/iptables = %+v", e)
	}
}
