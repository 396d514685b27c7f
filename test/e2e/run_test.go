package e2e

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

// runRecipe is a recipe on the test base whose provision phase is layers
// (list items indented by four spaces), with top added at the top level.
func runRecipe(top, layers string) string {
	return `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: e2e-run
arch: amd64
epoch: 1700000000
` + top + `base:
  tarball: ./base.tar.zst
provision:
  layers:
` + layers + `outputs:
  - {format: tar, name: rootfs}
`
}

// buildRun builds the recipe in dir into a fresh output directory, as root
// or as uid 65534, and returns the result and the tar's path.
func buildRun(t *testing.T, dir string, as65534 bool) (result, string) {
	t.Helper()
	out, err := os.MkdirTemp(dir, "out-")
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(out) // the build makes it
	args := []string{"build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir}
	if as65534 {
		return stampAs65534(t, dir, nil, args...), filepath.Join(out, "e2e-run-rootfs.tar")
	}
	return stampUmask022(t, dir, []string{"TZ=UTC", "LANG=C.UTF-8"}, args...), filepath.Join(out, "e2e-run-rootfs.tar")
}

// sameBytes fails the test, naming the first entries that differ, unless
// every tar is byte-identical to the first.
func sameBytes(t *testing.T, tars ...string) {
	t.Helper()
	first, err := os.ReadFile(tars[0])
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range tars[1:] {
		b, err := os.ReadFile(o)
		if err == nil && bytes.Equal(first, b) {
			continue
		}
		ea, eb := harness.TarIndex(harness.ReadTar(t, tars[0])), harness.TarIndex(harness.ReadTar(t, o))
		var diffs []string
		for p, x := range ea {
			if y, ok := eb[p]; !ok || x.String() != y.String() {
				diffs = append(diffs, fmt.Sprintf("%s: first %v, other %v", p, x, eb[p]))
			}
		}
		for p := range eb {
			if _, ok := ea[p]; !ok {
				diffs = append(diffs, p+": only in the other")
			}
		}
		sort.Strings(diffs)
		if len(diffs) > 20 {
			diffs = diffs[:20]
		}
		t.Errorf("build %d differs from the first (%v):\n%s", i+2, err, strings.Join(diffs, "\n"))
	}
}

// runStep installs a file, a symlink and a directory, removes a file of the
// base, and gives its file to owner. Its environment is checked as it runs.
func runStep(owner string) string {
	return `    - run:
        command:
          - /bin/sh
          - -c
          - |
            set -e
            test "$(env | sort | tr '\n' ' ')" = "GREETING=hello LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin PWD=/ SOURCE_DATE_EPOCH=1700000000 TZ=UTC "
            mkdir -p /opt/app
            echo "$GREETING $(id -u)" > /opt/app/greeting
            chmod 0640 /opt/app/greeting
            chown ` + owner + ` /opt/app/greeting
            ln -s greeting /opt/app/link
            rm /etc/issue.net
        env: {GREETING: hello}
`
}

// TestRunStep: a run step works as root and, in a user namespace, as uid
// 65534, with byte-identical results. In that namespace only the build
// user is mapped, as root, so "changing an owner" can only mean giving a
// file to root; a chown to anyone else fails the build, naming the step
// and saying why. As root the step may give a file to anyone, and the
// index takes the owner it gave.
func TestRunStep(t *testing.T) {
	harness.RequireSetpriv(t)
	harness.RequireTools(t, "unshare", "chroot", "mount")
	t.Run("root owner, as root and as 65534", func(t *testing.T) {
		dir := recipeDir(t, runRecipe("", runStep("root:root")), nil)
		var tars []string
		for i := range 3 {
			start := time.Now()
			r, tar := buildRun(t, dir, i == 2)
			r.mustSucceed(t)
			t.Logf("build %d (as 65534: %t): %s", i+1, i == 2, time.Since(start).Round(time.Millisecond))
			tars = append(tars, tar)
		}
		sameBytes(t, tars...)
		idx := harness.TarIndex(harness.ReadTar(t, tars[0]))
		g, ok := idx["/opt/app/greeting"]
		if !ok {
			t.Fatal("no /opt/app/greeting in the output")
		}
		if g.Mode != 0o640 || g.UID != 0 || g.GID != 0 || g.SHA256 != sha256Hex([]byte("hello 0\n")) {
			t.Errorf("/opt/app/greeting: %v, want 0640 0:0 %q", g, "hello 0\n")
		}
		if l := idx["/opt/app/link"]; l.Linkname != "greeting" {
			t.Errorf("/opt/app/link: %v", l)
		}
		if _, ok := idx["/etc/issue.net"]; ok {
			t.Error("/etc/issue.net survived its removal")
		}
		for _, p := range []string{"/usr/sbin/policy-rc.d", "/tmp/fixture-junk"} {
			if _, ok := idx[p]; ok {
				t.Errorf("%s is in the output", p)
			}
		}
	})
	t.Run("another owner", func(t *testing.T) {
		dir := recipeDir(t, runRecipe("", runStep("1000:1001")), nil)
		var tars []string
		for range 2 {
			r, tar := buildRun(t, dir, false)
			r.mustSucceed(t)
			tars = append(tars, tar)
		}
		sameBytes(t, tars...)
		g := harness.TarIndex(harness.ReadTar(t, tars[0]))["/opt/app/greeting"]
		if g.UID != 1000 || g.GID != 1001 || g.Mode != 0o640 {
			t.Errorf("/opt/app/greeting: %v, want 1000:1001 0640", g)
		}
		r, tar := buildRun(t, dir, true)
		r.mustFail(t, 1, "provision.layers[0].run", "/bin/sh exited with status 1", "a chown to another user fails; build as root")
		if _, err := os.Stat(filepath.Dir(tar)); err == nil {
			t.Errorf("the failed build left %s", filepath.Dir(tar))
		}
	})
}

// stampAs65534WithoutUserns runs the binary as uid 65534 where the kernel
// refuses it user namespaces: inside a user namespace (mapping root and
// 65534 to themselves) whose max_user_namespaces is 0, as a kernel with
// them disabled would.
func stampAs65534WithoutUserns(t *testing.T, dir string, args ...string) result {
	t.Helper()
	harness.RequireSetpriv(t)
	cmd := exec.Command(stampBin, noCache(args)...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}
	harness.Unprivileged(cmd)
	cmd.Args = append([]string{"/bin/sh", "-c", `echo 0 >/proc/sys/user/max_user_namespaces && exec "$@"`, "sh"}, cmd.Args...)
	cmd.Path = "/bin/sh"
	ids := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}, {ContainerID: harness.NobodyUID, HostID: harness.NobodyUID, Size: 1}}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER, UidMappings: ids, GidMappings: ids, GidMappingsEnableSetgroups: true}
	return runCmd(t, cmd)
}

