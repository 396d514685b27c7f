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

// What the conductor needs to know of a kind beyond Apply, it asks through
// the optional interfaces below, each implemented in the kind's own file:
// the conductor holds no list of kinds, so a new kind is its file, its
// schema in recipes and its conversion in the conductor's table.

// Prechecker is a layer that needs something of the build machine, such as
// namespaces or a way to run programs of the image's architecture (arch,
// the recipe's), and can tell before the build starts whether it is there,
// so a build that could not finish fails before it writes anything.
type Prechecker interface {
	Precheck(arch string) error
}

// Keeping is what a layer says about keeping the tree after its phase in
// the build cache, where a later build whose later phases changed starts.
type Keeping int

const (
	// KeepingNeutral is no say: what the layer writes is about as quick to
	// write again as to restore (a layer without PhaseKeeper).
	KeepingNeutral Keeping = iota
	// KeepingReferenced is a layer whose files point into an archive the
	// cache keeps (a tarball): the tree costs little more than its index
	// to keep and nothing to write again.
	KeepingReferenced
	// KeepingMaterialized is a layer that runs host processes on the tree
	// written out (a hook, a run step): what came before no longer points
	// into the cache, so keeping the tree would copy every file.
	KeepingMaterialized
	// KeepingAlways is a layer that takes far longer than writing its tree
	// again (installing packages): its phase is kept whatever else it holds.
	KeepingAlways
)

// PhaseKeeper is a layer with a say in whether its phase's tree is kept:
// KeepingAlways anywhere in the phase keeps it; otherwise the last layer's
// KeepingReferenced or KeepingMaterialized decides, and a phase whose
// layers are all neutral is not kept.
type PhaseKeeper interface {
	PhaseKeeping() Keeping
}

// HostFile is a host file a layer runs or reads that is not an Input.
type HostFile struct {
	// Kind is how provenance.json names it, e.g. "hook".
	Kind string
	// Path is the absolute host path.
	Path string
}

// WithHostFiles is a layer that runs or reads host files of its own (a
// hook's program): provenance.json lists each, by digest, beside the
// inputs, and the cache keys its phase on them.
type WithHostFiles interface {
	HostFiles() []HostFile
}

// HostSource is a host file or directory a layer copies into the tree.
type HostSource struct {
	// Field is the recipe field below the layer's own, e.g. "[2].from".
	Field string
	// Path is the absolute host path.
	Path string
}

// WithHostSources is a layer that copies host files or directories into
// the tree (files: from): the cache keys its phase on their names, modes,
// link targets and contents, which are hashed ahead on every core.
// provenance.json does not list them: they are the recipe's own files.
type WithHostSources interface {
	HostSources() []HostSource
}

// Resolver is a layer whose inputs are found through others (a debs
// layer's .debs, through the indexes its Inputs pin): stamp lock records
// them, stamp fetch fills the cache with them, and a build checks each
// against the lock.
type Resolver interface {
	// Pins lists what the layer would fetch on a tree that has none of
	// it yet; its Inputs must be resolved.
	Pins(ctx context.Context, env *Env) ([]Input, error)
	// UseLock hands the layer the lock's pins, looked up by input kind
	// and URI.
	UseLock(pinned func(kind InputKind, uri string) (digest string, ok bool))
}

// ProgramFree is a layer that can do without running any program of the
// image, even in the sandbox, counting what would need one as unhandled
// (the debs layer's py_compile handler): a recipe with offline-only: true
// asks it to.
type ProgramFree interface {
	RunNoPrograms()
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
