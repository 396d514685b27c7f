// Package stamp is the conductor: it plans a recipe's phases, resolves and
// pins every input, runs the layers on one tree, seals it and drives the
// output graph. It parses no YAML and knows no format's bytes.
package stamp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

// Progress starts a progress display for one long step. The CLI draws bars on
// a terminal; nil shows nothing.
type Progress = rootfs.Progress

// Options configure Build and the other entry points.
type Options struct {
	// OutputDir receives the outputs, SHA256SUMS and manifest.txt.
	OutputDir string
	// WorkDir holds the tree while it is built; a fresh directory is made
	// inside it and removed afterwards. Empty means the system temp dir.
	WorkDir string
	// CacheDir is the content-addressed cache; empty means the default.
	CacheDir string
	// LockPath is the lock file; empty means stamp.lock beside the recipe.
	LockPath string
	// Epoch overrides the recipe's epoch (the CLI passes --epoch or
	// SOURCE_DATE_EPOCH here).
	Epoch *int64
	// Offline forbids the network: every input must be in the cache.
	Offline bool
	// UpdateLock accepts inputs that no longer match the lock.
	UpdateLock bool
	// InsecureRegistries are registries ("host" or "host:port") reached over plain HTTP.
	InsecureRegistries []string
	// KeepWork leaves the work directory in place for debugging.
	KeepWork bool
	// ReverseReaddir reads host directories (what a hook or a maintainer
	// script left) in reverse byte order; verify's second build sets it so
	// that a result depending on that order shows as a difference.
	ReverseReaddir bool
	// NoCache builds every phase and output even when the cache holds them
	// from an earlier build with the same inputs, and files nothing there:
	// verify's builds and tests that compare builds set it, or comparing
	// them would prove nothing, and keeping each build's tree costs a copy.
	NoCache bool
	// CacheFrom and CacheTo are registry repositories ("host/name") the
	// cache's records are read from and written to, so that runners with
	// empty disks share builds. Credentials come from the docker config.
	CacheFrom, CacheTo string
	// CacheSign is a PEM file of an ed25519 private key (PKCS#8) that signs
	// every record pushed to CacheTo. The key is read into memory only.
	CacheSign string
	// CacheTrust are PEM files of ed25519 public keys: with any, CacheFrom
	// gives only records one of them signed, and a record pulled earlier
	// without such a signature is not taken from the local cache either.
	CacheTrust []string

	Log      logrus.FieldLogger
	Progress Progress

	// maker is the running stamp's digest when the build writes the cache:
	// layers key what they file there for later builds with it.
	maker string
}

// Result is what a build produced.
type Result struct {
	Outputs    []string // file names in OutputDir, sorted
	TreeDigest string
	Entries    int
}

// InputError names the recipe field whose input failed to resolve.
type InputError struct {
	Field string
	URI   string
	Err   error
}

func (e *InputError) Error() string { return fmt.Sprintf("%s: %s: %v", e.Field, e.URI, e.Err) }
func (e *InputError) Unwrap() error { return e.Err }

func (o *Options) log() logrus.FieldLogger {
	if o.Log == nil {
		l := logrus.New()
		l.SetOutput(discard{})
		return l
	}
	return o.Log
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// epoch is the build's SOURCE_DATE_EPOCH.
func epoch(rec *recipes.Recipe, o *Options) time.Time {
	e := rec.Epoch
	if o.Epoch != nil {
		e = *o.Epoch
	}
	return time.Unix(e, 0).UTC()
}

func (o *Options) openCache() (*cache.Cache, error) {
	dir := o.CacheDir
	if dir == "" {
		var err error
		if dir, err = cache.DefaultDir(os.Getenv); err != nil {
			return nil, err
		}
	}
	return cache.Open(dir, cache.Options{Offline: o.Offline, Log: o.log(), Progress: o.Progress})
}

// makeWork makes a fresh directory for one run inside WorkDir, made when
// missing, by its absolute path: maintainer-script handlers and hooks run
// programs by paths inside it, whatever their working directory.
func (o *Options) makeWork(pattern string) (string, error) {
	dir := o.WorkDir
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", fmt.Errorf("work dir %s: %w", dir, err)
		}
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return "", fmt.Errorf("work dir %s: %w", dir, err)
		}
		dir = abs
	}
	work, err := os.MkdirTemp(dir, pattern)
	if err != nil {
		return "", fmt.Errorf("work dir: %w", err)
	}
	if !filepath.IsAbs(work) {
		// The system's temp dir named by a relative TMPDIR.
		if work, err = filepath.Abs(work); err != nil {
			return "", fmt.Errorf("work dir: %w", err)
		}
	}
	return work, nil
}

