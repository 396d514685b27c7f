package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/stamp-dev/stamp/rootfs"
)

// Records file what a build made under a key computed from everything that
// went into it, so that the next build with the same inputs can take the
// result instead of making it again. A record is a small JSON document; the
// content it names (an output's files, a manifest section) is blobs, stored
// and re-hashed like any other.
//
// Layout under the cache directory:
//
//	records/<kind>/<hex key>         the record
//	records/<kind>/last/<hex subject> the key of the subject's latest record
//
// The second file only explains a miss: what changed since the last build of
// the same recipe or output.

// Part is one thing a key is made of, named so that a miss can say which
// part changed.
type Part struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
}

// RecordBlob is content a record needs, stored as a blob.
type RecordBlob struct {
	Name   string `json:"name"`
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// Record is a build result filed under Key. Data is the kind's own.
type Record struct {
	Kind    string          `json:"kind"`
	Key     string          `json:"key"`
	Subject string          `json:"subject"`
	Parts   []Part          `json:"parts"`
	Blobs   []RecordBlob    `json:"blobs"`
	Data    json.RawMessage `json:"data,omitempty"`
	// Pulled is set on a record filed from a shared cache and says where
	// it came from; nil is a record this machine made. It is the local
	// cache's own note: never part of the key, never shared, never signed.
	Pulled *Pulled `json:"pulled,omitempty"`
}

// Pulled is where a record filed from a shared cache came from.
type Pulled struct {
	// From is the reference it was pulled from.
	From string `json:"from"`
	// Signer is the ID of the trusted key whose signature was checked
	// before it was filed; "" when no signature was asked for.
	Signer string `json:"signer,omitempty"`
}

// KeyOf is the key of parts: the sha256 of their canonical JSON, in the
// order given.
func KeyOf(parts []Part) string {
	b, err := json.Marshal(parts)
	if err != nil {
		panic(err) // two strings per part always marshal
	}
	sum := sha256.Sum256(b)
	return digestOf(hex.EncodeToString(sum[:]))
}

// ErrBadRecord is a record that is not what its name says: unreadable,
// filed under another key or kind, or naming a blob the cache lacks. It is
// never used; the caller builds the result again.
var ErrBadRecord = errors.New("bad cache record")

func validKind(kind string) bool {
	return kind != "" && kind != "last" && !strings.ContainsAny(kind, "/.")
}

func (c *Cache) recordPath(kind, key string) (string, error) {
	h, err := ParseDigest(key)
	if err != nil {
		return "", err
	}
	if !validKind(kind) {
		return "", fmt.Errorf("record kind %q: %w", kind, ErrBadRecord)
	}
	return filepath.Join(c.dir, "records", kind, h), nil
}

func (c *Cache) lastPath(kind, subject string) string {
	sum := sha256.Sum256([]byte(subject))
	return filepath.Join(c.dir, "records", kind, "last", hex.EncodeToString(sum[:]))
}

// Check tells whether r is well formed and filed as asked: kind and key as
// given, the key the hash of its parts, and every blob present. It does not
// re-hash blobs; reading them does.
func (c *Cache) Check(r *Record, kind, key string) error {
	switch {
	case r.Kind != kind:
		return fmt.Errorf("%w: kind %q where %q was asked for", ErrBadRecord, r.Kind, kind)
	case r.Key != key:
		return fmt.Errorf("%w: key %s where %s was asked for", ErrBadRecord, r.Key, key)
	case KeyOf(r.Parts) != key:
		return fmt.Errorf("%w: its parts hash to %s, not its key %s", ErrBadRecord, KeyOf(r.Parts), key)
	}
	for _, b := range r.Blobs {
		if !c.Has(b.Digest) {
			return fmt.Errorf("%w: blob %s (%s) is not in the cache", ErrBadRecord, b.Digest, b.Name)
		}
	}
	return nil
}

// Record returns the record of kind filed under key, or nil when there is
// none. A record that is there but fails Check is an error wrapping
// ErrBadRecord. Its mtime is set to now, so Prune knows it was used.
func (c *Cache) Record(kind, key string) (*Record, error) {
	r, err := c.readRecord(kind, key)
	if r != nil && c.writable {
		if p, err := c.recordPath(kind, key); err == nil {
			now := time.Now()
			os.Chtimes(p, now, now) // failing costs the record its place in a prune
		}
	}
	return r, err
}

func (c *Cache) readRecord(kind, key string) (*Record, error) {
	p, err := c.recordPath(kind, key)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("record %s %s: %w", kind, key, err)
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("record %s %s: %w: %v", kind, key, ErrBadRecord, err)
	}
	if err := c.Check(&r, kind, key); err != nil {
		return nil, fmt.Errorf("record %s %s: %w", kind, key, err)
	}
	return &r, nil
}

