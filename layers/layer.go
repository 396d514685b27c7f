// Package layers holds every kind of change a recipe can apply to a tree, one
// file per kind, each behind the small Layer interface.
package layers

import (
	"context"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/rootfs"
)

// Layer is one step of a phase. Apply changes env.Tree and nothing outside it
// (and the cache).
type Layer interface {
	// Kind is the recipe key that selects this layer, e.g. "files".
	Kind() string
	Apply(ctx context.Context, env *Env) error
}

// Prechecker is a layer that needs something of the build machine, such as
// namespaces or a way to run programs of the image's architecture (arch,
// the recipe's), and can tell before the build starts whether it is there,
// so a build that could not finish fails before it writes anything.
type Prechecker interface {
	Precheck(arch string) error
}

// Env is what a layer may use while it applies.
type Env struct {
	Tree  *rootfs.Tree
	Cache *cache.Cache
	Log   logrus.FieldLogger
	// Epoch is the build's SOURCE_DATE_EPOCH, the mtime of everything a layer makes.
	Epoch time.Time
	Arch  string // amd64 | arm64
	// Label names the layer in errors and origins, e.g. "customize[2].files".
	Label string
	// RecipeDir is where relative host paths in the recipe start.
	RecipeDir string
	// Progress starts a progress display for long work; nil shows nothing.
	Progress rootfs.Progress
	// Maker is the digest of the running stamp when the build writes the
	// cache, "" when it does not. What a layer files in the cache for later
	// builds to take is keyed with it: another stamp may write other bytes.
	Maker string
}

// progress is Env.Progress made nil-safe.
func (e *Env) progress(name string, total int64) (func(int64), func()) {
	if e.Progress == nil {
		return func(int64) {}, func() {}
	}
	return e.Progress(name, total)
}

// Origin builds the origin record for an entry this layer writes.
func (e *Env) Origin(input, member string) rootfs.Origin {
	return rootfs.Origin{Layer: e.Label, Input: input, Member: member}
}
