// Package cache is the content-addressed store every downloaded or hashed
// input goes through.
//
// Layout under the cache directory:
//
//	blobs/sha256/<hex>   one file per blob, named by the sha256 of its content
//	tmp/                 temp files, renamed into blobs/ once complete
//
// A blob only ever appears under its final name by rename(2) of a complete,
// fsync'ed temp file whose hash was checked, so concurrent builds may put the
// same blob at once and a killed build leaves at most a temp file behind.
// Blobs are re-hashed whenever they are read, so a blob damaged on disk is
// found, reported and removed instead of being built into an image.
package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/stamp-dev/stamp/rootfs"
	"github.com/stamp-dev/stamp/rootfs/hashio"
)

const (
	// Directories and blobs are readable by everyone whatever the umask, so a
	// cache filled by root can be read by the unprivileged build of
	// `stamp verify`.
	dirMode  = 0o755
	blobMode = 0o644

	// A temp file that has not been written to for this long belongs to a
	// process that died; an active download keeps touching its mtime.
	staleTemp = time.Hour

	algorithm = "sha256"
	hexLen    = sha256.Size * 2

	copyBuffer = 256 << 10

	accessWrite = 0x2 // W_OK of access(2)
)

// Errors callers test for with errors.Is.
var (
	// ErrBadDigest is a digest string that is not sha256:<64 hex digits>.
	ErrBadDigest = errors.New("malformed digest")
	// ErrReadOnly is a write to a cache this user may only read.
	ErrReadOnly = errors.New("cache is not writable")
)

// Options configure a Cache. The zero value is usable.
type Options struct {
	// Offline forbids network fetchers; only blobs already present or local
	// files can be had.
	Offline bool
	// Log receives debug and warning messages; nil discards them.
	Log logrus.FieldLogger
	// Progress, when set, is called once per transfer. Either function it
	// returns may be nil.
	Progress rootfs.Progress
	// HTTPClient is used for http(s) fetches; nil means a plain http.Client
	// with CheckRedirect's policy. Cancellation comes from the context, and
	// stalls end by Retry's idle timeout, so it needs no timeout.
	HTTPClient *http.Client
	// UserAgent is sent with http(s) requests when not empty.
	UserAgent string
	// Retry says how downloads meet faults of the network; the zero value
	// is its defaults.
	Retry Retry
	// Unlocked opens the cache without its lock, for a long-lived process
	// (stamp serve) that must not keep a prune waiting: it opens the cache
	// again, locked, around what needs the lock (a build and the records
	// it files). Reading a blob through a file opened by OpenFile needs
	// none: a blob appears under its name only whole, and a file that was
	// open when a prune removed its name still reads it.
	Unlocked bool
}

// Cache is a content-addressed store on disk. It is safe for concurrent use by
// several goroutines and several processes.
type Cache struct {
	dir      string
	blobs    string
	tmp      string
	writable bool
	opts     Options
	log      logrus.FieldLogger
	client   *http.Client
	lockFile *os.File // see lock.go
}

// MismatchError is content whose sha256 is not the one asked for. Nothing is
// stored when it happens.
type MismatchError struct {
	Source, Want, Got string
}

func (e *MismatchError) Error() string {
	if e.Source == "" {
		return fmt.Sprintf("sha256 mismatch: want %s, got %s", e.Want, e.Got)
	}
	return fmt.Sprintf("sha256 mismatch for %s: want %s, got %s", e.Source, e.Want, e.Got)
}

// MissingError is an input that would need the network while offline and is
// not in the cache.
type MissingError struct {
	URI, Digest string
}

func (e *MissingError) Error() string {
	if e.Digest == "" {
		return fmt.Sprintf("offline: %s is not pinned by digest and cannot be downloaded", e.URI)
	}
	return fmt.Sprintf("offline: %s (%s) is not in the cache", e.URI, e.Digest)
}

// CorruptError is a blob whose content no longer hashes to its name.
type CorruptError struct {
	Digest, Got, Path string
	// Removed tells whether the blob was deleted, so the next fetch stores it
	// anew; a read-only cache cannot delete it.
	Removed bool
}

