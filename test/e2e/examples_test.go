package e2e

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/test/harness"
)

// TestEveryShippedRecipeBuilds builds each recipe under recipes/ as it is
// shipped, so that no example reads as real and fails when built. A recipe
// that needs inputs (a base tarball, a repository, a registry) gets them
// from the harness, never by editing the recipe.
func TestEveryShippedRecipeBuilds(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "recipes")
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte("\nkind: Recipe\n")) {
			rel, _ := filepath.Rel(root, p)
			found = append(found, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// How each recipe is built: extra arguments, and whether it wants the
	// harness's base as ./base.tar.zst beside it.
	how := map[string]struct {
		base bool
		args []string
		// repo, when set, gives the build its Debian repository (and the
		// --set arguments that name it).
		repo func(testing.TB) []string
		// elsewhere names the target that builds the recipe, when its
		// inputs outgrow make test; here it must still load.
		elsewhere string
		// setup lays out more inputs in the recipe's directory and
		// returns the arguments that name them.
		setup func(t *testing.T, dir string) []string
	}{
		"examples/demo.yaml":    {base: true},
		"examples/minimal.yaml": {base: true},
		"examples/live.yaml":    {base: true, setup: liveKernelDir},
		"examples/sealed.yaml": {base: true, repo: func(t testing.TB) []string {
			r := harness.SealedRepoFor(t)
			return []string{"--set", "mirror=" + r.FileURL(), "--set", "suite=" + r.Suite, "--set", "debian_keyring=" + r.Keyring}
		}},
		"k8s-node.yaml": {elsewhere: "make e2e-node (test/e2e/node_test.go)", args: []string{
			"--set", "mirror=file:///srv/debian", "--set", "kubernetes_repo=file:///srv/kubernetes/deb/",
			"--set", "kubernetes_keyring=./k.gpg", "--set", "registry=registry.example.invalid",
			"--set", "containerd_repo=file:///srv/containerd/", "--set", "containerd_keyring=./c.gpg"}},
		"stamp-image.yaml": {elsewhere: "TestStampImage (test/e2e/stamp_image_test.go)", args: []string{
			"--set", "mirror=file:///srv/debian", "--set", "stamp=/usr/local/bin/stamp"}},
	}
	if len(found) == 0 {
		t.Fatal("no recipes found under recipes/")
	}
	for _, rel := range found {
		t.Run(rel, func(t *testing.T) {
			h, ok := how[rel]
			if !ok {
				t.Fatalf("recipes/%s is shipped but this test does not know how to build it: add it here", rel)
			}
			if h.elsewhere != "" {
				// The recipe must at least load as a user's --set values
				// make it: schema, paths and every parameter use.
				set := map[string]string{}
				for i := 1; i < len(h.args); i += 2 {
					k, v, _ := strings.Cut(h.args[i], "=")
					set[k] = v
				}
				if _, err := recipes.LoadWith(filepath.Join(root, rel), recipes.Options{Set: set}); err != nil {
					t.Fatal(err)
				}
				t.Logf("recipes/%s loads; %s builds and boots it", rel, h.elsewhere)
				return
			}
			dir := harness.TempDirFor65534(t)
			copyTree(t, filepath.Dir(filepath.Join(root, rel)), dir)
			if h.base {
				copyBase(t, dir)
			}
			out := filepath.Join(dir, "out")
			args := append([]string{"build", filepath.Base(rel), "-o", out, "--cache-dir", filepath.Join(dir, "cache")}, h.args...)
			if h.repo != nil {
				args = append(args, h.repo(t)...)
			}
			if h.setup != nil {
				args = append(args, h.setup(t, dir)...)
			}
			stamp(t, dir, nil, args...).mustSucceed(t)
			if sums := readSums(t, filepath.Join(out, "SHA256SUMS")); len(sums) == 0 {
				t.Fatal("no outputs")
			}
		})
	}
}

// liveKernelDir lays out what recipes/examples/live.yaml's kernel parameter
// names, Debian's kernel and systemd-boot-efi packages unpacked, with only
// the modules its live initramfs needs in a VM (the whole set is 400 MB),
// and returns the --set that names it.
func liveKernelDir(t *testing.T, dir string) []string {
	t.Helper()
	k := harness.BootParts(t)
	kdir := filepath.Join(dir, "kernel")
	vmlinuz := filepath.Join(kdir, "boot", filepath.Base(k.Vmlinuz))
	if err := os.MkdirAll(filepath.Dir(vmlinuz), 0o755); err != nil {
		t.Fatal(err)
	}
	copyTree(t, k.Vmlinuz, vmlinuz)
	efi := filepath.Join(kdir, "usr", "lib", "systemd", "boot", "efi", filepath.Base(k.SystemdBoot))
	if err := os.MkdirAll(filepath.Dir(efi), 0o755); err != nil {
		t.Fatal(err)
	}
	copyTree(t, k.SystemdBoot, efi)
	for _, g := range append([]string{"modules.builtin", "modules.order"}, liveModuleGlobs...) {
		found, _ := filepath.Glob(filepath.Join(k.Modules, g))
		if len(found) == 0 {
			t.Fatalf("no module matches %s", g)
		}
		for _, f := range found {
			rel, _ := filepath.Rel(k.Modules, f)
			to := filepath.Join(kdir, "lib", "modules", k.KernelVersion, rel)
			if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
				t.Fatal(err)
			}
			copyTree(t, f, to)
		}
	}
	return []string{"--set", "kernel=" + kdir}
}

// copyTree copies the regular files, directories and symlinks under src
// into dst, keeping executable bits (hooks).
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		default:
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			return os.WriteFile(to, data, fi.Mode().Perm()|0o444)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}
