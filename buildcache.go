package stamp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"golang.org/x/sync/errgroup"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/recipes"
)

// Kinds of cache records a build files.
const (
	// recordSealed is a sealed tree: its digest, entry count, the manifest's
	// tree section and the SBOM, which is all the outputs' bookkeeping needs
	// of a tree whose outputs all come from the cache.
	recordSealed = "sealed"
	// recordOutput is one output's files, written from a tree with a given
	// digest and the output's options.
	recordOutput = "output"
	// recordParts is where an output's compressed parts lie in its files,
	// for the next build of it to take (partstore.go). Only the subject's
	// last one is read, and it is never shared: what it saves is this
	// machine's CPU, and the blobs it points into are already filed.
	recordParts = "parts"
)

// buildCache is the phase and output cache of one build: it finds what an
// earlier build with the same inputs made, locally or in a registry, and
// files what this build makes.
type buildCache struct {
	c     *cache.Cache
	log   logrus.FieldLogger
	self  string // digest of the running stamp: another stamp may write other bytes
	read  bool   // false with --no-cache
	write bool
	// shared is the registry the cache is shared through; nil without
	// --cache-from and --cache-to.
	shared *sharedCache
}

// sealedView is what the outputs' bookkeeping needs of the sealed tree,
// with or without the tree itself.
type sealedView struct {
	digest       string
	entries      int
	manifestTree []byte // the manifest's tree section
	sbom         []byte
}

type sealedData struct {
	TreeDigest string `json:"treeDigest"`
	Entries    int    `json:"entries"`
}

