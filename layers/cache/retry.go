package cache

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Retry says how a request that meets a fault of the network is made
// again: a connection reset, a body cut short, a server that stalls, a 5xx
// or 429 answer. The zero value is the defaults.
type Retry struct {
	// Attempts is how many times a request is made in all; 0 means 5.
	Attempts int
	// Backoff is the wait before the second attempt, doubled before each
	// later one up to MaxBackoff, with a fifth either way of jitter; 0
	// means 1s, and 30s.
	Backoff, MaxBackoff time.Duration
	// MaxRetryAfter is the longest wait a server may ask for with
	// Retry-After; one that asks for longer ends the request at once. 0
	// means 60s.
	MaxRetryAfter time.Duration
	// IdleTimeout ends an attempt when nothing has arrived for this long:
	// no answer to the request, or no byte of the body. It bounds a stall,
	// not a download, which may take as long as it keeps moving. 0 means
	// 30s.
	IdleTimeout time.Duration
}

func (r Retry) withDefaults() Retry {
	if r.Attempts <= 0 {
		r.Attempts = 5
	}
	if r.Backoff <= 0 {
		r.Backoff = time.Second
	}
	if r.MaxBackoff <= 0 {
		r.MaxBackoff = 30 * time.Second
	}
	if r.MaxRetryAfter <= 0 {
		r.MaxRetryAfter = time.Minute
	}
	if r.IdleTimeout <= 0 {
		r.IdleTimeout = 30 * time.Second
	}
	return r
}

// retryableError is a failure another attempt may get past, with the wait a
// server asked for.
type retryableError struct {
	err   error
	after time.Duration
}

func (e *retryableError) Error() string { return e.err.Error() }
func (e *retryableError) Unwrap() error { return e.err }

// Retryable marks err as worth another attempt, after at least after (a
// server's Retry-After; 0 for the backoff alone).
func Retryable(err error, after time.Duration) error {
	return &retryableError{err: err, after: after}
}

// Attempt is one try of a request. Its context ends with the caller's, or
// when nothing has arrived for the idle timeout.
type Attempt struct {
	// N counts attempts from 1.
	N     int
	ctx   context.Context
	timer *time.Timer
	idle  time.Duration
	mu    sync.Mutex
	done  bool
}

// errStalled is the cause an attempt's context ends with when the idle
// timeout fires.
var errStalled = errors.New("stalled")

// Context is the attempt's context, for its requests.
func (a *Attempt) Context() context.Context { return a.ctx }

// Reader is r (a response body) read within the attempt: every read that
// brings bytes restarts the idle timeout.
func (a *Attempt) Reader(r io.Reader) io.Reader { return &idleReader{a: a, r: r} }

func (a *Attempt) kick() {
	a.mu.Lock()
	if !a.done {
		a.timer.Reset(a.idle)
	}
	a.mu.Unlock()
}

func (a *Attempt) stop() {
	a.mu.Lock()
	a.done = true
	a.timer.Stop()
	a.mu.Unlock()
}

type idleReader struct {
	a *Attempt
	r io.Reader
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n > 0 {
		r.a.kick()
	}
	return n, err
}

// Do runs try until it succeeds, fails for good, or has been tried
// Attempts times. try marks a failure worth another attempt with Retryable;
// an attempt that stalls past the idle timeout is one too. Between
// attempts Do waits the backoff, or the Retry-After a server gave if
// longer, and gives up at once when ctx ends. Every error it returns
// begins with what (a method and a URL); the last one tried again also
// says how many attempts were made.
func (r Retry) Do(ctx context.Context, what string, try func(a *Attempt) error) error {
	r = r.withDefaults()
	backoff := r.Backoff
	var last error
	for n := 1; ; n++ {
		actx, cancel := context.WithCancelCause(ctx)
		a := &Attempt{N: n, ctx: actx, idle: r.IdleTimeout}
		a.timer = time.AfterFunc(r.IdleTimeout, func() { cancel(errStalled) })
		err := try(a)
		a.stop()
		stalled := context.Cause(actx) == errStalled
		cancel(nil)
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			// Transports say "canceled" in words of their own; give the
			// caller the context's error to test for.
			return fmt.Errorf("%s: %w", what, ctx.Err())
		}
		var re *retryableError
		switch {
		case stalled:
			err = Retryable(fmt.Errorf("stalled: nothing arrived for %s", r.IdleTimeout), 0)
		case !errors.As(err, &re):
			return fmt.Errorf("%s: %w", what, err)
		}
		last = err
		errors.As(err, &re)
		if re.after > r.MaxRetryAfter {
			return fmt.Errorf("%s: the server asks to try again after %s, longer than stamp waits (%s): %w", what, re.after, r.MaxRetryAfter, re.err)
		}
		if n >= r.Attempts {
			return fmt.Errorf("%s: gave up after %d attempts: %w", what, n, re.err)
		}
		wait := jitter(backoff)
		if re.after > wait {
			wait = re.after
		}
		backoff = min(2*backoff, r.MaxBackoff)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (after: %v)", what, ctx.Err(), last)
		}
	}
}

