package scripts

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/packages/deb"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

var epoch = time.Unix(1700000000, 0).UTC()

func newTree(t *testing.T) *rootfs.Tree {
	t.Helper()
	tr, err := rootfs.New(filepath.Join(t.TempDir(), "tree"), rootfs.Options{DefaultMTime: epoch})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// unpack extracts a real .deb into the tree and returns its control data.
func unpack(t *testing.T, tr *rootfs.Tree, debPath string) *deb.Control {
	t.Helper()
	f, err := os.Open(debPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := deb.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := r.Data()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rootfs.Extract(context.Background(), tr, data, rootfs.ExtractOptions{KeepDirSymlinks: true}); err != nil {
		t.Fatal(err)
	}
	return r.Control()
}

func file(t *testing.T, tr *rootfs.Tree, p, content string) {
	t.Helper()
	if _, err := tr.MkdirAll(filepath.Dir(p), rootfs.Header{Perm: 0o755, MTime: epoch}); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Create(p, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o755, MTime: epoch}, strings.NewReader(content)); err != nil {
		t.Fatal(err)
	}
}

func env(tr *rootfs.Tree) *Env {
	return &Env{Tree: tr, Arch: "amd64", Epoch: epoch}
}

func postinst(t *testing.T, tr *rootfs.Tree, pkg string, c *deb.Control) error {
	t.Helper()
	return Run(context.Background(), env(tr), Script{Package: pkg, Name: "postinst", Body: c.Files["postinst"]}, "configure", "")
}

// links lists every symlink under the given tree paths as "path -> target",
// and the content of every regular file, sorted.
func snapshot(tr *rootfs.Tree, prefixes ...string) []string {
	var out []string
	for _, p := range tr.Paths() {
		for _, pre := range prefixes {
			if !strings.HasPrefix(p, pre) {
				continue
			}
			e := tr.Get(p)
			switch e.Type {
			case rootfs.TypeSymlink:
				out = append(out, p+" -> "+e.Target)
			case rootfs.TypeRegular:
				f, _ := tr.Open(p)
				var b bytes.Buffer
				b.ReadFrom(f)
				f.Close()
				out = append(out, p+" = "+b.String())
			case rootfs.TypeDir:
				out = append(out, p+"/")
			}
		}
	}
	return out
}

// hostSnapshot is snapshot for a host directory.
func hostSnapshot(t *testing.T, root string, prefixes ...string) []string {
	var out []string
	filepath.Walk(root, func(hp string, fi os.FileInfo, err error) error {
		if err != nil {
			return nil
		}
		p := strings.TrimPrefix(hp, root)
		for _, pre := range prefixes {
			if !strings.HasPrefix(p, pre) {
				continue
			}
			switch {
			case fi.Mode()&os.ModeSymlink != 0:
				target, _ := os.Readlink(hp)
				out = append(out, p+" -> "+target)
			case fi.Mode().IsRegular():
				b, _ := os.ReadFile(hp)
				out = append(out, p+" = "+string(b))
			case fi.IsDir():
				out = append(out, p+"/")
			}
		}
		return nil
	})
	sort.Strings(out)
	return out
}

// TestAlternativesMatchUpdateAlternatives runs the real iptables and
// ebtables postinsts twice: through Run on a tree, and with /bin/sh on the
// host against a directory where update-alternatives is the real one with
// --root. The links and the alternatives database must be equal.
func TestAlternativesMatchUpdateAlternatives(t *testing.T) {
	harness.RequireTools(t, "update-alternatives", "sh")
	repo := harness.DebRepoFor(t)
	orders := [][]string{{"iptables", "ebtables"}, {"ebtables", "iptables"}}
	for _, order := range orders {
		t.Run(strings.Join(order, "-then-"), func(t *testing.T) {
			tr := newTree(t)
			host := t.TempDir()
			wrap := t.TempDir()
			os.WriteFile(filepath.Join(wrap, "update-alternatives"), []byte("#!/bin/sh\nexec /usr/bin/update-alternatives --root "+host+" --log /dev/null \"$@\"\n"), 0o755)
			ctrls := map[string]*deb.Control{}
			for _, p := range order {
				ctrls[p] = unpack(t, tr, filepath.Join(repo.Dir, repo.Debs[p]))
				if out, err := exec.Command("dpkg-deb", "-x", filepath.Join(repo.Dir, repo.Debs[p]), host).CombinedOutput(); err != nil {
					t.Fatalf("%v %s", err, out)
				}
			}
			os.MkdirAll(filepath.Join(host, "var/lib/dpkg/alternatives"), 0o755)
			for _, p := range order {
				// ebtables' postinst also calls dpkg and friends; on the
				// host only the alternatives part is of interest.
				body := string(ctrls[p].Files["postinst"])
				var keep []string
				skip := false
				for _, l := range strings.Split(body, "\n") {
					if strings.Contains(l, `if [ "$1" = "configure" ]; then`) && p == "ebtables" && !skip && !strings.Contains(body[:strings.Index(body, l)], "update-alternatives") {
						skip = true
					}
					if skip {
						if strings.HasPrefix(l, "fi") {
							skip = false
						}
						continue
					}
					if strings.Contains(l, "dpkg-maintscript-helper") {
						continue
					}
					keep = append(keep, l)
				}
				cmd := exec.Command("sh", "-c", strings.Join(keep, "\n"), "postinst", "configure", "")
				cmd.Env = []string{"PATH=" + wrap + ":/usr/bin:/bin"}
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("host %s postinst: %v\n%s", p, err, out)
				}
				if err := postinst(t, tr, p, ctrls[p]); err != nil {
					t.Fatalf("Run %s postinst: %v", p, err)
				}
			}
			prefixes := []string{"/etc/alternatives/", "/var/lib/dpkg/alternatives/", "/usr/sbin/"}
			got := snapshot(tr, prefixes...)
			want := hostSnapshot(t, host, prefixes...)
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("differs from update-alternatives:\n--- ours\n%s\n--- update-alternatives\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if e := tr.Get("/etc/alternatives/iptables"); e == nil || e.Target != "/usr/sbin/iptables-nft" {
				t.Errorf("/etc/alternatives/iptables = %+v, want the nft variant", e)
			}
		})
	}
}

