package stamp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/layers"
	"github.com/stamp-dev/stamp/layers/cache"
	"github.com/stamp-dev/stamp/recipes"
	"github.com/stamp-dev/stamp/rootfs"
)

// recordPhase is a phase's tree: its manifest (with origins), the
// references of files whose content is in an archive the cache keeps, the
// archives, and one blob of the other files' contents, so that a build whose
// later phases changed starts after it.
const recordPhase = "phase"

const (
	blobContent = "content"
	blobRefs    = "refs"
	// blobArchive names each archive the references point into.
	blobArchive = "archive"
	// blobFile names a blob that is the whole content of one file (a large
	// host file, an artifact's file): it is what the content blob would
	// otherwise have held, so it is shared like it.
	blobFile = "file"
)

// worthKeeping tells whether the tree after phase ph is kept in the cache,
// as its layers say (layers.PhaseKeeper): a phase that installs packages
// takes far longer than writing its tree again, and one that unpacks a
// tarball leaves a tree whose files point into the archive the cache keeps,
// which costs little more than its index to keep and nothing to write
// again, unless a host process ran on the tree after it. A phase of files
// alone is about as quick to redo as to restore, and keeping it would
// write its files into the cache.
func worthKeeping(ph phase) bool {
	referenced := false
	for _, st := range ph.steps {
		pk, ok := st.layer.(layers.PhaseKeeper)
		if !ok {
			continue
		}
		switch pk.PhaseKeeping() {
		case layers.KeepingAlways:
			return true
		case layers.KeepingReferenced:
			referenced = true
		case layers.KeepingMaterialized:
			referenced = false
		}
	}
	return referenced
}

// holdsArchive tells whether r is a phase kept as references into archives.
func holdsArchive(r *cache.Record) bool {
	for _, b := range r.Blobs {
		if b.Name == blobArchive {
			return true
		}
	}
	return false
}

func phaseSubject(rec *recipes.Recipe, ph phase) string { return rec.Name + "/" + ph.name }

// keptSteps is how many of a phase's first steps the tree the cache keeps
// comes after, 0 for none. It is the whole phase when that is worth
// keeping, except where the layers after its last package install are
// not worth keeping by themselves (files, units, a hook): then it is the
// tree after that install, so that a change in those layers, the usual
// one-line change, does not install the packages again. Either way a
// build files one tree per phase at most: each is a copy of the tree's
// contents.
func keptSteps(ph phase) int {
	last := -1
	for j, st := range ph.steps {
		if pk, ok := st.layer.(layers.PhaseKeeper); ok && pk.PhaseKeeping() == layers.KeepingAlways {
			last = j
		}
	}
	if last >= 0 && last < len(ph.steps)-1 && ph.steps[last].index >= 0 && !worthKeeping(phase{name: ph.name, steps: ph.steps[last+1:]}) {
		return last + 1
	}
	if worthKeeping(ph) {
		return len(ph.steps)
	}
	return 0
}

// keptTree is the tree the cache keeps of one phase: the one after its
// first n steps, filed under subject and the key of parts.
type keptTree struct {
	n       int
	what    string // "phase customize", or the label of its n-th step
	subject string
	parts   []cache.Part
	// earlier are the trees after the phase's earlier package installs,
	// latest first, which another version of the recipe may have kept
	// (keptSteps): the recipe's, up to that install, with a package or a
	// debs layer added after it, is the usual one. Only looked up.
	earlier []keptTree
}

// candidates are the trees a build looks for in the cache in place of the
// phase's steps, longest first: the one it keeps, then the earlier ones.
func (k keptTree) candidates() []keptTree { return append([]keptTree{k}, k.earlier...) }

// keptTrees is what the cache keeps of each phase (keptSteps).
func (bc *buildCache) keptTrees(rec *recipes.Recipe, phases []phase, ep time.Time, att *attestation) ([]keptTree, error) {
	whole, err := bc.phaseParts(rec, phases, ep, att)
	if err != nil {
		return nil, err
	}
	kept := make([]keptTree, len(phases))
	for i, ph := range phases {
		prev := ""
		if i > 0 {
			prev = cache.KeyOf(whole[i-1])
		}
		head := func(n int) (keptTree, error) {
			label := ph.steps[n-1].label
			parts, err := bc.headParts(rec, ph, n, ep, prev, att)
			return keptTree{n: n, what: label, subject: rec.Name + "/" + label, parts: parts}, err
		}
		k := keptTree{n: keptSteps(ph), what: "phase " + ph.name, subject: phaseSubject(rec, ph), parts: whole[i]}
		if k.n > 0 && k.n < len(ph.steps) {
			if k, err = head(k.n); err != nil {
				return nil, err
			}
		}
		for n := k.n - 1; n > 0; n-- {
			pk, ok := ph.steps[n-1].layer.(layers.PhaseKeeper)
			if !ok || pk.PhaseKeeping() != layers.KeepingAlways || ph.steps[n-1].index < 0 {
				continue
			}
			e, err := head(n)
			if err != nil {
				return nil, err
			}
			k.earlier = append(k.earlier, e)
		}
		kept[i] = k
	}
	return kept, nil
}

