package stamp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/layers/ociremote"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/recipes/lock"
)

// openStores sets o.LockPath and opens the cache and the lock every entry
// point resolves inputs against.
func (o *Options) openStores(rec *recipes.Recipe) (*cache.Cache, *lock.Lock, error) {
	o.LockPath = o.lockPath(rec)
	c, err := o.openCache()
	if err != nil {
		return nil, nil, err
	}
	lk, err := loadLock(o.LockPath)
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	if len(lk.Inputs) > 0 {
		if diff := lk.ParamsDiffer(rec.ParamValues()); len(diff) > 0 {
			o.log().WithField("lock", o.LockPath).Warnf("the lock was resolved under other parameter values (%s): its pins name the URIs "+
				"those values gave, so they pin nothing these values changed", strings.Join(diff, "; "))
		}
	}
	return c, lk, nil
}

// lockParams is what a lock records of the parameters: nil without any, so
// the lock of a recipe without parameters keeps its bytes.
func lockParams(rec *recipes.Recipe) map[string]string {
	if pv := rec.ParamValues(); len(pv) > 0 {
		return pv
	}
	return nil
}

func loadLock(p string) (*lock.Lock, error) {
	lk, err := lock.Load(p)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", p, err)
	}
	return lk, nil
}

// lockKey is how an input is named in stamp.lock: local paths relative to
// the lock's directory, so a lock stays true in another checkout.
func lockKey(lockDir, uri string) string {
	if strings.HasPrefix(uri, "/") {
		if rel, err := filepath.Rel(lockDir, uri); err == nil && !strings.HasPrefix(rel, "..") {
			return filepath.ToSlash(rel)
		}
	}
	return uri
}

// resolveInputs fills every input's digest and makes its content present in
// the cache, verified. The recipe's own digest wins, then the lock; a local
// file is always hashed anew so an edit is caught.
func resolveInputs(ctx context.Context, c *cache.Cache, lk *lock.Lock, inputs []plannedInput, o *Options) error {
	if err := resolveAll(ctx, c, lk, inputs, o); err != nil {
		return err
	}
	return savePins(lk, inputs, o)
}

// resolveAll is resolveInputs without touching the lock file.
func resolveAll(ctx context.Context, c *cache.Cache, lk *lock.Lock, inputs []plannedInput, o *Options) error {
	fetch, err := resolvePins(ctx, c, lk, inputs, o)
	if err != nil {
		return err
	}
	return fetch(ctx)
}

