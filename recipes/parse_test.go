package recipes

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// designExample is DESIGN.md's recipe with its "…" filled in.
const designExample = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: k8s-node                 # seeds every derived UUID/GUID; also names outputs
arch: amd64                    # amd64 | arm64
epoch: 1700000000              # SOURCE_DATE_EPOCH in the environment overrides it

base:                          # phase 1
  tarball: ./base.tar.zst      # path relative to the recipe, or https:// URL
  sha256: "sha256:` + hex64 + `"
  pre: [./hooks/check.sh]      # every phase may have pre/post host hooks
  post: []

customize:                     # phase 2: layers applied in order; each item has one kind key
  layers:
    - files:
        - {path: /etc/hostname, content: "node\n", mode: "0644", owner: "0:0"}
        - {path: /etc/kubernetes/, from: ./overlay/kubernetes/}
    - symlink: {path: /usr/local/bin/k, target: /usr/bin/kubectl}
    - remove: ["/usr/share/doc/**"]
    - users: [{name: capi, uid: 1000, groups: [sudo], shell: /bin/bash}]
    - groups: [{name: docker, gid: 998}]

provision:                     # phase 3: same layer kinds allowed
  layers:
    - oci: {ref: "127.0.0.1:5000/k8s/bins:v1.31.4", dest: /usr/bin/, mode: "0755"}
    - oci: {ref: "registry.example/img@sha256:` + hex64 + `", paths: [/usr/local/bin/crictl], dest: /usr/bin/}
    - debs: {repo: "file:///srv/debian", suite: bookworm, components: [main], packages: [socat]}
    - images: ["registry.example.invalid/pause:3.10@sha256:` + hex64 + `"]
    - systemd: {enable: [containerd.service], mask: [], default: multi-user.target}

seal:                          # applied by rootfs.Seal after the last phase
  cleanup: default             # default | none | a list of globs added to the default set

outputs:                       # every output comes from the same sealed tree
  - {format: tar, compression: zstd}                 # none | gzip | zstd | xz
  - format: raw
    size: auto                                       # or e.g. 4GiB
    partitions:
      - {name: esp, type: esp, size: 256MiB, filesystem: vfat}
      - {name: root, type: root, size: auto, filesystem: ext4}
    boot: {loader: systemd-boot, cmdline: "console=ttyS0", bios: false}
  - {format: qcow2, from: raw}                       # the same disk, qcow2-encoded
  - {format: cpio, compression: xz}                  # initramfs of the whole tree
  - {format: pxe}                                    # kernel + initramfs + iPXE script
  - {format: oci, kind: rootfs, layout: dir}         # or kind: containerdisk, layout: archive
