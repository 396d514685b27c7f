package e2e

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

type tarMember struct {
	name, link, body string
	typ              byte
}

func hostileTar(t *testing.T, ms ...tarMember) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		h := &tar.Header{Name: m.name, Linkname: m.link, Typeflag: m.typ, Mode: 0o644, ModTime: time.Unix(1600000000, 0), Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(m.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(m.body))
	}
	tw.Close()
	return buf.Bytes()
}

const tinyRecipe = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: tiny
epoch: 1700000000
base:
  tarball: ./base.tar
outputs:
  - {format: tar}
`

// Each hostile archive either fails naming the entry or is confined to the
// tree; nothing outside the work and output directories changes, and a
// failed build leaves no output under a final name.
func TestHostileInputs(t *testing.T) {
	cases := []struct {
		name    string
		members []tarMember
		wantErr string // "" = the build succeeds with everything confined
	}{
		{"dotdot entry", []tarMember{{name: "../../outside/pwned", body: "x"}}, `"../../outside/pwned"`},
		{"absolute path", []tarMember{{name: "/OUTSIDE/pwned", body: "x"}}, ""},
		{"symlink to outside dir, absolute, then write through it", []tarMember{
			{name: "evil", typ: tar.TypeSymlink, link: "OUTSIDE"}, {name: "evil/pwned", body: "x"}}, ""},
		{"symlink to outside dir, relative, then write through it", []tarMember{
			{name: "evil", typ: tar.TypeSymlink, link: "../../../../../../../../OUTSIDE"}, {name: "evil/pwned", body: "x"}}, ""},
		{"chain of symlinks", []tarMember{
			{name: "a", typ: tar.TypeSymlink, link: "b"}, {name: "b", typ: tar.TypeSymlink, link: "/c"},
			{name: "c", typ: tar.TypeSymlink, link: "../OUTSIDE"}, {name: "a/pwned", body: "x"}}, ""},
		{"file replaced by symlink to outside then written again", []tarMember{
			{name: "f", body: "1"}, {name: "f", typ: tar.TypeSymlink, link: "OUTSIDE/keep"}, {name: "f", body: "pwned"}}, ""},
		{"hard link to outside", []tarMember{{name: "h", typ: tar.TypeLink, link: "../../OUTSIDE/keep"}}, `"h"`},
		{"hard link through symlink to outside", []tarMember{
			{name: "s", typ: tar.TypeSymlink, link: "OUTSIDE"}, {name: "h", typ: tar.TypeLink, link: "s/keep"}}, `"h"`},
		{"symlink loop", []tarMember{
			{name: "l1", typ: tar.TypeSymlink, link: "l2"}, {name: "l2", typ: tar.TypeSymlink, link: "l1"},
			{name: "l1/x", body: "x"}}, `"l1/x"`},
		{"path longer than PATH_MAX", []tarMember{{name: strings.Repeat("d/", 2100) + "f", body: "x"}}, "PATH_MAX"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			outside := filepath.Join(base, "outside")
			os.MkdirAll(outside, 0o755)
			os.WriteFile(filepath.Join(outside, "keep"), []byte("original"), 0o644)
			dir := filepath.Join(base, "recipe")
			os.MkdirAll(dir, 0o755)
			for i := range c.members {
				c.members[i].name = strings.ReplaceAll(c.members[i].name, "OUTSIDE", strings.TrimPrefix(outside, "/"))
				c.members[i].link = strings.ReplaceAll(c.members[i].link, "OUTSIDE", outside)
				if strings.HasPrefix(c.members[i].link, "../") {
					c.members[i].link = strings.ReplaceAll(c.members[i].link, outside, strings.TrimPrefix(outside, "/"))
				}
			}
			writeFiles(t, dir, map[string]string{"recipe.yaml": tinyRecipe, "base.tar": string(hostileTar(t, c.members...))})
			out := filepath.Join(base, "out")
			r := stamp(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(base, "cache"), "--work-dir", base)
			if c.wantErr != "" {
				r.mustFail(t, 1, c.wantErr, "base.tarball")
				if files := finalFiles(t, out); len(files) != 0 {
					t.Errorf("failed build left %v in the output dir", files)
				}
			} else {
				r.mustSucceed(t)
			}
			ents, _ := os.ReadDir(outside)
			got, _ := os.ReadFile(filepath.Join(outside, "keep"))
			if len(ents) != 1 || string(got) != "original" {
				t.Fatalf("the build wrote outside its directories: %d entries, keep=%q", len(ents), got)
			}
			ents, _ = os.ReadDir(base)
			for _, e := range ents {
				switch e.Name() {
				case "outside", "recipe", "out", "cache":
				default:
					t.Errorf("left behind next to the work dir: %s", e.Name())
				}
			}
		})
	}
}

func TestRecipeErrorsExit2NamingFieldAndLine(t *testing.T) {
	cases := []struct {
		name, recipe string
		wants        []string
	}{
		{"unknown field", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: x\nbase:\n  tarball: ./b.tar\n  colour: red\n", []string{"recipe.yaml:6", "base.colour"}},
		{"wrong type", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: x\nepoch: soon\nbase:\n  tarball: ./b.tar\n", []string{"recipe.yaml:4", "epoch"}},
		{"unquoted mode", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: x\nbase:\n  tarball: ./b.tar\ncustomize:\n  layers:\n    - files:\n        - {path: /etc/x, content: y, mode: 0644}\n", []string{"recipe.yaml:9", "customize.layers[0].files[0].mode", "quoted"}},
		{"missing base", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: x\n", []string{"recipe.yaml:", "base"}},
		{"malformed digest", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: x\nbase:\n  tarball: ./b.tar\n  sha256: abc123\n", []string{"recipe.yaml:6", "base.sha256"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"recipe.yaml": c.recipe})
			stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out"), "--cache-dir", filepath.Join(dir, "cache")).
				mustFail(t, 2, c.wants...)
		})
	}
}

func TestDigestMismatchExits1BeforeAnythingApplies(t *testing.T) {
	dir := t.TempDir()
	body := hostileTar(t, tarMember{name: "etc/hostname", body: "x\n"})
	wrong := sha256.Sum256([]byte("something else"))
	recipe := strings.Replace(tinyRecipe, "  tarball: ./base.tar\n",
		"  tarball: ./base.tar\n  sha256: \""+hex.EncodeToString(wrong[:])+"\"\n  pre: [./pre.sh]\n", 1)
	marker := filepath.Join(dir, "pre-ran")
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe, "base.tar": string(body),
		"pre.sh": "#!/bin/sh\ntouch " + marker + "\n"})
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out"), "--cache-dir", filepath.Join(dir, "cache")).
		mustFail(t, 1, "base.tarball", "mismatch", hex.EncodeToString(wrong[:]))
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the base.pre hook ran although an input did not match")
	}
	if files := finalFiles(t, filepath.Join(dir, "out")); len(files) != 0 {
		t.Fatalf("output dir holds %v", files)
	}
}

func TestLockIsStableAndHonoured(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"recipe.yaml": tinyRecipe, "base.tar": string(hostileTar(t, tarMember{name: "etc/hostname", body: "a\n"}))})
	cache := filepath.Join(dir, "cache")
	stamp(t, dir, nil, "lock", "recipe.yaml", "--cache-dir", cache).mustSucceed(t)
	first, err := os.ReadFile(filepath.Join(dir, "stamp.lock"))
	if err != nil {
		t.Fatal(err)
	}
	stamp(t, dir, nil, "lock", "recipe.yaml", "--cache-dir", cache).mustSucceed(t)
	second, _ := os.ReadFile(filepath.Join(dir, "stamp.lock"))
	if !bytes.Equal(first, second) {
		t.Fatalf("stamp lock is not stable:\n%s\n---\n%s", first, second)
	}
	sum := sha256.Sum256([]byte(hostileTar(t, tarMember{name: "etc/hostname", body: "a\n"})))
	if !strings.Contains(string(first), hex.EncodeToString(sum[:])) || !strings.Contains(string(first), "base.tar") {
		t.Fatalf("lock does not pin the base:\n%s", first)
	}
	// The base changes behind the lock's back: the build refuses it.
	writeFiles(t, dir, map[string]string{"base.tar": string(hostileTar(t, tarMember{name: "etc/hostname", body: "b\n"}))})
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out"), "--cache-dir", cache).
		mustFail(t, 1, "mismatch", "stamp.lock")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", filepath.Join(dir, "out"), "--cache-dir", cache, "--update-lock").mustSucceed(t)
}

func TestInterruptedBuildLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	recipe := strings.Replace(tinyRecipe, "outputs:", "customize:\n  post: [./slow.sh]\noutputs:", 1)
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe,
		"base.tar": string(hostileTar(t, tarMember{name: "etc/hostname", body: "a\n"})),
		"slow.sh":  "#!/bin/sh\ntouch \"$STAMP_ROOT/started\"\nsleep 30\n"})
	out := filepath.Join(dir, "out")
	work := filepath.Join(dir, "work")
	os.MkdirAll(work, 0o755)
	cmd := exec.Command(stampBin, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--work-dir", work, "--no-cache")
	cmd.Dir = dir
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, _ := filepath.Glob(filepath.Join(work, "*", "tree", "started"))
		if len(m) > 0 {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("hook never started")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if err == nil {
		t.Fatal("interrupted build exited 0")
	}
	if files := finalFiles(t, out); len(files) != 0 {
		t.Fatalf("interrupted build left %v", files)
	}
	if ents, _ := os.ReadDir(work); len(ents) != 0 {
		t.Fatalf("interrupted build left its work dir: %v", ents)
	}
}

// Outputs are written two at a time: one that fails stops the others,
// the error names it (not an output stopped because of it, nor the one
// made from it), and nothing lands in the output directory.
func TestFailedOutputLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(3, 4))
	blob := make([]byte, 24<<20)
	for i := range blob {
		blob[i] = byte(rng.Uint32())
	}
	recipe := strings.Replace(tinyRecipe, "  - {format: tar}\n",
		"  - {format: tar}\n  - {format: erofs}\n  - {format: raw, size: 16MiB}\n  - {format: qcow2, from: raw}\n  - {format: cpio}\n", 1)
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe,
		"base.tar": string(hostileTar(t, tarMember{name: "etc/hostname", body: "a\n"}, tarMember{name: "opt/blob", body: string(blob)}))})
	out := filepath.Join(dir, "out")
	stamp(t, dir, nil, "build", "recipe.yaml", "-o", out, "--cache-dir", filepath.Join(dir, "cache"), "--no-cache").
		mustFail(t, 1, "outputs[2] (raw)", "the tree needs")
	if files := finalFiles(t, out); len(files) != 0 {
		t.Fatalf("a failed build left %v", files)
	}
}
