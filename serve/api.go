package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler is the server's HTTP API:
//
//	GET  /v1/recipes                 the recipes, their parameters and outputs
//	POST /v1/builds                  {"recipe": NAME, "params": {...}}: 202 queued or running, 200 done
//	GET  /v1/builds/ID               state, phase, progress, error, files (text/event-stream: as events)
//	GET  /v1/builds/ID/events        the same as Server-Sent Events, until the build ends
//	GET  /v1/builds/ID/log           the build's log, one JSON object a line
//	GET  /v1/images/ID/NAME          a file of the build (Range, ETag = its sha256, If-None-Match)
//	GET  /v1/images/ID/NAME.sha256sum its checksum line, the URL form Metal3 takes
//	GET  /v1/images/ID/boot.ipxe     the live output's iPXE script
//	GET  /healthz, /readyz, /metrics
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	metrics := promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		if _, ok := s.authorize(w, r, false); ok {
			metrics.ServeHTTP(w, r)
		}
	})
	mux.HandleFunc("GET /v1/recipes", s.getRecipes)
	mux.HandleFunc("POST /v1/builds", s.postBuild)
	mux.HandleFunc("GET /v1/builds/{id}", s.getBuild)
	mux.HandleFunc("GET /v1/builds/{id}/events", s.getEvents)
	mux.HandleFunc("GET /v1/builds/{id}/log", s.getLog)
	mux.HandleFunc("GET /v1/images/{id}/{name...}", s.getImage)
	return s.observe(mux)
}

// reqInfo is what a request's log line says besides the request itself.
type reqInfo struct {
	id, token, build string
}

type infoKey struct{}

func infoOf(r *http.Request) *reqInfo {
	if i, ok := r.Context().Value(infoKey{}).(*reqInfo); ok {
		return i
	}
	return &reqInfo{}
}

var requestIDRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// observe gives each request an ID (the client's X-Request-ID when it is a
// sane one), logs it with its status, size and time, and counts it.
func (s *Server) observe(next http.Handler) http.Handler {
	var boot [4]byte
	rand.Read(boot[:])
	prefix := hex.EncodeToString(boot[:])
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		info := &reqInfo{id: r.Header.Get("X-Request-ID")}
		if !requestIDRE.MatchString(info.id) {
			info.id = prefix + "-" + strconv.FormatUint(s.requests.Add(1), 10)
		}
		w.Header().Set("X-Request-ID", info.id)
		rec := &recorder{ResponseWriter: w}
		r = r.WithContext(context.WithValue(r.Context(), infoKey{}, info))
		next.ServeHTTP(rec, r)
		took := time.Since(start)
		route := r.Pattern
		if route == "" {
			route = "none"
		}
		s.metrics.httpSeconds.WithLabelValues(route).Observe(took.Seconds())
		if strings.HasPrefix(route, "GET /v1/images/") {
			s.metrics.bytes.Add(float64(rec.n))
		}
		if rec.status == 0 {
			rec.status = http.StatusOK
		}
		l := s.log.WithField("request", info.id).WithField("method", r.Method).WithField("path", r.URL.Path).
			WithField("status", rec.status).WithField("bytes", rec.n).WithField("ms", took.Milliseconds()).
			WithField("remote", r.RemoteAddr)
		if info.token != "" {
			l = l.WithField("token", info.token)
		}
		if info.build != "" {
			l = l.WithField("build", info.build)
		}
		// Polling and scraping would drown the rest at info.
		if r.Method == http.MethodGet && rec.status < 400 && !strings.HasPrefix(route, "GET /v1/images/") {
			l.Debug("request")
		} else {
			l.Info("request")
		}
	})
}

// recorder notes a response's status and size. It passes ReadFrom through,
// so a file still goes out by sendfile, and Unwrap, for deadlines.
type recorder struct {
	http.ResponseWriter
	status int
	n      int64
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(p)
	r.n += int64(n)
	return n, err
}

func (r *recorder) ReadFrom(src io.Reader) (int64, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.(io.ReaderFrom).ReadFrom(src)
	r.n += n
	return n, err
}

func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, r *http.Request, e *httpError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.code, map[string]*APIError{"error": &e.APIError})
}

func (s *Server) getRecipes(w http.ResponseWriter, r *http.Request) {
	if _, ok := s.authorize(w, r, false); !ok {
		return
	}
	list, err := s.recipesIn()
	if err != nil {
		writeError(w, r, failf(http.StatusInternalServerError, "", "listing the recipes: %s", s.hide(err)))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"recipes": list})
}

