package cache

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// server is a real HTTP server on 127.0.0.1 serving one blob in several ways.
type server struct {
	*httptest.Server
	data     []byte
	requests atomic.Int64
	// stallAfter > 0 makes /blob send that many bytes of a full-length
	// response and then hang until the client goes away.
	stallAfter atomic.Int64
	mu         sync.Mutex
	agents     []string
}

func newServer(t *testing.T, data []byte) *server {
	s := &server{data: data}
	mux := http.NewServeMux()
	mux.HandleFunc("/blob", func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		s.mu.Lock()
		s.agents = append(s.agents, r.UserAgent())
		s.mu.Unlock()
		w.Header().Set("Content-Length", strconv.Itoa(len(s.data)))
		n := s.stallAfter.Load()
		if n <= 0 {
			w.Write(s.data)
			return
		}
		w.Write(s.data[:n])
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		http.Redirect(w, r, "/blob", http.StatusFound)
	})
	mux.HandleFunc("/short", func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		w.Header().Set("Content-Length", strconv.Itoa(len(s.data)))
		w.Write(s.data[:len(s.data)/2])
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// progressLog records what Fetch reports.
type progressLog struct {
	mu    sync.Mutex
	names []string
	total int64
	added int64
	done  int
}

func (p *progressLog) fn(name string, total int64) (func(int64), func()) {
	p.mu.Lock()
	p.names = append(p.names, name)
	p.total = total
	p.mu.Unlock()
	return func(n int64) {
			p.mu.Lock()
			p.added += n
			p.mu.Unlock()
		}, func() {
			p.mu.Lock()
			p.done++
			p.mu.Unlock()
		}
}

func TestFetchHTTP(t *testing.T) {
	data := randomBytes(10, 500<<10)
	want := sum(data)
	srv := newServer(t, data)
	var prog progressLog
	c := openCache(t, Options{Progress: prog.fn, UserAgent: "stamp-test/1"})
	ctx := context.Background()

	url := srv.URL + "/redirect"
	d, err := c.Fetch(ctx, url, "")
	if err != nil {
		t.Fatal(err)
	}
	if d != want {
		t.Fatalf("Fetch = %s, want %s", d, want)
	}
	if err := c.Verify(d); err != nil {
		t.Fatal(err)
	}
	if got := srv.requests.Load(); got != 2 {
		t.Errorf("requests = %d, want 2 (redirect + blob)", got)
	}
	if fmt.Sprint(srv.agents) != "[stamp-test/1]" {
		t.Errorf("user agents = %v", srv.agents)
	}
	if fmt.Sprint(prog.names) != "["+url+"]" || prog.total != int64(len(data)) || prog.added != int64(len(data)) || prog.done != 1 {
		t.Errorf("progress = %+v", &prog)
	}

	// Pinned and present: no request at all.
	if d, err := c.Fetch(ctx, srv.URL+"/blob", want); err != nil || d != want {
		t.Fatalf("pinned Fetch = %s, %v", d, err)
	}
	if got := srv.requests.Load(); got != 2 {
		t.Errorf("pinned Fetch of a present blob made a request (%d)", got)
	}
}

func TestFetchHTTPErrors(t *testing.T) {
	data := randomBytes(11, 64<<10)
	srv := newServer(t, data)
	c := openCache(t, Options{Retry: fastRetry})
	ctx := context.Background()

	missing := srv.URL + "/nothing-here"
	_, err := c.Fetch(ctx, missing, "")
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), "404") {
		t.Errorf("404 Fetch = %v", err)
	}

	wrong := sum([]byte("something else"))
	_, err = c.Fetch(ctx, srv.URL+"/blob", wrong)
	var me *MismatchError
	if !errors.As(err, &me) || me.Source != srv.URL+"/blob" || me.Want != wrong || me.Got != sum(data) {
		t.Errorf("mismatched Fetch = %v", err)
	}

	// A body cut short of its Content-Length is an error, not a smaller blob.
	if _, err := c.Fetch(ctx, srv.URL+"/short", ""); err == nil {
		t.Error("short body Fetch succeeded")
	}

	if _, err := c.Fetch(ctx, srv.URL+"/blob", "sha256:zz"); !errors.Is(err, ErrBadDigest) {
		t.Errorf("malformed want = %v", err)
	}
	if _, err := c.Fetch(ctx, "ftp://example.invalid/x", ""); err == nil || !strings.Contains(err.Error(), "unsupported scheme") {
		t.Errorf("ftp Fetch = %v", err)
	}
	if _, err := c.Fetch(ctx, "relative/path.tar", ""); err == nil || !strings.Contains(err.Error(), "relative/path.tar") {
		t.Errorf("relative Fetch = %v", err)
	}
	if b := blobNames(t, c); len(b) != 0 {
		t.Errorf("blobs after failed fetches: %v", b)
	}
	if tmp := tmpNames(t, c); len(tmp) != 0 {
		t.Errorf("temp files after failed fetches: %v", tmp)
	}
}

