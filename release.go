package stamp

import (
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/formats/attest"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

// releaseText is the recipe's release file: what a running node tells about
// its own making without reading the embedded record (os-release syntax,
// so a shell can source it). The recipe digest is TreeDigest, which leaves
// the outputs out, so every output of one build says the same.
func releaseText(rec *recipes.Recipe, b attest.Builder) string {
	version := b.Version["stamp"]
	if rev := b.Version["build:vcs.revision"]; rev != "" {
		version += " (" + rev + ")"
	}
	var s strings.Builder
	s.WriteString("# Written by stamp: the recipe this image was built from.\n")
	for _, kv := range [][2]string{
		{"STAMP_RECIPE", rec.Name},
		{"STAMP_RECIPE_FILE", path.Base(rec.Path)},
		{"STAMP_RECIPE_DIGEST", rec.TreeDigest},
		{"STAMP_VERSION", version},
	} {
		fmt.Fprintf(&s, "%s=%s\n", kv[0], shellQuote(kv[1]))
	}
	return s.String()
}

// shellQuote quotes v for sh, as os-release(5) asks of values with spaces.
func shellQuote(v string) string {
	return "\"" + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`").Replace(v) + "\""
}

// writeRelease writes the release file before the seal, so it is sealed
// and recorded like every other file.
func writeRelease(t *rootfs.Tree, rec *recipes.Recipe, ep time.Time) error {
	if rec.Release == "" {
		return nil
	}
	p, err := t.Resolve(rec.Release, true)
	if err != nil {
		return fmt.Errorf("release %s: %w", rec.Release, err)
	}
	h := rootfs.Header{Perm: 0o755, MTime: ep, Origin: rootfs.Origin{Layer: "stamp"}}
	if _, err := t.MkdirAll(path.Dir(p), h); err != nil {
		return fmt.Errorf("release %s: %w", rec.Release, err)
	}
	h.Type, h.Perm = rootfs.TypeRegular, 0o644
	if _, err := t.Create(p, h, strings.NewReader(releaseText(rec, attest.ThisBuilder()))); err != nil {
		return fmt.Errorf("release %s: %w", rec.Release, err)
	}
	return nil
}