// TestRealScripts runs the maintainer scripts of real packages and checks
// their effects.
func TestRealScripts(t *testing.T) {
	repo := harness.DebRepoFor(t)
	tr := newTree(t)
	deb := func(p string) *deb.Control { return unpack(t, tr, filepath.Join(repo.Dir, repo.Debs[p])) }

	start := time.Now()
	defer func() { t.Logf("took %s", time.Since(start)) }()
	nb := deb("netbase")
	if err := postinst(t, tr, "netbase", nb); err != nil {
		t.Fatal(err)
	}
	lw := deb("libwrap0")
	if err := postinst(t, tr, "libwrap0", lw); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/etc/hosts", "/etc/networks", "/etc/hosts.allow", "/etc/hosts.deny"} {
		if e := tr.Get(p); e == nil || e.Size == 0 || e.Perm != 0o644 {
			t.Errorf("%s: %+v, want a 0644 file written by the postinst", p, e)
		}
	}
	hosts := strings.Join(snapshot(tr, "/etc/hosts"), "\n")
	if !strings.Contains(hosts, "127.0.0.1\tlocalhost\n") {
		t.Errorf("/etc/hosts (a <<- here-document) = %q", hosts)
	}

	t.Logf("netbase, libwrap0: %s", time.Since(start))
	ct := deb("containerd")
	t.Logf("unpacked containerd: %s", time.Since(start))
	if err := postinst(t, tr, "containerd", ct); err != nil {
		t.Fatal(err)
	}
	eb := deb("ebtables")
	if err := Run(context.Background(), env(tr), Script{Package: "ebtables", Name: "preinst", Body: eb.Files["preinst"]}, "install"); err != nil {
		t.Fatal(err)
	}
	if err := postinst(t, tr, "ebtables", eb); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(snapshot(tr, "/etc/systemd/", "/var/lib/systemd/"), "\n")
	want := strings.Join([]string{
		"/etc/systemd/system/",
		"/etc/systemd/system/multi-user.target.wants/",
		"/etc/systemd/system/multi-user.target.wants/containerd.service -> /lib/systemd/system/containerd.service",
		"/var/lib/systemd/deb-systemd-helper-enabled/",
		"/var/lib/systemd/deb-systemd-helper-enabled/containerd.service.dsh-also = /etc/systemd/system/multi-user.target.wants/containerd.service\n",
		"/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/",
		"/var/lib/systemd/deb-systemd-helper-enabled/multi-user.target.wants/containerd.service = ",
	}, "\n")
	if got != want {
		t.Errorf("systemd state:\n%s\nwant:\n%s", got, want)
	}

}

