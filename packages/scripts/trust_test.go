package scripts

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/test/harness"
)

// hostListing lists what a host directory holds, one level, sorted.
func hostListing(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

// treePaths lists every path of the tree's index.
func treePaths(tr *rootfs.Tree) map[string]bool {
	out := map[string]bool{}
	for _, p := range tr.Paths() {
		out[p] = true
	}
	return out
}

// pythonTree is a tree holding the image's python3.11 (the real .debs) and
// the mount points a sandbox needs, as base-files makes them.
func pythonTree(t *testing.T, debs []string) *rootfs.Tree {
	t.Helper()
	tr := newTree(t)
	for _, d := range debs {
		unpack(t, tr, d)
	}
	for _, d := range []string{"/proc", "/dev", "/tmp"} {
		if _, err := tr.MkdirAll(d, rootfs.Header{Perm: 0o755, MTime: epoch}); err != nil {
			t.Fatal(err)
		}
	}
	return tr
}

var pythonDebs = []string{"python3.11-minimal", "libpython3.11-minimal", "libexpat1", "zlib1g", "libc6", "libgcc-s1", "libssl3"}

// TestPyCompileInSandbox: python3.11's own postinst line (py_compile.py on
// modules) runs the image's python in the sandbox: the tree read-only, the
// .pyc read back and written through the index, nothing else in the tree
// changed, nothing left on the host (no scratch directory beside the tree,
// nothing in TMPDIR), and the same bytes as root and as uid 65534.
func TestPyCompileInSandbox(t *testing.T) {
	harness.RequireTools(t, "unshare", "chroot", "mount")
	var debs []string
	if os.Getenv(childEnv) == "" {
		debs = harness.Debs(t, pythonDebs...)
	}
	root, nobody := asBoth(t, debs, func(t *testing.T, debs []string) string {
		tr := pythonTree(t, debs)
		file(t, tr, "/usr/lib/python3.11/stamptest.py", "X = {'a', 'b', 'c'}\ndef f():\n    return 42\n")
		before := treePaths(tr)
		t.Setenv("TMPDIR", t.TempDir())
		tmp := hostListing(t, os.TempDir())
		beside := hostListing(t, filepath.Dir(tr.Dir()))
		script := Script{Package: "python3.11-minimal", Name: "postinst", Body: []byte(
			"#!/bin/sh\nset -e\npython3.11 -E -S /usr/lib/python3.11/py_compile.py /usr/lib/python3.11/stamptest.py\n")}
		se := env(tr)
		if err := Run(context.Background(), se, script, "configure", ""); err != nil {
			t.Fatal(err)
		}
		const pyc = "/usr/lib/python3.11/__pycache__/stamptest.cpython-311.pyc"
		if _, err := readTree(tr, pyc); err == nil {
			t.Errorf("%s written before the compiles were settled", pyc)
		}
		if err := se.Settle(context.Background()); err != nil {
			t.Fatal(err)
		}
		for p := range treePaths(tr) {
			if !before[p] && p != pyc && p != "/usr/lib/python3.11/__pycache__" {
				t.Errorf("%s appeared in the tree", p)
			}
		}
		b, err := readTree(tr, pyc)
		if err != nil {
			t.Fatal(err)
		}
		// Python 3.11's magic, and the checked-hash flags SOURCE_DATE_EPOCH asks for.
		if len(b) < 16 || hex.EncodeToString(b[:8]) != "a70d0d0a03000000" {
			t.Errorf(".pyc header %x, want 3.11's magic and checked-hash flags", b[:min(16, len(b))])
		}
		if got := hostListing(t, os.TempDir()); strings.Join(got, " ") != strings.Join(tmp, " ") {
			t.Errorf("TMPDIR changed: %v, before %v", got, tmp)
		}
		if got := hostListing(t, filepath.Dir(tr.Dir())); strings.Join(got, " ") != strings.Join(beside, " ") {
			t.Errorf("beside the tree: %v, before %v", got, beside)
		}
		e := tr.Get(pyc)
		return hex.EncodeToString(b) + " " + strings.TrimSpace(rootfs.FileInfo("x", e).Mode().String())
	})
	if root != nobody {
		t.Errorf("root's .pyc differs from uid 65534's:\n%s\n%s", root, nobody)
	}
}

// With NoPrograms (offline-only) the same line is unhandled, naming the
// package and why, and the tree is left alone.
func TestPyCompileNoPrograms(t *testing.T) {
	tr := pythonTree(t, harness.Debs(t, pythonDebs...))
	file(t, tr, "/usr/lib/python3.11/stamptest.py", "pass\n")
	e := env(tr)
	e.NoPrograms = true
	err := Run(context.Background(), e, Script{Package: "python3.11-minimal", Name: "postinst", Body: []byte(
		"#!/bin/sh\nset -e\npython3.11 -E -S /usr/lib/python3.11/py_compile.py /usr/lib/python3.11/stamptest.py\n")}, "configure", "")
	var ue *UnhandledError
	if !errors.As(err, &ue) || ue.Package != "python3.11-minimal" || !strings.Contains(err.Error(), "offline-only") {
		t.Fatalf("err = %v, want python3.11-minimal's postinst unhandled for offline-only", err)
	}
	if tr.Get("/usr/lib/python3.11/__pycache__") != nil {
		t.Error("a .pyc was written with NoPrograms")
	}
}

func readTree(tr *rootfs.Tree, p string) ([]byte, error) {
	f, err := tr.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b strings.Builder
	buf := make([]byte, 32*1024)
	for {
		n, err := f.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return []byte(b.String()), nil
}

// viewTree is a tree whose entries answer every file test differently
// from the host: owners and modes only the index holds, devices, a fifo,
// links, and a passwd whose users the host lacks (and lacking the host's).
func viewTree(t *testing.T) *rootfs.Tree {
	t.Helper()
	tr := newTree(t)
	mk := func(p string, h rootfs.Header, content string) {
		t.Helper()
		if _, err := tr.MkdirAll(filepath.Dir(p), rootfs.Header{Perm: 0o755, MTime: epoch}); err != nil {
			t.Fatal(err)
		}
		if h.MTime.IsZero() {
			h.MTime = epoch
		}
		var r *strings.Reader
		if h.Type == rootfs.TypeRegular {
			r = strings.NewReader(content)
		}
		var err error
		if r != nil {
			_, err = tr.Create(p, h, r)
		} else {
			_, err = tr.Create(p, h, nil)
		}
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
	}
	reg := func(perm, uid, gid uint32) rootfs.Header {
		return rootfs.Header{Type: rootfs.TypeRegular, Perm: perm, UID: uid, GID: gid}
	}
	mk("/etc/passwd", reg(0o644, 0, 0), "root:x:0:0:root:/root-of-image:/bin/sh\nimguser:x:1000:1000::/home/imguser:/bin/sh\n")
	mk("/etc/group", reg(0o644, 0, 0), "root:x:0:\nimguser:x:1000:\n")
	mk("/data/rootfile", reg(0o644, 0, 0), "x")
	mk("/data/userfile", reg(0o600, 1000, 1000), "secret")
	mk("/data/groupfile", reg(0o640, 0, 1000), "g")
	mk("/data/unreadable", reg(0o000, 1000, 1000), "u")
	mk("/data/exe", reg(0o755, 0, 0), "#!/bin/sh\n")
	mk("/data/empty", reg(0o644, 0, 0), "")
	mk("/data/suid", reg(0o4755, 0, 0), "s")
	mk("/data/sgid", reg(0o2755, 0, 0), "s")
	mk("/data/older", rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: epoch.Add(-3600e9)}, "o")
	mk("/data/sticky", rootfs.Header{Type: rootfs.TypeDir, Perm: 0o1777}, "")
	mk("/data/link", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "rootfile"}, "")
	mk("/data/abslink", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "/etc/passwd"}, "")
	mk("/data/dangling", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "/nowhere"}, "")
	mk("/data/fifo", rootfs.Header{Type: rootfs.TypeFifo, Perm: 0o644}, "")
	mk("/data/chr", rootfs.Header{Type: rootfs.TypeChar, Perm: 0o666, Major: 1, Minor: 3}, "")
	mk("/data/blk", rootfs.Header{Type: rootfs.TypeBlock, Perm: 0o660, Major: 8}, "")
	mk("/data/sock", rootfs.Header{Type: rootfs.TypeSocket, Perm: 0o777}, "")
	mk("/srv/real/inner", reg(0o644, 0, 0), "i")
	mk("/srv/dirlink", rootfs.Header{Type: rootfs.TypeSymlink, Perm: 0o777, Target: "real"}, "")
	return tr
}

