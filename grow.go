package stamp

import (
	"strings"
	"time"

	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

// GrowDropIn is where a raw disk's image gets its systemd-repart drop-in.
const GrowDropIn = "/usr/lib/repart.d/50-stamp-root.conf"

// growDropIn makes the root partition grow to the end of a larger disk at
// first boot (systemd-repart), and its filesystem with it. The raw format
// also sets the partition's grow-file-system attribute, for systemd's
// gpt-auto and growfs.
const growDropIn = `# Written by stamp: grow the root partition and its filesystem to fill the
# disk on first boot. Remove this file to keep the partition as built.
[Partition]
Type=root
GrowFileSystem=yes
`

// wantsGrow reports whether any raw output asks for a growing root (the
// default for raw disks).
func wantsGrow(rec *recipes.Recipe) bool {
	for _, o := range rec.Outputs {
		if o.Format == recipes.FormatRaw && (o.Grow == nil || *o.Grow) {
			return true
		}
	}
	return false
}

// addGrowDropIn puts the drop-in into the tree before it is sealed. The
// conductor does it, not the raw format, because formats never change the
// tree: every output of the build therefore carries the same file.
func addGrowDropIn(t *rootfs.Tree, rec *recipes.Recipe, ep time.Time) error {
	if !wantsGrow(rec) || t.Get(GrowDropIn) != nil {
		return nil
	}
	origin := rootfs.Origin{Layer: "stamp", Member: "raw.grow"}
	if _, err := t.MkdirAll("/usr/lib/repart.d", rootfs.Header{Perm: 0o755, MTime: ep, Origin: origin}); err != nil {
		return err
	}
	_, err := t.Create(GrowDropIn, rootfs.Header{Type: rootfs.TypeRegular, Perm: 0o644, MTime: ep, Origin: origin},
		strings.NewReader(growDropIn))
	return err
}