func TestUnhandled(t *testing.T) {
	tr := newTree(t)
	for name, body := range map[string]string{
		"command":     "#!/bin/sh\nset -e\nif [ \"$1\" = configure ]; then\n  frobnicate --all\nfi\n",
		"interpreter": "#!/usr/bin/perl\nprint 1;\n",
	} {
		t.Run(name, func(t *testing.T) {
			// Commands the tree has but no handler covers; one the tree
			// lacks just fails with 127, as in the image.
			file(t, tr, "/usr/bin/frobnicate", "#!/bin/sh\n")
			err := Run(context.Background(), env(tr), Script{Package: "foo", Name: "postinst", Body: []byte(body)}, "configure", "")
			var ue *UnhandledError
			if !errors.As(err, &ue) || ue.Package != "foo" || ue.Script != "postinst" {
				t.Fatalf("err = %v, want an UnhandledError naming foo postinst", err)
			}
			t.Log(err)
		})
	}
	// Setting debconf up without asking anything is fine offline.
	if err := Run(context.Background(), env(tr), Script{Package: "foo", Name: "postinst", Body: []byte("#!/bin/sh\nset -e\n. /usr/share/debconf/confmodule\ndb_version 2.0\ndb_stop\n")}, "configure", ""); err != nil {
		t.Errorf("sourcing confmodule: %v", err)
	}
	err0 := Run(context.Background(), env(tr), Script{Package: "foo", Name: "postinst", Body: []byte("#!/bin/sh\nset -e\nnot-in-the-tree\n")}, "configure", "")
	var se0 *ScriptError
	if !errors.As(err0, &se0) || se0.Status != 127 {
		t.Errorf("missing command: err = %v, want exit status 127", err0)
	}
	// A failing script is a ScriptError with its output.
	err := Run(context.Background(), env(tr), Script{Package: "foo", Name: "postinst", Body: []byte("#!/bin/sh\necho broken >&2\nexit 3\n")}, "configure", "")
	var se *ScriptError
	if !errors.As(err, &se) || se.Status != 3 || !strings.Contains(se.Output, "broken") {
		t.Fatalf("err = %v", err)
	}
}

func TestCompareVersionsNL(t *testing.T) {
	for _, c := range []struct {
		a, op, b string
		want     bool
	}{
		{"", "le", "2.0", true}, {"", "le-nl", "2.0", false}, {"1.0", "lt", "2.0", true},
		{"2.0", "ge", "2.0", true}, {"", "lt-nl", "1", false}, {"1", "gt-nl", "", false},
	} {
		got, err := compareVersions(c.a, c.op, c.b)
		if err != nil || got != c.want {
			t.Errorf("%q %s %q = %v, %v; want %v", c.a, c.op, c.b, got, err, c.want)
		}
		if _, err := exec.LookPath("dpkg"); err == nil {
			real := exec.Command("dpkg", "--compare-versions", c.a, c.op, c.b).Run() == nil
			if real != c.want {
				t.Errorf("table wrong for %q %s %q: dpkg says %v", c.a, c.op, c.b, real)
			}
		}
	}
}

// TestApplyMode checks symbolic and octal modes against the real chmod.
func TestApplyMode(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	os.WriteFile(f, nil, 0o644)
	for _, c := range []struct {
		spec string
		in   uint32
	}{
		{"755", 0o600}, {"+x", 0o644}, {"u+x", 0o644}, {"go-w", 0o666}, {"a=r", 0o755},
		{"u+rw,g-x", 0o751}, {"+t", 0o755}, {"o+t", 0o755}, {"u=rwx,go=rx", 0o600}, {"-w", 0o666},
	} {
		os.Chmod(f, os.FileMode(c.in))
		if out, err := exec.Command("sh", "-c", "umask 022; chmod "+c.spec+" "+f+" 2>/dev/null; true").CombinedOutput(); err != nil {
			t.Fatalf("chmod %s: %v %s", c.spec, err, out)
		}
		fi, _ := os.Stat(f)
		want := uint32(fi.Mode().Perm())
		if fi.Mode()&os.ModeSticky != 0 {
			want |= 0o1000
		}
		got, ok := applyMode(c.spec, c.in, false)
		if !ok || got != want {
			t.Errorf("applyMode(%q, %o) = %o, %v; chmod gives %o", c.spec, c.in, got, ok, want)
		}
	}
	if _, ok := applyMode("u+q", 0, false); ok {
		t.Error("bad mode accepted")
	}
}

