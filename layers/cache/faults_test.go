package cache

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/test/harness"
)

// content serves one file as a Debian mirror serves a .deb or an index:
// with a strong ETag, Range and If-Range (net/http's ServeContent). The
// file can be replaced, with a new ETag.
type content struct {
	mu   sync.Mutex
	data []byte
	etag string
	// noETag serves no validator, as some servers do.
	noETag bool
}

func (c *content) set(data []byte, etag string) {
	c.mu.Lock()
	c.data, c.etag = data, etag
	c.mu.Unlock()
}

func (c *content) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	data, etag := c.data, c.etag
	c.mu.Unlock()
	if !c.noETag {
		w.Header().Set("ETag", etag)
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

// TestFetchFaults holds the http(s) fetcher (the Debian repositories' and
// remote files') to a server that breaks every way a network or a mirror
// does: each fault is met by retrying, resuming where the server allows,
// and ends with the right bytes in the cache, or with an error naming the
// URL and nothing in the cache, neither blob nor temp file.
func TestFetchFaults(t *testing.T) {
	data := randomBytes(30, 1<<20)
	other := randomBytes(31, 1<<20)
	const half = 300 << 10
	type check func(t *testing.T, seen []harness.Seen, elapsed time.Duration)
	ranges := func(want ...string) check {
		return func(t *testing.T, seen []harness.Seen, _ time.Duration) {
			var got []string
			for _, s := range seen {
				if s.Path == "/file" {
					got = append(got, s.Range)
				}
			}
			if !harness.RangesMatch(got, want) {
				t.Errorf("Range headers %q, want %q", got, want)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		faults []harness.Fault
		// path defaults to /file; want to data's digest.
		path, want string
		noETag     bool
		// replace swaps the file's content after the first request.
		replace []byte
		// wantErr is "" for success, else what the error says.
		wantErr string
		checks  []check
	}{
		{name: "reset before an answer", faults: []harness.Fault{{Kind: harness.Reset, Times: 2}},
			checks: []check{ranges("", "", "")}},
		{name: "reset mid-body resumes", faults: []harness.Fault{{Kind: harness.ResetMidBody, After: half, Times: 1}},
			checks: []check{ranges("", "resume")}},
		{name: "truncated body resumes", faults: []harness.Fault{{Kind: harness.Truncate, After: half, Times: 2}},
			checks: []check{ranges("", "bytes=307200-", "bytes=614400-")}},
		{name: "truncated without an ETag starts over", noETag: true, faults: []harness.Fault{{Kind: harness.Truncate, After: half, Times: 1}},
			checks: []check{ranges("", "")}},
		{name: "stall mid-body resumes", faults: []harness.Fault{{Kind: harness.Stall, After: half, Times: 1}},
			checks: []check{ranges("", "bytes=307200-")}},
		{name: "stall before the head", faults: []harness.Fault{{Kind: harness.StallHead, Times: 1}},
			checks: []check{ranges("", "")}},
		{name: "503 then the file", faults: []harness.Fault{{Kind: harness.Status, Status: 503, Times: 2}}},
		{name: "429 waits its Retry-After", faults: []harness.Fault{{Kind: harness.Status, Status: 429, RetryAfter: "1", Times: 1}},
			checks: []check{func(t *testing.T, seen []harness.Seen, _ time.Duration) {
				if len(seen) != 2 || seen[1].At.Sub(seen[0].At) < time.Second {
					t.Errorf("the retry came %v after the 429, not after Retry-After: 1", seen[len(seen)-1].At.Sub(seen[0].At))
				}
			}}},
		{name: "Content-Length promises more than it sends", faults: []harness.Fault{{Kind: harness.LieLength, LengthDelta: 4096, Times: 1}},
			// The bytes that came hash right: nothing more to ask.
			checks: []check{ranges("")}},
		{name: "Content-Length promises less than the file", faults: []harness.Fault{{Kind: harness.LieLength, LengthDelta: -half, Times: 1}},
			checks: []check{ranges("", "bytes=741376-")}},
		{name: "the file changes while resuming (If-Range)", want: sum(other), replace: other,
			faults: []harness.Fault{{Kind: harness.Truncate, After: half, Times: 1}},
			checks: []check{ranges("", "bytes=307200-")}},
		{name: "redirect to another host", path: "/moved", faults: []harness.Fault{{Kind: harness.Redirect, Match: harness.PathHas("/moved")}}},
		// Failures.
		{name: "503 every time", faults: []harness.Fault{{Kind: harness.Status, Status: 503}},
			wantErr: "gave up after 3 attempts: 503 Service Unavailable"},
		{name: "reset every time", faults: []harness.Fault{{Kind: harness.ResetMidBody, After: 1000}},
			wantErr: "gave up after 3 attempts"},
		{name: "stalls every time", faults: []harness.Fault{{Kind: harness.Stall, After: 1000}},
			wantErr: "gave up after 3 attempts: stalled: nothing arrived for 2s"},
		{name: "Retry-After longer than stamp waits", faults: []harness.Fault{{Kind: harness.Status, Status: 429, RetryAfter: "3600"}},
			wantErr: "asks to try again after 1h0m0s"},
		{name: "404 is not tried again", faults: []harness.Fault{{Kind: harness.Status, Status: 404}},
			wantErr: "404 Not Found", checks: []check{ranges("")}},
		{name: "other bytes", want: sum(other), wantErr: "sha256 mismatch",
			// One more request asks whether anything follows; nothing does.
			checks: []check{ranges("", "bytes=1048576-")}},
		{name: "Content-Length lies every time", noETag: true, faults: []harness.Fault{{Kind: harness.LieLength, LengthDelta: -half}},
			wantErr: "sha256 mismatch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := &content{data: data, etag: `"v1"`, noETag: tc.noETag}
			srv := harness.NewFaultServer(t, file)
			// The host a redirect leads to, which must see no credentials.
			elsewhere := harness.NewFaultServer(t, file)
			for i := range tc.faults {
				if tc.faults[i].Kind == harness.Redirect {
					tc.faults[i].Location = elsewhere.URL + "/file"
				}
			}
			srv.Add(tc.faults...)
			if tc.replace != nil {
				first := srv.Upstream
				var once sync.Once
				srv.Upstream = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					first.ServeHTTP(w, r)
					once.Do(func() { file.set(tc.replace, `"v2"`) })
				})
			}
			c := openCache(t, Options{Retry: fastRetry})
			path, want := tc.path, tc.want
			if path == "" {
				path = "/file"
			}
			if want == "" {
				want = sum(data)
			}
			// Credentials in the URL, as a private mirror takes them.
			url := strings.Replace(srv.URL, "http://", "http://ci:s3cret@", 1) + path
			start := time.Now()
			d, err := c.Fetch(context.Background(), url, want)
			elapsed := time.Since(start)
			seen := append(srv.Seen(), elsewhere.Seen()...)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("Fetch: %v\nrequests: %+v", err, seen)
				}
				wantData := data
				if tc.replace != nil {
					wantData = tc.replace
				}
				if d != sum(wantData) {
					t.Fatalf("Fetch = %s, want %s", d, sum(wantData))
				}
				if got, err := readAll(t, c, d); err != nil || !bytes.Equal(got, wantData) {
					t.Fatalf("the cached blob is not the file (%v)", err)
				}
				if b := blobNames(t, c); len(b) != 1 {
					t.Errorf("blobs %v, want the file alone", b)
				}
			} else {
				redacted := strings.Replace(url, "s3cret", "xxxxx", 1)
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), redacted) {
					t.Fatalf("Fetch = %s, %v; want an error naming %s and saying %q", d, err, redacted, tc.wantErr)
				}
				if strings.Contains(err.Error(), "s3cret") {
					t.Errorf("the error holds the password: %v", err)
				}
				t.Log(err)
				if b := blobNames(t, c); len(b) != 0 {
					t.Errorf("blobs after a failed fetch: %v", b)
				}
			}
			if tmp := tmpNames(t, c); len(tmp) != 0 {
				t.Errorf("temp files left: %v", tmp)
			}
			for _, s := range elsewhere.Seen() {
				if s.Authorization {
					t.Errorf("the credentials went to another host: %+v", s)
				}
			}
			if s := srv.Seen(); len(s) > 0 && !s[0].Authorization {
				t.Error("the credentials were not sent to their own host")
			}
			for _, ch := range tc.checks {
				ch(t, seen, elapsed)
			}
		})
	}
}

