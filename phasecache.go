package stamp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

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

// filePhase keeps the tree as it is after phase ph under the phase's key.
func (bc *buildCache) filePhase(ctx context.Context, rec *recipes.Recipe, ph phase, parts []cache.Part, tree *rootfs.Tree) {
	if !bc.write || !worthKeeping(ph) {
		return
	}
	// Origins name host files relative to the recipe, as the sealed tree's
	// do, so that a runner in another directory restores the same tree.
	var m bytes.Buffer
	if err := rootfs.WriteManifest(&m, withRelativeOrigins(tree.Entries(), rec.Dir), true); err != nil {
		bc.log.WithError(err).Warnf("cache: cannot keep phase %s", ph.name)
		return
	}
	md, err := bc.c.Put(ctx, bytes.NewReader(m.Bytes()), "")
	if err != nil {
		bc.log.WithError(err).Warnf("cache: cannot keep phase %s", ph.name)
		return
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(tree.WriteContent(ctx, pw)) }()
	cd, err := bc.c.Put(ctx, pr, "")
	pr.CloseWithError(err)
	if err != nil {
		bc.log.WithError(err).Warnf("cache: cannot keep phase %s", ph.name)
		return
	}
	blobs := []cache.RecordBlob{{Name: blobManifest, Digest: md, Size: int64(m.Len())}, {Name: blobContent, Digest: cd, Size: bc.blobSize(cd)}}
	if refs := tree.Refs(); len(refs) > 0 {
		more, err := bc.keepRefs(ctx, refs, tree)
		if err != nil {
			bc.log.WithError(err).Warnf("cache: cannot keep phase %s", ph.name)
			return
		}
		blobs = append(blobs, more...)
	}
	bc.file(ctx, &cache.Record{Kind: recordPhase, Key: cache.KeyOf(parts), Subject: phaseSubject(rec, ph), Parts: parts, Blobs: blobs})
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

// restorePhases finds the last phase the cache keeps and restores the tree
// as it was after it into a new tree in dir. It returns the tree and how
// many phases it stands for; with none, a new empty tree.
func (bc *buildCache) restorePhases(ctx context.Context, rec *recipes.Recipe, phases []phase, keys [][]cache.Part, dir string, opts rootfs.Options) (*rootfs.Tree, int, error) {
	for i := len(phases) - 1; i >= 0 && bc.read; i-- {
		if !worthKeeping(phases[i]) {
			continue
		}
		r, _ := bc.lookup(ctx, recordPhase, phaseSubject(rec, phases[i]), keys[i])
		if r == nil {
			continue
		}
		tree, err := rootfs.New(dir, opts)
		if err != nil {
			return nil, 0, err
		}
		if err := bc.restorePhase(ctx, r, tree); err != nil {
			bc.log.WithError(err).Warnf("cache: cannot restore phase %s; building it", phases[i].name)
			tree.Close()
			if err := os.RemoveAll(dir); err != nil {
				return nil, 0, err
			}
			continue
		}
		bc.log.Infof("cache: the tree after phase %s is in the cache (key %s): %d entries restored", phases[i].name, r.Key, tree.Len())
		return tree, i + 1, nil
	}
	tree, err := rootfs.New(dir, opts)
	return tree, 0, err
}

func (bc *buildCache) restorePhase(ctx context.Context, r *cache.Record, tree *rootfs.Tree) error {
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
		return fmt.Errorf("%w: phase record %s lacks its manifest or content", cache.ErrBadRecord, r.Key)
	}
	m, err := bc.readBlob(manifest)
	if err != nil {
		return err
	}
	entries, err := rootfs.ParseManifest(bytes.NewReader(m))
	if err != nil {
		return fmt.Errorf("phase record %s: %w", r.Key, err)
	}
	var refs []rootfs.Ref
	if refsBlob != "" {
		b, err := bc.readBlob(refsBlob)
		if err != nil {
			return err
		}
		if err := json.Unmarshal(b, &refs); err != nil {
			return fmt.Errorf("%w: phase record %s: references: %v", cache.ErrBadRecord, r.Key, err)
		}
	}
	rc, err := bc.c.Open(content)
	if err != nil {
		return err
	}
	defer rc.Close()
	if err := tree.Restore(ctx, entries, rc, refs); err != nil {
		return err
	}
	// Read to the end, where the reader checks the whole blob's hash.
	if n, err := io.Copy(io.Discard, rc); err != nil || n != 0 {
		return fmt.Errorf("phase record %s: %d bytes of content left over (%v)", r.Key, n, err)
	}
	return nil
}