// BuildRequest is the body of POST /v1/builds.
type BuildRequest struct {
	Recipe string            `json:"recipe"`
	Params map[string]string `json:"params,omitempty"`
}

func (s *Server) postBuild(w http.ResponseWriter, r *http.Request) {
	token, ok := s.authorize(w, r, true)
	if !ok {
		return
	}
	if r.ContentLength > maxBody {
		writeError(w, r, failf(http.StatusRequestEntityTooLarge, "", "a body of %d bytes; at most %d", r.ContentLength, maxBody))
		return
	}
	var req BuildRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(&req)
	if err == nil && dec.Decode(&struct{}{}) != io.EOF {
		err = errors.New("more than one JSON value")
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, r, failf(http.StatusRequestEntityTooLarge, "", "a body of more than %d bytes", maxBody))
			return
		}
		writeError(w, r, failf(http.StatusBadRequest, "", "the body must be {\"recipe\": NAME, \"params\": {NAME: VALUE}}: %v", err))
		return
	}
	l, herr := s.load(req.Recipe, req.Params)
	if herr != nil {
		writeError(w, r, herr)
		return
	}
	infoOf(r).build = l.id
	b, code, herr := s.submit(l, token, req.Params)
	if herr != nil {
		writeError(w, r, herr)
		return
	}
	st, _, _ := b.snapshot()
	w.Header().Set("Location", st.URL)
	writeJSON(w, code, st)
}

// buildOf is the build a request's path names, or an answer saying there
// is none.
func (s *Server) buildOf(w http.ResponseWriter, r *http.Request) *build {
	if _, ok := s.authorize(w, r, false); !ok {
		return nil
	}
	id := r.PathValue("id")
	if !validID(id) {
		writeError(w, r, failf(http.StatusNotFound, "", "a build ID is 64 lowercase hex digits"))
		return nil
	}
	infoOf(r).build = id
	b := s.find(id)
	if b == nil {
		writeError(w, r, failf(http.StatusNotFound, "", "no build %s here; POST /v1/builds to ask for it", id))
	}
	return b
}

func (s *Server) getBuild(w http.ResponseWriter, r *http.Request) {
	b := s.buildOf(w, r)
	if b == nil {
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		s.events(w, r, b)
		return
	}
	st, _, _ := b.snapshot()
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) getEvents(w http.ResponseWriter, r *http.Request) {
	if b := s.buildOf(w, r); b != nil {
		s.events(w, r, b)
	}
}

// events streams the build's status as Server-Sent Events, one "status"
// event per change (progress at most four times a second), until the build
// ends or the client goes.
func (s *Server) events(w http.ResponseWriter, r *http.Request, b *build) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	var last uint64
	sent, quiet := false, time.Now()
	for {
		st, version, notify := b.snapshot()
		if !sent || version != last {
			data, _ := json.Marshal(st)
			rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := io.WriteString(w, "event: status\ndata: "+string(data)+"\n\n"); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			sent, last, quiet = true, version, time.Now()
		}
		if st.State != stateQueued && st.State != stateRunning {
			return
		}
		if time.Since(quiet) > 15*time.Second {
			// A comment keeps proxies from taking a quiet stream for a dead one.
			rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := io.WriteString(w, ": waiting\n\n"); err != nil || rc.Flush() != nil {
				return
			}
			quiet = time.Now()
		}
		select {
		case <-r.Context().Done():
			return
		case <-notify:
		case <-tick.C:
		}
	}
}

func (s *Server) getLog(w http.ResponseWriter, r *http.Request) {
	b := s.buildOf(w, r)
	if b == nil {
		return
	}
	f, err := os.Open(s.logPath(b.id))
	if err != nil {
		writeError(w, r, failf(http.StatusNotFound, "", "build %s has no log here (it has not run on this server)", b.id))
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeError(w, r, failf(http.StatusInternalServerError, "", "log: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	http.NewResponseController(w).SetWriteDeadline(downloadDeadline(fi.Size()))
	http.ServeContent(w, r, "", time.Time{}, f)
}

// downloadDeadline is when sending size bytes must be done: a minute, plus
// the time at minDownloadRate.
func downloadDeadline(size int64) time.Time {
	return time.Now().Add(time.Minute + time.Duration(size/minDownloadRate)*time.Second)
}
