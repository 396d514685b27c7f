package cache

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// Prune keeps the cache to what recent builds used. Without it the cache
// only grows: every change to a recipe files new outputs (a disk image is
// hundreds of megabytes), and every tarball base an uncompressed archive.
//
// What a build used is known from its records: a build files or looks up
// (Record) the records of its phases, sealed tree and outputs, and each one
// names its blobs, and by its parts every input the build read. A record's
// mtime is when a build last used it. A blob no record names (an input
// fetched for an --offline build not made yet) is judged by its ctime: when
// it was stored, or linked out as an output.

// PruneOptions say what Prune keeps.
type PruneOptions struct {
	// KeepFor keeps every record a build used within this long, with every
	// blob it names, and every other blob stored or linked out within this
	// long. Zero keeps nothing for its age.
	KeepFor time.Duration
	// MaxSize, when positive, also lets go of the records used longest ago,
	// and then of the blobs no record kept names, oldest first, until the
	// blobs kept take at most MaxSize bytes of disk.
	MaxSize int64
	// DryRun reports what would go and removes nothing.
	DryRun bool
}

// PruneReport says what a prune removed and what it left.
type PruneReport struct {
	Records, Blobs int // removed
	// Freed is the disk the removed blobs and temp files held alone. A blob
	// hard-linked to an output frees nothing until the output goes too.
	Freed int64
	// What is left; Kept is the disk the blobs take.
	KeptRecords, KeptBlobs int
	Kept                   int64
}

type prunedBlob struct {
	hex    string
	disk   int64 // allocated bytes
	stored time.Time
	alone  bool // no hard link outside the cache
}

type prunedRecord struct {
	path  string
	used  time.Time
	names []string // blobs it names (hex), by its blobs and its parts
	bad   bool
}

// Prune removes what no build used within opts.KeepFor (and, with MaxSize,
// the least recently used until the rest fits), and every temp file. It
// waits until no other process has the cache open, and holds it alone.
func (c *Cache) Prune(ctx context.Context, opts PruneOptions) (*PruneReport, error) {
	if !c.writable {
		return nil, fmt.Errorf("prune %s: %w", c.dir, ErrReadOnly)
	}
	if opts.KeepFor < 0 || opts.MaxSize < 0 {
		return nil, fmt.Errorf("prune %s: a negative age or size keeps nothing; say 0", c.dir)
	}
	if err := c.lockAlone(ctx); err != nil {
		return nil, fmt.Errorf("prune %s: %w", c.dir, err)
	}
	defer c.unlockAlone()
	cutoff := time.Now().Add(-opts.KeepFor)

	blobs, err := c.listBlobs()
	if err != nil {
		return nil, fmt.Errorf("prune %s: %w", c.dir, err)
	}
	records, err := c.listRecords(ctx)
	if err != nil {
		return nil, fmt.Errorf("prune %s: %w", c.dir, err)
	}
	p := &prunePlan{blobs: blobs, cutoff: cutoff, maxSize: opts.MaxSize, keep: map[string]bool{}, rep: &PruneReport{}}
	p.chooseRecords(records)
	p.chooseBlobs()
	rep := p.rep
	if opts.DryRun {
		return rep, nil
	}
	if err := c.removePruned(p); err != nil {
		return nil, fmt.Errorf("prune %s: %w", c.dir, err)
	}
	freed, err := c.pruneTemp()
	if err != nil {
		return nil, fmt.Errorf("prune %s: %w", c.dir, err)
	}
	rep.Freed += freed
	return rep, nil
}

// prunePlan is what a prune keeps and drops, chosen before anything goes.
type prunePlan struct {
	blobs   map[string]*prunedBlob
	cutoff  time.Time // what was last used before it goes
	maxSize int64     // 0: no limit
	keep    map[string]bool
	// full is set once something used since cutoff did not fit: from then
	// on nothing older is kept.
	full        bool
	rep         *PruneReport
	dropRecords []*prunedRecord
	dropBlobs   []*prunedBlob
}