`

func ptr[T any](v T) *T { return &v }

func TestParseDesignExample(t *testing.T) {
	got, err := Parse([]byte(designExample), "k8s-node.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := &Recipe{
		APIVersion: "stamp.dev/v1alpha1", Kind: "Recipe", Name: "k8s-node", Arch: "amd64", Epoch: 1700000000,
		Base: Base{Tarball: "./base.tar.zst", SHA256: hex64, Pre: []string{"./hooks/check.sh"}, Line: 8},
		Customize: Phase{Layers: []Layer{
			{Line: 15, Field: "customize.layers[0]", Files: []File{
				{Path: "/etc/hostname", Content: ptr("node\n"), Mode: ptr(Mode(0644)), Owner: Owner{"0", "0"}},
				{Path: "/etc/kubernetes/", From: "./overlay/kubernetes/"},
			}},
			{Line: 18, Field: "customize.layers[1]", Symlink: []Symlink{{Path: "/usr/local/bin/k", Target: "/usr/bin/kubectl"}}},
			{Line: 19, Field: "customize.layers[2]", Remove: []string{"/usr/share/doc/**"}},
			{Line: 20, Field: "customize.layers[3]", Users: []User{{Name: "capi", UID: ptr(uint32(1000)), Groups: []string{"sudo"}, Shell: "/bin/bash"}}},
			{Line: 21, Field: "customize.layers[4]", Groups: []Group{{Name: "docker", GID: ptr(uint32(998))}}},
		}},
		Provision: Phase{Layers: []Layer{
			{Line: 25, Field: "provision.layers[0]", OCI: &OCI{Ref: "127.0.0.1:5000/k8s/bins:v1.31.4", Dest: "/usr/bin/", Mode: ptr(Mode(0755))}},
			{Line: 26, Field: "provision.layers[1]", OCI: &OCI{Ref: "registry.example/img@sha256:" + hex64, Paths: []string{"/usr/local/bin/crictl"}, Dest: "/usr/bin/"}},
			{Line: 27, Field: "provision.layers[2]", Debs: &Debs{Repo: "file:///srv/debian", Suite: "bookworm", Components: []string{"main"}, Packages: []string{"socat"}, Scripts: ScriptsOffline}},
			{Line: 28, Field: "provision.layers[3]", Images: []Image{{Ref: "registry.example.invalid/pause:3.10@sha256:" + hex64}}},
			{Line: 29, Field: "provision.layers[4]", Systemd: &Systemd{Enable: []string{"containerd.service"}, Default: "multi-user.target"}},
		}},
		Seal: Seal{Cleanup: Cleanup{Default: true}},
		Outputs: []Output{
			{Line: 35, Field: "outputs[0]", Format: "tar", Name: "tar", Compression: "zstd"},
			{Line: 36, Field: "outputs[1]", Format: "raw", Name: "raw",
				Partitions: []Partition{
					{Name: "esp", Type: "esp", Size: 256 << 20, Filesystem: "vfat"},
					{Name: "root", Type: "root", Filesystem: "ext4"},
				},
				Boot: &Boot{Loader: "systemd-boot", Cmdline: "console=ttyS0"}},
			{Line: 42, Field: "outputs[2]", Format: "qcow2", Name: "qcow2", From: "raw"},
			{Line: 43, Field: "outputs[3]", Format: "cpio", Name: "cpio", Compression: "xz"},
			{Line: 44, Field: "outputs[4]", Format: "pxe", Name: "pxe", Compression: "zstd"},
			{Line: 45, Field: "outputs[5]", Format: "oci", Name: "oci", Kind: "rootfs", Layout: "dir", Compression: "gzip"},
		},
		Path: "k8s-node.yaml",
		// Checked by TestTreeDigest.
		TreeDigest: got.TreeDigest,
	}
	if !reflect.DeepEqual(got, want) {
		compare(t, "", reflect.ValueOf(got).Elem(), reflect.ValueOf(want).Elem())
	}
	for i, l := range got.Customize.Layers {
		if k := []string{"files", "symlink", "remove", "users", "groups"}[i]; l.Kind() != k {
			t.Errorf("customize layer %d Kind() = %q, want %q", i, l.Kind(), k)
		}
	}
	for i, l := range got.Provision.Layers {
		if k := []string{"oci", "oci", "debs", "images", "systemd"}[i]; l.Kind() != k {
			t.Errorf("provision layer %d Kind() = %q, want %q", i, l.Kind(), k)
		}
	}
	im := got.Provision.Layers[3].Images[0]
	if im.Name() != "registry.example.invalid/pause" || im.Tag() != "3.10" || im.Digest() != "sha256:"+hex64 {
		t.Errorf("image parts = %q %q %q", im.Name(), im.Tag(), im.Digest())
	}
}

// compare reports the first differing fields by path, which reflect.DeepEqual does not.
func compare(t *testing.T, path string, a, b reflect.Value) {
	t.Helper()
	if reflect.DeepEqual(a.Interface(), b.Interface()) {
		return
	}
	switch a.Kind() {
	case reflect.Struct:
		for i := 0; i < a.NumField(); i++ {
			compare(t, path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i))
		}
		return
	case reflect.Slice:
		if a.Len() == b.Len() && (a.IsNil() == b.IsNil()) {
			for i := 0; i < a.Len(); i++ {
				compare(t, path+"["+string(rune('0'+i%10))+"]", a.Index(i), b.Index(i))
			}
			return
		}
	case reflect.Pointer:
		if !a.IsNil() && !b.IsNil() {
			compare(t, path, a.Elem(), b.Elem())
			return
		}
	}
	t.Errorf("%s = %#v, want %#v", path, a.Interface(), b.Interface())
}

func TestShortForms(t *testing.T) {
	src := head + `epoch: 0
