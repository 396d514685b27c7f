package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/test/harness"
)

// TestHostileScriptSeesOnlyImage installs, from a signed local repository,
// a package built for the test whose postinst asks the host everything a
// script can: file tests of every form on the build's own work path and on
// the image's files, ~user for a user only the host has, pwd, $UID, id,
// $$, a process substitution, a here-document, a descriptor above 2, and a
// write to the absolute path of a host canary. Built as root and as uid
// 65534 the outputs are byte-identical and the report holds the image's
// answers; the canary, and the TMPDIR both builds were given, are
// untouched. A second package that reads a descriptor above 2 fails the
// build naming the package and its script.
func TestHostileScriptSeesOnlyImage(t *testing.T) {
	harness.RequireSetpriv(t)
	// Outside /tmp and /var/tmp, which the seal empties, so the script's
	// write to the same path is seen in the image.
	canaryDir, err := os.MkdirTemp("/var/cache", "stamp-canary-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(canaryDir) })
	os.Chmod(canaryDir, 0o777)
	canary := filepath.Join(canaryDir, "canary")
	if err := os.WriteFile(canary, []byte("host\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chmod(canary, 0o666)
	// ~user for every user of the host's passwd: each must come out as the
	// image's passwd says, and a user only the host has as written.
	hostPasswd, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	var hostUsers []string
	for _, l := range strings.Split(string(hostPasswd), "\n") {
		if name, _, ok := strings.Cut(l, ":"); ok && name != "" && !strings.ContainsAny(name, " $`\\'\"") {
			hostUsers = append(hostUsers, name)
		}
	}
	postinst := `#!/bin/bash
set -e
mkdir -p /var/lib/hostile
cd /usr/bin
{
echo "pwd=$(pwd) PWD=$PWD P=$(pwd -P) uid=$UID euid=$EUID id=$(id -u) who=$(whoami) pid=$$"
echo home HOMES
for p in CANARY CANARYDIR/. hostile-tool /usr/bin/hostile-tool ../../etc/passwd; do
	r=
	[ -e "$p" ] && r="${r}e"
	test -f "$p" && r="${r}f"
	[[ -r $p ]] && r="${r}r"
	[[ -w $p ]] && r="${r}w"
	[[ -x $p ]] && r="${r}x"
	[[ -O $p ]] && r="${r}O"
	[ -G "$p" ] && r="${r}G"
	echo "$p:$r"
done
while read -r l; do echo "procsubst $l"; done < <(echo one)
cat <<EOF
heredoc $UID
EOF
echo dropped 3>/dev/null 4>&1
} > /var/lib/hostile/report
mkdir -p CANARYDIR
echo pwned > CANARY
`
	homes := make([]string, len(hostUsers))
	for i, u := range hostUsers {
		homes[i] = "~" + u
	}
	postinst = strings.ReplaceAll(postinst, "HOMES", strings.Join(homes, " "))
	postinst = strings.ReplaceAll(postinst, "CANARYDIR", canaryDir)
	postinst = strings.ReplaceAll(postinst, "CANARY", canary)
	debDir := t.TempDir()
	hostile := harness.ScriptDeb(t, debDir, "hostile", postinst)
	fd := harness.ScriptDeb(t, debDir, "hostile-fd", "#!/bin/sh\nset -e\nexec 3< /etc/passwd\nread -r l <&3 || true\n")
	repo := harness.DebRepoWith(t, &harness.DebRepo{}, hostile, fd)
	base := harness.DpkgBaseFor(t)

	dir := debsDir(t, repo, base, debsRecipe(repo.FileURL(), []string{"hostile"}, ""))
	tmp := harness.TempDirFor65534(t)
	var tars []string
	for i, as65534 := range []bool{false, true} {
		out := filepath.Join(dir, "out"+string(rune('a'+i)))
		args := []string{"build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", dir}
		env := []string{"TMPDIR=" + tmp}
		var r result
		if as65534 {
			r = stampAs65534(t, dir, env, args...)
		} else {
			r = stampUmask022(t, dir, append(env, "TZ=UTC", "LANG=C.UTF-8"), args...)
		}
		r.mustSucceed(t)
		tars = append(tars, filepath.Join(out, "e2e-debs-rootfs.tar"))
	}
	sameBytes(t, tars...)
	root := extractAsRoot(t, tars[0])
	report, err := os.ReadFile(filepath.Join(root, "var/lib/hostile/report"))
	if err != nil {
		t.Fatal(err)
	}
	imagePasswd, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	if err != nil {
		t.Fatal(err)
	}
	imageHomes := map[string]string{}
	for _, l := range strings.Split(string(imagePasswd), "\n") {
		if f := strings.Split(l, ":"); len(f) > 5 {
			imageHomes[f[0]] = f[5]
		}
	}
	onlyHost := 0
	for i, u := range hostUsers {
		if h, ok := imageHomes[u]; ok {
			homes[i] = h
		} else {
			onlyHost++
		}
	}
	if onlyHost == 0 {
		t.Log("every host user is in the image too: ~user is checked against the image's homes only")
	}
	want := "pwd=/usr/bin PWD=/usr/bin P=/usr/bin uid=0 euid=0 id=0 who=root pid=2\n" +
		"home " + strings.Join(homes, " ") + "\n" +
		canary + ":\n" + canaryDir + "/.:\n" +
		"hostile-tool:efrwxOG\n/usr/bin/hostile-tool:efrwxOG\n../../etc/passwd:efrwOG\n" +
		"procsubst one\nheredoc 0\ndropped\n"
	if string(report) != want {
		t.Errorf("report:\n%s\nwant:\n%s", report, want)
	}
	if b, _ := os.ReadFile(canary); string(b) != "host\n" {
		t.Errorf("the host canary holds %q", b)
	}
	if b, err := os.ReadFile(filepath.Join(root, canary)); err != nil || string(b) != "pwned\n" {
		t.Errorf("the script's write did not land in the image: %q %v", b, err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
		t.Errorf("TMPDIR holds %d entries after the builds", len(ents))
	}

	fdDir := debsDir(t, repo, base, debsRecipe(repo.FileURL(), []string{"hostile-fd"}, ""))
	r := stampAs65534(t, fdDir, nil, "build", "recipe.yaml", "-o", filepath.Join(fdDir, "out"), "--cache-dir", filepath.Join(fdDir, "cache"), "--work-dir", fdDir)
	r.mustFail(t, 1, "hostile-fd postinst", "redirection of file descriptor 3", "not handled offline")
	if files := finalFiles(t, filepath.Join(fdDir, "out")); len(files) > 0 {
		t.Errorf("a failed build left %v", files)
	}
}