// PutRecord files r under its kind and key, and as its subject's latest. Its
// blobs must be in the cache already. Like a blob, a record appears under its
// name only complete.
func (c *Cache) PutRecord(r *Record) error {
	if !c.writable {
		return fmt.Errorf("record %s %s in %s: %w", r.Kind, r.Key, c.dir, ErrReadOnly)
	}
	if err := c.Check(r, r.Kind, r.Key); err != nil {
		return fmt.Errorf("record %s %s: %w", r.Kind, r.Key, err)
	}
	p, err := c.recordPath(r.Kind, r.Key)
	if err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := c.writeSmall(p, append(b, '\n')); err != nil {
		return fmt.Errorf("record %s %s: %w", r.Kind, r.Key, err)
	}
	if r.Subject != "" {
		if err := c.writeSmall(c.lastPath(r.Kind, r.Subject), []byte(r.Key+"\n")); err != nil {
			return fmt.Errorf("record %s %s: %w", r.Kind, r.Key, err)
		}
	}
	return nil
}

// LastRecord is the latest record filed for subject, or nil.
func (c *Cache) LastRecord(kind, subject string) *Record {
	if !validKind(kind) {
		return nil
	}
	b, err := os.ReadFile(c.lastPath(kind, subject))
	if err != nil {
		return nil
	}
	// Reading it to explain a miss is not a use.
	r, err := c.readRecord(kind, strings.TrimSpace(string(b)))
	if err != nil {
		return nil
	}
	return r
}

// writeSmall puts b at path whole, through a rename, and does not sync it.
// The outputs a record names are not synced (fileWritten), and a sync here
// would wait for their data to reach the disk. A crash may leave a record
// empty or gone: an empty one is ErrBadRecord, never used, and either costs
// a build (or a fetch) again, nothing worse.
func (c *Cache) writeSmall(path string, b []byte) error {
	if err := mkdirAll(filepath.Dir(path)); err != nil {
		return err
	}
	f, err := os.CreateTemp(c.tmp, "record-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(blobMode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Changed names the parts of a key that differ from an earlier record's, in
// the order of parts: the parts whose digests differ, those that are new,
// and those that are gone.
func Changed(earlier *Record, parts []Part) []string {
	was := map[string]string{}
	for _, p := range earlier.Parts {
		was[p.Name] = p.Digest
	}
	var out []string
	for _, p := range parts {
		d, ok := was[p.Name]
		switch {
		case !ok:
			out = append(out, p.Name+" is new")
		case d != p.Digest:
			out = append(out, fmt.Sprintf("%s changed (%s, was %s)", p.Name, short(p.Digest), short(d)))
		}
		delete(was, p.Name)
	}
	var gone []string
	for n := range was {
		gone = append(gone, n+" is gone")
	}
	sort.Strings(gone)
	return append(out, gone...)
}

func short(d string) string {
	if h, err := ParseDigest(d); err == nil {
		return h[:12]
	}
	return d
}

// Extract writes the blob to path, re-hashing it as it goes, and leaves holes
// where it is zero: a cached raw disk is mostly zeros. A corrupt blob is
// removed from the cache and path is left incomplete; the caller writes to
// a temp name.
func (c *Cache) Extract(ctx context.Context, digest, path string) error {
	rc, err := c.Open(digest)
	if err != nil {
		return err
	}
	defer rc.Close()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	sw := rootfs.NewSparseWriter(f)
	buf := make([]byte, copyBuffer)
	if _, err := io.CopyBuffer(sw, &ctxReader{ctx: ctx, r: rc}, buf); err != nil {
		f.Close()
		return fmt.Errorf("extract %s to %s: %w", digest, path, err)
	}
	if err := sw.Close(); err != nil {
		f.Close()
		return fmt.Errorf("extract %s to %s: %w", digest, path, err)
	}
	return f.Close()
}