func (o *Options) lockPath(rec *recipes.Recipe) string {
	if o.LockPath != "" {
		return o.LockPath
	}
	return filepath.Join(rec.Dir, "stamp.lock")
}

// Build runs every phase of the recipe and writes its outputs. On failure
// nothing appears in OutputDir under a final name.
func Build(ctx context.Context, rec *recipes.Recipe, o Options) (*Result, error) {
	log := o.log()
	p, err := prepare(ctx, rec, &o, true)
	if err != nil {
		return nil, err
	}
	defer p.c.Close()
	phases, inputs, c, att, ep, bc, sealedKey := p.phases, p.inputs, p.c, p.att, p.ep, p.bc, p.sealedKey
	if res, err := buildFromCache(ctx, rec, &o, bc, sealedKey, ep, att); res != nil || err != nil {
		return res, err
	}
	if err := p.fetch(ctx); err != nil {
		return nil, err
	}
	work, err := o.makeWork("stamp-" + rec.Name + "-")
	if err != nil {
		return nil, err
	}
	if !o.KeepWork {
		defer func() {
			start := time.Now()
			if err := removeTree(work); err != nil {
				log.Warnf("removing work directory: %v", err)
			}
			log.Debugf("work directory removed in %s", time.Since(start).Round(time.Millisecond))
		}()
	} else {
		log.Infof("keeping work directory %s", work)
	}
	kept, err := bc.keptTrees(rec, phases, ep, att)
	if err != nil {
		return nil, err
	}
	treeOpts := rootfs.Options{DefaultMTime: ep, ReverseReaddir: o.ReverseReaddir, ContentDir: filepath.Join(work, "content")}
	if bc.write {
		// An archive extracted by reference is kept in the cache, so the
		// work directory holds no copy of it and a kept phase can point
		// into it.
		treeOpts.Archives = c.Archives()
	}
	tree, done, from, err := bc.restorePhases(ctx, phases, kept, filepath.Join(work, "tree"), treeOpts)
	if err != nil {
		return nil, err
	}
	defer tree.Close()
	if err := runPhases(ctx, rec, phases[done:], from, tree, c, ep, &o, func(i, j int) {
		if k := kept[done+i]; k.n == j+1 {
			bc.filePhase(ctx, rec, k, tree)
		}
	}); err != nil {
		return nil, err
	}
	if err := writeRelease(tree, rec, ep); err != nil {
		return nil, err
	}
	// Host paths in origins become the recipe's before sealing: nothing
	// changes the tree after Seal, which writes the record last.
	relativeOrigins(tree, rec.Dir)
	sealOpts := rootfs.SealOptions{Epoch: ep, NoDefaultCleanup: !rec.Seal.Cleanup.Default, Cleanup: rec.Seal.Cleanup.Globs,
		Record: func(treeDigest string, entries []*rootfs.Entry) ([]byte, error) {
			return recordJSON(rec, ep, treeDigest, entries, inputs)
		}}
	sealStart := time.Now()
	sealed, rep, err := rootfs.Seal(ctx, tree, sealOpts)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	log.WithField("removed", len(rep.Removed)).Infof("sealed %d entries", sealed.Len())
	log.Debugf("seal done in %s", time.Since(sealStart).Round(time.Millisecond))
	view, err := viewOf(sealed, rec, ep, att)
	if err != nil {
		return nil, err
	}
	bc.fileSealed(ctx, rec.Name, sealedKey, view)
	plans, err := bc.planOutputs(ctx, rec, ep, view.digest)
	if err != nil {
		return nil, err
	}
	outs, err := writeOutputs(ctx, &outputJob{rec: rec, o: &o, work: work, tree: sealed, view: view, ep: ep, att: att, bc: bc, plans: plans})
	if err != nil {
		return nil, err
	}
	return &Result{Outputs: outs, TreeDigest: view.digest, Entries: view.entries}, nil
}

