package layers

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/rootfs"
)

var unitFixtures = []struct{ name, content string }{
	{"foo.service", "[Unit]\nDescription=foo\n\n[Service]\nExecStart=/bin/true\n\n[Install]\nWantedBy=multi-user.target\nAlias=bar.service\nAlso=helper.socket\n"},
	{"helper.socket", "[Socket]\nListenStream=/run/helper.sock\n[Install]\n# comment\nWantedBy=sockets.target \\\n  timers.target\nRequiredBy=foo.service\n"},
	{"tpl@.service", "[Service]\nExecStart=/bin/echo %i\n[Install]\nWantedBy=multi-user.target\nDefaultInstance=one\nAlias=tmpl-%p@.service\n"},
	{"noinst.service", "[Service]\nExecStart=/bin/true\n"},
	{"up.service", "[Service]\nExecStart=/bin/true\n[Install]\nUpheldBy=multi-user.target\nWantedBy=\nWantedBy=graphical.target\n"},
	{"multi-user.target", "[Unit]\nDescription=Multi-User System\n"},
	{"graphical.target", "[Unit]\nDescription=Graphical\n"},
}

// unitTree lays out the units in a tree and, identically, in a plain
// directory for systemctl. merged puts them in /usr/lib with /lib -> usr/lib.
func unitTree(t *testing.T, merged bool) (*Env, string, *bytes.Buffer) {
	env := acctTestEnv(t)
	var logBuf bytes.Buffer
	log := logrus.New()
	log.SetOutput(&logBuf)
	env.Log = log
	host := t.TempDir()
	dir := "/lib/systemd/system"
	if merged {
		dir = "/usr/lib/systemd/system"
		if _, err := env.Tree.Create("/lib", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "usr/lib"}, nil); err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(host, "usr/lib"), 0o755)
		if err := os.Symlink("usr/lib", filepath.Join(host, "lib")); err != nil {
			t.Fatal(err)
		}
	}
	put := func(p, content string) {
		acctPutFile(t, env, p, content, 0o644, 0, 0)
		if err := os.MkdirAll(filepath.Join(host, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(host, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range unitFixtures {
		put(dir+"/"+u.name, u.content)
	}
	put("/etc/systemd/system/local.service", "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n")
	return env, host, &logBuf
}

// configLinks lists /etc/systemd/system of the tree as "path -> target"
// lines (directories as "path/"), sorted.
func configLinks(env *Env) []string {
	var out []string
	for _, p := range env.Tree.Paths() {
		if !strings.HasPrefix(p, unitConfigDir+"/") {
			continue
		}
		e := env.Tree.Get(p)
		switch e.Type {
		case rootfs.TypeSymlink:
			out = append(out, p+" -> "+e.Target)
		case rootfs.TypeDir:
			out = append(out, p+"/")
		}
	}
	return out
}

// hostLinks lists the same from a plain directory.
func hostLinks(t *testing.T, root string) []string {
	var out []string
	base := filepath.Join(root, unitConfigDir)
	err := filepath.Walk(base, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == base {
			return err
		}
		rel := "/" + strings.TrimPrefix(p, root+"/")
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out = append(out, rel+" -> "+target)
		case fi.IsDir():
			out = append(out, rel+"/")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

func systemdVersion(t *testing.T) int {
	out, err := exec.Command("systemctl", "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	var v int
	if _, err := fmt.Sscanf(string(out), "systemd %d", &v); err != nil {
		t.Fatalf("systemctl --version: %q: %v", out, err)
	}
	return v
}

func systemctlOracle(t *testing.T, root string, args ...string) {
	t.Helper()
	cmd := exec.Command("systemctl", append([]string{"--root=" + root}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("systemctl %v: %v\n%s", args, err, out)
	}
}

// Hand-written expectations for the merged layout after the enable step,
// which also stand in when systemctl is missing.
var wantUnitLinks = []string{
	"/etc/systemd/system/bar.service -> /lib/systemd/system/foo.service",
	"/etc/systemd/system/default.target -> /lib/systemd/system/multi-user.target",
	"/etc/systemd/system/foo.service.requires/",
	"/etc/systemd/system/foo.service.requires/helper.socket -> /lib/systemd/system/helper.socket",
	"/etc/systemd/system/graphical.target.wants/",
	"/etc/systemd/system/graphical.target.wants/up.service -> /lib/systemd/system/up.service",
	"/etc/systemd/system/multi-user.target.upholds/",
	"/etc/systemd/system/multi-user.target.upholds/up.service -> /lib/systemd/system/up.service",
	"/etc/systemd/system/multi-user.target.wants/",
	"/etc/systemd/system/multi-user.target.wants/foo.service -> /lib/systemd/system/foo.service",
	"/etc/systemd/system/multi-user.target.wants/local.service -> /etc/systemd/system/local.service",
	"/etc/systemd/system/multi-user.target.wants/tpl@one.service -> /lib/systemd/system/tpl@.service",
	"/etc/systemd/system/multi-user.target.wants/tpl@two.service -> /lib/systemd/system/tpl@.service",
	"/etc/systemd/system/nothere.service -> /dev/null",
	"/etc/systemd/system/sockets.target.wants/",
	"/etc/systemd/system/sockets.target.wants/helper.socket -> /lib/systemd/system/helper.socket",
	"/etc/systemd/system/timers.target.wants/",
	"/etc/systemd/system/timers.target.wants/helper.socket -> /lib/systemd/system/helper.socket",
	"/etc/systemd/system/tmpl-tpl@.service -> /lib/systemd/system/tpl@.service",
	"/etc/systemd/system/tmpl-tpl@two.service -> /lib/systemd/system/tpl@.service",
}

func TestSystemdMatchesSystemctl(t *testing.T) {
	_, err := exec.LookPath("systemctl")
	haveSystemctl := err == nil
	for _, merged := range []bool{true, false} {
		t.Run(map[bool]string{true: "merged-usr", false: "split-usr"}[merged], func(t *testing.T) {
			env, host, logs := unitTree(t, merged)
			enable := []string{"foo.service", "tpl@.service", "tpl@two.service", "noinst.service", "up.service", "local.service"}
			acctApply(t, env, &Systemd{Enable: enable, Mask: []string{"nothere.service"}, Default: "multi-user.target"})
			got := configLinks(env)
			want := wantUnitLinks
			if haveSystemctl {
				systemctlOracle(t, host, append([]string{"enable"}, enable...)...)
				systemctlOracle(t, host, "mask", "nothere.service")
				systemctlOracle(t, host, "set-default", "multi-user.target")
				want = hostLinks(t, host)
				if systemdVersion(t) < 254 {
					// [Install] UpheldBy= came in systemd 254; older ones ignore it.
					want = append(want, "/etc/systemd/system/multi-user.target.upholds/",
						"/etc/systemd/system/multi-user.target.upholds/up.service -> /lib/systemd/system/up.service")
					sort.Strings(want)
				}
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("after enable:\n--- got\n%s\n--- want\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			if !strings.Contains(logs.String(), "noinst.service has no installation config") {
				t.Errorf("no warning for a unit without [Install]; log:\n%s", logs)
			}

			// Links are root's, dated at the epoch, and say which unit made them.
			e := env.Tree.Get("/etc/systemd/system/multi-user.target.wants/foo.service")
			if e.UID != 0 || e.GID != 0 || !e.MTime.Equal(acctEpoch) || e.Origin != env.Origin("", "/lib/systemd/system/foo.service") {
				t.Errorf("link metadata: %d:%d %v %+v", e.UID, e.GID, e.MTime, e.Origin)
			}

			// Enabling again changes nothing.
			before := acctSnapshot(env)
			acctApply(t, env, &Systemd{Enable: enable, Mask: []string{"nothere.service"}, Default: "multi-user.target"})
			if acctSnapshot(env) != before {
				t.Error("second enable changed the tree")
			}

			disable := []string{"tpl@two.service", "foo.service", "up.service"}
			acctApply(t, env, &Systemd{Disable: disable})
			got = configLinks(env)
			want = []string{
				"/etc/systemd/system/default.target -> /lib/systemd/system/multi-user.target",
				"/etc/systemd/system/multi-user.target.wants/",
				"/etc/systemd/system/multi-user.target.wants/local.service -> /etc/systemd/system/local.service",
				"/etc/systemd/system/multi-user.target.wants/tpl@one.service -> /lib/systemd/system/tpl@.service",
				"/etc/systemd/system/nothere.service -> /dev/null",
				"/etc/systemd/system/tmpl-tpl@.service -> /lib/systemd/system/tpl@.service",
			}
			if haveSystemctl {
				systemctlOracle(t, host, append([]string{"disable"}, disable...)...)
				want = hostLinks(t, host)
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Errorf("after disable:\n--- got\n%s\n--- want\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}

func TestSystemdErrors(t *testing.T) {
	for _, c := range []struct {
		name  string
		layer Systemd
		want  string
	}{
		{"enable missing", Systemd{Enable: []string{"nosuch.service"}}, "enable nosuch.service: unit file nosuch.service not found"},
		{"disable missing", Systemd{Disable: []string{"nosuch.service"}}, "disable nosuch.service: unit file nosuch.service not found"},
		{"default missing", Systemd{Default: "rescue.target"}, "set-default rescue.target: unit file rescue.target not found"},
		{"default not a target", Systemd{Default: "foo.service"}, "is not a target"},
		{"enable masked", Systemd{Mask: []string{"foo.service"}, Enable: []string{"foo.service"}}, ""},
		{"bad name", Systemd{Enable: []string{"../../etc/passwd"}}, "invalid unit name"},
		{"alias taken", Systemd{Enable: []string{"foo.service"}}, "bar.service already exists as a file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env, _, _ := unitTree(t, true)
			if c.name == "alias taken" {
				acctPutFile(t, env, "/etc/systemd/system/bar.service", "[Service]\n", 0o644, 0, 0)
			}
			err := c.layer.Apply(context.Background(), env)
			if c.want == "" {
				// Mask runs after enable, so this order succeeds; the other
				// order must fail as systemctl does.
				if err != nil {
					t.Fatal(err)
				}
				err = (&Systemd{Enable: []string{"foo.service"}}).Apply(context.Background(), env)
				c.want = "enable foo.service: unit is masked"
			}
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), env.Label+": ") {
				t.Fatalf("error %v, want one starting with the label and containing %q", err, c.want)
			}
		})
	}
}

func TestParseInstall(t *testing.T) {
	in, err := parseInstall([]byte("[Install]\nWantedBy=a.target b.target\n[Service]\nWantedBy=x.target\n[Install]\n; c\nAlso=c.service\\\n d.service\nRequiredBy=r.target\nRequiredBy=\nDefaultInstance=tty1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(in.wantedBy, ",") != "a.target,b.target" || strings.Join(in.also, ",") != "c.service,d.service" ||
		len(in.requiredBy) != 0 || in.defaultInstance != "tty1" {
		t.Errorf("%+v", in)
	}
	for _, c := range []struct{ in, name, want string }{
		{"%n", "getty@tty1.service", "getty@tty1.service"},
		{"%N", "getty@tty1.service", "getty@tty1"},
		{"%p-x", "getty@tty1.service", "getty-x"},
		{"%i", "getty@tty1.service", "tty1"},
		{"%j", "a-b-c.service", "c"},
		{"100%%", "a.service", "100%"},
	} {
		if got, err := expandSpecifiers(c.in, c.name); err != nil || got != c.want {
			t.Errorf("expand(%q, %q) = %q, %v; want %q", c.in, c.name, got, err, c.want)
		}
	}
	if _, err := expandSpecifiers("%H", "a.service"); err == nil {
		t.Error("%H expanded offline")
	}
}
