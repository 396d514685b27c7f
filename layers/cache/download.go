package cache

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/stamp-dev/stamp/rootfs"
)

// Request is one HTTP download into the cache.
type Request struct {
	// URL is fetched with GET; every attempt asks the URL itself, not where
	// an earlier one was redirected (storage URLs a registry hands out
	// expire).
	URL string
	// Client makes the requests; nil is the cache's. Its CheckRedirect
	// should be CheckRedirect.
	Client *http.Client
	// Header is sent with every attempt.
	Header http.Header
	// Want is the digest the content must have; "" takes what comes.
	Want string
	// Size is the content's length when the caller knows it (a registry's
	// descriptor), else negative. A body that ends short of it is resumed;
	// one longer is refused.
	Size int64
}

// Download fetches req.URL into the cache and returns its digest. Faults of
// the network are tried again as c's Retry says: a body cut short (a reset,
// a stall, a Content-Length that promised more) is resumed where it
// stopped with a Range request when the server gave a strong ETag (sent
// back as If-Range, so a file that changed meanwhile comes whole again);
// without one it starts over. A body that HTTP calls whole but that does
// not hash to Want (a Content-Length that promised less) is asked once more
// for what follows. Nothing reaches the cache until the whole content is
// there and hashes as wanted: the bytes go to a temp file, renamed in only
// then; any failure removes it. A mismatch is a *MismatchError.
func (c *Cache) Download(ctx context.Context, req Request) (digest string, err error) {
	var wantHex string
	if req.Want != "" {
		if wantHex, err = ParseDigest(req.Want); err != nil {
			return "", err
		}
	}
	u, err := url.Parse(req.URL)
	if err != nil {
		return "", fmt.Errorf("GET %q: %w", req.URL, err)
	}
	src := u.Redacted()
	if !c.writable {
		return "", fmt.Errorf("store %s in %s: %w", src, c.dir, ErrReadOnly)
	}
	if req.Client == nil {
		req.Client = c.client
	}
	f, err := os.CreateTemp(c.tmp, "blob-*")
	if err != nil {
		return "", fmt.Errorf("store %s: %w", src, err)
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
	d := &download{c: c, req: req, src: src, wantHex: wantHex, f: f, h: sha256.New()}
	defer func() {
		if d.done != nil {
			d.done()
		}
	}()
	d.restart()
	if err := c.opts.Retry.Do(ctx, "GET "+src, d.attempt); err != nil {
		return "", err
	}
	got := d.sum()
	if wantHex != "" && got != wantHex {
		return "", &MismatchError{Source: src, Want: digestOf(wantHex), Got: digestOf(got)}
	}
	closed = true
	if err := c.fileTemp(f, got, src); err != nil {
		return "", err
	}
	return digestOf(got), nil
}

// download is the state a Download keeps across attempts: the bytes
// written so far, hashed as they were written, and what they are a prefix
// of.
type download struct {
	c       *Cache
	req     Request
	src     string
	wantHex string
	f       *os.File
	sw      *rootfs.SparseWriter
	h       hash.Hash
	// add and done report progress, once the first answer says how much
	// is coming.
	add  func(int64)
	done func()

	n     int64  // bytes written and hashed
	etag  string // the strong validator of the representation they come from
	total int64  // its length, -1 unknown
	// whole is set once a body ended where HTTP said it would; probed once
	// more was asked for after a whole body that did not hash right.
	whole, probing, probed bool
}

// restart throws away what was written.
func (d *download) restart() {
	if d.n > 0 || d.sw == nil {
		d.f.Truncate(0)
		d.f.Seek(0, io.SeekStart)
	}
	d.sw = rootfs.NewSparseWriter(d.f)
	d.h.Reset()
	d.n, d.etag, d.total = 0, "", -1
	d.whole, d.probing = false, false
}

// settle makes the file as long as what was written, holes included, so
// the next attempt appends at d.n.
func (d *download) settle() error {
	if err := d.sw.Close(); err != nil {
		return err
	}
	d.sw = rootfs.NewSparseWriter(d.f)
	return nil
}

func (d *download) attempt(a *Attempt) error {
	hreq, resuming, err := d.request(a)
	if err != nil {
		return err
	}
	if a.N == 1 {
		d.c.log.WithField("url", d.src).Debug("downloading")
	} else {
		d.c.log.WithField("url", d.src).WithField("attempt", a.N).WithField("from", d.n).Debug("downloading again")
	}
	resp, err := d.req.Client.Do(hreq)
	if err != nil {
		return RoundTripError(err)
	}
	defer resp.Body.Close()
	if read, err := d.answer(resp, resuming); !read || err != nil {
		return err
	}
	return d.readBody(a, resp)
}

// request is the GET of this attempt: for what follows d.n when the file
// can be resumed (it has a strong ETag), or for the whole file again.
func (d *download) request(a *Attempt) (_ *http.Request, resuming bool, _ error) {
	hreq, err := http.NewRequestWithContext(a.Context(), http.MethodGet, d.req.URL, nil)
	if err != nil {
		return nil, false, err
	}
	for k, v := range d.req.Header {
		hreq.Header[k] = v
	}
	if d.c.opts.UserAgent != "" && hreq.Header.Get("User-Agent") == "" {
		hreq.Header.Set("User-Agent", d.c.opts.UserAgent)
	}
	// Offsets count the bytes as stored; a transparently decoded body would
	// count others.
	hreq.Header.Set("Accept-Encoding", "identity")
	resuming = d.n > 0 && d.etag != ""
	if d.n > 0 && !resuming {
		d.restart()
	}
	if resuming {
		hreq.Header.Set("Range", "bytes="+strconv.FormatInt(d.n, 10)+"-")
		hreq.Header.Set("If-Range", d.etag)
	}
	return hreq, resuming, nil
}

// answer takes in the response's status and headers; read says whether its
// body is content to store.
func (d *download) answer(resp *http.Response, resuming bool) (read bool, err error) {
	probing := d.probing
	switch {
	case resp.StatusCode == http.StatusOK:
		if d.n > 0 {
			// The server ignored the range, or the file changed (If-Range).
			d.restart()
		}
		d.etag = strongETag(resp.Header.Get("ETag"))
		d.total = resp.ContentLength
		if d.req.Size >= 0 {
			// A Content-Length that disagrees is a lie or a truncation
			// either way: read to the size known, resume if short.
			d.total = d.req.Size
		}
	case resp.StatusCode == http.StatusPartialContent && resuming:
		start, total, ok := contentRange(resp.Header.Get("Content-Range"))
		switch {
		case !ok || start != d.n:
			d.restart()
			return false, Retryable(fmt.Errorf("asked for bytes from %d, the server answered Content-Range %q", d.n, resp.Header.Get("Content-Range")), 0)
		case total >= 0 && d.total >= 0 && total != d.total && !probing:
			d.restart()
			return false, Retryable(fmt.Errorf("the content was %d bytes and is now %d", d.total, total), 0)
		case total >= 0 && (d.req.Size < 0 || total == d.req.Size):
			d.total = total
		}
		d.probing = false
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && resuming && probing:
		// Nothing follows what HTTP called whole: the content is what it
		// is, and Download tells whether it is what was wanted.
		return false, nil
	case RetryableStatus(resp.StatusCode):
		return false, Retryable(StatusError(resp, d.src), RetryAfter(resp.Header))
	case resuming && (resp.StatusCode == http.StatusPartialContent || resp.StatusCode == http.StatusRequestedRangeNotSatisfiable):
		d.restart()
		return false, Retryable(fmt.Errorf("the server cannot resume: %s", resp.Status), 0)
	default:
		return false, StatusError(resp, d.src)
	}
	return true, nil
}

// readBody stores the response's body after what is stored, and tells a
// body that ended short, or ran long, or does not hash as wanted.
func (d *download) readBody(a *Attempt, resp *http.Response) error {
	if d.add == nil {
		d.add, d.done = d.c.progress(d.src, d.total)
	}
	body := a.Reader(resp.Body)
	if d.total >= 0 {
		// One byte past the end tells a body that is too long.
		body = io.LimitReader(body, d.total-d.n+1)
	}
	w := &countingWriter{d: d}
	_, cerr := io.CopyBuffer(w, body, make([]byte, copyBuffer))
	if w.err != nil {
		return fmt.Errorf("store: %w", w.err)
	}
	if err := d.settle(); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	short := d.total >= 0 && d.n < d.total
	if (cerr != nil || short) && d.wantHex != "" && (d.req.Size < 0 || d.n == d.req.Size) && d.sum() == d.wantHex {
		// A Content-Length that promised more than the file holds: what
		// came is what was wanted.
		return nil
	}
	if cerr != nil {
		return Retryable(fmt.Errorf("after %d bytes: %w", d.n, cerr), 0)
	}
	if short {
		return Retryable(fmt.Errorf("the body ended after %d of %d bytes", d.n, d.total), 0)
	}
	if d.total >= 0 && d.n > d.total {
		return fmt.Errorf("the server sent more than the %d bytes the content has", d.total)
	}
	d.whole = true
	if d.wantHex != "" && !d.probed && d.etag != "" && d.req.Size < 0 && d.sum() != d.wantHex {
		// HTTP called the body whole, but a Content-Length that promised
		// less than the file holds looks just so: ask for what follows.
		d.probed, d.probing = true, true
		return Retryable(errors.New("the body does not hash as wanted; asking whether more follows"), 0)
	}
	return nil
}

func (d *download) sum() string { return hex.EncodeToString(d.h.Sum(nil)) }

// countingWriter writes a download's bytes to its file and hash.
type countingWriter struct {
	d   *download
	err error
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if _, err := w.d.sw.Write(p); err != nil {
		w.err = err
		return 0, err
	}
	w.d.h.Write(p)
	w.d.n += int64(len(p))
	w.d.add(int64(len(p)))
	return len(p), nil
}

// strongETag is an ETag fit for If-Range: quoted, not weak.
func strongETag(s string) string {
	s = strings.TrimSpace(s)
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return ""
	}
	return s
}

// contentRange reads "bytes START-END/TOTAL" (TOTAL may be "*", -1).
func contentRange(s string) (start, total int64, ok bool) {
	rest, found := strings.CutPrefix(strings.TrimSpace(s), "bytes ")
	if !found {
		return 0, 0, false
	}
	rng, tot, found := strings.Cut(rest, "/")
	if !found {
		return 0, 0, false
	}
	first, last, found := strings.Cut(rng, "-")
	if !found {
		return 0, 0, false
	}
	start, err1 := strconv.ParseInt(first, 10, 64)
	end, err2 := strconv.ParseInt(last, 10, 64)
	if err1 != nil || err2 != nil || start < 0 || end < start {
		return 0, 0, false
	}
	total = -1
	if tot != "*" {
		t, err := strconv.ParseInt(tot, 10, 64)
		if err != nil || t <= end {
			return 0, 0, false
		}
		total = t
	}
	return start, total, true
}