// TestRunWithoutNamespaces: where the build is not root and may not make a
// user namespace, a run step or scripts: chroot fails the build before it
// writes anything (no output, no cache, no work tree), naming the step and
// what is missing.
func TestRunWithoutNamespaces(t *testing.T) {
	harness.RequireTools(t, "unshare", "chroot", "mount")
	for _, tc := range []struct {
		name, layers, step string
	}{
		{"run", "    - files: [{path: /etc/x, content: x}]\n    - run: {command: [/bin/true]}\n", "provision.layers[1].run: "},
		{"debs chroot", "    - debs: {repo: \"file:///nonexistent\", suite: s, packages: [socat], trusted: true, scripts: chroot}\n", "provision.layers[0].debs: scripts: chroot: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := recipeDir(t, runRecipe("", tc.layers), nil)
			work := filepath.Join(dir, "work")
			if err := os.Mkdir(work, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(work, 0o777); err != nil { // past the umask: 65534 must write there
				t.Fatal(err)
			}
			out, cache := filepath.Join(dir, "out"), filepath.Join(dir, "cache")
			r := stampAs65534WithoutUserns(t, dir, "build", "recipe.yaml", "-o", out, "--cache-dir", cache, "--work-dir", work)
			r.mustFail(t, 1, tc.step, "needs a root build or user namespaces, and this build (uid 65534) may not make a user namespace",
				"user.max_user_namespaces is 0")
			if _, err := os.Stat(out); err == nil {
				t.Errorf("%s exists after a build that could not run", out)
			}
			// The CLI makes a missing --cache-dir and --work-dir; the build
			// must put nothing in them.
			for _, d := range []string{cache, work} {
				if ents, _ := os.ReadDir(d); len(ents) > 0 {
					t.Errorf("%s holds %d entries", d, len(ents))
				}
			}
		})
	}
}

// TestRunOfflineOnly: offline-only refuses run steps and scripts: chroot
// as recipe errors (exit 2) naming each field.
func TestRunOfflineOnly(t *testing.T) {
	dir := recipeDir(t, runRecipe("offline-only: true\n",
		"    - run: {command: [/bin/true]}\n    - debs: {repo: \"file:///nonexistent\", suite: s, packages: [socat], trusted: true, scripts: chroot}\n"), nil)
	r := stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out"), "--cache-dir", filepath.Join(dir, "cache"))
	r.mustFail(t, 2, "recipe.yaml:11: provision.layers[0].run: offline-only: true forbids run steps",
		"recipe.yaml:12: provision.layers[1].debs.scripts: offline-only: true forbids scripts: chroot")
	if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
		t.Error("an invalid recipe made an output directory")
	}
}