// TestFetchRedirectPolicy: a redirect from https to plain http, one to
// another scheme, and a loop are refused at once, naming where they led.
func TestFetchRedirectPolicy(t *testing.T) {
	file := &content{data: []byte("file\n"), etag: `"v1"`}
	plain := harness.NewFaultServer(t, file)
	tls := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/down":
			http.Redirect(w, r, plain.URL+"/file", http.StatusFound)
		case "/ftp":
			http.Redirect(w, r, "ftp://127.0.0.1/file", http.StatusFound)
		default:
			http.Redirect(w, r, r.URL.Path, http.StatusFound)
		}
	}))
	t.Cleanup(tls.Close)
	client := tls.Client()
	client.CheckRedirect = CheckRedirect
	c := openCache(t, Options{Retry: fastRetry, HTTPClient: client})
	for path, says := range map[string]string{
		"/down": "redirect to " + plain.URL + "/file refused: it leaves https for plain http",
		"/ftp":  "only http and https are followed",
		"/loop": "stopped after 10 redirects",
	} {
		_, err := c.Fetch(context.Background(), tls.URL+path, "")
		if err == nil || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), tls.URL+path) {
			t.Errorf("%s: %v; want an error saying %q", path, err, says)
		}
		var re *RedirectError
		if !errors.As(err, &re) {
			t.Errorf("%s: %v is not a *RedirectError", path, err)
		}
	}
	if n := len(plain.Seen()); n != 0 {
		t.Errorf("the plain http server was asked %d times", n)
	}
	if b, tmp := blobNames(t, c), tmpNames(t, c); len(b)+len(tmp) != 0 {
		t.Errorf("blobs %v and temp files %v after refused redirects", b, tmp)
	}
}

// TestFetchCancelledWhileWaiting: a build cancelled while a fetch waits for
// a Retry-After ends at once with the context's error.
func TestFetchCancelledWhileWaiting(t *testing.T) {
	srv := harness.NewFaultServer(t, &content{data: []byte("x"), etag: `"1"`})
	srv.Add(harness.Fault{Kind: harness.Status, Status: 503, RetryAfter: "1"})
	c := openCache(t, Options{Retry: fastRetry})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Fetch(ctx, srv.URL+"/file", "")
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 900*time.Millisecond {
		t.Errorf("Fetch = %v after %v; want the context's error before the Retry-After", err, time.Since(start))
	}
	if tmp := tmpNames(t, c); len(tmp) != 0 {
		t.Errorf("temp files left: %v", tmp)
	}
}