// resolvePins fills every input's digest and checks it against the recipe
// and the lock. Local files are hashed and OCI references resolved to their
// manifests now; what only needs downloading under a digest already pinned
// (an OCI input's blobs, a remote file the cache lacks) is left to fetch,
// so that a build the cache holds whole downloads nothing.
func resolvePins(ctx context.Context, c *cache.Cache, lk *lock.Lock, inputs []plannedInput, o *Options) (fetch func(context.Context) error, err error) {
	lockDir := filepath.Dir(o.LockPath)
	var reg *ociremote.Client
	var pulls, downloads []plannedInput
	for _, pi := range inputs {
		in := pi.in
		if pi.oci != nil {
			if reg == nil {
				reg = ociremote.New(c, ociremote.Options{Offline: o.Offline, Insecure: o.InsecureRegistries, Log: o.log(),
					UserAgent: "stamp"})
			}
			if err := resolveOCI(ctx, reg, lk, pi, o); err != nil {
				return nil, &InputError{Field: pi.field, URI: in.URI, Err: err}
			}
			pulls = append(pulls, pi)
			continue
		}
		key := lockKey(lockDir, in.URI)
		want := in.Digest
		source := "recipe"
		if want == "" {
			if li, ok := lk.Get(string(in.Kind), key); ok {
				want, source = li.Digest, "stamp.lock"
			}
		}
		var got string
		var err error
		if !isLocal(in.URI) && want != "" && !c.Has(want) {
			if _, err := cache.ParseDigest(want); err == nil {
				in.Digest = want
				downloads = append(downloads, pi)
				continue
			}
		}
		if isLocal(in.URI) {
			got, err = c.Fetch(ctx, in.URI, "")
			if err == nil && want != "" && got != want && !(o.UpdateLock && source == "stamp.lock") {
				err = &cache.MismatchError{Source: in.URI + " (pinned in the " + source + ")", Want: want, Got: got}
			}
		} else {
			got, err = c.Fetch(ctx, in.URI, want)
		}
		if err != nil {
			return nil, &InputError{Field: pi.field, URI: in.URI, Err: err}
		}
		in.Digest = got
	}
	// Every reference is resolved (and checked against the lock) before any
	// blob moves; then all blobs come down together, as many at once as the
	// client allows.
	return func(ctx context.Context) error {
		for _, pi := range downloads {
			if _, err := c.Fetch(ctx, pi.in.URI, pi.in.Digest); err != nil {
				return &InputError{Field: pi.field, URI: pi.in.URI, Err: err}
			}
		}
		g, gctx := errgroup.WithContext(ctx)
		for _, pi := range pulls {
			g.Go(func() error {
				if err := reg.Pull(gctx, pi.in.URI, pi.oci.manifest); err != nil {
					return &InputError{Field: pi.field, URI: pi.in.URI, Err: err}
				}
				return nil
			})
		}
		return g.Wait()
	}, nil
}

// Lock resolves every input of the recipe and writes the lock file.
func Lock(ctx context.Context, rec *recipes.Recipe, o Options) (string, error) {
	phases, inputs, err := plan(rec)
	if err != nil {
		return "", err
	}
	c, old, err := o.openStores(rec)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := resolveAll(ctx, c, old, inputs, &o); err != nil {
		return "", err
	}
	lk := &lock.Lock{Params: lockParams(rec)}
	for _, pi := range inputs {
		lk.Set(lockPin(filepath.Dir(o.LockPath), pi))
	}
	if err := lockPackages(ctx, c, rec, &o, phases, lk); err != nil {
		return "", err
	}
	if err := writeAtomic(o.LockPath, lk.Marshal(), 0o644); err != nil {
		return "", err
	}
	return o.LockPath, nil
}

// writeAtomic writes data to a temporary name beside p and renames it.
func writeAtomic(p string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(p), "."+filepath.Base(p)+".tmp-")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, perm)
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("writing %s: %w", p, err)
	}
	return nil
}

// Fetch fills the cache with every input of the recipe, as the lock pins
// them, so that a build with Options.Offline needs no network. Inputs the
// lock does not pin yet (a tag never resolved) are resolved and added to it;
// it returns the lock's path.
func Fetch(ctx context.Context, rec *recipes.Recipe, o Options) (string, error) {
	phases, inputs, err := plan(rec)
	if err != nil {
		return "", err
	}
	c, lk, err := o.openStores(rec)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := resolveAll(ctx, c, lk, inputs, &o); err != nil {
		return "", err
	}
	if err := fetchPackages(ctx, c, rec, &o, phases); err != nil {
		return "", err
	}
	for _, pi := range inputs {
		lk.Set(lockPin(filepath.Dir(o.LockPath), pi))
	}
	// The pins just added are this set's; older pins of other values stay,
	// under URIs these values do not name.
	lk.Params = lockParams(rec)
	if err := writeLockIfChanged(o.LockPath, lk); err != nil {
		return "", err
	}
	o.log().WithField("inputs", len(inputs)).Infof("cache %s holds every input", c.Dir())
	return o.LockPath, nil
}

// ociPin is what resolving an OCI input learned for the lock.
type ociPin struct {
	// manifest is the image or artifact manifest to pull.
	manifest string
	extra    map[string]string
	// fresh is set when a tag was resolved anew: the lock did not pin it, or
	// --update-lock accepted a move.
	fresh bool
}

