package harness

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// FaultKind is a way a network or a server breaks an HTTP exchange.
type FaultKind int

const (
	// Reset closes the connection with a TCP RST before any answer.
	Reset FaultKind = iota
	// ResetMidBody sends the answer's head and After bytes of its body,
	// then a TCP RST.
	ResetMidBody
	// Truncate sends the head, with the full Content-Length, and After
	// bytes of the body, then closes the connection cleanly.
	Truncate
	// Stall sends the head and After bytes of the body, then nothing, until
	// the client goes away.
	Stall
	// StallHead answers nothing until the client goes away.
	StallHead
	// Status answers Status (a 5xx, a 429), with RetryAfter when set.
	Status
	// LieLength sends the answer with a Content-Length of the true one
	// plus LengthDelta: more than it sends (then closes), or less than it
	// sends.
	LieLength
	// Redirect answers 307 to Location.
	Redirect
)

func (k FaultKind) String() string {
	return [...]string{"reset", "reset mid-body", "truncate", "stall", "stall before the head", "status", "lying Content-Length", "redirect"}[k]
}

// Fault breaks requests a FaultServer passes on.
type Fault struct {
	Kind FaultKind
	// Match picks the requests it breaks; nil is every one.
	Match func(*http.Request) bool
	// Times is how many matching requests it breaks; 0 is every one.
	Times int
	// After is how many bytes of the body go out before the fault.
	After       int64
	Status      int
	RetryAfter  string
	LengthDelta int64
	Location    string

	hits int
}

// Seen is a request a FaultServer received.
type Seen struct {
	Method, Path, Range, IfRange string
	// Authorization tells whether the request carried credentials.
	Authorization bool
	// Fault is the fault it met, "" when it was passed on whole.
	Fault string
	At    time.Time
}

// FaultServer is an HTTP server on 127.0.0.1 that passes each request to
// Upstream (a handler serving a file, or a reverse proxy to a real
// registry) and breaks those its faults match, as a bad network or server
// does: resets, truncated bodies, stalls, 5xx and 429 answers, lying
// Content-Lengths, redirects. It stops when the test ends.
type FaultServer struct {
	*httptest.Server
	Upstream http.Handler
	mu       sync.Mutex
	faults   []*Fault
	seen     []Seen
}

// NewFaultServer starts a FaultServer in front of upstream.
func NewFaultServer(t testing.TB, upstream http.Handler) *FaultServer {
	t.Helper()
	s := &FaultServer{Upstream: upstream}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

// Add arms more faults; the first that matches a request breaks it.
func (s *FaultServer) Add(f ...Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range f {
		s.faults = append(s.faults, &f[i])
	}
}

// Clear disarms every fault and forgets the requests seen.
func (s *FaultServer) Clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults, s.seen = nil, nil
}

// Seen is every request received, in order.
func (s *FaultServer) Seen() []Seen {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Seen(nil), s.seen...)
}

func (s *FaultServer) pick(r *http.Request) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	var f *Fault
	for _, c := range s.faults {
		if (c.Match == nil || c.Match(r)) && (c.Times == 0 || c.hits < c.Times) {
			c.hits++
			f = c
			break
		}
	}
	seen := Seen{Method: r.Method, Path: r.URL.Path, Range: r.Header.Get("Range"), IfRange: r.Header.Get("If-Range"),
		Authorization: r.Header.Get("Authorization") != "", At: time.Now()}
	if f != nil {
		seen.Fault = f.Kind.String()
	}
	s.seen = append(s.seen, seen)
	return f
}