// filePhase keeps the tree as it is after the steps k names under its key.
func (bc *buildCache) filePhase(ctx context.Context, rec *recipes.Recipe, k keptTree, tree *rootfs.Tree) {
	if !bc.write || k.n == 0 {
		return
	}
	// Origins name host files relative to the recipe, as the sealed tree's
	// do, so that a runner in another directory restores the same tree.
	var m bytes.Buffer
	if err := rootfs.WriteManifest(&m, withRelativeOrigins(tree.Entries(), rec.Dir), true); err != nil {
		bc.log.WithError(err).Warnf("cache: cannot keep the tree after %s", k.what)
		return
	}
	md, err := bc.c.Put(ctx, bytes.NewReader(m.Bytes()), "")
	if err != nil {
		bc.log.WithError(err).Warnf("cache: cannot keep the tree after %s", k.what)
		return
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tree.WriteContent(ctx, pw)) }()
	cd, err := bc.c.Put(ctx, pr, "")
	pr.CloseWithError(err)
	if err != nil {
		bc.log.WithError(err).Warnf("cache: cannot keep the tree after %s", k.what)
		return
	}
	blobs := []cache.RecordBlob{{Name: blobManifest, Digest: md, Size: int64(m.Len())}, {Name: blobContent, Digest: cd, Size: bc.blobSize(cd)}}
	if refs := tree.Refs(); len(refs) > 0 {
		more, err := bc.keepRefs(ctx, refs, tree)
		if err != nil {
			bc.log.WithError(err).Warnf("cache: cannot keep the tree after %s", k.what)
			return
		}
		blobs = append(blobs, more...)
	}
	bc.file(ctx, &cache.Record{Kind: recordPhase, Key: cache.KeyOf(k.parts), Subject: k.subject, Parts: k.parts, Blobs: blobs})
}

// keepRefs stores a tree's references and names the archives they point
// into, so that the record is found whole only while they are there.
func (bc *buildCache) keepRefs(ctx context.Context, refs []rootfs.Ref, tree *rootfs.Tree) ([]cache.RecordBlob, error) {
	b, err := json.Marshal(refs)
	if err != nil {
		return nil, err
	}
	rd, err := bc.c.Put(ctx, bytes.NewReader(b), "")
	if err != nil {
		return nil, err
	}
	blobs := []cache.RecordBlob{{Name: blobRefs, Digest: rd, Size: int64(len(b))}}
	count := map[string]int{}
	for _, r := range refs {
		count[r.Archive]++
	}
	seen := map[string]bool{}
	for _, r := range refs {
		if seen[r.Archive] {
			continue
		}
		seen[r.Archive] = true
		d := "sha256:" + r.Archive
		rb := cache.RecordBlob{Name: blobArchive, Digest: d, Size: bc.blobSize(d)}
		if e := tree.Get(r.Path); count[r.Archive] == 1 && r.Offset == 0 && e != nil && e.Size == rb.Size {
			rb.Name = blobFile
		}
		blobs = append(blobs, rb)
	}
	return blobs, nil
}

func (bc *buildCache) blobSize(digest string) int64 {
	if p, err := bc.c.Path(digest); err == nil {
		if fi, err := os.Stat(p); err == nil {
			return fi.Size()
		}
	}
	return 0
}