// jitter spreads d by a fifth either way, so runners that failed together
// do not all come back at once.
func jitter(d time.Duration) time.Duration {
	return d + time.Duration((rand.Float64()*0.4-0.2)*float64(d))
}

// RetryableStatus tells whether an HTTP status is worth another attempt: a
// timeout, too many requests, or a server's trouble.
func RetryableStatus(code int) bool {
	switch code {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests,
		http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// RetryAfter is the wait a response's Retry-After header asks for (delay
// seconds or an HTTP date), 0 when it has none or none that parses.
func RetryAfter(h http.Header) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s < 0 {
			return 0
		}
		return time.Duration(min(s, 1<<31)) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// RoundTripError classifies an error of http.Client.Do: a refused redirect
// or a certificate that does not verify fails for good; anything else (a
// refused or reset connection, a timeout, a TLS handshake cut short) is
// worth another attempt.
func RoundTripError(err error) error {
	var re *RedirectError
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var host x509.HostnameError
	var verify *tls.CertificateVerificationError
	if errors.As(err, &re) || errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &host) || errors.As(err, &verify) {
		return err
	}
	return Retryable(err, 0)
}

// StatusError is an HTTP answer to a request for src that is not the one
// asked for; it says where a redirect led.
func StatusError(resp *http.Response, src string) error {
	if final := resp.Request.URL.Redacted(); final != src {
		return fmt.Errorf("redirected to %s: %s", final, resp.Status)
	}
	return errors.New(resp.Status)
}

// MaxRedirects is how many redirects a request follows.
const MaxRedirects = 10

// RedirectError is a redirect stamp does not follow.
type RedirectError struct {
	To  string
	Why string
}

func (e *RedirectError) Error() string { return fmt.Sprintf("redirect to %s refused: %s", e.To, e.Why) }

// CheckRedirect is the redirect policy of every download, for
// http.Client.CheckRedirect. A redirect to another host is followed (Debian
// mirrors hand out other mirrors, registries hand out storage URLs), at
// most MaxRedirects times, to http or https only and never from https down
// to http. Credentials stay with the origin they were given for: a hop to
// another scheme, host or port carries no Authorization,
// Proxy-Authorization or Cookie header, stricter than net/http alone, which
// keeps them for another port of the same host and for a subdomain. A URL's
// user:password is never carried (net/http sets it on the first request
// only), and registry tokens are added by go-containerregistry's transport
// only for the registry's own host.
func CheckRedirect(req *http.Request, via []*http.Request) error {
	to := req.URL.Redacted()
	if len(via) >= MaxRedirects {
		return &RedirectError{To: to, Why: fmt.Sprintf("stopped after %d redirects", MaxRedirects)}
	}
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return &RedirectError{To: to, Why: "only http and https are followed"}
	}
	for _, v := range via {
		if v.URL.Scheme == "https" && req.URL.Scheme == "http" {
			return &RedirectError{To: to, Why: "it leaves https for plain http"}
		}
	}
	if origin(req.URL) != origin(via[0].URL) {
		for _, h := range []string{"Authorization", "Proxy-Authorization", "Cookie"} {
			req.Header.Del(h)
		}
	}
	return nil
}

func origin(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return u.Scheme + "://" + strings.ToLower(u.Hostname()) + ":" + port
}
