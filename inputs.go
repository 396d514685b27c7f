package stamp

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/recipes/lock"
)

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
	lockDir := filepath.Dir(o.LockPath)
	for _, pi := range inputs {
		in := pi.in
		key := lockKey(lockDir, in.URI)
		want := in.Digest
		source := "recipe"
		if want == "" {
			if li, ok := lk.Get(in.Kind, key); ok {
				want, source = li.Digest, "stamp.lock"
			}
		}
		var got string
		var err error
		if isLocal(in.URI) {
			got, err = c.Fetch(ctx, in.URI, "")
			if err == nil && want != "" && got != want && !(o.UpdateLock && source == "stamp.lock") {
				err = &cache.MismatchError{Source: in.URI + " (pinned in the " + source + ")", Want: want, Got: got}
			}
		} else {
			got, err = c.Fetch(ctx, in.URI, want)
		}
		if err != nil {
			return &InputError{Field: pi.field, URI: in.URI, Err: err}
		}
		in.Digest = got
	}
	return nil
}

// Lock resolves every input of the recipe and writes the lock file.
func Lock(ctx context.Context, rec *recipes.Recipe, o Options) (string, error) {
	_, inputs, err := plan(rec)
	if err != nil {
		return "", err
	}
	o.LockPath = o.lockPath(rec)
	c, err := o.openCache()
	if err != nil {
		return "", err
	}
	old, err := loadLock(o.LockPath)
	if err != nil {
		return "", err
	}
	if err := resolveInputs(ctx, c, old, inputs, &o); err != nil {
		return "", err
	}
	lk := &lock.Lock{}
	for _, pi := range inputs {
		lk.Set(lock.Input{Kind: pi.in.Kind, URI: lockKey(filepath.Dir(o.LockPath), pi.in.URI), Digest: pi.in.Digest})
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