// prepared is what a build knows before it changes anything: its plan,
// every input resolved and verified, and the cache key of its sealed tree.
type prepared struct {
	phases    []phase
	inputs    []plannedInput
	c         *cache.Cache
	att       *attestation
	ep        time.Time
	bc        *buildCache
	sealedKey []cache.Part
	// fetch downloads what resolving left for later: a build the cache
	// holds whole needs none of it.
	fetch func(context.Context) error
}

// prepare plans the recipe, checks the build machine, and resolves and
// pins every input (writing the lock when saveLock is set).
func prepare(ctx context.Context, rec *recipes.Recipe, o *Options, saveLock bool) (*prepared, error) {
	phases, inputs, err := plan(rec)
	if err != nil {
		return nil, err
	}
	if err := precheck(phases, rec.Arch); err != nil {
		return nil, err
	}
	// What an output reads from the host is checked before anything runs.
	for i := range rec.Outputs {
		out := &rec.Outputs[i]
		spec, err := outputSpec(out)
		if err != nil {
			return nil, err
		}
		if err := secureBootOf(rec, out, spec); err != nil {
			return nil, err
		}
	}
	c, lk, err := o.openStores(rec)
	if err != nil {
		return nil, err
	}
	done := false
	defer func() {
		if !done {
			c.Close()
		}
	}()
	// Every input is pinned now; what is only a download under a pinned
	// digest waits until the cache has missed, and is verified before the
	// tree changes.
	fetch, err := resolvePins(ctx, c, lk, inputs, o)
	if err != nil {
		return nil, err
	}
	if saveLock {
		if err := savePins(lk, inputs, o); err != nil {
			return nil, err
		}
	}
	pinDebs(phases, lk)
	att, err := newAttestation(rec, phases, inputs)
	if err != nil {
		return nil, err
	}
	ep := epoch(rec, o)
	bc, err := o.openBuildCache(c)
	if err != nil {
		return nil, err
	}
	if bc.write {
		o.maker = bc.self
	}
	prehash(c, phases)
	sealedKey, err := bc.sealedParts(rec, phases, ep, att)
	if err != nil {
		return nil, err
	}
	done = true
	return &prepared{phases: phases, inputs: inputs, c: c, att: att, ep: ep, bc: bc, sealedKey: sealedKey, fetch: fetch}, nil
}

// buildFromCache writes the outputs from the cache when it holds the sealed
// tree of this key and every output made from it: then no phase runs. It
// returns nil, nil when the tree must be built.
func buildFromCache(ctx context.Context, rec *recipes.Recipe, o *Options, bc *buildCache, sealedKey []cache.Part, ep time.Time, att *attestation) (*Result, error) {
	log := o.log()
	r, why := bc.lookup(ctx, recordSealed, rec.Name, sealedKey)
	if r == nil {
		log.Infof("cache: building the tree: %s", why)
		return nil, nil
	}
	view, err := bc.sealedFrom(r)
	if err != nil {
		log.WithError(err).Warn("cache: ignoring the sealed tree's record; building the tree")
		return nil, nil
	}
	plans, err := bc.planOutputs(ctx, rec, ep, view.digest)
	if err != nil {
		return nil, err
	}
	for _, p := range plans {
		if p.hit == nil {
			log.Infof("cache: tree %s is in the cache, but output %s is not (%s); building the tree", view.digest, p.out.Name, p.why)
			return nil, nil
		}
	}
	log.Infof("cache: tree %s and all %d outputs are in the cache (key %s); no phase runs", view.digest, len(plans), r.Key)
	outs, err := writeOutputs(ctx, &outputJob{rec: rec, o: o, view: view, ep: ep, att: att, bc: bc, plans: plans})
	if errors.Is(err, errNotRestored) {
		log.WithError(err).Warn("cache: building the tree")
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &Result{Outputs: outs, TreeDigest: view.digest, Entries: view.entries}, nil
}

// IsUsage reports whether err comes from an invalid recipe or command, the
// cases the CLI exits 2 for (recipes.IsUsage).
func IsUsage(err error) bool { return recipes.IsUsage(err) }

// UsageError is the one type of a request that cannot be carried out as
// given, recipes.UsageError, which verify returns too; the conductor's
// callers need not import recipes to make one.
type UsageError = recipes.UsageError

func isLocal(uri string) bool {
	return strings.HasPrefix(uri, "/") || strings.HasPrefix(uri, "file://")
}