func (e *CorruptError) Error() string {
	what := "removed it; fetch it again"
	if !e.Removed {
		what = "could not remove it"
	}
	return fmt.Sprintf("cached blob %s is corrupt: %s hashes to %s (%s)", e.Digest, e.Path, e.Got, what)
}

// ParseDigest returns the lowercase hex of a sha256 digest given as
// "sha256:<64 hex>" or bare "<64 hex>". Any other string wraps ErrBadDigest.
func ParseDigest(s string) (string, error) {
	h := s
	if algo, rest, ok := strings.Cut(s, ":"); ok {
		if algo != algorithm {
			return "", fmt.Errorf("%w %q: only %s is supported", ErrBadDigest, s, algorithm)
		}
		h = rest
	}
	if len(h) != hexLen {
		return "", fmt.Errorf("%w %q: want %s: and %d hex digits", ErrBadDigest, s, algorithm, hexLen)
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
			return "", fmt.Errorf("%w %q: %q is not a hex digit", ErrBadDigest, s, c)
		}
	}
	return strings.ToLower(h), nil
}

func digestOf(hexSum string) string { return algorithm + ":" + hexSum }

// DefaultDir is where the cache lives when the user names none:
// $XDG_CACHE_HOME/stamp, else $HOME/.cache/stamp. getenv is usually os.Getenv.
func DefaultDir(getenv func(string) string) (string, error) {
	// The XDG spec says a relative value is to be ignored.
	if x := getenv("XDG_CACHE_HOME"); filepath.IsAbs(x) {
		return filepath.Join(x, "stamp"), nil
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".cache", "stamp"), nil
	}
	return "", errors.New("no cache directory: neither XDG_CACHE_HOME nor HOME is set")
}

// Open opens the cache in dir, creating it if it is missing. A cache this user
// cannot write to (another user's) is opened read-only: reads work, and
// anything that would store a blob fails with ErrReadOnly. Temp files left by
// killed processes are swept. The cache stays locked against Prune until
// Close, unless opts.Unlocked.
func Open(dir string, opts Options) (*Cache, error) {
	if dir == "" {
		return nil, errors.New("open cache: no directory given")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("open cache %s: %w", dir, err)
	}
	c := &Cache{
		dir:    abs,
		blobs:  filepath.Join(abs, "blobs", algorithm),
		tmp:    filepath.Join(abs, "tmp"),
		opts:   opts,
		log:    opts.Log,
		client: opts.HTTPClient,
	}
	if c.log == nil {
		l := logrus.New()
		l.Out = io.Discard
		c.log = l
	}
	if c.client == nil {
		c.client = &http.Client{CheckRedirect: CheckRedirect}
	}
	if err := c.prepare(); err != nil {
		return nil, err
	}
	if !opts.Unlocked {
		if err := c.openLock(); err != nil {
			return nil, err
		}
	}
	if c.writable {
		c.sweep()
	}
	return c, nil
}

func (c *Cache) prepare() error {
	var mkErr error
	for _, d := range []string{c.blobs, c.tmp} {
		if err := mkdirAll(d); err != nil {
			mkErr = err
			break
		}
	}
	if mkErr != nil {
		// Another user's cache: reading it is fine as long as the blobs are there.
		if !errors.Is(mkErr, fs.ErrPermission) && !errors.Is(mkErr, syscall.EROFS) {
			return fmt.Errorf("open cache %s: %w", c.dir, mkErr)
		}
		if fi, err := os.Stat(c.blobs); err != nil || !fi.IsDir() {
			return fmt.Errorf("open cache %s: %w", c.dir, mkErr)
		}
	}
	c.writable = mkErr == nil &&
		syscall.Access(c.blobs, accessWrite) == nil &&
		syscall.Access(c.tmp, accessWrite) == nil
	if !c.writable {
		c.log.WithField("cache", c.dir).Debug("cache is read-only for this user")
		return nil
	}
	// A cache made by an older build or by hand under a tight umask would lock
	// other users out; widen what we own and leave the rest alone.
	for _, d := range []string{c.dir, filepath.Dir(c.blobs), c.blobs, c.tmp} {
		if fi, err := os.Stat(d); err == nil && fi.Mode().Perm()&dirMode != dirMode {
			if err := os.Chmod(d, fi.Mode().Perm()|dirMode); err != nil {
				c.log.WithError(err).WithField("dir", d).Debug("cannot widen cache directory mode")
			}
		}
	}
	return nil
}

