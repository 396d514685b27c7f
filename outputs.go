package stamp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/stamp-dev/stamp/formats"
	"github.com/stamp-dev/stamp/formats/attest"
	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/compress"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

// Names of the files every build writes beside its outputs.
const (
	SumsFile     = attest.SumsFile
	ManifestFile = attest.ManifestFile
)

// outputBase is the file name stem of an output: the recipe's name, plus the
// output's own name when it is not just the format.
func outputBase(rec *recipes.Recipe, out *recipes.Output) string {
	if out.Name == "" || out.Name == out.Format {
		return rec.Name
	}
	return rec.Name + "-" + out.Name
}

// errNotRestored is an output the cache named but could not give back; the
// build then makes it from the tree.
var errNotRestored = errors.New("output not restored from the cache")

// outputPlan is one output with its cache key, and the record that holds it
// when the cache does.
type outputPlan struct {
	out   *recipes.Output
	spec  *formats.Spec
	base  string
	parts []cache.Part
	hit   *cache.Record
	why   string // why a miss missed
	// reuse is what the output's last build filed for its writer to take,
	// looked up before the outputs take their turns; nil for none.
	reuse *outputParts
}

func (p *outputPlan) subject(rec *recipes.Recipe) string { return rec.Name + "/" + p.out.Name }

// planOutputs turns the recipe's outputs into specs with their keys, and
// looks each up in the cache.
func (bc *buildCache) planOutputs(ctx context.Context, rec *recipes.Recipe, ep time.Time, treeDigest string) ([]*outputPlan, error) {
	keys := map[string]string{}
	var plans []*outputPlan
	for i := range rec.Outputs {
		out := &rec.Outputs[i]
		if _, err := formats.Lookup(out.Format); err != nil {
			return nil, &UsageError{Msg: fmt.Sprintf("%s.format: %v", out.Field, err)}
		}
		spec, err := outputSpec(out)
		if err != nil {
			return nil, err
		}
		if err := secureBootOf(rec, out, spec); err != nil {
			return nil, err
		}
		p := &outputPlan{out: out, spec: spec, base: outputBase(rec, out)}
		if p.parts, err = bc.outputParts(rec, spec, p.base, ep, treeDigest, keys[out.From]); err != nil {
			return nil, err
		}
		keys[out.Name] = cache.KeyOf(p.parts)
		p.hit, p.why = bc.lookup(ctx, recordOutput, p.subject(rec), p.parts)
		plans = append(plans, p)
	}
	return plans, nil
}

// viewOf is the sealed tree's bookkeeping for the outputs and the cache.
func viewOf(tree *rootfs.Sealed, rec *recipes.Recipe, ep time.Time, att *attestation) (*sealedView, error) {
	v := &sealedView{digest: tree.Digest(), entries: tree.Len()}
	var m bytes.Buffer
	if err := rootfs.WriteManifest(&m, tree.Entries(), true); err != nil {
		return nil, err
	}
	v.manifestTree = m.Bytes()
	var err error
	if v.sbom, err = sbomJSON(tree, rec, ep, v.digest, att.inputs); err != nil {
		return nil, err
	}
	return v, nil
}

// outputJob is what writing a build's outputs needs.
type outputJob struct {
	rec   *recipes.Recipe
	o     *Options
	work  string         // where each output gets scratch space
	tree  *rootfs.Sealed // nil when every output is to come from the cache
	view  *sealedView
	ep    time.Time
	att   *attestation
	bc    *buildCache
	plans []*outputPlan
}

// staged is what the outputs written so far into the staging directory
// add up to.
type staged struct {
	dir      string
	manifest bytes.Buffer              // each output's section of the manifest
	mainFile map[string]string         // by output name
	factsOf  map[string][]formats.Fact // by main file
	addsOf   map[string][]string       // manifest lines of what each output added
	known    map[string]string         // sums of every file, by name
	files    []string
	// An output's files are hashed while the next output is written: on a
	// machine with a second core the hash of a disk costs no time.
	hashing []*pendingSums
}