// fits reports whether the blobs names adds to what is kept still fit in
// maxSize.
func (p *prunePlan) fits(names []string) bool {
	if p.maxSize == 0 {
		return true
	}
	add := int64(0)
	seen := map[string]bool{}
	for _, h := range names {
		if b := p.blobs[h]; b != nil && !p.keep[h] && !seen[h] {
			seen[h] = true
			add += b.disk
		}
	}
	return p.rep.Kept+add <= p.maxSize
}

// chooseRecords keeps the records, most recently used first, that were
// used since cutoff and fit, and the blobs they name.
func (p *prunePlan) chooseRecords(records []*prunedRecord) {
	for _, r := range records {
		if p.full || r.bad || r.used.Before(p.cutoff) || !p.fits(r.names) {
			// Strictly least recently used: once one record does not fit,
			// no older one is kept in its place.
			p.full = p.full || (!r.bad && !r.used.Before(p.cutoff))
			p.dropRecords = append(p.dropRecords, r)
			continue
		}
		for _, h := range r.names {
			if b := p.blobs[h]; b != nil && !p.keep[h] {
				p.keep[h] = true
				p.rep.Kept += b.disk
			}
		}
		p.rep.KeptRecords++
	}
}

// chooseBlobs keeps, of the blobs no kept record names, the most recently
// stored that were stored since cutoff and fit, and counts what goes.
func (p *prunePlan) chooseBlobs() {
	var orphans []*prunedBlob
	for h, b := range p.blobs {
		if !p.keep[h] {
			orphans = append(orphans, b)
		}
	}
	sort.Slice(orphans, func(i, j int) bool {
		if !orphans[i].stored.Equal(orphans[j].stored) {
			return orphans[i].stored.After(orphans[j].stored)
		}
		return orphans[i].hex < orphans[j].hex
	})
	for _, b := range orphans {
		if p.full || b.stored.Before(p.cutoff) || !p.fits([]string{b.hex}) {
			p.full = p.full || !b.stored.Before(p.cutoff)
			p.dropBlobs = append(p.dropBlobs, b)
			continue
		}
		p.keep[b.hex] = true
		p.rep.Kept += b.disk
	}
	p.rep.KeptBlobs = len(p.blobs) - len(p.dropBlobs)
	p.rep.Records, p.rep.Blobs = len(p.dropRecords), len(p.dropBlobs)
	for _, b := range p.dropBlobs {
		if b.alone {
			p.rep.Freed += b.disk
		}
	}
}

// removePruned removes what p drops, then the pointers to latest records
// and the stat cache's entries that name what is gone.
func (c *Cache) removePruned(p *prunePlan) error {
	// Records go before their blobs: a record never names a blob that is
	// gone, though a build would only take it for a miss if it did.
	for _, r := range p.dropRecords {
		if err := removeIfThere(r.path); err != nil {
			return err
		}
		c.log.WithField("record", r.path).Debug("pruned record")
	}
	for _, b := range p.dropBlobs {
		if err := removeIfThere(c.blobPath(b.hex)); err != nil {
			return err
		}
		c.log.WithField("blob", digestOf(b.hex)).Debug("pruned blob")
	}
	if err := c.pruneLast(); err != nil {
		return err
	}
	return c.pruneStat(p.blobs, p.keep, p.cutoff)
}

func removeIfThere(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// diskOf is the disk a file takes, its allocated blocks: a cached raw disk
// image is mostly holes.
func diskOf(fi os.FileInfo) (disk int64, stored time.Time, nlink uint64) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fi.Size(), fi.ModTime(), 1
	}
	return st.Blocks * 512, time.Unix(st.Ctim.Sec, st.Ctim.Nsec), uint64(st.Nlink)
}

func (c *Cache) listBlobs() (map[string]*prunedBlob, error) {
	ents, err := os.ReadDir(c.blobs)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*prunedBlob, len(ents))
	for _, e := range ents {
		h, err := ParseDigest(e.Name())
		if err != nil || h != e.Name() || !e.Type().IsRegular() {
			continue // not a blob of ours: left alone
		}
		fi, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, err
		}
		disk, stored, nlink := diskOf(fi)
		out[h] = &prunedBlob{hex: h, disk: disk, stored: stored, alone: nlink == 1}
	}
	return out, nil
}