// TestRunNetwork: a run step has no network unless it asks for it. The
// test listens on 127.0.0.1; the step reaches it only with network: true.
func TestRunNetwork(t *testing.T) {
	harness.RequireTools(t, "unshare", "chroot", "mount")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	got := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			b, _ := io.ReadAll(c)
			c.Close()
			got <- string(b)
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	step := func(network bool) string {
		return fmt.Sprintf("    - run:\n        command: [/bin/bash, -c, 'echo ping >/dev/tcp/127.0.0.1/%d']\n        network: %t\n", port, network)
	}

	dir := recipeDir(t, runRecipe("", step(false)), nil)
	r, _ := buildRun(t, dir, false)
	r.mustFail(t, 1, "provision.layers[0].run: /bin/bash exited with status 1", "Network is unreachable")
	select {
	case s := <-got:
		t.Fatalf("a step without network reached the host's 127.0.0.1 and sent %q", s)
	default:
	}

	for _, as65534 := range []bool{false, true} {
		dir := recipeDir(t, runRecipe("", step(true)), nil)
		r, _ := buildRun(t, dir, as65534)
		r.mustSucceed(t)
		select {
		case s := <-got:
			if s != "ping\n" {
				t.Errorf("as 65534 %t: the listener got %q", as65534, s)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("as 65534 %t: a step with network: true never reached the listener", as65534)
		}
	}
}

// TestChrootPythonReproducible: scripts: chroot installing a Python package
// (python3-minimal's and python3-six's postinsts run py3compile) gives the
// same bytes twice as root and once as uid 65534, and every .pyc in the
// image is hash-based: before, Python cached py3compile's own modules
// (debpython) as timestamp .pycs recording when the tree was unpacked, and
// two builds of the node's package set differed in six of them.
func TestChrootPythonReproducible(t *testing.T) {
	harness.RequireSetpriv(t)
	harness.RequireTools(t, "unshare", "chroot", "mount")
	repo := harness.DebRepoFor(t)
	base := harness.DpkgBaseFor(t)
	var tars []string
	for i := range 3 {
		dir := debsDir(t, repo, base, debsRecipe(repo.FileURL(), []string{"python3-six"}, "        scripts: chroot"))
		out := filepath.Join(dir, "out")
		args := []string{"build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir}
		start := time.Now()
		if i < 2 {
			stampUmask022(t, dir, []string{"TZ=UTC", "LANG=C.UTF-8"}, args...).mustSucceed(t)
		} else {
			stampAs65534(t, dir, nil, args...).mustSucceed(t)
		}
		t.Logf("build %d: %s", i+1, time.Since(start).Round(time.Millisecond))
		tars = append(tars, filepath.Join(out, "e2e-debs-rootfs.tar"))
	}
	sameBytes(t, tars...)
	idx := harness.TarIndex(harness.ReadTar(t, tars[0]))
	root := extractAsRoot(t, tars[0])
	var pycs []string
	for p := range idx {
		if !strings.HasSuffix(p, ".pyc") {
			continue
		}
		pycs = append(pycs, p)
		b, err := os.ReadFile(filepath.Join(root, p))
		// PEP 552: the second word's bit 0 marks a hash-based .pyc.
		if err != nil || len(b) < 16 || binary.LittleEndian.Uint32(b[4:8])&1 == 0 {
			t.Errorf("%s is a timestamp .pyc (%v)", p, err)
		}
	}
	sort.Strings(pycs)
	for _, want := range []string{
		"/usr/lib/python3/dist-packages/__pycache__/six.cpython-311.pyc",
		"/usr/lib/python3.11/__pycache__/os.cpython-311.pyc",
	} {
		if _, ok := idx[want]; !ok {
			t.Errorf("no %s: py3compile did not compile what the packages ask for (%d .pycs)", want, len(pycs))
		}
	}
	// No package asks for these: only the import cache wrote them, and a
	// timestamp .pyc made at build time would be stale in the image anyway,
	// whose sources carry their packages' mtimes.
	for _, p := range pycs {
		if strings.HasPrefix(p, "/usr/share/python3/debpython/") {
			t.Errorf("%s: Python cached py3compile's own module", p)
		}
	}
}