// TestSedMatchesSed runs the s commands scripts use through cmdSed and the
// real sed.
func TestSedMatchesSed(t *testing.T) {
	tr := newTree(t)
	for _, c := range []struct{ script, input string }{
		{`s/\([0-9]*\)\.\([0-9]*\).*/\1 \* 100 + \2/`, "6.1.0-13-amd64\n"},
		{`s/:/ /g`, "/lib:/usr/lib:/opt\n"},
		{`s/a/[&]/`, "banana\n"},
		{`/^###/d`, "### comment\nkept\n## not a match\n###\n"},
		{`s,/usr,/opt,g`, "/usr/bin /usr/lib\n"},
		{`s/x\{2\}/Y/`, "axxxb\n"},
		{`s/(lit)/ok/`, "a(lit)b\n"},
		{`/^[a-zA-Z]/!d`, "en_US UTF-8\n# comment\nde_DE ISO-8859-1\n"},
		{`s/ *$//g`, "trailing   \nnone\n"},
		{`0,/^[# ]*2.0 *$/ s/^[# ]*2.0 *$/2.0/`, "# 2.0\nx\n# 2.0\n"},
		{`0,/b/ s/b/B/`, "b\nb\n"},
		{`s/^ *[a-zA-Z]/# &/`, "en_US.UTF-8 UTF-8\n# x\n"},
		{`/^\/usr\/lib\/python3.11\/.*\.py$/p`, "/usr/lib/python3.11/a.py\n/usr/lib/python3.11/b.pyc\n"},
		{`2,3d`, "1\n2\n3\n4\n"},
		{`/b/,/d/d`, "a\nb\nc\nd\ne\n"},
		{`$d`, "a\nb\n"},
		{`s/a/x/2`, "aaa\n"},
		{`s/^!\(.*\)/\1/p`, "!x\ny\n"},
		{`s/[[:space:]]*$//; /^$/d`, "a  \n   \nb\n"},
		{`/^#/!s/^/# /`, "#c\nv\n"},
		{`$a\`, "no newline"},
	} {
		want, err := exec.Command("sh", "-c", `printf '%s' "$2" | sed "$1"`, "sh", c.script, c.input).Output()
		if err != nil {
			t.Fatal(err)
		}
		body := "#!/bin/sh\nprintf '%s' \"$2\" | sed \"$1\" > /out\n"
		if err := Run(context.Background(), env(tr), Script{Package: "t", Name: "postinst", Body: []byte(body)}, c.script, c.input); err != nil {
			t.Fatal(err)
		}
		f, _ := tr.Open("/out")
		var got bytes.Buffer
		got.ReadFrom(f)
		f.Close()
		if got.String() != string(want) {
			t.Errorf("sed %q on %q = %q, sed says %q", c.script, c.input, got.String(), want)
		}
	}
}

// TestDbusUUIDGen: dbus-daemon's postinst runs dbus-uuidgen --ensure, which
// copies systemd's machine ID into D-Bus's file when it is valid, keeps a
// valid file, and refuses options it does not know.
func TestDbusUUIDGen(t *testing.T) {
	tr := newTree(t)
	const id = "0123456789abcdef0123456789abcdef"
	file(t, tr, "/etc/machine-id", id+"\n")
	file(t, tr, "/usr/bin/dbus-uuidgen", "#!/bin/sh\n")
	script := func(body string) error {
		return Run(context.Background(), env(tr), Script{Package: "dbus-daemon", Name: "postinst", Body: []byte("#!/bin/sh\nset -e\n" + body)}, "configure", "")
	}
	if err := script("mkdir -p /var/lib/dbus\ndbus-uuidgen --ensure\n"); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(tr, "/var/lib/dbus/machine-id"); len(got) != 1 || got[0] != "/var/lib/dbus/machine-id = "+id+"\n" {
		t.Errorf("after --ensure: %q", got)
	}
	// A custom file gets an ID of its own; a second run keeps it.
	if err := script("dbus-uuidgen --ensure=/var/lib/dbus/other\n"); err != nil {
		t.Fatal(err)
	}
	first := snapshot(tr, "/var/lib/dbus/other")
	if err := script("dbus-uuidgen --ensure=/var/lib/dbus/other\n"); err != nil {
		t.Fatal(err)
	}
	if again := snapshot(tr, "/var/lib/dbus/other"); len(first) != 1 || strings.Contains(first[0], id) || first[0] != again[0] {
		t.Errorf("custom file: first %q, again %q", first, again)
	}
	var ue *UnhandledError
	if err := script("dbus-uuidgen --get\n"); !errors.As(err, &ue) {
		t.Errorf("dbus-uuidgen --get: err = %v, want an UnhandledError", err)
	}
}
