package recipes

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// head is a valid recipe prefix of four lines; cases add from line 5 on.
const head = "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: t\nbase: {tarball: ./b.tar}\n"

const hex64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		line  int
		field string
		msg   string // substring of Msg
	}{
		{"unknown top field", head + "bogus: 1\n", 5, "bogus", "unknown field"},
		{"repeated key", head + "name: u\n", 5, "name", "repeated key (first at line 3)"},
		{"missing base", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: t\n", 1, "base", "base is required"},
		{"null base", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: t\nbase:\n", 4, "base.tarball", "base.tarball or base.debs is required"},
		{"base without tarball", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: t\nbase:\n  post: [./x]\n", 5, "base.tarball", "base.tarball or base.debs is required"},
		{"base tarball and debs", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: t\nbase:\n  tarball: ./b\n  debs: {repo: \"file:///r\", suite: s}\n", 6, "base.debs", "tarball or debs, not both"},
		{"base debs sha256", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: t\nbase:\n  debs: {repo: \"file:///r\", suite: s}\n  sha256: " + hex64 + "\n", 6, "base.sha256", "pinned by stamp.lock"},
		{"base debs bad variant", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: t\nbase:\n  debs:\n    repo: file:///r\n    suite: s\n    variant: fat\n", 8, "base.debs.variant", `variant "fat" must be one of essential, apt, minbase`},
		{"base debs without repo", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: t\nbase:\n  debs: {suite: s}\n", 5, "base.debs.repo", "required"},
		{"variant in a debs layer", head + "customize:\n  layers:\n    - debs: {repo: \"file:///r\", suite: s, packages: [a], variant: minbase}\n", 7, "customize.layers[0].debs.variant", "variant belongs to base.debs"},
		{"missing apiVersion", "kind: Recipe\nname: t\nbase: {tarball: ./b}\n", 1, "apiVersion", "apiVersion is required"},
		{"wrong apiVersion", "apiVersion: stamp.dev/v1\nkind: Recipe\nname: t\nbase: {tarball: ./b}\n", 1, "apiVersion", `must be "stamp.dev/v1alpha1"`},
		{"wrong kind", "apiVersion: stamp.dev/v1alpha1\nkind: Image\nname: t\nbase: {tarball: ./b}\n", 2, "kind", `must be "Recipe"`},
		{"bad name", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: K8s\nbase: {tarball: ./b}\n", 3, "name", "must match"},
		{"bad arch", head + "arch: x86_64\n", 5, "arch", "amd64 or arm64"},
		{"epoch string", head + "epoch: soon\n", 5, "epoch", `expected an integer, got the string "soon"`},
		{"epoch negative", head + "epoch: -1\n", 5, "epoch", "out of range"},
		{"epoch float", head + "epoch: 1.5\n", 5, "epoch", "expected an integer"},
		{"url without sha", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: t\nbase:\n  tarball: https://x/b.tar\n", 5, "base.sha256", "required when the tarball is a URL"},
		{"ftp url", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: t\nbase:\n  tarball: ftp://x/b.tar\n", 5, "base.tarball", `scheme "ftp"`},
		{"short digest", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: t\nbase:\n  tarball: ./b\n  sha256: abc123\n", 6, "base.sha256", "64 lowercase hex"},
		{"upper digest", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: t\nbase:\n  tarball: ./b\n  sha256: " + strings.ToUpper(hex64) + "\n", 6, "base.sha256", "lowercase"},
		{"wrong algo digest", "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: t\nbase:\n  tarball: ./b\n  sha256: sha512:" + hex64 + "\n", 6, "base.sha256", "64 lowercase hex"},
		{"unquoted mode", head + "customize:\n  layers:\n    - files:\n        - {path: /a, content: x}\n    - files:\n        - path: /etc/x\n          content: y\n          mode: 0644\n", 12, "customize.layers[1].files[0].mode",
			`mode must be a quoted octal string such as "0644" (YAML reads 0644 as the integer 420)`},
		{"mode out of range", head + "customize:\n  layers:\n    - files: [{path: /a, content: x, mode: \"17777\"}]\n", 7, "customize.layers[0].files[0].mode", "between 0000 and 07777"},
		{"mode not octal", head + "customize:\n  layers:\n    - mkdir: [{path: /a, mode: \"0789\"}]\n", 7, "customize.layers[0].mkdir[0].mode", "octal"},
		{"two layer keys", head + "customize:\n  layers:\n    - {path: /a}\n    - files: [{path: /a, content: x}]\n      remove: [/b]\n", 8, "customize.layers[1]", "exactly one kind key, got files, remove"},
		{"zero layer keys", head + "provision:\n  layers:\n    - {}\n", 7, "provision.layers[0]", "exactly one kind key"},
		{"layer is a string", head + "provision:\n  layers:\n    - files\n", 7, "provision.layers[0]", `got the string "files"`},
		{"unknown layer kind", head + "provision:\n  layers:\n    - copy: {a: b}\n", 7, "provision.layers[0].copy", `unknown layer kind "copy"`},
		{"empty layer", head + "provision:\n  layers:\n    - files: []\n", 7, "provision.layers[0].files", "files layer is empty"},
		{"relative file path", head + "customize:\n  layers:\n    - files: [{path: etc/x, content: x}]\n", 7, "customize.layers[0].files[0].path", "must be absolute"},
		{"dotdot path", head + "customize:\n  layers:\n    - files: [{path: /etc/../x, content: x}]\n", 7, "customize.layers[0].files[0].path", ".. components"},
		{"content and from", head + "customize:\n  layers:\n    - files:\n      - path: /x\n        content: a\n        from: ./b\n", 10, "customize.layers[0].files[0]", "not both"},
		{"neither content nor from", head + "customize:\n  layers:\n    - files:\n      - path: /x\n        mode: \"0600\"\n", 8, "customize.layers[0].files[0]", "give content"},
		{"dir with content", head + "customize:\n  layers:\n    - files:\n      - path: /x/\n        content: a\n", 9, "customize.layers[0].files[0].content", "needs from"},
		{"unknown file field", head + "customize:\n  layers:\n    - files:\n      - path: /x\n        content: a\n        perms: \"0600\"\n", 10, "customize.layers[0].files[0].perms", "unknown field"},
		{"bad owner", head + "customize:\n  layers:\n    - mkdir: {path: /x, owner: \"a:b:c\"}\n", 7, "customize.layers[0].mkdir.owner", "USER:GROUP"},
		{"bool owner", head + "customize:\n  layers:\n    - mkdir: {path: /x, owner: true}\n", 7, "customize.layers[0].mkdir.owner", "got the boolean true"},
		{"negative mtime", head + "customize:\n  layers:\n    - files: [{path: /x, content: a, mtime: -5}]\n", 7, "customize.layers[0].files[0].mtime", "out of range"},
		{"symlink no target", head + "customize:\n  layers:\n    - symlink: {path: /x}\n", 7, "customize.layers[0].symlink.target", "target is required"},
		{"symlink list relative", head + "customize:\n  layers:\n    - symlink:\n      - {path: /a, target: b}\n      - {path: c, target: d}\n", 9, "customize.layers[0].symlink[1].path", "must be absolute"},
		{"mkdir relative", head + "customize:\n  layers:\n    - mkdir: [var/lib/x]\n", 7, "customize.layers[0].mkdir[0]", "must be absolute"},
		{"remove relative", head + "customize:\n  layers:\n    - remove: [/ok, \"usr/share/doc\"]\n", 7, "customize.layers[0].remove[1]", "must be absolute"},
		{"remove bad glob", head + "customize:\n  layers:\n    - remove: [\"/usr/[a\"]\n", 7, "customize.layers[0].remove[0]", "malformed"},
		{"remove mapping", head + "customize:\n  layers:\n    - remove: {path: /x}\n", 7, "customize.layers[0].remove", "expected a string, got a mapping"},
		{"user no name", head + "customize:\n  layers:\n    - users: [{uid: 1000}]\n", 7, "customize.layers[0].users[0].name", "name is required"},
		{"user uid string", head + "customize:\n  layers:\n    - users: [{name: a, uid: \"1000\"}]\n", 7, "customize.layers[0].users[0].uid", `expected an integer, got the string "1000"`},
		{"user uid too big", head + "customize:\n  layers:\n    - users: [{name: a, uid: 4294967296}]\n", 7, "customize.layers[0].users[0].uid", "out of range"},
		{"user twice", head + "customize:\n  layers:\n    - users:\n      - {name: a}\n      - {name: a}\n", 9, "customize.layers[0].users[1].name", `user "a" is listed twice (first at line 8)`},
		{"user bad name", head + "customize:\n  layers:\n    - users: [{name: \"Bad Name\"}]\n", 7, "customize.layers[0].users[0].name", "not a valid user"},
		{"user system string", head + "customize:\n  layers:\n    - users: [{name: a, system: \"yes\"}]\n", 7, "customize.layers[0].users[0].system", "expected true or false"},
		{"group colon", head + "customize:\n  layers:\n    - users: [{name: a, comment: \"x:y\"}]\n", 7, "customize.layers[0].users[0].comment", "':'"},
		{"systemd unit", head + "provision:\n  layers:\n    - systemd: {enable: [containerd]}\n", 7, "provision.layers[0].systemd.enable[0]", "not a systemd unit name"},
		{"systemd default", head + "provision:\n  layers:\n    - systemd: {default: multi-user.service}\n", 7, "provision.layers[0].systemd.default", ".target unit"},
		{"hook no run", head + "provision:\n  layers:\n    - hook: {args: [a]}\n", 7, "provision.layers[0].hook.run", "run is required"},
		{"hook env name", head + "provision:\n  layers:\n    - hook: {run: ./x, env: {A-B: c}}\n", 7, "provision.layers[0].hook.env.A-B", "environment variable"},
		{"oci no ref", head + "provision:\n  layers:\n    - oci: {dest: /usr/bin/}\n", 7, "provision.layers[0].oci.ref", "ref is required"},
		{"oci bad digest", head + "provision:\n  layers:\n    - oci: {ref: \"r.example/a@sha256:abc\"}\n", 7, "provision.layers[0].oci.ref", "digest must be sha256:<64 lowercase hex>"},
		{"oci platform", head + "provision:\n  layers:\n    - oci: {ref: r/a:1, platform: amd64}\n", 7, "provision.layers[0].oci.platform", "os/arch"},
		{"debs no suite", head + "provision:\n  layers:\n    - debs: {repo: \"file:///srv\", packages: [socat]}\n", 7, "provision.layers[0].debs.suite", "suite is required"},
		{"debs both suites", head + "provision:\n  layers:\n    - debs:\n        repo: \"file:///srv\"\n        suite: a\n        suites: [b]\n        packages: [socat]\n", 10, "provision.layers[0].debs.suites", "not both"},
		{"debs repo", head + "provision:\n  layers:\n    - debs: {repo: /srv, suite: a, packages: [socat]}\n", 7, "provision.layers[0].debs.repo", "URL"},
		{"debs no packages", head + "provision:\n  layers:\n    - debs: {repo: \"file:///srv\", suite: a}\n", 7, "provision.layers[0].debs.packages", "packages is required"},
		{"debs scripts", head + "provision:\n  layers:\n    - debs: {repo: \"file:///srv\", suite: a, packages: [socat], scripts: real}\n", 7, "provision.layers[0].debs.scripts", `must be "offline" or "chroot"`},
		{"debs flat components", head + "provision:\n  layers:\n    - debs:\n        repo: \"file:///srv\"\n        suite: /\n        components: [main]\n        packages: [kubelet]\n", 10, "provision.layers[0].debs.components", "flat repository"},
		{"debs skip unknown", head + "provision:\n  layers:\n    - debs:\n        repo: \"file:///srv\"\n        suite: a\n        packages: [socat]\n        skip: [depmod]\n", 11, "provision.layers[0].debs.skip", `skip "depmod": only update-initramfs can be skipped`},
		{"debs skip chroot", head + "provision:\n  layers:\n    - debs:\n        repo: \"file:///srv\"\n        suite: a\n        packages: [socat]\n        scripts: chroot\n        skip: [update-initramfs]\n", 12, "provision.layers[0].debs.skip", "no effect with scripts: chroot"},
		{"debs chroot defer", head + "provision:\n  layers:\n    - debs:\n        repo: \"file:///srv\"\n        suite: a\n        packages: [socat]\n        scripts: chroot\n        deferScripts: true\n", 12, "provision.layers[0].debs.deferScripts", "no effect with scripts: chroot"},
		{"image no tag", head + "provision:\n  layers:\n    - images: [\"registry.example.invalid/pause@sha256:" + hex64 + "\"]\n", 7, "provision.layers[0].images[0]", "must have a tag"},
		{"image short digest", head + "provision:\n  layers:\n    - images:\n      - \"registry.example.invalid/pause:3.10@sha256:" + hex64 + "\"\n      - \"registry.example.invalid/pause:3.10@sha256:abcd\"\n", 9, "provision.layers[0].images[1]", "digest must be sha256:<64 lowercase hex>"},
		{"image mapping", head + "provision:\n  layers:\n    - images:\n      - ref: \"a/b:1@sha256:123\"\n", 8, "provision.layers[0].images[0].ref", "digest must be"},
		{"images into", head + "provision:\n  layers:\n    - images: {into: cri-o, refs: [\"r.example/a:1\"]}\n", 7, "provision.layers[0].images.into", "must be one of archives, containerd"},
		{"images no refs", head + "provision:\n  layers:\n    - images: {into: containerd}\n", 7, "provision.layers[0].images.refs", "refs is required"},
		{"images empty refs", head + "provision:\n  layers:\n    - images: {into: containerd, refs: []}\n", 7, "provision.layers[0].images.refs", "list at least one image"},
		{"images discard archives", head + "provision:\n  layers:\n    - images: {refs: [\"r.example/a:1\"], discardLayers: true}\n", 7, "provision.layers[0].images.discardLayers", "needs into: containerd"},
		{"images refs ref", head + "provision:\n  layers:\n    - images: {into: containerd, refs: [\"a/b:1@sha256:123\"]}\n", 7, "provision.layers[0].images.refs[0]", "digest must be"},
		{"tarball layer url", head + "provision:\n  layers:\n    - tarball: {path: \"https://x/y.tar\", dest: /opt}\n", 7, "provision.layers[0].tarball.sha256", "required when the tarball is a URL"},
		{"tarball layer dest", head + "provision:\n  layers:\n    - tarball: {path: ./y.tar, dest: opt}\n", 7, "provision.layers[0].tarball.dest", "must be absolute"},
		{"cleanup bad", head + "seal:\n  cleanup: all\n", 6, "seal.cleanup", "default, none, or a list"},
		{"cleanup relative glob", head + "seal:\n  cleanup: [var/log]\n", 6, "seal.cleanup[0]", "must be absolute"},
		{"output no format", head + "outputs:\n  - {name: x}\n", 6, "outputs[0].format", "format is required"},
		{"output bad format", head + "outputs:\n  - {format: floppy}\n", 6, "outputs[0].format", `format "floppy" must be one of`},
		{"tar bad compression", head + "outputs:\n  - {format: tar, compression: bzip2}\n", 6, "outputs[0].compression", "none, gzip, zstd, xz"},
		{"raw compression", head + "outputs:\n  - format: raw\n    compression: gzip\n", 7, "outputs[0].compression", "does not apply to format raw"},
		{"duplicate output", head + "outputs:\n  - {format: tar}\n  - {format: tar, compression: gzip}\n", 7, "outputs[1].name", `"tar" is already used by outputs[0]`},
		{"from later", head + "outputs:\n  - {format: qcow2, from: disk}\n  - {format: raw, name: disk}\n", 6, "outputs[0].from", `from "disk" must name an earlier output`},
		{"from wrong format", head + "outputs:\n  - {format: tar}\n  - {format: qcow2, from: tar}\n", 7, "outputs[1].from", "cannot be made from tar"},
		{"qcow2 without raw", head + "outputs:\n  - {format: tar}\n  - {format: qcow2}\n", 7, "outputs[1].from", "needs an earlier raw output"},
		{"vhd without raw", head + "outputs:\n  - {format: tar}\n  - {format: vhd}\n", 7, "outputs[1].from", "needs an earlier raw output"},
		{"vhd bad type", head + "outputs:\n  - {format: raw}\n  - {format: vhd, type: sparse}\n", 7, "outputs[1].type", `type "sparse" must be one of fixed, dynamic`},
		{"type on qcow2", head + "outputs:\n  - {format: raw}\n  - {format: qcow2, type: fixed}\n", 7, "outputs[1].type", "does not apply to format qcow2"},
		{"two vhds unnamed", head + "outputs:\n  - {format: raw}\n  - {format: vhd}\n  - {format: vhd, type: dynamic}\n", 8, "outputs[2].name", `"vhd" is already used by outputs[1]`},
		{"vhd compression", head + "outputs:\n  - {format: raw}\n  - {format: vhd, compression: zlib}\n", 7, "outputs[1].compression", "does not apply to format vhd"},
		{"vmdk without raw", head + "outputs:\n  - {format: tar}\n  - {format: vmdk}\n", 7, "outputs[1].from", "needs an earlier raw output"},
		{"vmdk bad type", head + "outputs:\n  - {format: raw}\n  - {format: vmdk, type: fixed}\n", 7, "outputs[1].type", `type "fixed" must be one of streamOptimized, monolithicSparse`},
		{"vmdk compression", head + "outputs:\n  - {format: raw}\n  - {format: vmdk, compression: zlib}\n", 7, "outputs[1].compression", "does not apply to format vmdk"},
		{"ova bios", head + "outputs:\n  - {format: raw}\n  - {format: tar}\n  - {format: ova, firmware: bios}\n", 8, "outputs[2].firmware", `needs the raw output "raw" to boot BIOS machines`},
		{"ova bios from", head + "outputs:\n  - {format: raw, name: a, boot: {bios: true}}\n  - {format: raw, name: b}\n  - {format: ova, from: b, firmware: bios}\n", 8, "outputs[2].firmware", `needs the raw output "b"`},
		{"ova firmware", head + "outputs:\n  - {format: raw}\n  - {format: ova, firmware: uefi}\n", 7, "outputs[1].firmware", `firmware "uefi" must be one of efi, bios`},
		{"ova cpus", head + "outputs:\n  - {format: raw}\n  - {format: ova, cpus: 0}\n", 7, "outputs[1].cpus", "out of range 1..768"},
		{"ova memory", head + "outputs:\n  - {format: raw}\n  - {format: ova, memory: 1000KiB}\n", 7, "outputs[1].memory", "whole number of MiB"},
		{"ova type", head + "outputs:\n  - {format: raw}\n  - {format: ova, type: streamOptimized}\n", 7, "outputs[1].type", "does not apply to format ova"},
		{"gce without raw", head + "outputs:\n  - {format: tar}\n  - {format: gce}\n", 7, "outputs[1].from", "needs an earlier raw output"},
		{"gce memory", head + "outputs:\n  - {format: raw}\n  - {format: gce, memory: 1GiB}\n", 7, "outputs[1].memory", "does not apply to format gce"},
		{"tar from", head + "outputs:\n  - {format: raw}\n  - {format: tar, from: raw}\n", 7, "outputs[1].from", "does not apply to format tar"},
		{"partition size", head + "outputs:\n  - format: raw\n    partitions:\n      - {name: esp, type: esp, size: 256MB}\n      - {name: root, type: root, size: 4 GB}\n      - {name: data, type: linux, size: lots}\n", 10, "outputs[0].partitions[2].size", `"lots"`},
		{"partition unit", head + "outputs:\n  - format: raw\n    partitions:\n      - {name: root, type: root, size: 4Gb}\n", 8, "outputs[0].partitions[0].size", "unknown unit"},
		{"partition zero", head + "outputs:\n  - format: raw\n    partitions:\n      - {name: root, type: root, size: 0}\n", 8, "outputs[0].partitions[0].size", "greater than zero"},
		{"partition twice", head + "outputs:\n  - format: raw\n    partitions:\n      - {name: root, type: root}\n      - {name: root, type: linux}\n", 9, "outputs[0].partitions[1].name", "listed twice"},
		{"no root partition", head + "outputs:\n  - format: raw\n    partitions:\n      - {name: esp, type: esp}\n", 7, "outputs[0].partitions", "exactly one partition of type root"},
		{"esp filesystem", head + "outputs:\n  - format: raw\n    partitions:\n      - {name: esp, type: esp, filesystem: ext4}\n      - {name: root, type: root}\n", 8, "outputs[0].partitions[0].filesystem", "type esp has filesystem vfat"},
		{"bios no loader", head + "outputs:\n  - format: raw\n    boot: {loader: none, bios: true}\n", 7, "outputs[0].boot.bios", "BIOS boot needs loader systemd-boot"},
		{"bios grub", head + "outputs:\n  - format: raw\n    boot: {loader: grub, bios: true}\n", 7, "outputs[0].boot.bios", "not grub"},
		{"bios partition", head + "outputs:\n  - format: raw\n    partitions:\n      - {name: esp, type: esp}\n      - {name: root, type: root}\n    boot: {bios: true}\n", 10, "outputs[0].boot.bios", "needs a partition of type bios"},
		{"free space auto", head + "outputs:\n  - {format: raw, freeSpace: auto}\n", 6, "outputs[0].freeSpace", "not auto"},
		{"oci kind", head + "outputs:\n  - {format: oci, kind: vm}\n", 6, "outputs[0].kind", "rootfs, containerdisk"},
		{"oci env", head + "outputs:\n  - {format: oci, env: [PATH]}\n", 6, "outputs[0].env[0]", "NAME=VALUE"},
		{"containerdisk without disk", head + "outputs:\n  - {format: oci, kind: containerdisk}\n", 6, "outputs[0].from", "needs an earlier qcow2 or raw output"},
		{"outputs not a list", head + "outputs: {format: tar}\n", 5, "outputs", "expected a list, got a mapping"},
		{"layers not a list", head + "customize:\n  layers: {files: []}\n", 6, "customize.layers", "expected a list"},
		{"merge key", head + "customize:\n  layers:\n    - files:\n      - &f {path: /a, content: x}\n      - {<<: *f, path: /b}\n", 9, "customize.layers[0].files[1]", "merge keys"},
		{"syntax error", head + "outputs:\n  - {format: tar\n", 6, "", "invalid YAML"},
		{"block syntax error", head + "customize:\n  layers:\n  - a\n - b\n", 8, "", "invalid YAML"},
		{"tab indent", head + "customize:\n\tlayers: []\n", 6, "", "invalid YAML"},
		{"two documents", head + "---\nname: u\n", 5, "", "one YAML document"},
		{"empty", "", 1, "", "empty"},
		{"not a mapping", "- a\n- b\n", 1, "", "expected a mapping, got a list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse([]byte(tt.yaml), "recipe.yaml")
			if err == nil {
				t.Fatalf("Parse succeeded, want an error at line %d on %q: %+v", tt.line, tt.field, r)
			}
			if r != nil {
				t.Errorf("Parse returned a recipe along with the error")
			}
			all := unjoin(err)
			for _, e := range all {
				if e.Line == tt.line && e.Field == tt.field && strings.Contains(e.Msg, tt.msg) {
					if e.File != "recipe.yaml" {
						t.Errorf("File = %q", e.File)
					}
					want := "recipe.yaml:" + strconv.Itoa(tt.line) + ": "
					if tt.field != "" {
						want += tt.field + ": "
					}
					if !strings.HasPrefix(e.Error(), want) {
						t.Errorf("Error() = %q, want prefix %q", e.Error(), want)
					}
					return
				}
			}
			t.Errorf("no error at line %d field %q containing %q; got:\n%v", tt.line, tt.field, tt.msg, err)
		})
	}
}

// unjoin returns every *Error inside err, failing on anything else.
func unjoin(err error) []*Error {
	var out []*Error
	var walk func(error)
	walk = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		var e *Error
		if errors.As(err, &e) {
			out = append(out, e)
		} else {
			out = append(out, &Error{Msg: "NOT AN *Error: " + err.Error()})
		}
	}
	walk(err)
	return out
}

// Several problems are all reported, in document order, and errors.As finds one.
func TestParseCollectsErrorsInOrder(t *testing.T) {
	src := `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: t
outputs:
  - {format: raw, compression: gzip}
customize:
  layers:
    - files: [{path: rel, content: x, mode: 0755}]
arch: sparc
`
	_, err := Parse([]byte(src), "r.yaml")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("errors.As(*Error) failed on %v", err)
	}
	got := unjoin(err)
	want := []string{
		"r.yaml:1: base: base is required",
		"r.yaml:5: outputs[0].compression: compression does not apply to format raw",
		"r.yaml:8: customize.layers[0].files[0].path: path \"rel\" must be absolute (start with /)",
		"r.yaml:8: customize.layers[0].files[0].mode: " + modeMsg,
		"r.yaml:9: arch: arch \"sparc\" must be amd64 or arm64",
	}
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%v", len(got), len(want), err)
	}
	for i := range want {
		if !strings.HasPrefix(got[i].Error(), want[i]) {
			t.Errorf("error %d = %q, want prefix %q", i, got[i].Error(), want[i])
		}
	}
}

func TestErrorFormat(t *testing.T) {
	for _, tt := range []struct {
		e    Error
		want string
	}{
		{Error{File: "a.yaml", Line: 3, Field: "x.y", Msg: "bad"}, "a.yaml:3: x.y: bad"},
		{Error{File: "a.yaml", Line: 3, Msg: "bad"}, "a.yaml:3: bad"},
		{Error{File: "a.yaml", Field: "x", Msg: "bad"}, "a.yaml: x: bad"},
	} {
		if got := tt.e.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestTooManyErrorsIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString(head + "customize:\n  layers:\n    - remove:\n")
	for range 200 {
		b.WriteString("      - relative\n")
	}
	_, err := Parse([]byte(b.String()), "r.yaml")
	got := unjoin(err)
	if len(got) != maxErrors+1 || !strings.Contains(got[maxErrors].Msg, "150 more") {
		t.Fatalf("got %d errors, last %v", len(got), got[len(got)-1])
	}
}
