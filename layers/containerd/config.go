package containerd

import (
	"fmt"
	"path"
	"sort"

	"github.com/pelletier/go-toml/v2"
)

// ConfigPath is where containerd reads its configuration.
const ConfigPath = "/etc/containerd/config.toml"

// Snapshotter is the only snapshotter this package writes for.
const Snapshotter = "overlayfs"

// Config is what a containerd configuration says about where images go.
type Config struct {
	// Version is the file's version key: 1 when it has none, as containerd
	// reads it, 0 when there is no file (every default).
	Version int64
	// Root is containerd's state directory.
	Root string
	// SnapshotterRoot is the overlayfs snapshotter's directory.
	SnapshotterRoot string
	// SandboxImage is the CRI plugin's sandbox image, "" for the release's
	// default.
	SandboxImage string
	// DiscardUnpackedLayers is the CRI plugin's discard_unpacked_layers.
	DiscardUnpackedLayers bool
}

// DefaultRoot is containerd's state directory when the configuration
// names none.
const DefaultRoot = "/var/lib/containerd"

// ParseConfig reads a containerd configuration (an absent file reads as
// nil data: every default). Only what decides where and how images are
// kept is read; a snapshotter other than overlayfs, for the CRI plugin or
// one of its runtimes, is an error naming the key.
func ParseConfig(data []byte) (Config, error) {
	c := Config{Version: 1, Root: DefaultRoot}
	if len(data) == 0 {
		c.Version = 0
	}
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		return c, fmt.Errorf("%s: %w", ConfigPath, err)
	}
	if v, ok := doc["version"]; ok {
		n, ok := v.(int64)
		if !ok || n < 1 || n > 3 {
			return c, fmt.Errorf("%s: version = %v: want 1, 2 or 3", ConfigPath, v)
		}
		c.Version = n
	}
	if _, ok := doc["imports"]; ok {
		return c, fmt.Errorf("%s: imports: stamp reads only this file; put the settings here", ConfigPath)
	}
	if v, err := str(doc, "root"); err != nil {
		return c, err
	} else if v != "" {
		if !path.IsAbs(v) {
			return c, fmt.Errorf("%s: root = %q is not an absolute path", ConfigPath, v)
		}
		c.Root = path.Clean(v)
	}
	cri, images, overlay := `plugins."io.containerd.grpc.v1.cri"`, `plugins."io.containerd.grpc.v1.cri".containerd`, `plugins."io.containerd.snapshotter.v1.overlayfs"`
	runtimes := images + ".runtimes"
	sandbox := cri + ".sandbox_image"
	switch c.Version {
	case 1:
		cri, images, overlay = "plugins.cri", "plugins.cri.containerd", "plugins.overlayfs"
		runtimes, sandbox = images+".runtimes", cri+".sandbox_image"
	case 3:
		images = `plugins."io.containerd.cri.v1.images"`
		runtimes = `plugins."io.containerd.cri.v1.runtime".containerd.runtimes`
		sandbox = images + `.pinned_images.sandbox`
	}
	var err error
	if c.SandboxImage, err = str(doc, sandbox); err != nil {
		return c, err
	}
	if sn, err := str(doc, images+".snapshotter"); err != nil {
		return c, err
	} else if sn != "" && sn != Snapshotter {
		return c, fmt.Errorf("%s: %s.snapshotter = %q: stamp writes images only for the %s snapshotter", ConfigPath, images, sn, Snapshotter)
	}
	if v, ok := lookup(doc, images+".discard_unpacked_layers"); ok {
		b, ok := v.(bool)
		if !ok {
			return c, fmt.Errorf("%s: %s.discard_unpacked_layers = %v: want true or false", ConfigPath, images, v)
		}
		c.DiscardUnpackedLayers = b
	}
	if rs, ok := lookup(doc, runtimes); ok {
		m, _ := rs.(map[string]any)
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			key := fmt.Sprintf("%s.%s.snapshotter", runtimes, n)
			if sn, err := str(doc, key); err != nil {
				return c, err
			} else if sn != "" && sn != Snapshotter {
				return c, fmt.Errorf("%s: %s = %q: stamp writes images only for the %s snapshotter", ConfigPath, key, sn, Snapshotter)
			}
		}
	}
	c.SnapshotterRoot = path.Join(c.Root, "io.containerd.snapshotter.v1."+Snapshotter)
	if v, err := str(doc, overlay+".root_path"); err != nil {
		return c, err
	} else if v != "" {
		if !path.IsAbs(v) {
			return c, fmt.Errorf("%s: %s.root_path = %q is not an absolute path", ConfigPath, overlay, v)
		}
		c.SnapshotterRoot = path.Clean(v)
	}
	return c, nil
}

// lookup finds a dotted key whose parts may be quoted, as the TOML tables
// containerd's documentation writes: plugins."io.containerd.grpc.v1.cri".
func lookup(doc map[string]any, key string) (any, bool) {
	var cur any = doc
	for _, k := range splitKey(key) {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = m[k]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// str is a string key, "" when absent.
func str(doc map[string]any, key string) (string, error) {
	v, ok := lookup(doc, key)
	if !ok {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%s: %s = %v: want a string", ConfigPath, key, v)
	}
	return s, nil
}

func splitKey(key string) []string {
	var parts []string
	var cur []byte
	quoted := false
	for i := 0; i < len(key); i++ {
		switch c := key[i]; {
		case c == '"':
			quoted = !quoted
		case c == '.' && !quoted:
			parts = append(parts, string(cur))
			cur = cur[:0]
		default:
			cur = append(cur, c)
		}
	}
	return append(parts, string(cur))
}