customize:
  pre: ./hooks/one.sh
  layers:
    - tarball: ./extra.tar
    - tarball: {path: "https://example.com/x.tar.gz", sha256: "` + hex64 + `", dest: /opt/x}
    - files: {path: /etc/motd, content: "hi\n", owner: root}
    - files: [{path: /etc/id, content: !!binary aGk=, owner: 0, mtime: 5}]
    - symlink: {path: /a, target: b}
    - symlink: [{path: /c, target: d, owner: "1000:capi"}, {path: /e, target: f}]
    - mkdir: /var/lib/x
    - mkdir: [/y, {path: /z, mode: "1777"}]
    - remove: /usr/share/man
    - hook: ./hooks/fix.sh
    - hook: {run: ./h.sh, args: [a, 1], env: {B: "2", A: x}}
    - images: "r.example/a:1@sha256:` + hex64 + `"
    - images: [{ref: "r.example/b:2@sha256:` + hex64 + `"}]
    - images: {into: containerd, refs: ["r.example/c:3@sha256:` + hex64 + `"], discardLayers: true}
    - images: {into: archives, refs: "r.example/d:4@sha256:` + hex64 + `"}
    - debs: {repo: "https://deb.example.invalid/debian", suites: [bookworm, bookworm-updates], packages: socat, recommends: true}