// lockPin is the lock entry for a resolved input.
func lockPin(lockDir string, pi plannedInput) lock.Input {
	li := lock.Input{Kind: string(pi.in.Kind), URI: lockKey(lockDir, pi.in.URI), Digest: pi.in.Digest}
	if pi.oci != nil && len(pi.oci.extra) > 0 {
		li.Extra = pi.oci.extra
	}
	return li
}

// resolveOCI pins an OCI reference and makes its manifests present in the
// cache; resolveAll pulls the blobs afterwards. A tag is asked of the
// registry once per build (by HEAD, so only the manifest digest moves) and
// must name what the lock pins unless --update-lock; offline, the lock's
// digest is used as it is. An oci input ends up as the platform's manifest
// digest; an image input keeps the recipe's digest (an index or a manifest),
// which the images layer stores whole.
func resolveOCI(ctx context.Context, reg *ociremote.Client, lk *lock.Lock, pi plannedInput, o *Options) error {
	in := pi.in
	locked, haveLock := lk.Get(string(in.Kind), lockKey(filepath.Dir(o.LockPath), in.URI))
	if haveLock && in.Kind == layers.InputOCI && locked.Extra["platform"] != "" && !samePlatform(locked.Extra["platform"], pi.platform) {
		// Pinned for another arch (the recipe's arch changed): the pin says
		// nothing about this one, except which index to pick from.
		if idx := locked.Extra["index"]; idx != "" && o.Offline {
			locked.Digest = idx
		} else {
			haveLock = false
		}
	}
	top := ""
	if in.Pinned {
		top = in.Digest
	}
	fromTag := top == ""
	if fromTag {
		if o.Offline {
			if !haveLock {
				return fmt.Errorf("%w (run stamp fetch or stamp lock while online)", &cache.MissingError{URI: in.URI})
			}
			top = locked.Digest
		} else {
			d, err := reg.Head(ctx, in.URI)
			if err != nil {
				return err
			}
			top = d
		}
	}
	res, err := reg.Resolve(ctx, in.URI, top, pi.platform)
	if err != nil {
		return err
	}
	if fromTag && haveLock && o.Offline && res.Index != "" {
		haveLock = false // the lock named the index of another platform's pin
	}
	if fromTag && haveLock && res.Manifest != locked.Digest {
		if !o.UpdateLock {
			return &ociremote.MovedError{Ref: in.URI, Locked: locked.Digest, Now: res.Manifest}
		}
		o.log().WithField("ref", in.URI).WithField("was", locked.Digest).WithField("now", res.Manifest).
			Warn("tag moved; --update-lock accepts the new digest")
	}
	pi.oci.manifest = res.Manifest
	switch {
	case res.Index != "" && in.Kind == layers.InputImage:
		pi.oci.extra = map[string]string{"manifest": res.Manifest, "platform": res.Platform}
	case res.Index != "":
		pi.oci.extra = map[string]string{"index": res.Index, "platform": res.Platform}
	case haveLock && locked.Digest == res.Manifest:
		// Offline, the lock's digest is the platform manifest itself; keep
		// what the lock knew about its index.
		pi.oci.extra = locked.Extra
	}
	if in.Kind == layers.InputImage {
		in.Digest = top
	} else {
		in.Digest = res.Manifest
	}
	pi.oci.fresh = fromTag && !o.Offline && (!haveLock || locked.Digest != res.Manifest)
	return nil
}

