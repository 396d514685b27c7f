package recipes

import (
	"strings"
	"testing"
)

// TestUKI: loader uki with secureBoot and /usr on verified partitions reads
// into the recipe as written; what does not fit together fails naming the
// field, before anything is built.
func TestUKI(t *testing.T) {
	const head = "apiVersion: stamp.dev/v1alpha1\nkind: Recipe\nname: x\nbase: {tarball: ./b.tar}\noutputs:\n"
	const parts = "    partitions: [{name: esp, type: esp, size: 64MiB}, {name: usr, type: usr}, {name: usr-verity, type: usr-verity}, {name: root, type: root}]\n"
	r, err := Parse([]byte(head+"  - format: raw\n"+parts+
		"    boot: {loader: uki, cmdline: console=ttyS0, systemdBoot: false, secureBoot: {key: ./k.pem, cert: ./c.pem}}\n"), "r.yaml")
	if err != nil {
		t.Fatal(err)
	}
	raw := r.Outputs[0]
	b := raw.Boot
	if b == nil || b.Loader != "uki" || b.SystemdBoot == nil || *b.SystemdBoot || b.SecureBoot == nil || b.SecureBoot.Key != "./k.pem" || b.SecureBoot.Cert != "./c.pem" {
		t.Errorf("boot %+v", b)
	}
	if raw.Partitions[1].Filesystem != "ext4" || raw.Partitions[2].Filesystem != "none" {
		t.Errorf("partitions %+v", raw.Partitions)
	}
	for _, c := range []struct{ src, want string }{
		{"  - format: raw\n    boot: {loader: shim, secureBoot: {key: k, cert: c}}\n", "r.yaml:7: outputs[0].boot.secureBoot: secureBoot applies to loader uki, not shim"},
		{"  - format: raw\n    boot: {loader: systemd-boot, systemdBoot: false}\n", "outputs[0].boot.systemdBoot: systemdBoot applies to loader uki"},
		{"  - format: raw\n    boot: {loader: uki, secureBoot: {key: k}}\n", "outputs[0].boot.secureBoot.cert: cert is required"},
		{"  - format: raw\n" + parts + "    boot: {loader: systemd-boot}\n", "/usr on a partition of its own needs boot.loader uki"},
		{"  - format: raw\n    partitions: [{name: esp, type: esp}, {name: usr-verity, type: usr-verity}, {name: root, type: root}]\n    boot: {loader: uki}\n",
			"a usr-verity partition holds the hash tree of a usr partition, and there is none"},
		{"  - format: raw\n    partitions: [{name: esp, type: esp}, {name: usr, type: usr, filesystem: vfat}, {name: root, type: root}]\n    boot: {loader: uki}\n",
			"outputs[0].partitions[1].filesystem: the usr partition is ext4"},
		{"  - format: raw\n    partitions: [{name: esp, type: esp}, {name: v, type: usr-verity, filesystem: ext4}, {name: usr, type: usr}, {name: root, type: root}]\n    boot: {loader: uki}\n",
			"outputs[0].partitions[1].filesystem: a partition of type usr-verity has filesystem none"},
		{"  - format: raw\n    partitions: [{name: root, type: root}]\n    boot: {loader: uki}\n", "outputs[0].boot.loader: uki needs a partition of type esp"},
	} {
		_, err := Parse([]byte(head+c.src), "r.yaml")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.src, err, c.want)
		}
	}
}