func TestFetchCancelledHalfway(t *testing.T) {
	data := randomBytes(12, 1<<20)
	want := sum(data)
	srv := newServer(t, data)
	const half = 256 << 10
	srv.stallAfter.Store(half)

	reached := make(chan struct{})
	var once sync.Once
	var got atomic.Int64
	progress := func(string, int64) (func(int64), func()) {
		return func(n int64) {
			if got.Add(n) >= half {
				once.Do(func() { close(reached) })
			}
		}, nil
	}
	c := openCache(t, Options{Progress: progress})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-reached
		// Give the fetch time to block in the body read, so cancellation has
		// to interrupt the transport rather than be seen between reads.
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	_, err := c.Fetch(ctx, srv.URL+"/blob", want)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Fetch = %v, want context.Canceled", err)
	}
	if c.Has(want) {
		t.Error("cancelled Fetch left the blob")
	}
	if b := blobNames(t, c); len(b) != 0 {
		t.Errorf("blobs after cancel: %v", b)
	}
	if tmp := tmpNames(t, c); len(tmp) != 0 {
		t.Errorf("temp files after cancel: %v", tmp)
	}

	srv.stallAfter.Store(0)
	if d, err := c.Fetch(context.Background(), srv.URL+"/blob", want); err != nil || d != want {
		t.Fatalf("Fetch after cancel = %s, %v", d, err)
	}
	if err := c.Verify(want); err != nil {
		t.Fatal(err)
	}
}