// savePins writes tags a build resolved for the first time (or moved with
// --update-lock) into the lock, so later builds use the same digests. The
// build goes on if the lock cannot be written (a read-only checkout): its
// inputs are already pinned for this run.
func savePins(lk *lock.Lock, inputs []plannedInput, o *Options) error {
	changed := false
	for _, pi := range inputs {
		if pi.oci != nil && pi.oci.fresh {
			lk.Set(lockPin(filepath.Dir(o.LockPath), pi))
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := writeLockIfChanged(o.LockPath, lk); err != nil {
		o.log().WithError(err).Warn("could not record newly resolved tags in the lock")
		return nil
	}
	o.log().WithField("lock", o.LockPath).Info("pinned newly resolved tags")
	return nil
}

// writeLockIfChanged writes the lock unless the file already holds exactly
// these bytes.
func writeLockIfChanged(p string, lk *lock.Lock) error {
	data := lk.Marshal()
	if old, err := os.ReadFile(p); err == nil && bytes.Equal(old, data) {
		return nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("lock %s: %w", p, err)
	}
	return writeAtomic(p, data, 0o644)
}

// samePlatform compares os/arch and, when both name one, the variant.
func samePlatform(a, b string) bool {
	pa, pb := strings.Split(a, "/"), strings.Split(b, "/")
	if len(pa) < 2 || len(pb) < 2 || pa[0] != pb[0] || pa[1] != pb[1] {
		return false
	}
	return len(pa) < 3 || len(pb) < 3 || pa[2] == pb[2]
}

// pinDebs hands each layer whose inputs are found through others
// (layers.Resolver: a debs layer's .debs) the lock's pins, so a build checks
// every package it installs against the lock as well as against the index
// the lock pins.
func pinDebs(phases []phase, lk *lock.Lock) {
	if lk == nil {
		return
	}
	for _, ph := range phases {
		for _, st := range ph.steps {
			if r, ok := st.layer.(layers.Resolver); ok {
				r.UseLock(func(kind layers.InputKind, uri string) (string, bool) {
					in, ok := lk.Get(string(kind), uri)
					return in.Digest, ok
				})
			}
		}
	}
}

// fetchPackages puts every .deb each debs layer would install on a tree
// without packages into the cache, verified against its index, so that a
// build --offline finds them there: the lock pins the indexes, and through
// them every .deb.
func fetchPackages(ctx context.Context, c *cache.Cache, rec *recipes.Recipe, o *Options, phases []phase) error {
	return eachResolved(ctx, c, rec, o, phases, func(env *layers.Env, pins []layers.Input) error {
		for _, p := range pins {
			if _, err := c.Fetch(ctx, p.URI, p.Digest); err != nil {
				return err
			}
		}
		env.Log.Infof("%s: %d packages in the cache", env.Label, len(pins))
		return nil
	})
}

// lockPackages adds the .deb files of every debs layer to the lock (kind
// "deb", the .deb URL and its digest), so the exact versions are on record.
func lockPackages(ctx context.Context, c *cache.Cache, rec *recipes.Recipe, o *Options, phases []phase, lk *lock.Lock) error {
	return eachResolved(ctx, c, rec, o, phases, func(_ *layers.Env, pins []layers.Input) error {
		for _, p := range pins {
			lk.Set(lock.Input{Kind: string(p.Kind), URI: p.URI, Digest: p.Digest})
		}
		return nil
	})
}

// eachResolved hands do what each layer of the plan whose inputs are found
// through others would fetch on a tree without any of it (layers.Resolver:
// the .debs a debs layer would install), layer by layer.
func eachResolved(ctx context.Context, c *cache.Cache, rec *recipes.Recipe, o *Options, phases []phase, do func(env *layers.Env, pins []layers.Input) error) error {
	for _, ph := range phases {
		for _, st := range ph.steps {
			d, ok := st.layer.(layers.Resolver)
			if !ok {
				continue
			}
			env := &layers.Env{Cache: c, Log: o.log().WithField("layer", st.label), Arch: rec.Arch, Label: st.label, RecipeDir: rec.Dir}
			pins, err := d.Pins(ctx, env)
			if err != nil {
				return fmt.Errorf("%s: %w", st.label, err)
			}
			if err := do(env, pins); err != nil {
				return fmt.Errorf("%s: %w", st.label, err)
			}
		}
	}
	return nil
}