seal:
  cleanup: [/var/cache/**, /root/.bash_history]
outputs:
  - {format: raw, name: disk, freeSpace: 1G}
  - {format: cpio}
  - {format: pxe, from: cpio}
  - {format: oci, kind: containerdisk, layout: archive}
`
	r, err := Parse([]byte(src), "short.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l := r.Customize.Layers
	checks := []struct {
		name      string
		got, want any
	}{
		{"pre", r.Customize.Pre, []string{"./hooks/one.sh"}},
		{"tarball short", *l[0].Tarball, Tarball{Path: "./extra.tar", Dest: "/"}},
		{"tarball long", *l[1].Tarball, Tarball{Path: "https://example.com/x.tar.gz", SHA256: hex64, Dest: "/opt/x"}},
		{"files single", l[2].Files, []File{{Path: "/etc/motd", Content: ptr("hi\n"), Owner: Owner{"root", "root"}}}},
		{"files binary", l[3].Files, []File{{Path: "/etc/id", Content: ptr("hi"), Owner: Owner{"0", "0"}, MTime: ptr(int64(5))}}},
		{"symlink single", l[4].Symlink, []Symlink{{Path: "/a", Target: "b"}}},
		{"symlink list", l[5].Symlink, []Symlink{{Path: "/c", Target: "d", Owner: Owner{"1000", "capi"}}, {Path: "/e", Target: "f"}}},
		{"mkdir string", l[6].Mkdir, []Mkdir{{Path: "/var/lib/x"}}},
		{"mkdir list", l[7].Mkdir, []Mkdir{{Path: "/y"}, {Path: "/z", Mode: ptr(Mode(01777))}}},
		{"remove string", l[8].Remove, []string{"/usr/share/man"}},
		{"hook short", *l[9].Hook, Hook{Run: "./hooks/fix.sh"}},
		{"hook long", *l[10].Hook, Hook{Run: "./h.sh", Args: []string{"a", "1"}, Env: map[string]string{"A": "x", "B": "2"}}},
		{"images string", l[11].Images, []Image{{Ref: "r.example/a:1@sha256:" + hex64}}},
		{"images mapping", l[12].Images, []Image{{Ref: "r.example/b:2@sha256:" + hex64}}},
		{"images into containerd", []any{l[13].Images, l[13].ImagesInto, *l[13].ImagesDiscardLayers},
			[]any{[]Image{{Ref: "r.example/c:3@sha256:" + hex64}}, "containerd", true}},
		{"images into archives", []any{l[14].Images, l[14].ImagesInto, l[14].ImagesDiscardLayers},
			[]any{[]Image{{Ref: "r.example/d:4@sha256:" + hex64}}, "", (*bool)(nil)}},
		{"debs", *l[15].Debs, Debs{Repo: "https://deb.example.invalid/debian", Suites: []string{"bookworm", "bookworm-updates"}, Components: []string{"main"}, Packages: []string{"socat"}, Recommends: true, Scripts: ScriptsOffline}},
		{"cleanup list", r.Seal.Cleanup, Cleanup{Default: true, Globs: []string{"/var/cache/**", "/root/.bash_history"}}},
		{"raw defaults", r.Outputs[0].Partitions, []Partition{
			{Name: "esp", Type: "esp", Size: 256 << 20, Filesystem: "vfat"},
			{Name: "root", Type: "root", Filesystem: "ext4"},
		}},
		{"raw size", r.Outputs[0].Size, int64(0)},
		{"cpio compression", r.Outputs[1].Compression, "zstd"},
		{"pxe from", r.Outputs[2].From, "cpio"},
		{"containerdisk from", r.Outputs[3].From, "disk"},
		{"arch", r.Arch, "amd64"},
	}
	for _, c := range checks {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %#v, want %#v", c.name, c.got, c.want)
		}
	}
	if out, ok := r.Output("disk"); !ok || out.Format != "raw" {
		t.Errorf("Output(disk) = %v, %v", out, ok)
	}
}

func TestCleanup(t *testing.T) {
	for _, tt := range []struct {
		yaml string
		want Cleanup
	}{
		{"", Cleanup{Default: true}},
		{"seal: {}\n", Cleanup{Default: true}},
		{"seal: {cleanup: default}\n", Cleanup{Default: true}},
		{"seal: {cleanup: none}\n", Cleanup{}},
		{"seal: {cleanup: [/x]}\n", Cleanup{Default: true, Globs: []string{"/x"}}},
	} {
		r, err := Parse([]byte(head+tt.yaml), "r.yaml")
		if err != nil {
			t.Fatalf("%q: %v", tt.yaml, err)
		}
		if !reflect.DeepEqual(r.Seal.Cleanup, tt.want) {
			t.Errorf("%q: cleanup = %#v, want %#v", tt.yaml, r.Seal.Cleanup, tt.want)
		}
	}
}

// Anchors and aliases are plain YAML and work for whole values.
func TestAliases(t *testing.T) {
	src := head + `customize:
  layers:
    - files:
      - &motd {path: /etc/motd, content: "x"}
    - files: [*motd]
`
	r, err := Parse([]byte(src), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.Customize.Layers[1].Files[0].Path; got != "/etc/motd" {
		t.Errorf("aliased path = %q", got)
	}
}

// A small document whose aliases expand enormously is refused, not chewed on.
func TestAliasBomb(t *testing.T) {
	var b strings.Builder
	b.WriteString(head + "seal:\n  cleanup: &c [")
	for i := 0; i < 1100; i++ {
		b.WriteString("/a, ")
	}
	b.WriteString("/a]\ncustomize:\n  layers:\n")
	for i := 0; i < 1000; i++ {
		b.WriteString("    - remove: *c\n")
	}
	_, err := Parse([]byte(b.String()), "r.yaml")
	if err == nil || !strings.Contains(err.Error(), "too large after expanding aliases") {
		t.Fatalf("err = %v", err)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "r.yaml")
	if err := os.WriteFile(file, []byte(head), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	if r.Dir != dir || r.Path != file {
		t.Errorf("Dir, Path = %q, %q; want %q, %q", r.Dir, r.Path, dir, file)
	}
	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !os.IsNotExist(unwrapAll(err)) {
		t.Errorf("Load(missing) = %v", err)
	}
}

func unwrapAll(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

// Every example recipe parses; the examples are documentation users copy.
// One whose mirror defaults to the host's reads a test apt configuration.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("examples/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("found %d examples, want at least 2", len(files))
	}
	for _, f := range files {
		r, err := LoadWith(f, Options{HostApt: os.DirFS("testdata/apt/deb822")})
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if r.Name+".yaml" != filepath.Base(f) {
			t.Errorf("%s: name %q does not match the file name", f, r.Name)
		}
	}
}

func TestTreeDigest(t *testing.T) {
	digest := func(src string) string {
		t.Helper()
		r, err := Parse([]byte(src), "r.yaml")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(r.TreeDigest, "sha256:") || len(r.TreeDigest) != 71 {
			t.Fatalf("TreeDigest %q", r.TreeDigest)
		}
		return r.TreeDigest
	}
	const head = "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: n\nbase: {tarball: ./b.tar}\n"
	plain := digest(head + "customize:\n  layers:\n    - remove: [/tmp/x]\noutputs:\n  - {format: tar}\n")
	for name, src := range map[string]string{
		"more outputs":        head + "customize:\n  layers:\n    - remove: [/tmp/x]\noutputs:\n  - {format: tar}\n  - {format: cpio}\n",
		"no outputs":          head + "customize:\n  layers:\n    - remove: [/tmp/x]\n",
		"comments and layout": "# a comment\n" + head + "customize:\n  layers: # the only layer\n  - remove:\n    - \"/tmp/x\"\noutputs: [{format: tar}]\n",
	} {
		if got := digest(src); got != plain {
			t.Errorf("%s: digest %s, want %s as the tree is the same", name, got, plain)
		}
	}
	if digest(head+"customize:\n  layers:\n    - remove: [/tmp/y]\n") == plain {
		t.Error("a different layer gives the same digest")
	}
	params := "params: {p: /tmp/x}\n" + head + "customize:\n  layers:\n    - remove: [\"${p}\"]\n"
	r, err := ParseWith([]byte(params), "r.yaml", Options{Set: map[string]string{"p": "/tmp/z"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.TreeDigest == digest(params) {
		t.Error("another parameter value gives the same digest")
	}
}

func TestBaseDebs(t *testing.T) {
	r, err := Parse([]byte(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: t
base:
  debs:
    repo: file:///srv/debian
    suite: bookworm
    keyring: ./debian.gpg
    packages: [systemd-sysv]
  post: [./check]
`), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := r.Base.Debs
	if d == nil || r.Base.Tarball != "" {
		t.Fatalf("base = %+v", r.Base)
	}
	if d.Variant != DefaultVariant || d.Suite != "bookworm" || !reflect.DeepEqual(d.Components, []string{"main"}) ||
		!reflect.DeepEqual(d.Packages, []string{"systemd-sysv"}) || d.Scripts != ScriptsOffline || len(r.Base.Post) != 1 {
		t.Errorf("base.debs = %+v, post %v", d, r.Base.Post)
	}
	// The variant and the packages are part of what the recipe says, so
	// of its digest.
	r2, err := Parse([]byte(strings.Replace(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: t
base:
  debs: {repo: "file:///srv/debian", suite: bookworm, trusted: true, variant: minbase}
`, "minbase", "important", 1)), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r3, err := Parse([]byte(`apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: t
base:
  debs: {repo: "file:///srv/debian", suite: bookworm, trusted: true, variant: minbase}
`), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r2.TreeDigest == r3.TreeDigest {
		t.Error("the variant does not change the recipe's digest")
	}
}