// fileTestCases are file tests and what each says in the image, as root
// runs it there. The host has none of /data; it has /etc/hostname, /bin/sh
// and, relative to where the tests run, scripts.go, which the image lacks.
var fileTestCases = []struct{ test, want string }{
	{"-e rootfile", "y"}, {"-e /data/rootfile", "y"}, {"-e /etc/hostname", "n"}, {"-e /bin/sh", "n"},
	{"-e scripts.go", "n"}, {"-e ../../../../etc/passwd", "y"}, {"-e ''", "n"},
	{"-f rootfile", "y"}, {"-f sticky", "n"}, {"-f link", "y"}, {"-f dangling", "n"}, {"-f abslink", "y"},
	{"-d sticky", "y"}, {"-d /srv/dirlink", "y"}, {"-d rootfile", "n"},
	{"-r unreadable", "y"}, {"-r /data/userfile", "y"}, {"-r nothing", "n"}, {"-r /etc/shadow", "n"},
	{"-w unreadable", "y"}, {"-w /etc/hostname", "n"},
	{"-x exe", "y"}, {"-x rootfile", "n"}, {"-x sticky", "y"}, {"-x /bin/sh", "n"},
	{"-s rootfile", "y"}, {"-s empty", "n"}, {"-s sticky", "y"},
	{"-L link", "y"}, {"-h dangling", "y"}, {"-L rootfile", "n"}, {"-h /data/abslink", "y"},
	{"-O rootfile", "y"}, {"-O userfile", "n"}, {"-O /data/groupfile", "y"},
	{"-G groupfile", "n"}, {"-G rootfile", "y"}, {"-G /data/userfile", "n"},
	{"-u suid", "y"}, {"-u exe", "n"}, {"-g sgid", "y"}, {"-g suid", "n"}, {"-k sticky", "y"}, {"-k /data", "n"},
	{"-p fifo", "y"}, {"-p rootfile", "n"}, {"-S sock", "y"}, {"-b blk", "y"}, {"-b chr", "n"}, {"-c chr", "y"}, {"-c rootfile", "n"},
	{"rootfile -nt older", "y"}, {"older -nt rootfile", "n"}, {"rootfile -nt nothing", "y"},
	{"older -ot rootfile", "y"}, {"nothing -ot rootfile", "y"},
	{"link -ef rootfile", "y"}, {"/data/link -ef /data/rootfile", "y"}, {"exe -ef rootfile", "n"},
	{"/srv/dirlink/inner -ef /srv/real/inner", "y"},
}