// TestKilledFetchLeavesNoBlob kills a real process half-way through a download:
// only a temp file may remain, and it is swept once stale.
func TestKilledFetchLeavesNoBlob(t *testing.T) {
	data := randomBytes(13, 1<<20)
	want := sum(data)
	srv := newServer(t, data)
	const half = 256 << 10
	srv.stallAfter.Store(half)
	dir := filepath.Join(t.TempDir(), "cache")

	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFetch$", "-test.count=1")
	cmd.Env = append(os.Environ(), "STAMP_CACHE_HELPER_DIR="+dir, "STAMP_CACHE_HELPER_URL="+srv.URL+"/blob")
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tmpDir := filepath.Join(dir, "tmp")
	deadline := time.Now().Add(20 * time.Second)
	var partial string
	for partial == "" {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("helper never wrote %d bytes; output:\n%s", half, out)
		}
		ents, _ := os.ReadDir(tmpDir)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && fi.Size() >= half {
				partial = filepath.Join(tmpDir, e.Name())
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	c, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b := blobNames(t, c); len(b) != 0 {
		t.Fatalf("killed fetch left blobs: %v", b)
	}
	if tmp := tmpNames(t, c); len(tmp) != 1 {
		t.Fatalf("temp files after kill: %v (a fresh one must survive Open)", tmp)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(partial, old, old); err != nil {
		t.Fatal(err)
	}
	srv.stallAfter.Store(0)
	c, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if tmp := tmpNames(t, c); len(tmp) != 0 {
		t.Errorf("stale temp file not swept: %v", tmp)
	}
	if d, err := c.Fetch(context.Background(), srv.URL+"/blob", want); err != nil || d != want {
		t.Fatalf("Fetch after kill = %s, %v", d, err)
	}
}

// TestHelperFetch is the process TestKilledFetchLeavesNoBlob kills.
func TestHelperFetch(t *testing.T) {
	dir := os.Getenv("STAMP_CACHE_HELPER_DIR")
	if dir == "" {
		t.Skip("helper process for TestKilledFetchLeavesNoBlob")
	}
	c, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Fetch(context.Background(), os.Getenv("STAMP_CACHE_HELPER_URL"), "")
	t.Fatalf("fetch returned instead of hanging: %v", err)
}

func TestFetchOffline(t *testing.T) {
	data := randomBytes(14, 10<<10)
	want := sum(data)
	srv := newServer(t, data)
	dir := filepath.Join(t.TempDir(), "cache")
	off, err := Open(dir, Options{Offline: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	u := srv.URL + "/blob"

	_, err = off.Fetch(ctx, u, want)
	var miss *MissingError
	if !errors.As(err, &miss) || miss.URI != u || miss.Digest != want {
		t.Fatalf("offline Fetch = %v, want *MissingError{%s, %s}", err, u, want)
	}
	if !strings.Contains(err.Error(), u) || !strings.Contains(err.Error(), want) {
		t.Errorf("message %q", err)
	}
	if _, err := off.Fetch(ctx, u, ""); !errors.As(err, &miss) || miss.Digest != "" {
		t.Errorf("offline unpinned Fetch = %v", err)
	}
	if n := srv.requests.Load(); n != 0 {
		t.Fatalf("offline cache made %d requests", n)
	}

	// Once fetched online, the offline cache serves it without the network.
	on, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := on.Fetch(ctx, u, want); err != nil {
		t.Fatal(err)
	}
	if d, err := off.Fetch(ctx, u, want); err != nil || d != want {
		t.Fatalf("offline Fetch of a present blob = %s, %v", d, err)
	}
	if n := srv.requests.Load(); n != 1 {
		t.Errorf("requests = %d, want 1", n)
	}

	// Local files need no network, so offline does not stop them.
	local := filepath.Join(t.TempDir(), "local.txt")
	if err := os.WriteFile(local, []byte("local\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := off.Fetch(ctx, local, ""); err != nil || d != sum([]byte("local\n")) {
		t.Errorf("offline local Fetch = %s, %v", d, err)
	}
}

func TestFetchFile(t *testing.T) {
	c := openCache(t, Options{})
	ctx := context.Background()
	dir := t.TempDir()
	data := randomBytes(15, 33<<10)
	want := sum(data)
	p := filepath.Join(dir, "with space.bin")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}

	// A mismatched pin stores nothing and names the file.
	wrong := sum([]byte("x"))
	_, err := c.Fetch(ctx, p, wrong)
	var me *MismatchError
	if !errors.As(err, &me) || me.Source != p || me.Got != want {
		t.Fatalf("mismatched local Fetch = %v", err)
	}
	if b := blobNames(t, c); len(b) != 0 {
		t.Fatalf("blobs after mismatch: %v", b)
	}

	// An unpinned local path is hashed and stored, so a lock can record it.
	if d, err := c.Fetch(ctx, p, ""); err != nil || d != want {
		t.Fatalf("local Fetch = %s, %v", d, err)
	}
	if !c.Has(want) {
		t.Fatal("local Fetch did not store the blob")
	}

	fileURL := (&url.URL{Scheme: "file", Path: p}).String()
	other := randomBytes(16, 1000)
	p2 := filepath.Join(dir, "other.bin")
	if err := os.WriteFile(p2, other, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{fileURL, "file://localhost" + p} {
		if d, err := c.Fetch(ctx, u, want); err != nil || d != want {
			t.Errorf("Fetch(%s) = %s, %v", u, d, err)
		}
	}
	if d, err := c.Fetch(ctx, "file://"+p2, sum(other)); err != nil || d != sum(other) {
		t.Errorf("pinned file:// Fetch = %s, %v", d, err)
	}
	if _, err := c.Fetch(ctx, "file://otherhost"+p, ""); err == nil || !strings.Contains(err.Error(), "otherhost") {
		t.Errorf("remote file URL = %v", err)
	}
	if _, err := c.Fetch(ctx, filepath.Join(dir, "absent"), ""); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("missing local Fetch = %v", err)
	}
}

// fastRetry tries three times without waiting long, for tests of faults.
var fastRetry = Retry{Attempts: 3, Backoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, MaxRetryAfter: 2 * time.Second, IdleTimeout: 2 * time.Second}