// waitHashing waits until no output is being hashed.
func (st *staged) waitHashing() {
	for _, h := range st.hashing {
		<-h.done
	}
}

// outputsAtOnce is how many outputs are written at the same time. Writing
// a disk is mostly the kernel copying pages and a compressed image mostly
// the compressor, so two overlap well on two cores; more would multiply
// the compressors' buffers for little.
const outputsAtOnce = 2

// outputsAtOnceReusing is how many are written at the same time when an
// output has parts of its last build to take. Such an output mostly copies
// and hashes, waiting on the disk, and a third overlaps those waits: the
// node's rebuild after one changed file took 10.1-11.3 s against
// 10.8-12.2 s with two, in six alternating pairs, each one faster. A cold
// build, bound by its compressors, gained nothing from a third (its
// outputs took 17.0-19.5 s after the seal against 17.3-17.8 s).
const outputsAtOnceReusing = 3

// writeOutputs writes every output into a staging directory inside the
// output directory and moves the files to their final names only when all of
// them, the manifest and the sums are complete. An output the cache holds is
// taken from it; j.tree is nil when every output is, and then a cached output
// that cannot be restored is errNotRestored. Outputs are written
// outputsAtOnce at a time (outputsAtOnceReusing when one has parts of its
// last build to take), each once the output it is made from is done, and
// added to the manifest in the recipe's order.
func writeOutputs(ctx context.Context, j *outputJob) ([]string, error) {
	if err := os.MkdirAll(j.o.OutputDir, 0o755); err != nil {
		return nil, fmt.Errorf("output dir: %w", err)
	}
	staging, err := os.MkdirTemp(j.o.OutputDir, ".stamp-staging-")
	if err != nil {
		return nil, fmt.Errorf("output dir: %w", err)
	}
	defer os.RemoveAll(staging)
	st := &staged{dir: staging, mainFile: map[string]string{}, factsOf: map[string][]formats.Fact{},
		addsOf: map[string][]string{}, known: map[string]string{}}
	defer st.waitHashing()
	if j.tree != nil {
		// The tree sorts its paths once, on first use; the writers
		// share it from here on, and only read.
		j.tree.Paths()
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	made := make([]*madeOutput, len(j.plans))
	byName := map[string]int{}
	for i, p := range j.plans {
		made[i] = &madeOutput{}
		byName[p.out.Name] = i
	}
	from := make([]int, len(j.plans))
	errs := make([]error, len(j.plans))
	for i, p := range j.plans {
		from[i] = -1
		if p.out.From != "" {
			f, ok := byName[p.out.From]
			if !ok {
				errs[i] = fmt.Errorf("%s.from: no output named %q", p.out.Field, p.out.From)
				continue
			}
			from[i] = f
		}
	}
	// Nothing may still write into staging, or read it, when it is removed.
	defer func() {
		for _, m := range made {
			if m.hashing != nil {
				<-m.hashing.done
			}
		}
	}()
	at := outputsAtOnce
	for _, p := range j.plans {
		if p.hit == nil {
			if p.reuse = j.bc.partStore(p.subject(j.rec)); p.reuse != nil {
				at = outputsAtOnceReusing
			}
		}
	}
	heir := heirsOf(from, errs)
	takeTurns(ctx, at, from, errs, func(i int) error {
		m, p := made[i], j.plans[i]
		var src *madeOutput
		if from[i] >= 0 {
			src = made[from[i]]
		}
		hashFrom := src != nil && src.hashedByHeir
		res, restored, err := j.makeOutput(ctx, staging, p, src, hashFrom)
		m.res, m.restored = res, restored
		switch {
		case err != nil:
			cancel()
		case !restored && heir[i] >= 0 && j.hashesFrom(j.plans[heir[i]]):
			// Its heir, which takes its turn now, reads it whole and
			// hashes it as it goes; it starts the hashing below.
			m.hashedByHeir = true
		case !restored:
			// Hashed while the other outputs are written.
			m.hashing = hashOutput(staging, p, res)
		}
		if hashFrom && err == nil {
			// What the heir could not hash (an output taken from the
			// cache) is read again. After a failure nothing is: the
			// build fails, and would wait for the hash of a disk.
			if !restored && res.FromSum != "" {
				src.res.Sums = maps.Clone(src.res.Sums)
				if src.res.Sums == nil {
					src.res.Sums = map[string]string{}
				}
				src.res.Sums[src.res.Files[0]] = res.FromSum
			}
			src.hashing = hashOutput(staging, j.plans[from[i]], src.res)
		}
		return err
	})
	for i, m := range made {
		m.err = errs[i]
	}
	if err := firstOutputError(made); err != nil {
		return nil, err
	}
	for i, p := range j.plans {
		j.stageOutput(st, p, made[i])
	}
	if err := j.collectSums(ctx, st); err != nil {
		return nil, err
	}
	all, err := j.writeRecords(st)
	if err != nil {
		return nil, err
	}
	return all, publish(ctx, staging, j.o.OutputDir, all)
}

// errOutputSkipped is an output not written because the one it is made
// from failed.
var errOutputSkipped = errors.New("not written: the output it is made from failed")

// takeTurns runs write(i) for every output i whose errs[i] is nil, at
// most at at a time, and leaves each one's error in errs. Outputs take
// their turns in the recipe's order; one made from another (from[i], -1
// for none) waits for it without holding a turn, is skipped when it
// failed (errOutputSkipped), and the first made from it takes over its
// turn when it is done, ahead of the outputs after it in the recipe: a
// disk's qcow2 then reads the disk back while another output keeps the
// cores busy, not beside the last one (the node's outputs took 32.5 s
// after the seal instead of 35.2 s). An output that gets no turn before
// ctx ends has ctx's error.
func takeTurns(ctx context.Context, at int, from []int, errs []error, write func(i int) error) {
	heir := heirsOf(from, errs)
	done := make([]chan struct{}, len(from))
	for i := range done {
		done[i] = make(chan struct{})
	}
	slots := make(chan struct{}, at)
	acquire := func() error {
		select {
		case slots <- struct{}{}:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	var wg sync.WaitGroup
	for i, f := range from {
		if errs[i] == nil && f < 0 {
			errs[i] = acquire()
		}
		if errs[i] != nil {
			close(done[i])
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer close(done[i])
			if f >= 0 {
				<-done[f]
				if errs[f] != nil {
					errs[i] = errOutputSkipped
					return
				}
				if heir[f] != i {
					if errs[i] = acquire(); errs[i] != nil {
						return
					}
				}
			}
			defer func() {
				// The heir runs only after a success, in this turn.
				if errs[i] != nil || heir[i] < 0 {
					<-slots
				}
			}()
			errs[i] = write(i)
		}()
	}
	wg.Wait()
}

// heirsOf is, for each output, the first output made from it (from[i],
// -1 for none) that has no error yet: the one that takes over its turn.
// -1 for none.
func heirsOf(from []int, errs []error) []int {
	heir := make([]int, len(from))
	for i := range heir {
		heir[i] = -1
	}
	for i := len(from) - 1; i >= 0; i-- {
		if f := from[i]; f >= 0 && errs[i] == nil {
			heir[f] = i
		}
	}
	return heir
}

// hashesFrom says whether p's output, written, hashes the output it is
// made from as it reads it (formats.FromHasher).
func (j *outputJob) hashesFrom(p *outputPlan) bool {
	if p.hit != nil {
		return false
	}
	f, err := formats.Lookup(p.out.Format)
	if err != nil {
		return false
	}
	fh, ok := f.(formats.FromHasher)
	return ok && fh.HashesFrom(p.spec)
}

// madeOutput is one output as it is made: restored from the cache or
// written, then hashed unless restored. hashedByHeir says its heir, the
// first output made from it, hashes its main file as it reads it, and
// starts its hashing (of the rest) once done.
type madeOutput struct {
	res          *formats.Result
	restored     bool
	err          error
	hashing      *pendingSums
	hashedByHeir bool
}

// firstOutputError is the error of the first output, in the recipe's
// order, that failed on its own: not one skipped or stopped because
// another had failed first.
func firstOutputError(made []*madeOutput) error {
	var first error
	for _, m := range made {
		switch {
		case m.err == nil:
		case errors.Is(m.err, errOutputSkipped) || errors.Is(m.err, context.Canceled):
			if first == nil {
				first = m.err
			}
		default:
			return m.err
		}
	}
	return first
}

// makeOutput restores p's output from the cache or writes it into
// staging; from is the output p is made from, done, or nil. A written
// output starts being hashed as soon as it is complete.
func (j *outputJob) makeOutput(ctx context.Context, staging string, p *outputPlan, from *madeOutput, hashFrom bool) (*formats.Result, bool, error) {
	out, log := p.out, j.o.log()
	start := time.Now()
	if p.hit != nil {
		res, err := j.bc.restoreOutput(ctx, p.hit, staging)
		if err == nil {
			log.Infof("%s from the cache in %s", res.Files[0], time.Since(start).Round(time.Millisecond))
			return res, true, nil
		}
		if j.tree == nil {
			return nil, false, fmt.Errorf("%s: %w: %v", out.Field, errNotRestored, err)
		}
		log.WithError(err).Warnf("cache: cannot restore output %s; writing it", out.Name)
	}
	if j.tree == nil {
		return nil, false, fmt.Errorf("%s: %w: not in the cache", out.Field, errNotRestored)
	}
	res, err := j.writeOutput(ctx, p, staging, from, hashFrom)
	if err != nil {
		return nil, false, err
	}
	log.Infof("wrote %s in %s", res.Files[0], time.Since(start).Round(time.Millisecond))
	return res, false, nil
}

// stageOutput adds a made output to the manifest, and its hashing, when
// it was written, to what collectSums waits for.
func (j *outputJob) stageOutput(st *staged, p *outputPlan, m *madeOutput) {
	out, res := p.out, m.res
	if m.restored {
		for name, h := range res.Sums {
			st.known[name] = h
		}
	} else {
		st.hashing = append(st.hashing, m.hashing)
	}
	st.addsOf[out.Name] = res.Adds
	for _, w := range res.Warnings {
		j.o.log().Warnf("%s: %s", out.Name, w)
	}
	st.mainFile[out.Name] = res.Files[0]
	st.files = append(st.files, res.Files...)
	fmt.Fprintf(&st.manifest, "## output %s %s\n", out.Name, res.Files[0])
	for _, f := range res.Facts {
		fmt.Fprintf(&st.manifest, "# fact %s %s\n", f.Key, f.Value)
	}
	st.factsOf[res.Files[0]] = res.Facts
	for _, a := range res.Adds {
		st.manifest.WriteString(a + "\n")
	}
}

// collectSums waits for the hashing of every written output, and files
// each in the build cache.
func (j *outputJob) collectSums(ctx context.Context, st *staged) error {
	for _, h := range st.hashing {
		<-h.done
		if h.err != nil {
			return h.err
		}
		h.res.Sums = h.sums
		j.bc.fileOutput(ctx, h.plan.subject(j.rec), h.plan.parts, st.dir, h.res, h.sums)
		for name, sum := range h.sums {
			st.known[name] = sum
		}
	}
	return nil
}

// writeRecords writes the manifest, the SBOM, provenance.json and
// SHA256SUMS beside the outputs, and returns the names of every file staged.
func (j *outputJob) writeRecords(st *staged) ([]string, error) {
	sort.Strings(st.files)
	var sums bytes.Buffer
	var subjects []attest.Sum
	sumFiles, err := sumNames(st.dir, st.files)
	if err != nil {
		return nil, err
	}
	for _, name := range sumFiles {
		h, ok := st.known[name]
		if !ok {
			return nil, fmt.Errorf("output file %s has no sum", name)
		}
		fmt.Fprintf(&sums, "%s  %s\n", h, name)
		subjects = append(subjects, attest.Sum{Name: name, SHA256: h, Annotations: factAnnotations(st.factsOf[name])})
	}
	// The manifest is its header, the tree's section (megabytes for a real
	// tree, never copied) and each output's section, in that order.
	manifestHead := fmt.Sprintf("# stamp manifest v1: %s\n# tree %s\n", j.rec.Name, j.view.digest)
	sbom := j.view.sbom
	manifestSum, err := writeJoined(filepath.Join(st.dir, ManifestFile), []byte(manifestHead), j.view.manifestTree, st.manifest.Bytes())
	if err != nil {
		return nil, err
	}
	byproducts := []attest.Sum{{Name: ManifestFile, SHA256: manifestSum}, {Name: SBOMFile, SHA256: bytesSHA256(sbom)}}
	prov, err := provenanceJSON(j.rec, j.ep, j.att.recipeDigest, j.view.digest, j.att.deps, subjects, byproducts)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(st.dir, SBOMFile), sbom, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(st.dir, ProvenanceFile), prov, 0o644); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(st.dir, SumsFile), sums.Bytes(), 0o644); err != nil {
		return nil, err
	}
	// SHA256SUMS comes last, so its presence says the rest is in place.
	return append(append([]string{}, st.files...), ManifestFile, SBOMFile, ProvenanceFile, SumsFile), nil
}

// publish moves the staged files named by all into the output directory,
// in order.
func publish(ctx context.Context, staging, outDir string, all []string) error {
	for _, name := range all {
		// Modes are set explicitly so the umask of whoever builds does not show.
		if err := chmodOutput(filepath.Join(staging, name)); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	for _, name := range all {
		if err := renameOutput(staging, name, filepath.Join(outDir, name)); err != nil {
			return fmt.Errorf("moving %s into place: %w", name, err)
		}
	}
	return nil
}

// writeOutput writes one output from the tree into staging; from is the
// output it is made from, done, or nil.
func (j *outputJob) writeOutput(ctx context.Context, p *outputPlan, staging string, from *madeOutput, hashFrom bool) (*formats.Result, error) {
	out := p.out
	f, err := formats.Lookup(out.Format)
	if err != nil {
		return nil, &UsageError{Msg: fmt.Sprintf("%s.format: %v", out.Field, err)}
	}
	// Each output has scratch space of its own in the work directory, for
	// its own view of the tree, gone once it is written.
	scratch, err := os.MkdirTemp(j.work, "output-")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", out.Field, err)
	}
	defer os.RemoveAll(scratch)
	rec := j.rec
	src := &formats.Source{Tree: j.tree, Epoch: j.ep, Name: rec.Name, Arch: rec.Arch, Seed: seed(rec),
		WorkDir: scratch, Log: j.o.log().WithField("output", out.Name), Progress: j.o.Progress}
	if from != nil {
		src.From = filepath.Join(staging, from.res.Files[0])
		src.FromAdds = from.res.Adds
		src.HashFrom = hashFrom
	}
	parts := p.reuse
	if p.hit != nil {
		// Written after all: the cached output could not be restored.
		parts = j.bc.partStore(p.subject(rec))
	}
	if parts != nil {
		src.Parts = parts
	}
	res, err := f.Write(ctx, src, p.spec, staging, p.base)
	if parts != nil {
		if n := parts.close(); n > 0 && res != nil {
			j.o.log().Infof("cache: %d of the %d compressed parts of output %s unchanged since its last build, taken from it", n, len(res.Parts), out.Name)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%s (%s): %w", out.Field, out.Format, err)
	}
	return res, nil
}

// writeJoined writes the parts one after another into a new file at path
// and returns the hex sha256 of the whole.
func writeJoined(path string, parts ...[]byte) (string, error) {
	h := sha256.New()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return "", err
	}
	for _, p := range parts {
		h.Write(p)
		if _, err := f.Write(p); err != nil {
			f.Close()
			return "", fmt.Errorf("%s: %w", path, err)
		}
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// pendingSums is the hashing of one written output's files.
type pendingSums struct {
	plan *outputPlan
	res  *formats.Result
	done chan struct{}
	sums map[string]string
	err  error
}

// hashOutput starts hashing what res wrote into staging.
func hashOutput(staging string, p *outputPlan, res *formats.Result) *pendingSums {
	h := &pendingSums{plan: p, res: res, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		h.sums, h.err = sumsOf(staging, res)
	}()
	return h
}

// sumsOf is the hex sha256 of every file an output wrote, by name relative
// to staging; the format's own sums spare reading a file again.
func sumsOf(staging string, res *formats.Result) (map[string]string, error) {
	names, err := sumNames(staging, res.Files)
	if err != nil {
		return nil, err
	}
	sums := map[string]string{}
	for _, n := range names {
		if h, ok := res.Sums[n]; ok {
			sums[n] = h
			continue
		}
		hash := func(p string) (string, int64, error) { return hashio.File(p, false) }
		if slices.Contains(res.Uncached, n) {
			hash = hashio.FileUncached
		}
		h, _, err := hash(filepath.Join(staging, n))
		if err != nil {
			return nil, err
		}
		sums[n] = h
	}
	return sums, nil
}

// factAnnotations are an output's facts as its subject's annotations in
// provenance.json, "stamp.dev/" and the key; the values of a key given
// more than once are joined by "; " in order.
func factAnnotations(facts []formats.Fact) map[string]string {
	if len(facts) == 0 {
		return nil
	}
	a := map[string]string{}
	for _, f := range facts {
		k := "stamp.dev/" + f.Key
		if v, ok := a[k]; ok {
			a[k] = v + "; " + f.Value
		} else {
			a[k] = f.Value
		}
	}
	return a
}

// secureBootOf loads the Secure Boot key and certificate a booting output
// names (relative to the recipe) into its spec, checking that they belong
// together: the spec keeps the key in memory for the writer and names it
// by its certificate's fingerprint, so no cache key or record holds it.
func secureBootOf(rec *recipes.Recipe, out *recipes.Output, spec *formats.Spec) error {
	b, ok := spec.Options.(formats.Booter)
	if !ok || out.Boot == nil || out.Boot.SecureBoot == nil {
		return nil
	}
	boot := b.BootOptions()
	if boot == nil {
		return nil
	}
	field := out.Field + ".boot.secureBoot"
	read := func(k, p string) ([]byte, error) {
		if !filepath.IsAbs(p) && rec.Dir != "" {
			p = filepath.Join(rec.Dir, p)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, &UsageError{Msg: fmt.Sprintf("%s.%s: %v", field, k, err)}
		}
		return b, nil
	}
	key, err := read("key", out.Boot.SecureBoot.Key)
	if err != nil {
		return err
	}
	cert, err := read("cert", out.Boot.SecureBoot.Cert)
	if err != nil {
		return err
	}
	sb, err := formats.LoadSecureBoot(key, cert)
	if err != nil {
		return &UsageError{Msg: fmt.Sprintf("%s.%v", field, err)}
	}
	boot.SecureBoot = sb
	return nil
}

// outputSpec is an output as the recipe asks for it, in the formats' terms.
func outputSpec(out *recipes.Output) (*formats.Spec, error) {
	conv, ok := outputOptions[out.Format]
	if !ok {
		return nil, &UsageError{Msg: fmt.Sprintf("%s.format: output format %q is not supported by this version of stamp", out.Field, out.Format)}
	}
	opts, err := conv(out)
	if err != nil {
		return nil, &UsageError{Msg: fmt.Sprintf("%s.%v", out.Field, err)}
	}
	return &formats.Spec{Format: out.Format, Name: out.Name, From: out.From, Options: opts}, nil
}

// outputOptions turns each format's options as the recipe schema decoded
// them into the format's own typed options (formats does not import
// recipes); a new format is one line here. A test holds it against both
// tables.
var outputOptions = map[string]func(out *recipes.Output) (any, error){
	recipes.FormatTar: func(out *recipes.Output) (any, error) {
		alg, err := outputCompression(out)
		return &formats.TarSpec{Compression: alg}, err
	},
	recipes.FormatCpio: func(out *recipes.Output) (any, error) {
		alg, err := outputCompression(out)
		return &formats.CpioSpec{Compression: alg}, err
	},
	recipes.FormatPXE: func(out *recipes.Output) (any, error) {
		alg, err := outputCompression(out)
		o := &formats.PXESpec{Compression: alg}
		if out.Boot != nil {
			o.Cmdline = out.Boot.Cmdline
		}
		return o, err
	},
	recipes.FormatQcow2: func(out *recipes.Output) (any, error) {
		return &formats.Qcow2Spec{Compress: out.Compression == "zlib"}, nil
	},
	recipes.FormatVHD: func(out *recipes.Output) (any, error) {
		return &formats.VHDSpec{Dynamic: out.Type == "dynamic"}, nil
	},
	recipes.FormatVMDK: func(out *recipes.Output) (any, error) {
		return &formats.VMDKSpec{Type: out.Type}, nil
	},
	recipes.FormatOVA: func(out *recipes.Output) (any, error) {
		return &formats.OVASpec{CPUs: out.CPUs, Memory: out.Memory, Firmware: out.Firmware, Network: out.Network}, nil
	},
	recipes.FormatGCE: func(out *recipes.Output) (any, error) { return &formats.GCESpec{}, nil },
	recipes.FormatCompressed: func(out *recipes.Output) (any, error) {
		alg, err := outputCompression(out)
		return &formats.CompressedSpec{Compression: alg}, err
	},
	recipes.FormatLive: func(out *recipes.Output) (any, error) {
		alg, err := outputCompression(out)
		o := &formats.LiveSpec{Compression: alg}
		if out.Boot != nil {
			o.Cmdline = out.Boot.Cmdline
		}
		return o, err
	},
	recipes.FormatISO: func(out *recipes.Output) (any, error) {
		alg, err := outputCompression(out)
		o := &formats.ISOSpec{Compression: alg}
		if out.Boot != nil {
			o.Cmdline, o.BIOS = out.Boot.Cmdline, out.Boot.BIOS
		}
		return o, err
	},
	recipes.FormatErofs: func(out *recipes.Output) (any, error) {
		return &formats.ErofsSpec{Compression: out.Compression}, nil
	},
	recipes.FormatOCI: func(out *recipes.Output) (any, error) {
		alg, err := outputCompression(out)
		return &formats.OCISpec{Kind: out.Kind, Layout: out.Layout, Compression: alg,
			Entrypoint: out.Entrypoint, Env: out.Env, Labels: out.Labels}, err
	},
	recipes.FormatRaw: rawOptions,
}

func outputCompression(out *recipes.Output) (compress.Algorithm, error) {
	alg, err := compress.Parse(out.Compression)
	if err != nil {
		return "", fmt.Errorf("compression: %w", err)
	}
	return alg, nil
}

// rawOptions carries a raw disk's layout into the formats' terms; the
// schema has already read its sizes into bytes.
func rawOptions(out *recipes.Output) (any, error) {
	o := &formats.RawSpec{Size: out.Size, FreeSpace: out.FreeSpace, Grow: out.Grow == nil || *out.Grow}
	for _, p := range out.Partitions {
		o.Partitions = append(o.Partitions, formats.PartitionSpec{Name: p.Name, Type: p.Type, Size: p.Size, Filesystem: p.Filesystem, Label: p.Label})
	}
	if b := out.Boot; b != nil {
		o.Boot = &formats.BootSpec{Loader: b.Loader, Cmdline: b.Cmdline, BIOS: b.BIOS, SystemdBoot: b.SystemdBoot}
	}
	return o, nil
}

func seed(rec *recipes.Recipe) string {
	if rec.Seed != "" {
		return rec.Seed
	}
	return rec.Name
}