// TestFileTestsAnswerFromImage: every operator, in [ ], test and [[ ]],
// with relative and absolute operands, answers from the index as root
// would in the image: the build user (root or uid 65534), the host's files
// and the host's working directory change nothing.
func TestFileTestsAnswerFromImage(t *testing.T) {
	var script strings.Builder
	script.WriteString("#!/bin/bash\ncd /data\n")
	var want strings.Builder
	for i, c := range fileTestCases {
		for _, form := range []string{"[ %s ]", "test %s", "[[ %s ]]", "[ ! %s ]"} {
			fmt.Fprintf(&script, "if "+form+"; then echo '%d %s y'; else echo '%d %s n'; fi >> /out\n", c.test, i, form, i, form)
			w := c.want
			if strings.HasPrefix(form, "[ !") {
				w = map[string]string{"y": "n", "n": "y"}[w]
			}
			fmt.Fprintf(&want, "%d %s %s\n", i, form, w)
		}
	}
	root, nobody := asBoth(t, nil, func(t *testing.T, _ []string) string {
		tr := viewTree(t)
		if err := Run(context.Background(), env(tr), Script{Package: "p", Name: "postinst", Body: []byte(script.String())}, "configure"); err != nil {
			t.Fatal(err)
		}
		b, err := readTree(tr, "/out")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	})
	if root != want.String() {
		diffLines(t, "as root", root, want.String())
	}
	if nobody != root {
		diffLines(t, "as uid 65534", nobody, root)
	}
}

