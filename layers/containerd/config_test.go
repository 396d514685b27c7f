package containerd

import (
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	for _, c := range []struct {
		name, toml string
		want       Config
		err        string
	}{
		{"none", "", Config{Version: 0, Root: DefaultRoot, SnapshotterRoot: DefaultRoot + "/io.containerd.snapshotter.v1.overlayfs"}, ""},
		{"v2", "version = 2\nroot = \"/srv/ctd\"\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"r.example/pause:3.10\"\n" +
			"[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"overlayfs\"\n  discard_unpacked_layers = true\n",
			Config{Version: 2, Root: "/srv/ctd", SnapshotterRoot: "/srv/ctd/io.containerd.snapshotter.v1.overlayfs",
				SandboxImage: "r.example/pause:3.10", DiscardUnpackedLayers: true}, ""},
		{"v3", "version = 3\n[plugins.\"io.containerd.cri.v1.images\".pinned_images]\n  sandbox = \"r.example/pause:3.10\"\n" +
			"[plugins.\"io.containerd.snapshotter.v1.overlayfs\"]\n  root_path = \"/data/overlay\"\n",
			Config{Version: 3, Root: DefaultRoot, SnapshotterRoot: "/data/overlay", SandboxImage: "r.example/pause:3.10"}, ""},
		{"v1", "[plugins.cri]\n  sandbox_image = \"r.example/pause:3.9\"\n",
			Config{Version: 1, Root: DefaultRoot, SnapshotterRoot: DefaultRoot + "/io.containerd.snapshotter.v1.overlayfs", SandboxImage: "r.example/pause:3.9"}, ""},
		{"runtime snapshotter", "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata]\n  snapshotter = \"devmapper\"\n",
			Config{}, `plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata.snapshotter = "devmapper"`},
		{"v3 snapshotter", "version = 3\n[plugins.\"io.containerd.cri.v1.images\"]\n  snapshotter = \"native\"\n",
			Config{}, `plugins."io.containerd.cri.v1.images".snapshotter = "native"`},
		{"imports", "version = 2\nimports = [\"/etc/containerd/conf.d/*.toml\"]\n", Config{}, "imports"},
		{"relative root", "version = 2\nroot = \"var/lib\"\n", Config{}, "not an absolute path"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := ParseConfig([]byte(c.toml))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want one naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Errorf("%+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestSchemaFor(t *testing.T) {
	for v, line := range map[string]string{"1.6.20~ds1-1+deb12u3": "1.6", "1.7.24-1": "1.7", "2.0.0": "2.0", "1:2.1.3-0ubuntu1": "2.1"} {
		s, err := SchemaFor("containerd", v)
		if err != nil || s.Line != line {
			t.Errorf("%s: %v %v, want %s", v, s.Line, err, line)
		}
	}
	if _, err := SchemaFor("containerd", "1.5.18-1"); err == nil || !strings.Contains(err.Error(), "version 1.5.18-1") {
		t.Errorf("1.5: %v", err)
	}
	if s, _ := SchemaFor("containerd", "1.7.2"); s.Pinned("1.7.2") {
		t.Error("1.7.2 pins")
	}
	if s, _ := SchemaFor("containerd", "1.7.3"); !s.Pinned("1.7.3") {
		t.Error("1.7.3 does not pin")
	}
}