// listRecords reads every record, the most recently used first.
func (c *Cache) listRecords(ctx context.Context) ([]*prunedRecord, error) {
	root := filepath.Join(c.dir, "records")
	kinds, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*prunedRecord
	for _, k := range kinds {
		if !k.IsDir() || !validKind(k.Name()) {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(root, k.Name()))
		if err != nil {
			return nil, err
		}
		for _, e := range ents {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			h, err := ParseDigest(e.Name())
			if err != nil || h != e.Name() || !e.Type().IsRegular() {
				continue
			}
			r, err := c.pruneRecord(k.Name(), h)
			if err != nil {
				return nil, err
			}
			if r != nil {
				out = append(out, r)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].used.Equal(out[j].used) {
			return out[i].used.After(out[j].used)
		}
		return out[i].path < out[j].path
	})
	return out, nil
}

// pruneRecord reads one record for Prune. One that fails its check (a
// blob gone, bytes damaged) is bad: no build would take it.
func (c *Cache) pruneRecord(kind, h string) (*prunedRecord, error) {
	p := filepath.Join(c.dir, "records", kind, h)
	fi, err := os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	pr := &prunedRecord{path: p, used: fi.ModTime()}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var r Record
	if json.Unmarshal(b, &r) != nil || c.Check(&r, kind, digestOf(h)) != nil {
		pr.bad = true
		return pr, nil
	}
	for _, bl := range r.Blobs {
		if bh, err := ParseDigest(bl.Digest); err == nil {
			pr.names = append(pr.names, bh)
		}
	}
	for _, part := range r.Parts {
		if bh, err := ParseDigest(part.Digest); err == nil {
			pr.names = append(pr.names, bh)
		}
	}
	return pr, nil
}

// pruneLast removes the pointers to a subject's latest record that point at
// none.
func (c *Cache) pruneLast() error {
	root := filepath.Join(c.dir, "records")
	kinds, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, k := range kinds {
		if !k.IsDir() || !validKind(k.Name()) {
			continue
		}
		dir := filepath.Join(root, k.Name(), "last")
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := filepath.Join(dir, e.Name())
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			rp, err := c.recordPath(k.Name(), strings.TrimSpace(string(b)))
			if err == nil {
				if _, err := os.Stat(rp); err == nil {
					continue
				}
			}
			if err := removeIfThere(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// pruneStat removes the stat cache's entries for blobs that are gone, and
// those no longer young that name no blob kept. An entry of a blob kept
// stays whatever its age: without it the next build would hash the blob
// again.
func (c *Cache) pruneStat(blobs map[string]*prunedBlob, keep map[string]bool, cutoff time.Time) error {
	dir := filepath.Join(c.dir, "stat")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		fi, err := e.Info()
		if err != nil {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		_, sum, _ := strings.Cut(strings.TrimSpace(string(b)), "\t")
		switch {
		case keep[sum]:
			continue
		case blobs[sum] == nil && !fi.ModTime().Before(cutoff):
			continue // a host file's digest, hashed lately
		}
		if err := removeIfThere(p); err != nil {
			return err
		}
	}
	return nil
}

// pruneTemp removes every temp file: with the cache held alone, none is
// being written.
func (c *Cache) pruneTemp() (int64, error) {
	ents, err := os.ReadDir(c.tmp)
	if err != nil {
		return 0, err
	}
	var freed int64
	for _, e := range ents {
		p := filepath.Join(c.tmp, e.Name())
		if fi, err := e.Info(); err == nil {
			if disk, _, nlink := diskOf(fi); nlink == 1 && fi.Mode().IsRegular() {
				freed += disk
			}
		}
		if err := os.RemoveAll(p); err != nil {
			return freed, err
		}
	}
	return freed, nil
}