func diffLines(t *testing.T, what, got, want string) {
	t.Helper()
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var a, b string
		if i < len(g) {
			a = g[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			t.Errorf("%s: got %q, want %q", what, a, b)
		}
	}
}

// TestShellSeesImage: pwd, $PWD, cd through a symlink, $UID, $EUID, id,
// whoami and ~user answer from the image whoever builds it (the host has
// a user daemon the image lacks; the image has imguser).
func TestShellSeesImage(t *testing.T) {
	body := `#!/bin/sh
set -e
{
echo "pwd=$(pwd) PWD=$PWD"
cd /srv/dirlink
echo "pwd=$(pwd) PWD=$PWD P=$(pwd -P)"
cd ..
echo "up=$(pwd)"
echo "UID=$UID EUID=$EUID u=$(id -u) g=$(id -g) un=$(id -un) who=$(whoami) id=$(id) imguser=$(id -u imguser)"
echo ~imguser ~daemon ~root ~ ~/x
echo pids $$ $PPID
} > /out
`
	want := "pwd=/ PWD=/\npwd=/srv/dirlink PWD=/srv/dirlink P=/srv/real\nup=/srv\n" +
		"UID=0 EUID=0 u=0 g=0 un=root who=root id=uid=0(root) gid=0(root) groups=0(root) imguser=1000\n" +
		"/home/imguser ~daemon /root-of-image /root /root/x\npids 2 1\n"
	root, nobody := asBoth(t, nil, func(t *testing.T, _ []string) string {
		tr := viewTree(t)
		if err := Run(context.Background(), env(tr), Script{Package: "p", Name: "postinst", Body: []byte(body)}, "configure"); err != nil {
			t.Fatal(err)
		}
		b, err := readTree(tr, "/out")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	})
	if root != want {
		diffLines(t, "as root", root, want)
	}
	if nobody != root {
		diffLines(t, "as uid 65534", nobody, root)
	}
}

// TestRedirections: descriptors above 2 are dropped where nothing reads
// them and refused, naming the package and script, where the script would
// use them; never a panic, whether the script swallows the status or not,
// and whether the code comes from the script, eval or a sourced file.
func TestRedirections(t *testing.T) {
	ok := []string{
		"echo x 3>/dev/null",
		"echo x 4>&1 5>&2 6>&-",
		"exec 3>&-",
		"exec 9</dev/null",
		"echo x >&2",
		"echo x 1>&2 2>&1",
		"fd=2; echo x >&$fd",
		"echo to-out > /dev/stdout; echo to-err >/dev/stderr; echo x >| /clobbered",
		"cat < /dev/stdin",
		"echo x >& /both",
		"eval 'echo x 3>/dev/null'",
		"cat <&- ; echo x >&-",
		"builtin [ -O /data/rootfile ]",
	}
	refused := []string{
		"exec 3< /etc/passwd",
		"echo x >&3",
		"echo x 3> /file",
		"exec 3>&1; echo x >&3",
		"cat <&3",
		"fd=5; echo x >&$fd || true",
		"echo x 3>/file || true",
		"cat <> /etc/passwd",
		"eval 'exec 4< /etc/passwd' || :",
		". /lib/sourced.sh",
		"read -r line < <(echo x) 3</etc/passwd",
		"echo x > >(cat)",
		"exec {fd}</etc/passwd",
	}
	run := func(t *testing.T, line string) (*rootfs.Tree, error) {
		tr := viewTree(t)
		file(t, tr, "/lib/sourced.sh", "echo in-sourced\nexec 3</etc/passwd\n")
		return tr, Run(context.Background(), env(tr), Script{Package: "pkg", Name: "postinst", Body: []byte("#!/bin/sh\n" + line + "\n")}, "configure")
	}
	for _, l := range ok {
		if _, err := run(t, l); err != nil {
			t.Errorf("%q: %v", l, err)
		}
	}
	for _, l := range refused {
		_, err := run(t, l)
		var ue *UnhandledError
		if !errors.As(err, &ue) || ue.Package != "pkg" || ue.Script != "postinst" {
			t.Errorf("%q: err = %v, want pkg postinst unhandled", l, err)
		}
	}
	tr, err := run(t, "echo x >| /clobbered; echo y >& /both; echo z > /dev/stderr")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"/clobbered": "x\n", "/both": "y\n"} {
		if b, _ := readTree(tr, p); string(b) != want {
			t.Errorf("%s holds %q, want %q", p, b, want)
		}
	}
	if tr.Get("/dev/stderr") != nil {
		t.Error("echo > /dev/stderr made a file in the tree")
	}
}