// mkdirAll is os.MkdirAll that gives every directory it creates mode 0755
// whatever the umask. Directories that exist are left as they are.
func mkdirAll(path string) error {
	fi, err := os.Stat(path)
	if err == nil {
		if !fi.IsDir() {
			return fmt.Errorf("%s: %w", path, syscall.ENOTDIR)
		}
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if parent := filepath.Dir(path); parent != path {
		if err := mkdirAll(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(path, dirMode); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // made by a concurrent process; its mode is its business
		}
		return err
	}
	return os.Chmod(path, dirMode)
}

// sweep removes temp files nobody has written to for an hour.
func (c *Cache) sweep() {
	ents, err := os.ReadDir(c.tmp)
	if err != nil {
		c.log.WithError(err).Debug("cannot list cache temp files")
		return
	}
	cutoff := time.Now().Add(-staleTemp)
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() || !fi.ModTime().Before(cutoff) {
			continue
		}
		p := filepath.Join(c.tmp, e.Name())
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.log.WithError(err).WithField("path", p).Debug("cannot remove stale temp file")
			continue
		}
		c.log.WithField("path", p).Debug("removed stale temp file")
	}
}

// Dir is the cache's directory, absolute.
func (c *Cache) Dir() string { return c.dir }

// Retry is how the cache's downloads, and those of clients that share its
// policy (the registry client), meet faults of the network.
func (c *Cache) Retry() Retry { return c.opts.Retry }

// Writable tells whether this user can store blobs in the cache.
func (c *Cache) Writable() bool { return c.writable }

func (c *Cache) blobPath(hexSum string) string { return filepath.Join(c.blobs, hexSum) }

// Has tells whether the blob is present. It only stats; a malformed digest is
// never present.
func (c *Cache) Has(digest string) bool {
	h, err := ParseDigest(digest)
	if err != nil {
		return false
	}
	fi, err := os.Stat(c.blobPath(h))
	return err == nil && fi.Mode().IsRegular()
}

// Path is the file holding a present blob. The file is not re-hashed: callers
// that read it should prefer Open.
func (c *Cache) Path(digest string) (string, error) {
	h, err := ParseDigest(digest)
	if err != nil {
		return "", err
	}
	p := c.blobPath(h)
	fi, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("blob %s: %w", digestOf(h), err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("blob %s: %s is not a regular file", digestOf(h), p)
	}
	return p, nil
}

// Open returns a reader of the blob that re-hashes what it reads. At the end
// it returns io.EOF only if the content matched; otherwise a *CorruptError,
// and the blob is removed. A caller that stops before EOF gets no check.
func (c *Cache) Open(digest string) (io.ReadCloser, error) {
	f, h, err := c.openBlob(digest)
	if err != nil {
		return nil, err
	}
	// The blob is read ahead and hashed on another goroutine, so checking it
	// costs its consumer no time on a machine with a second core.
	return &verifyingReader{c: c, f: f, want: h, r: hashio.NewReader(f)}, nil
}

// ReadBlob returns the content of a small blob (a record's manifest, an
// SBOM), verified: read whole and hashed in memory, without the read-ahead
// buffers Open sets up for a stream. A blob larger than max bytes is
// refused. A corrupt blob is removed and reported as a *CorruptError.
func (c *Cache) ReadBlob(digest string, max int64) ([]byte, error) {
	f, h, err := c.openBlob(digest)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", digestOf(h), err)
	}
	if fi.Size() > max {
		return nil, fmt.Errorf("blob %s: %d bytes, more than the %d expected", digestOf(h), fi.Size(), max)
	}
	b := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("read blob %s: %w", digestOf(h), err)
	}
	sum := sha256.Sum256(b)
	if got := hex.EncodeToString(sum[:]); got != h {
		return nil, c.corrupt(f, h, got)
	}
	return b, nil
}