// restorePhases finds the last tree the cache keeps and restores it into
// a new tree in dir. It returns the tree, how many phases it stands for
// whole and how many steps of the next one; with none, a new empty tree.
func (bc *buildCache) restorePhases(ctx context.Context, phases []phase, kept []keptTree, dir string, opts rootfs.Options) (tree *rootfs.Tree, done, from int, err error) {
	for i := len(phases) - 1; i >= 0 && bc.read; i-- {
		for _, k := range kept[i].candidates() {
			if k.n == 0 {
				continue
			}
			r, _ := bc.lookup(ctx, recordPhase, k.subject, k.parts)
			if r == nil {
				continue
			}
			tree, err := rootfs.New(dir, opts)
			if err != nil {
				return nil, 0, 0, err
			}
			inPlace, err := bc.restorePhase(ctx, r, tree)
			if err != nil {
				bc.log.WithError(err).Warnf("cache: cannot restore %s; building it", k.what)
				tree.Close()
				if err := os.RemoveAll(dir); err != nil {
					return nil, 0, 0, err
				}
				continue
			}
			how := ""
			if inPlace {
				how = ", their content read in place from the cache"
			}
			bc.log.Infof("cache: the tree after %s is in the cache (key %s): %d entries restored%s", k.what, r.Key, tree.Len(), how)
			if k.n == len(phases[i].steps) {
				return tree, i + 1, 0, nil
			}
			return tree, i, k.n, nil
		}
	}
	tree, err = rootfs.New(dir, opts)
	return tree, 0, 0, err
}

// restorePhase makes the tree r keeps in tree, and says whether its files'
// content stays in the cache, where they point.
func (bc *buildCache) restorePhase(ctx context.Context, r *cache.Record, tree *rootfs.Tree) (inPlace bool, err error) {
	var manifest, content, refsBlob string
	for _, b := range r.Blobs {
		switch b.Name {
		case blobManifest:
			manifest = b.Digest
		case blobContent:
			content = b.Digest
		case blobRefs:
			refsBlob = b.Digest
		}
	}
	if manifest == "" || content == "" {
		return false, fmt.Errorf("%w: phase record %s lacks its manifest or content", cache.ErrBadRecord, r.Key)
	}
	m, err := bc.readBlob(manifest)
	if err != nil {
		return false, err
	}
	entries, err := rootfs.ParseManifest(bytes.NewReader(m))
	if err != nil {
		return false, fmt.Errorf("phase record %s: %w", r.Key, err)
	}
	var refs []rootfs.Ref
	if refsBlob != "" {
		b, err := bc.readBlob(refsBlob)
		if err != nil {
			return false, err
		}
		if err := json.Unmarshal(b, &refs); err != nil {
			return false, fmt.Errorf("%w: phase record %s: references: %v", cache.ErrBadRecord, r.Key, err)
		}
	}
	if tree.KeepsReferences() {
		// The content blob is kept in the cache as an archive is: the
		// files point into it, so none is written or hashed again (the
		// blob is verified as a whole when it is opened).
		h, err := cache.ParseDigest(content)
		if err != nil {
			return false, err
		}
		if all, size := contentRefs(entries, refs, h); size == bc.blobSize(content) {
			return true, tree.Restore(ctx, entries, strings.NewReader(""), all)
		}
		return false, fmt.Errorf("%w: phase record %s: its content is not the size its manifest says", cache.ErrBadRecord, r.Key)
	}
	rc, err := bc.c.Open(content)
	if err != nil {
		return false, err
	}
	defer rc.Close()
	if err := tree.Restore(ctx, entries, rc, refs); err != nil {
		return false, err
	}
	// Read to the end, where the reader checks the whole blob's hash.
	if n, err := io.Copy(io.Discard, rc); err != nil || n != 0 {
		return false, fmt.Errorf("phase record %s: %d bytes of content left over (%v)", r.Key, n, err)
	}
	return false, nil
}

// contentRefs adds to refs a reference into the content blob content (hex)
// for every regular file with content that refs does not name, at its
// place in what Tree.WriteContent wrote: each hard-link group once, in the
// byte order of the paths. It also returns the blob's size that makes.
func contentRefs(entries []*rootfs.Entry, refs []rootfs.Ref, content string) ([]rootfs.Ref, int64) {
	named := make(map[string]bool, len(refs))
	for _, r := range refs {
		named[r.Path] = true
	}
	all := slices.Clone(refs)
	seen := map[*rootfs.Inode]bool{}
	var off int64
	for _, e := range entries {
		if e.Type != rootfs.TypeRegular || seen[e.Inode] {
			continue
		}
		seen[e.Inode] = true
		if named[e.Path] {
			continue
		}
		if e.Size > 0 {
			all = append(all, rootfs.Ref{Path: e.Path, Archive: content, Offset: off})
		}
		off += e.Size
	}
	return all, off
}