// TestSubstitutionsLeaveNothing: process substitution and here-documents
// work and leave nothing in the host's TMPDIR (set to an empty directory
// of the test's, which must stay empty) or beside the tree.
func TestSubstitutionsLeaveNothing(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	tr := viewTree(t)
	beside := hostListing(t, filepath.Dir(tr.Dir()))
	body := `#!/bin/bash
set -e
while read -r l; do echo "line $l"; done < <(printf 'a\nb\n') > /out1
cat <(echo one) <(echo two) > /out2
grep -c x <(printf 'x\ny\nx\n') > /out3
diff_in=$(cat <(cat /data/rootfile))
echo "$diff_in" > /out4
cat > /out5 <<EOF
heredoc $UID
EOF
cat <<-'EOF' > /out6
	quoted $HOME
	EOF
cat <<< "here-string" > /out7
[ -e <(true) ] && echo exists > /out8
`
	if err := Run(context.Background(), env(tr), Script{Package: "p", Name: "postinst", Body: []byte(body)}, "configure"); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"/out1": "line a\nline b\n", "/out2": "one\ntwo\n", "/out3": "2\n", "/out4": "x\n",
		"/out5": "heredoc 0\n", "/out6": "quoted $HOME\n", "/out7": "here-string\n", "/out8": "exists\n"}
	for p, w := range want {
		if b, _ := readTree(tr, p); string(b) != w {
			t.Errorf("%s holds %q, want %q", p, b, w)
		}
	}
	if left := hostListing(t, tmp); len(left) > 0 {
		t.Errorf("TMPDIR holds %v", left)
	}
	if got := hostListing(t, filepath.Dir(tr.Dir())); strings.Join(got, " ") != strings.Join(beside, " ") {
		t.Errorf("beside the tree: %v, before %v", got, beside)
	}
	for _, p := range tr.Paths() {
		if strings.HasPrefix(p, "/dev") || strings.HasPrefix(p, "/tmp") {
			t.Errorf("%s reached the tree", p)
		}
	}
}

// TestSSHHostKeysNotMade: openssh-server's create_key (its postinst's
// shape) makes no key and runs nothing; the log says why, and the
// fingerprint of the key not made shows nothing.
func TestSSHHostKeysNotMade(t *testing.T) {
	tr := newTree(t)
	file(t, tr, "/usr/bin/ssh-keygen", "#!/bin/sh\necho ran > /ran\n")
	body := `#!/bin/sh
set -e
create_key() {
	msg="$1"; shift; file="$1"; shift
	if [ ! -f "$file" ]; then
		printf %s "$msg"
		ssh-keygen -q -f "$file" -N '' "$@"
		echo
		ssh-keygen -l -f "$file.pub"
	fi
}
create_key "Creating SSH2 RSA key" /etc/ssh/ssh_host_rsa_key -t rsa
create_key "Creating SSH2 ED25519 key" /etc/ssh/ssh_host_ed25519_key -t ed25519
`
	var logged []string
	e := env(tr)
	e.Logf = func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }
	if err := Run(context.Background(), e, Script{Package: "openssh-server", Name: "postinst", Body: []byte(body)}, "configure", ""); err != nil {
		t.Fatal(err)
	}
	for _, p := range tr.Paths() {
		if strings.HasPrefix(p, "/etc/ssh") || p == "/ran" {
			t.Errorf("%s was made", p)
		}
	}
	if !strings.Contains(strings.Join(logged, "\n"), "not making the SSH host key /etc/ssh/ssh_host_ed25519_key") {
		t.Errorf("the log does not say the key was not made:\n%s", strings.Join(logged, "\n"))
	}
}