// openBlob opens the blob named digest and returns it with its hex sum.
func (c *Cache) openBlob(digest string) (*os.File, string, error) {
	h, err := ParseDigest(digest)
	if err != nil {
		return nil, "", err
	}
	f, err := os.Open(c.blobPath(h))
	if err != nil {
		return nil, "", fmt.Errorf("blob %s: %w", digestOf(h), err)
	}
	return f, h, nil
}

// Verify re-hashes the whole blob. A corrupt blob is removed and reported as a
// *CorruptError.
func (c *Cache) Verify(digest string) error {
	rc, err := c.Open(digest)
	if err != nil {
		return err
	}
	defer rc.Close()
	buf := make([]byte, copyBuffer)
	_, err = io.CopyBuffer(io.Discard, rc, buf)
	return err
}

type verifyingReader struct {
	c    *Cache
	f    *os.File
	want string
	r    *hashio.Reader
	err  error // sticky end state: io.EOF, a *CorruptError or a read error
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	if v.err != nil {
		return 0, v.err
	}
	n, err := v.r.Read(p)
	switch {
	case err == io.EOF:
		sum := v.r.Sum()
		if got := hex.EncodeToString(sum[:]); got != v.want {
			v.err = v.c.corrupt(v.f, v.want, got)
		} else {
			v.err = io.EOF
		}
		return n, v.err
	case err != nil:
		v.err = fmt.Errorf("read blob %s: %w", digestOf(v.want), err)
		return n, v.err
	}
	return n, nil
}

func (v *verifyingReader) Close() error {
	v.r.Close()
	return v.f.Close()
}

// corrupt reports a bad blob and removes it, unless the name now holds another
// file: a concurrent Put may have replaced it with a good copy.
func (c *Cache) corrupt(f *os.File, want, got string) error {
	e := &CorruptError{Digest: digestOf(want), Got: digestOf(got), Path: f.Name()}
	if c.writable {
		open, err1 := f.Stat()
		now, err2 := os.Stat(f.Name())
		if err1 == nil && err2 == nil && os.SameFile(open, now) {
			if err := os.Remove(f.Name()); err == nil || errors.Is(err, fs.ErrNotExist) {
				e.Removed = true
			}
		}
	}
	c.log.WithField("digest", e.Digest).WithField("got", e.Got).WithField("removed", e.Removed).
		Warn("corrupt blob in cache")
	return e
}

// Put stores what r yields. want "" accepts any content; otherwise content
// that does not hash to want is a *MismatchError and nothing is stored. It
// returns the digest as "sha256:<hex>". Put reads r to the end even if the
// blob is already present, so the stream is always checked.
func (c *Cache) Put(ctx context.Context, r io.Reader, want string) (string, error) {
	var wantHex string
	if want != "" {
		h, err := ParseDigest(want)
		if err != nil {
			return "", err
		}
		wantHex = h
	}
	return c.put(ctx, r, wantHex, "", -1)
}

// Import hashes a local file and stores it, unless a blob with that content is
// already there, in which case the file is read only once.
func (c *Cache) Import(ctx context.Context, path string) (string, error) {
	return c.importFile(ctx, path, "")
}

// ImportAs stores a local file whose sha256 (hex) the caller has just
// computed; "" is Import. The content is still checked as it is copied.
func (c *Cache) ImportAs(ctx context.Context, path, sum string) (string, error) {
	if sum == "" {
		return c.Import(ctx, path)
	}
	if c.Has(sum) {
		return digestOf(sum), nil
	}
	return c.importFile(ctx, path, sum)
}

func (c *Cache) importFile(ctx context.Context, path, wantHex string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", fmt.Errorf("import: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("import %s: not a regular file", path)
	}
	if wantHex == "" {
		abs, _ := filepath.Abs(path)
		if hexSum, ok := c.statLookup(abs, fi); ok {
			return digestOf(hexSum), nil
		}
		defer func() {
			if wantHex != "" && c.Has(wantHex) {
				c.rememberUnchanged(abs, fi, wantHex)
			}
		}()
		// Most builds import the same local inputs again: hashing alone is
		// cheaper than writing and fsyncing a copy that already exists.
		h := sha256.New()
		buf := make([]byte, copyBuffer)
		if _, err := io.CopyBuffer(h, &ctxReader{ctx: ctx, r: f}, buf); err != nil {
			return "", fmt.Errorf("import %s: %w", path, err)
		}
		wantHex = hex.EncodeToString(h.Sum(nil))
		if c.Has(wantHex) {
			return digestOf(wantHex), nil
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return "", fmt.Errorf("import %s: %w", path, err)
		}
	}
	// With wantHex fixed, a file that changed since it was hashed is a mismatch.
	return c.put(ctx, f, wantHex, path, fi.Size())
}

