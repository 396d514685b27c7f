package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// stamp apply changes an existing root in place: the layers' files appear
// with the modes and owners the recipe says, and what was there keeps its
// own metadata.
func TestApplyToExistingRoot(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	writeFiles(t, root, map[string]string{
		"etc/passwd":      "root:x:0:0:root:/root:/bin/sh\n",
		"etc/group":       "root:x:0:\n",
		"usr/bin/tool.sh": "#!/bin/sh\n",
		"usr/share/doc/x": "doc\n",
	})
	os.Chmod(filepath.Join(root, "usr/bin/tool.sh"), os.ModeSetuid|0o755)
	os.Chmod(filepath.Join(root, "etc"), 0o751)
	recipe := `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: apply
epoch: 1700000000
base: {tarball: ./unused.tar}
customize:
  layers:
    - files: [{path: /etc/hostname, content: "applied\n", mode: "0640", owner: "0:42"}]
    - mkdir: [{path: /var/lib/kubelet, mode: "0700"}]
    - remove: ["/usr/share/doc/**"]
    - groups: [{name: docker, gid: 998}]
`
	writeFiles(t, dir, map[string]string{"recipe.yaml": recipe})
	stamp(t, dir, nil, "apply", "recipe.yaml", "--root", root, "--cache-dir", filepath.Join(dir, "cache")).mustSucceed(t)
	fi, err := os.Stat(filepath.Join(root, "etc/hostname"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 || fi.ModTime().Unix() != 1700000000 {
		t.Errorf("/etc/hostname: mode %v mtime %v", fi.Mode(), fi.ModTime())
	}
	if uid, gid := owner(t, filepath.Join(root, "etc/hostname")); os.Geteuid() == 0 && (uid != 0 || gid != 42) {
		t.Errorf("/etc/hostname owner %d:%d", uid, gid)
	}
	if fi, _ := os.Stat(filepath.Join(root, "var/lib/kubelet")); fi == nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("/var/lib/kubelet: %v", fi)
	}
	if fi, _ := os.Stat(filepath.Join(root, "usr/bin/tool.sh")); fi.Mode()&os.ModeSetuid == 0 || fi.Mode().Perm() != 0o755 {
		t.Errorf("existing setuid file lost its mode: %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(root, "etc")); fi.Mode().Perm() != 0o751 {
		t.Errorf("existing /etc mode changed: %v", fi.Mode())
	}
	if _, err := os.Stat(filepath.Join(root, "usr/share/doc/x")); err == nil {
		t.Error("remove layer not applied")
	}
	b, _ := os.ReadFile(filepath.Join(root, "etc/group"))
	if string(b) != "root:x:0:\ndocker:x:998:\n" {
		t.Errorf("/etc/group = %q", b)
	}
}

func owner(t *testing.T, p string) (uint32, uint32) {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return st.Uid, st.Gid
}