// TestJournalCatalogHandler: systemd's postinst line writes the database
// journalctl --update-catalog writes from the same catalog files, without
// running the image's journalctl.
func TestJournalCatalogHandler(t *testing.T) {
	harness.RequireTools(t, "journalctl")
	tr := newTree(t)
	for _, d := range harness.Debs(t, "systemd") {
		if strings.HasPrefix(filepath.Base(d), "systemd_") {
			unpack(t, tr, d)
		}
	}
	if err := Run(context.Background(), env(tr), Script{Package: "systemd", Name: "postinst", Body: []byte("#!/bin/sh\nset -e\njournalctl --update-catalog || true\n")}, "configure", ""); err != nil {
		t.Fatal(err)
	}
	got, err := readTree(tr, "/var/lib/systemd/catalog/database")
	if err != nil {
		t.Fatal(err)
	}
	if e := tr.Get("/var/lib/systemd/catalog/database"); e.Perm != 0o644 || e.UID != 0 {
		t.Errorf("database mode %o owner %d", e.Perm, e.UID)
	}
	host := t.TempDir()
	for _, p := range tr.Paths() {
		if e := tr.Get(p); strings.HasPrefix(p, "/usr/lib/systemd/catalog/") && e.Type == rootfs.TypeRegular {
			b, _ := readTree(tr, p)
			os.MkdirAll(filepath.Join(host, "usr/lib/systemd/catalog"), 0o755)
			os.WriteFile(filepath.Join(host, p), b, 0o644)
		}
	}
	cmd := exec.Command("journalctl", "--root="+host, "--update-catalog")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("journalctl: %v\n%s", err, out)
	}
	want, _ := os.ReadFile(filepath.Join(host, "var/lib/systemd/catalog/database"))
	if len(want) == 0 || string(got) != string(want) {
		t.Errorf("database: %d bytes, journalctl's %d", len(got), len(want))
	}
}

// TestRandomIsSeeded: $RANDOM draws the same numbers in every build of a
// script, so what a script makes of it is reproducible.
func TestRandomIsSeeded(t *testing.T) {
	var outs []string
	for range 2 {
		tr := newTree(t)
		if err := Run(context.Background(), env(tr), Script{Package: "p", Name: "postinst", Body: []byte("#!/bin/bash\necho $RANDOM $RANDOM > /out\n")}, "configure"); err != nil {
			t.Fatal(err)
		}
		b, _ := readTree(tr, "/out")
		outs = append(outs, string(b))
	}
	if outs[0] != outs[1] || len(outs[0]) < 4 {
		t.Errorf("$RANDOM drew %q, then %q", outs[0], outs[1])
	}
}

// TestErrexitOnCompounds: under set -e a compound command whose status
// comes from a failure set -e ignores (an && list) does not end the
// script, as in dash and bash (mvdan.cc/sh from v3.12 on ends it, which is
// why stamp stays on v3.11 and answers access checks itself).
func TestErrexitOnCompounds(t *testing.T) {
	tr := newTree(t)
	body := "#!/bin/sh -e\nif true; then [ -x /nothing ] && echo y; fi\nfor i in 1; do false || false && true; done\necho after > /after\n"
	if err := Run(context.Background(), env(tr), Script{Package: "p", Name: "postinst", Body: []byte(body)}, "configure"); err != nil {
		t.Fatal(err)
	}
	if tr.Get("/after") == nil {
		t.Error("the script ended at a compound command")
	}
}