// put streams r into a temp file while hashing it, and renames the temp file
// into place only if the content is complete and as wanted.
func (c *Cache) put(ctx context.Context, r io.Reader, wantHex, source string, total int64) (digest string, err error) {
	name := source
	if name == "" {
		name = "stream"
	}
	if !c.writable {
		return "", fmt.Errorf("store %s in %s: %w", name, c.dir, ErrReadOnly)
	}
	f, err := os.CreateTemp(c.tmp, "blob-*")
	if err != nil {
		return "", fmt.Errorf("store %s: %w", name, err)
	}
	tmpName := f.Name()
	closed := false
	defer func() {
		if err != nil {
			if !closed {
				f.Close()
			}
			os.Remove(tmpName)
		}
	}()

	add, done := c.progress(name, total)
	defer done()
	h := sha256.New()
	buf := make([]byte, copyBuffer)
	// Blobs are written sparsely: an output kept in the cache may be a raw
	// disk of mostly zeros.
	sw := rootfs.NewSparseWriter(f)
	if _, err := io.CopyBuffer(io.MultiWriter(sw, h), &ctxReader{ctx: ctx, r: r, add: add}, buf); err != nil {
		if ctx.Err() != nil {
			// Transports report cancellation in their own words; give callers
			// the context's error to test for.
			return "", fmt.Errorf("store %s: %w", name, ctx.Err())
		}
		return "", fmt.Errorf("store %s: %w", name, err)
	}
	if err := sw.Close(); err != nil {
		return "", fmt.Errorf("store %s: %w", name, err)
	}
	got := hex.EncodeToString(h.Sum(nil))
	if wantHex != "" && got != wantHex {
		return "", &MismatchError{Source: source, Want: digestOf(wantHex), Got: digestOf(got)}
	}
	closed = true
	if err := c.fileTemp(f, got, name); err != nil {
		return "", err
	}
	// Hashed just now as it was written: the first reader need not hash
	// it again (a kept tree's content is a gigabyte, read by the next
	// rebuild).
	c.rememberWritten(got)
	return digestOf(got), nil
}

// fileTemp files the temp file f, complete and checked, as the blob with
// hex sum got: readable by all, synced, closed (whatever happens) and
// renamed into place.
func (c *Cache) fileTemp(f *os.File, got, name string) error {
	err := f.Chmod(blobMode)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	// Renaming over an existing blob is fine: same name, same content, and it
	// heals a copy that was damaged on disk.
	if err == nil {
		err = os.Rename(f.Name(), c.blobPath(got))
	}
	if err != nil {
		return fmt.Errorf("store %s: %w", name, err)
	}
	if err := syncDir(c.blobs); err != nil {
		c.log.WithError(err).Debug("cannot sync cache blob directory")
	}
	c.log.WithField("source", name).WithField("digest", digestOf(got)).Debug("stored blob")
	return nil
}

// syncDir makes a rename durable, so a crash cannot leave a blob name
// pointing nowhere after the build went on using it.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (c *Cache) progress(name string, total int64) (add func(int64), done func()) {
	if c.opts.Progress != nil {
		add, done = c.opts.Progress(name, total)
	}
	if add == nil {
		add = func(int64) {}
	}
	if done == nil {
		done = func() {}
	}
	return add, done
}

// ctxReader stops a copy when the context ends, even for readers (files, pipes)
// that know nothing of contexts, and reports progress.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
	add func(int64)
}

func (r *ctxReader) Read(p []byte) (int, error) {
	if err := r.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := r.r.Read(p)
	if n > 0 && r.add != nil {
		r.add(int64(n))
	}
	return n, err
}