type outputData struct {
	Files    []string `json:"files"`
	Adds     []string `json:"adds,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
	// Facts are formats.Result.Facts, as key and value pairs.
	Facts [][2]string `json:"facts,omitempty"`
}

const (
	blobManifest = "manifest"
	blobSBOM     = "sbom"
)

func (o *Options) openBuildCache(c *cache.Cache) (*buildCache, error) {
	self, err := selfDigest(c)
	if err != nil {
		return nil, err
	}
	bc := &buildCache{c: c, log: o.log(), self: self, read: !o.NoCache,
		// verify's second build reads directories backwards to shake out
		// order dependence; what it makes is not filed for others.
		write: c.Writable() && !o.ReverseReaddir && !o.NoCache}
	if o.CacheFrom != "" || o.CacheTo != "" || o.CacheSign != "" || len(o.CacheTrust) > 0 {
		if bc.shared, err = newSharedCache(o, c); err != nil {
			return nil, err
		}
	}
	return bc, nil
}

// selfDigest is the sha256 of the running executable: a stamp built from
// other sources may make other bytes from the same tree.
func selfDigest(c *cache.Cache) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("cache key: %w", err)
	}
	sum, err := c.HashFile(exe)
	if err != nil {
		return "", fmt.Errorf("cache key: %w", err)
	}
	return "sha256:" + sum, nil
}

func textDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

func jsonDigest(v any) (string, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return "", err
	}
	return textDigest(string(b)), nil
}

// sealedParts is what the sealed tree depends on: stamp itself, the recipe
// as decoded (its outputs aside), the build's epoch and every input and host
// file a layer reads, each by digest. What a hook reads beyond its own
// script, and the host tools the layers run, are not in it: a recipe whose
// hooks read more wants --no-cache when those change.
func (bc *buildCache) sealedParts(rec *recipes.Recipe, phases []phase, ep time.Time, att *attestation) ([]cache.Part, error) {
	params, err := jsonDigest(rec.ParamValues())
	if err != nil {
		return nil, err
	}
	parts := []cache.Part{
		{Name: "stamp", Digest: bc.self},
		{Name: "recipe", Digest: rec.TreeDigest},
		{Name: "recipe file name", Digest: filepath.Base(rec.Path)},
		{Name: "params", Digest: params},
		{Name: "arch", Digest: rec.Arch},
		{Name: "epoch", Digest: strconv.FormatInt(ep.Unix(), 10)},
	}
	// Per-phase digests of the recipe add nothing to the key that "recipe"
	// lacks; they let a miss say which phase changed.
	for _, p := range []struct {
		name string
		v    any
	}{{"recipe base", rec.Base}, {"recipe customize", rec.Customize}, {"recipe provision", rec.Provision}, {"recipe seal", rec.Seal}} {
		d, err := jsonDigest(p.v)
		if err != nil {
			return nil, fmt.Errorf("cache key: %s: %w", p.name, err)
		}
		parts = append(parts, cache.Part{Name: p.name, Digest: d})
	}
	for _, ph := range phases {
		in, err := bc.phaseInputs(rec, ph, att, nil)
		if err != nil {
			return nil, err
		}
		parts = append(parts, in...)
	}
	return parts, nil
}

// phaseOf is the phase a recipe field belongs to: "customize" for
// "customize.layers[2].oci".
func phaseOf(field string) string {
	if i := strings.IndexAny(field, ".["); i >= 0 {
		return field[:i]
	}
	return field
}

// phaseInputs is every input and host file (a hook's program) of one phase
// and every host file or directory its layers copy in (files.from), by
// digest, but the inputs of the steps labelled in skip.
func (bc *buildCache) phaseInputs(rec *recipes.Recipe, ph phase, att *attestation, skip map[string]bool) ([]cache.Part, error) {
	var parts []cache.Part
	for _, d := range att.deps {
		if phaseOf(d.Field) == ph.name && !skip[d.Field] {
			parts = append(parts, cache.Part{Name: fmt.Sprintf("%s %s %s", d.Kind, d.Field, d.URI), Digest: d.Digest})
		}
	}
	err := eachHostSource(ph, func(st step, src layers.HostSource) error {
		d, err := bc.c.HashTree(src.Path)
		if err != nil {
			return fmt.Errorf("%s%s: %w", st.label, src.Field, err)
		}
		parts = append(parts, cache.Part{Name: fmt.Sprintf("%s %s %s", st.layer.Kind(), st.label, lockKey(rec.Dir, src.Path)), Digest: d})
		return nil
	})
	return parts, err
}

// eachHostSource calls fn with every host file or directory a layer of ph
// copies into the tree (layers.WithHostSources), in order, and stops at
// its first error.
func eachHostSource(ph phase, fn func(st step, src layers.HostSource) error) error {
	for _, st := range ph.steps {
		hs, ok := st.layer.(layers.WithHostSources)
		if !ok {
			continue
		}
		for _, src := range hs.HostSources() {
			if err := fn(st, src); err != nil {
				return err
			}
		}
	}
	return nil
}

// phaseParts is each phase's key: what its tree depends on, the key of the
// phase before it included.
func (bc *buildCache) phaseParts(rec *recipes.Recipe, phases []phase, ep time.Time, att *attestation) ([][]cache.Part, error) {
	sections := map[string]any{"base": rec.Base, "customize": rec.Customize, "provision": rec.Provision}
	var out [][]cache.Part
	prev := ""
	for _, ph := range phases {
		d, err := jsonDigest(sections[ph.name])
		if err != nil {
			return nil, fmt.Errorf("cache key: recipe %s: %w", ph.name, err)
		}
		parts := bc.treeParts(rec, ep, cache.Part{Name: "recipe " + ph.name, Digest: d}, prev)
		in, err := bc.phaseInputs(rec, ph, att, nil)
		if err != nil {
			return nil, err
		}
		parts = append(parts, in...)
		out = append(out, parts)
		prev = cache.KeyOf(parts)
	}
	return out, nil
}

// treeParts is what every kept tree's key starts with: stamp, the recipe's
// name, arch and epoch, its part of the recipe, and the key of the phase
// before it ("" for none).
func (bc *buildCache) treeParts(rec *recipes.Recipe, ep time.Time, section cache.Part, prev string) []cache.Part {
	parts := []cache.Part{
		{Name: "stamp", Digest: bc.self},
		{Name: "name", Digest: rec.Name},
		{Name: "arch", Digest: rec.Arch},
		{Name: "epoch", Digest: strconv.FormatInt(ep.Unix(), 10)},
		section,
	}
	if prev != "" {
		parts = append(parts, cache.Part{Name: "phase before", Digest: prev})
	}
	return parts
}

// headParts is the key of the tree after the first n steps of phase ph
// (keptSteps): its pre hooks and layers up to the n-th step's, their
// inputs and host files, and the key of the phase before (prev).
func (bc *buildCache) headParts(rec *recipes.Recipe, ph phase, n int, ep time.Time, prev string, att *attestation) ([]cache.Part, error) {
	sec := rec.Customize
	if ph.name == "provision" {
		sec = rec.Provision
	}
	last := ph.steps[n-1]
	d, err := jsonDigest(struct {
		Pre    []string
		Layers []recipes.Layer
	}{sec.Pre, sec.Layers[:last.index+1]})
	if err != nil {
		return nil, fmt.Errorf("cache key: recipe %s: %w", last.label, err)
	}
	parts := bc.treeParts(rec, ep, cache.Part{Name: "recipe " + ph.name + " up to " + last.label, Digest: d}, prev)
	later := map[string]bool{}
	for _, st := range ph.steps[n:] {
		later[st.label] = true
	}
	for _, st := range ph.steps[:n] {
		delete(later, st.label)
	}
	in, err := bc.phaseInputs(rec, phase{name: ph.name, steps: ph.steps[:n]}, att, later)
	if err != nil {
		return nil, err
	}
	return append(parts, in...), nil
}

// outputParts is what an output depends on: stamp, the tree, the output's
// options and names, the output it is made from, and the host files its
// writer reads (formats.HostReader: the host's GRUB for a BIOS disk, whose
// core.img grub-mkimage makes).
func (bc *buildCache) outputParts(rec *recipes.Recipe, spec *formats.Spec, base string, ep time.Time, treeDigest, fromKey string) ([]cache.Part, error) {
	opts, err := jsonDigest(spec)
	if err != nil {
		return nil, fmt.Errorf("cache key of output %s: %w", spec.Name, err)
	}
	parts := []cache.Part{
		{Name: "stamp", Digest: bc.self},
		{Name: "tree", Digest: treeDigest},
		{Name: "options", Digest: opts},
		{Name: "file name", Digest: base},
		{Name: "name", Digest: rec.Name},
		{Name: "seed", Digest: seed(rec)},
		{Name: "arch", Digest: rec.Arch},
		{Name: "epoch", Digest: strconv.FormatInt(ep.Unix(), 10)},
	}
	if fromKey != "" {
		parts = append(parts, cache.Part{Name: "from " + spec.From, Digest: fromKey})
	}
	if hr, ok := spec.Options.(formats.HostReader); ok {
		for _, p := range hr.HostFiles() {
			d, err := bc.c.HashTree(p)
			if err != nil {
				continue // the writer says why it needs it
			}
			parts = append(parts, cache.Part{Name: "host " + p, Digest: d})
		}
	}
	return parts, nil
}

// prehash hashes every host file the layers copy in (files.from) on as
// many goroutines as there are cores, ahead of the keys, which read them
// one at a time and then find each sum in the stat cache: a cold build
// hashes hundreds of MB of Kubernetes binaries here. A failure is left for
// the keys to report.
func prehash(c *cache.Cache, phases []phase) {
	var paths []string
	for _, ph := range phases {
		eachHostSource(ph, func(_ step, src layers.HostSource) error {
			return filepath.WalkDir(src.Path, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					paths = append(paths, p)
				}
				return nil
			})
		})
	}
	if len(paths) < 2 {
		return
	}
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for _, p := range paths {
		g.Go(func() error {
			c.HashFile(p)
			return nil
		})
	}
	g.Wait()
}

// lookup finds the record of kind under the key of parts, in this cache or
// the shared one. A miss is logged with what changed since the subject's
// last record; a bad record is a warning and a miss.
func (bc *buildCache) lookup(ctx context.Context, kind, subject string, parts []cache.Part) (*cache.Record, string) {
	key := cache.KeyOf(parts)
	if !bc.read {
		return nil, "--no-cache"
	}
	r, err := bc.c.Record(kind, key)
	if err != nil {
		bc.log.WithError(err).Warnf("cache: ignoring the %s record of %s; building it again", kind, subject)
		r = nil
	}
	if r != nil && bc.shared != nil && !bc.shared.believe(r) {
		r = nil
	}
	if r == nil && bc.shared != nil {
		r = bc.shared.pull(ctx, kind, subject, key)
	}
	if r != nil {
		if bc.shared != nil {
			// A runner whose own disk had it still shares it.
			bc.shared.push(ctx, r)
		}
		return r, ""
	}
	why := "no earlier build of " + subject + " in the cache"
	if last := bc.c.LastRecord(kind, subject); last != nil {
		if ch := cache.Changed(last, parts); len(ch) > 0 {
			why = "since the last build of " + subject + ": " + strings.Join(ch, "; ")
		}
	}
	return nil, why
}

// file stores a record whose blobs are already in the cache, and shares it.
func (bc *buildCache) file(ctx context.Context, r *cache.Record) {
	if !bc.write {
		return
	}
	if err := bc.c.PutRecord(r); err != nil {
		bc.log.WithError(err).Warnf("cache: cannot file the %s record of %s", r.Kind, r.Subject)
		return
	}
	if bc.shared != nil {
		bc.shared.push(ctx, r)
	}
}

// fileSealed stores the sealed tree's bookkeeping under its key.
func (bc *buildCache) fileSealed(ctx context.Context, subject string, parts []cache.Part, v *sealedView) {
	if !bc.write {
		return
	}
	r := &cache.Record{Kind: recordSealed, Key: cache.KeyOf(parts), Subject: subject, Parts: parts}
	for _, b := range []struct {
		name string
		data []byte
	}{{blobManifest, v.manifestTree}, {blobSBOM, v.sbom}} {
		d, err := bc.c.Put(ctx, strings.NewReader(string(b.data)), "")
		if err != nil {
			bc.log.WithError(err).Warn("cache: cannot store the sealed tree's record")
			return
		}
		r.Blobs = append(r.Blobs, cache.RecordBlob{Name: b.name, Digest: d, Size: int64(len(b.data))})
	}
	data, _ := json.Marshal(sealedData{TreeDigest: v.digest, Entries: v.entries})
	r.Data = data
	bc.file(ctx, r)
}

// sealedFrom reads a sealed record back into a view without a tree. Its
// blobs are re-hashed as they are read.
func (bc *buildCache) sealedFrom(r *cache.Record) (*sealedView, error) {
	var d sealedData
	if err := json.Unmarshal(r.Data, &d); err != nil || d.TreeDigest == "" {
		return nil, fmt.Errorf("%w: sealed record %s has no tree digest", cache.ErrBadRecord, r.Key)
	}
	v := &sealedView{digest: d.TreeDigest, entries: d.Entries}
	for _, b := range r.Blobs {
		data, err := bc.readBlob(b.Digest)
		if err != nil {
			return nil, err
		}
		switch b.Name {
		case blobManifest:
			v.manifestTree = data
		case blobSBOM:
			v.sbom = data
		}
	}
	if v.manifestTree == nil || v.sbom == nil {
		return nil, fmt.Errorf("%w: sealed record %s lacks its manifest or SBOM", cache.ErrBadRecord, r.Key)
	}
	return v, nil
}

// maxRecordBlob bounds what a record's own data (a manifest, an SBOM) may
// be: a tree of a million entries has a manifest of about 150 MB.
const maxRecordBlob = 1 << 30

func (bc *buildCache) readBlob(digest string) ([]byte, error) {
	return bc.c.ReadBlob(digest, maxRecordBlob)
}

// fileOutput stores an output's files, staged under staging, with their
// sums, and files its record.
func (bc *buildCache) fileOutput(ctx context.Context, subject string, parts []cache.Part, staging string, res *formats.Result, sums map[string]string) {
	if !bc.write {
		return
	}
	r := &cache.Record{Kind: recordOutput, Key: cache.KeyOf(parts), Subject: subject, Parts: parts}
	names, err := sumNames(staging, res.Files)
	if err != nil {
		bc.log.WithError(err).Warnf("cache: cannot store output %s", subject)
		return
	}
	blobs := map[string]cache.RecordBlob{}
	for _, n := range names {
		d, err := bc.c.Adopt(ctx, filepath.Join(staging, n), sums[n])
		if err != nil {
			bc.log.WithError(err).Warnf("cache: cannot store output %s", subject)
			return
		}
		fi, err := os.Stat(filepath.Join(staging, n))
		if err != nil {
			return
		}
		b := cache.RecordBlob{Name: n, Digest: d, Size: fi.Size()}
		r.Blobs = append(r.Blobs, b)
		blobs[n] = b
	}
	od := outputData{Files: res.Files, Adds: res.Adds, Warnings: res.Warnings}
	for _, f := range res.Facts {
		od.Facts = append(od.Facts, [2]string{f.Key, f.Value})
	}
	data, _ := json.Marshal(od)
	r.Data = data
	bc.file(ctx, r)
	bc.fileParts(subject, r.Key, res.Parts, blobs)
}

// restoreOutput writes a cached output's files into staging, each re-hashed
// on the way, and returns the result its writer had returned. A blob that
// fails its hash is removed from the cache and reported.
func (bc *buildCache) restoreOutput(ctx context.Context, r *cache.Record, staging string) (*formats.Result, error) {
	var d outputData
	if err := json.Unmarshal(r.Data, &d); err != nil || len(d.Files) == 0 {
		return nil, fmt.Errorf("%w: output record %s names no files", cache.ErrBadRecord, r.Key)
	}
	// A record may come from a shared registry: every name it gives must
	// stay inside the staging directory, and each output file must be one
	// of its blobs or a directory of them.
	for _, f := range d.Files {
		if !filepath.IsLocal(f) || strings.ContainsRune(f, filepath.Separator) || !slices.ContainsFunc(r.Blobs, func(b cache.RecordBlob) bool {
			return b.Name == f || strings.HasPrefix(b.Name, f+string(filepath.Separator))
		}) {
			return nil, fmt.Errorf("%w: output record %s names output file %q", cache.ErrBadRecord, r.Key, f)
		}
	}
	res := &formats.Result{Files: d.Files, Adds: d.Adds, Warnings: d.Warnings, Sums: map[string]string{}}
	for _, f := range d.Facts {
		res.Facts = append(res.Facts, formats.Fact{Key: f[0], Value: f[1]})
	}
	for _, b := range r.Blobs {
		if !filepath.IsLocal(b.Name) {
			return nil, fmt.Errorf("%w: output record %s names file %q", cache.ErrBadRecord, r.Key, b.Name)
		}
		dst := filepath.Join(staging, b.Name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return nil, err
		}
		if err := bc.c.Restore(ctx, b.Digest, dst); err != nil {
			return nil, err
		}
		h, _ := cache.ParseDigest(b.Digest)
		res.Sums[b.Name] = h
	}
	return res, nil
}