// TestRefusedConstructs: what the interpreter would panic on, hang on, or
// answer with the host's state is refused, naming the package and script.
func TestRefusedConstructs(t *testing.T) {
	for _, body := range []string{
		"coproc cat", "eval 'coproc cat'", "select x in a b; do break; done", "declare", "export -p", "set",
		"shopt -s extglob; echo @(a|b)", "echo ${x@P}", "pushd /etc", "dirs", "x=7; echo y >&$x",
	} {
		tr := newTree(t)
		err := Run(context.Background(), env(tr), Script{Package: "pkg", Name: "prerm", Body: []byte("#!/bin/bash\n" + body + "\n")}, "remove")
		var ue *UnhandledError
		if !errors.As(err, &ue) || ue.Package != "pkg" || ue.Script != "prerm" {
			t.Errorf("%q: err = %v, want pkg prerm unhandled", body, err)
		}
	}
}

// TestPatternsOfAnyBytes: a pattern holds whatever bytes the script or
// what it read gave it (a continuation byte 0x80, a lone byte that is not
// UTF-8, an escaped multibyte character), in a glob, a case, a pipe's left
// side and a parameter expansion; it matches as bash and dash match it in
// C.UTF-8 instead of ending the process.
func TestPatternsOfAnyBytes(t *testing.T) {
	tr := newTree(t)
	file(t, tr, "/data/XÀ", "")
	file(t, tr, "/data/a\xc3b", "")
	body := `#!/bin/sh -e
cd /data
for f in X*À; do echo "$f" >> /out; done
x=$(printf '\303')
case "a${x}b" in a${x}b) echo case >> /out;; esac
echo a${x}* | cat >> /out
y=${x}z; echo "${y#$x}" >> /out
case é in \é) echo escaped >> /out;; esac
`
	if err := Run(context.Background(), env(tr), Script{Package: "p", Name: "postinst", Body: []byte(body)}, "configure"); err != nil {
		t.Fatal(err)
	}
	got, err := readTree(tr, "/out")
	if err != nil {
		t.Fatal(err)
	}
	if want := "XÀ\ncase\na\xc3b\nz\nescaped\n"; string(got) != want {
		t.Errorf("/out = %q, want %q", got, want)
	}
}

// TestBackgroundJobsEndWithTheScript: a job put in the background runs to
// its end before the script does, so nothing changes the tree once the
// script has returned (the interpreter itself waits only at wait).
func TestBackgroundJobsEndWithTheScript(t *testing.T) {
	tr := newTree(t)
	body := "#!/bin/sh\nfor i in 1 2 3 4 5 6 7 8; do echo $i >> /bg; done &\necho main > /main\n"
	if err := Run(context.Background(), env(tr), Script{Package: "p", Name: "postinst", Body: []byte(body)}, "configure"); err != nil {
		t.Fatal(err)
	}
	got, err := readTree(tr, "/bg")
	if err != nil {
		t.Fatal(err)
	}
	if want := "1\n2\n3\n4\n5\n6\n7\n8\n"; string(got) != want {
		t.Errorf("/bg = %q after the script, want %q", got, want)
	}
}

// TestPyCompileWorkers: py_compile shared out over several processes
// writes the same .pyc files as one process does, and reports the modules
// that do not compile in the order they were named, whatever the count.
func TestPyCompileWorkers(t *testing.T) {
	harness.RequireTools(t, "unshare", "chroot", "mount")
	debs := harness.Debs(t, pythonDebs...)
	compile := func(procs int) (string, error) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		tr := pythonTree(t, debs)
		var names []string
		for i := range 7 {
			src := fmt.Sprintf("X%d = {'a', 'b', %d}\ndef f():\n    return [%d] * 3\n", i, i, i)
			if i == 2 || i == 4 {
				src = fmt.Sprintf("def broken%d(:\n", i)
			}
			p := fmt.Sprintf("/usr/lib/python3.11/stampw%d.py", i)
			file(t, tr, p, src)
			names = append(names, p)
		}
		script := Script{Package: "python3.11-minimal", Name: "postinst", Body: []byte(
			"#!/bin/sh\npython3.11 -E -S /usr/lib/python3.11/py_compile.py " + strings.Join(names, " ") + "\n")}
		e := env(tr)
		if err := Run(context.Background(), e, script, "configure", ""); err != nil {
			t.Fatalf("the script failed before its compiles ran: %v", err)
		}
		err := e.Settle(context.Background())
		var out []string
		for i := range 7 {
			b, rerr := readTree(tr, fmt.Sprintf("/usr/lib/python3.11/__pycache__/stampw%d.cpython-311.pyc", i))
			out = append(out, fmt.Sprintf("%d %x %v", i, b, rerr != nil))
		}
		return strings.Join(out, "\n"), err
	}
	one, err1 := compile(1)
	three, err3 := compile(3)
	if one != three {
		t.Errorf("one process wrote\n%s\nthree wrote\n%s", one, three)
	}
	if err1 == nil || err3 == nil || err1.Error() != err3.Error() {
		t.Fatalf("errors differ or are missing:\none process: %v\nthree: %v", err1, err3)
	}
	if m := err3.Error(); !strings.Contains(m, "stampw2.py") || !strings.Contains(m, "stampw4.py") || strings.Index(m, "stampw2.py") > strings.Index(m, "stampw4.py") {
		t.Errorf("the modules that do not compile are not named in order: %v", err3)
	}
}