func (s *FaultServer) serve(w http.ResponseWriter, r *http.Request) {
	f := s.pick(r)
	if f == nil {
		s.Upstream.ServeHTTP(w, r)
		return
	}
	switch f.Kind {
	case Status:
		if f.RetryAfter != "" {
			w.Header().Set("Retry-After", f.RetryAfter)
		}
		http.Error(w, http.StatusText(f.Status), f.Status)
		return
	case Redirect:
		http.Redirect(w, r, f.Location, http.StatusTemporaryRedirect)
		return
	}
	conn, rw, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	switch f.Kind {
	case Reset:
		reset(conn)
		return
	case StallHead:
		waitGone(conn, rw.Reader)
		return
	}
	// What the upstream answers, streamed and broken on the way out.
	rw2 := &rawWriter{f: f, conn: conn, rw: rw, header: http.Header{}}
	func() {
		defer func() {
			// A reverse proxy whose writes fail aborts its handler.
			if p := recover(); p != nil && p != http.ErrAbortHandler {
				panic(p)
			}
		}()
		s.Upstream.ServeHTTP(rw2, r)
	}()
	rw2.finish()
}

// errFaulted stops an upstream handler once its answer has been broken.
var errFaulted = fmt.Errorf("fault injected")

// rawWriter writes an upstream's answer to a hijacked connection as
// HTTP/1.1, breaking it as its fault says.
type rawWriter struct {
	f       *Fault
	conn    net.Conn
	rw      *bufio.ReadWriter
	header  http.Header
	wrote   bool
	sent    int64
	faulted bool
}

func (w *rawWriter) Header() http.Header { return w.header }

func (w *rawWriter) WriteHeader(code int) {
	if w.wrote {
		return
	}
	w.wrote = true
	fmt.Fprintf(w.rw, "HTTP/1.1 %d %s\r\n", code, http.StatusText(code))
	keys := make([]string, 0, len(w.header))
	for k := range w.header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "Content-Length" || k == "Transfer-Encoding" || k == "Connection" {
			continue
		}
		for _, v := range w.header[k] {
			fmt.Fprintf(w.rw, "%s: %s\r\n", k, v)
		}
	}
	if cl := w.header.Get("Content-Length"); cl != "" {
		n, _ := strconv.ParseInt(cl, 10, 64)
		if w.f.Kind == LieLength {
			n += w.f.LengthDelta
		}
		fmt.Fprintf(w.rw, "Content-Length: %d\r\n", n)
	}
	fmt.Fprintf(w.rw, "Connection: close\r\n\r\n")
}

func (w *rawWriter) Write(p []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	switch w.f.Kind {
	case ResetMidBody, Truncate, Stall:
		if w.sent+int64(len(p)) >= w.f.After {
			w.rw.Write(p[:w.f.After-w.sent])
			w.sent = w.f.After
			w.fault()
			return 0, errFaulted
		}
	}
	if w.faulted {
		return 0, errFaulted
	}
	n, err := w.rw.Write(p)
	w.sent += int64(n)
	return n, err
}

func (w *rawWriter) Flush() { w.rw.Flush() }

// fault breaks the connection as the fault says.
func (w *rawWriter) fault() {
	w.faulted = true
	w.rw.Flush()
	switch w.f.Kind {
	case ResetMidBody:
		reset(w.conn)
	case Truncate:
		w.conn.Close()
	case Stall:
		waitGone(w.conn, w.rw.Reader)
	}
}

// finish ends an answer the fault did not break before its end.
func (w *rawWriter) finish() {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	if !w.faulted {
		switch w.f.Kind {
		case ResetMidBody, Truncate, Stall:
			// The body was shorter than After: break it at its end.
			w.fault()
			return
		}
		w.rw.Flush()
	}
}

// reset closes conn with a TCP RST rather than a FIN.
func reset(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	conn.Close()
}

// waitGone reads conn until the client closes it, or a minute passes.
func waitGone(conn net.Conn, r *bufio.Reader) {
	conn.SetReadDeadline(time.Now().Add(time.Minute))
	io.Copy(io.Discard, r)
}

// PathHas matches requests whose path contains s.
func PathHas(s string) func(*http.Request) bool {
	return func(r *http.Request) bool { return strings.Contains(r.URL.Path, s) }
}

// RangesMatch tells whether the Range headers a FaultServer saw are want,
// in order, where "resume" stands for a Range from wherever the bytes
// stopped (not 0): a reset may destroy some that were sent.
func RangesMatch(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] && (want[i] != "resume" || !strings.HasPrefix(got[i], "bytes=") || got[i] == "bytes=0-") {
			return false
		}
	}
	return true
}