// TestPyCompilesBatched: the compiles the scripts ask for run together
// when the Env is settled, and give the tree the scripts would have given
// it one compile at a time: a script that removes a source runs after the
// compiles before it (its .pyc stays, as it would have), a module asked
// for twice is compiled once, and the bytes are those of separate runs.
func TestPyCompilesBatched(t *testing.T) {
	harness.RequireTools(t, "unshare", "chroot", "mount")
	debs := harness.Debs(t, pythonDebs...)
	const dir = "/usr/lib/python3.11/"
	compileLine := func(mods ...string) string {
		line := "#!/bin/sh\nset -e\npython3.11 -E -S " + dir + "py_compile.py"
		for _, m := range mods {
			line += " " + dir + m + ".py"
		}
		return line + "\n"
	}
	scripts := []Script{
		{Package: "pa", Name: "postinst", Body: []byte(compileLine("stampa"))},
		{Package: "pb", Name: "postinst", Body: []byte(compileLine("stampb", "stampc"))},
		{Package: "pc", Name: "postinst", Body: []byte("#!/bin/sh\nset -e\nrm " + dir + "stampc.py\n")},
		{Package: "pd", Name: "postinst", Body: []byte(compileLine("stampa"))},
	}
	build := func(settleEach bool) (string, []string) {
		tr := pythonTree(t, debs)
		for _, m := range []string{"stampa", "stampb", "stampc"} {
			file(t, tr, dir+m+".py", "X = {'"+m+"', 1, 2}\ndef f():\n    return 42\n")
		}
		var logs []string
		se := env(tr)
		se.Logf = func(format string, args ...any) {
			if m := fmt.Sprintf(format, args...); strings.Contains(m, "compiled") {
				logs = append(logs, m)
			}
		}
		for _, s := range scripts {
			if err := Run(context.Background(), se, s, "configure", ""); err != nil {
				t.Fatal(err)
			}
			if settleEach {
				if err := se.Settle(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := se.Settle(context.Background()); err != nil {
			t.Fatal(err)
		}
		return strings.Join(snapshot(tr, dir+"__pycache__/", dir+"stamp"), "\n"), logs
	}
	one, oneLogs := build(true)
	batched, logs := build(false)
	if batched != one {
		t.Errorf("batched compiles left\n%s\none at a time\n%s", batched, one)
	}
	if !strings.Contains(one, "__pycache__/stampc.cpython-311.pyc") || strings.Contains(one, dir+"stampc.py = ") {
		t.Errorf("stampc's .pyc should stay and its source go:\n%s", one)
	}
	want := []string{
		"python3.11: compiled 3 modules with the image's interpreter, in the sandbox",
		"python3.11: compiled 1 modules with the image's interpreter, in the sandbox",
	}
	if strings.Join(logs, "\n") != strings.Join(want, "\n") {
		t.Errorf("batched runs:\n%s\nwant\n%s\n(one at a time: %d runs)", strings.Join(logs, "\n"), strings.Join(want, "\n"), len(oneLogs))
	}
}
