package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stamp-dev/stamp/serve"
	"github.com/stamp-dev/stamp/test/harness"
)

// serveToken is the bearer token the tests' servers take.
const serveToken = "e2e-token-0123456789abcdef"

// The recipes the tests' servers build: small, so a build takes a fraction
// of a second. tiny makes a tar and a raw disk, with a parameter the load
// tests vary; slow waits in a hook, so a test can catch it running.
const (
	serveTiny = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: tiny
epoch: 1700000000
params:
  motd: {default: "hello\n", description: the message of the day}
base:
  tarball: ./base.tar
customize:
  layers:
    - files:
        - {path: /etc/motd, content: "${motd}"}
outputs:
  - {format: tar}
  - format: raw
    partitions:
      - {name: root, type: root, size: auto, filesystem: ext4}
`
	serveTar = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: tars
epoch: 1700000000
params:
  motd: {default: "hello\n"}
base:
  tarball: ./base.tar
customize:
  layers:
    - files:
        - {path: /etc/motd, content: "${motd}"}
outputs:
  - {format: tar}
`
	serveSlow = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: slow
epoch: 1700000000
base:
  tarball: ./base.tar
customize:
  pre: [./slow.sh]
  layers:
    - files:
        - {path: /etc/motd, content: "slow\n"}
outputs:
  - {format: tar}
`
	// live is a network-boot bundle: a stand-in kernel, and a stand-in
	// busybox for its live /init.
	serveLive = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: live
epoch: 1700000000
base:
  tarball: ./base.tar
customize:
  layers:
    - files:
        - {path: /boot/vmlinuz-6.1.0-stamp, content: "a stand-in kernel\n"}
        - {path: /bin/busybox, content: "a stand-in busybox\n", mode: "0755"}
outputs:
  - {format: pxe}
`
	// from takes host files parameters name: one a client gives must stay
	// inside the recipe directory; a default is the recipe author's to
	// place, outside it too.
	serveFrom = `apiVersion: stamp.dev/v1alpha1
kind: Recipe
name: from
epoch: 1700000000
params:
  src: ./motd.txt
  release: /etc/os-release
base:
  tarball: ./base.tar
customize:
  layers:
    - files:
        - {path: /etc/motd, from: "${src}"}
        - {path: /etc/host-release, from: "${release}"}
outputs:
  - {format: tar}
`
)

// serveDir lays out a server's directory: recipes/ with the test recipes
// and their small base, and the tokens file.
func serveDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	base := hostileTar(t, tarMember{name: "etc/hostname", body: "tiny\n"}, tarMember{name: "etc/os-release", body: "ID=tiny\n"},
		tarMember{name: "usr/bin/tool", body: strings.Repeat("a tool\n", 4000)})
	writeFiles(t, dir, map[string]string{
		"recipes/base.tar":     string(base),
		"recipes/tiny.yaml":    serveTiny,
		"recipes/tars.yaml":    serveTar,
		"recipes/slow.yaml":    serveSlow,
		"recipes/slow.sh":      "#!/bin/sh\nsleep 3\n",
		"recipes/from.yaml":    serveFrom,
		"recipes/motd.txt":     "from a file\n",
		"recipes/notes/x.yaml": "kind: Kustomization\n",
		"recipes/live.yaml":    serveLive,
		"outside/r.yaml":       serveTar,
		"tokens":               "# name token\ne2e " + serveToken + "\n",
	})
	return dir
}

// stampServer is a `stamp serve` child process and what it logged.
type stampServer struct {
	t     *testing.T
	cmd   *exec.Cmd
	url   string
	cache string
	exit  chan struct{}

	mu    sync.Mutex
	lines []string
}

// startServe runs stamp serve on the recipes of dir, with its cache in
// cache, on a free port of 127.0.0.1.
func startServe(t *testing.T, dir, cache string, extra ...string) *stampServer {
	t.Helper()
	return startServeWith(t, nil, dir, cache, extra...)
}

// startServeWith runs it under the wrapper command, when given (a mount
// namespace).
func startServeWith(t *testing.T, wrapper []string, dir, cache string, extra ...string) *stampServer {
	t.Helper()
	args := append([]string{stampBin, "serve", "--recipes", filepath.Join(dir, "recipes"), "--listen", "127.0.0.1:0",
		"--cache-dir", cache, "--tokens", filepath.Join(dir, "tokens"), "--log-format", "json"}, extra...)
	args = append(wrapper, args...)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &stampServer{t: t, cmd: cmd, cache: cache, exit: make(chan struct{})}
	listening := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.mu.Lock()
			s.lines = append(s.lines, line)
			s.mu.Unlock()
			var l struct{ Msg, Addr string }
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "listening" {
				listening <- l.Addr
			}
		}
		cmd.Wait()
		close(s.exit)
	}()
	select {
	case addr := <-listening:
		s.url = "http://" + addr
	case <-s.exit:
		t.Fatalf("stamp serve exited before listening:\n%s", s.log())
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("stamp serve did not listen within 30s:\n%s", s.log())
	}
	t.Cleanup(s.stop)
	return s
}

// stop ends the server as a pod's SIGTERM does, and waits for it.
func (s *stampServer) stop() {
	select {
	case <-s.exit:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exit:
	case <-time.After(20 * time.Second):
		s.cmd.Process.Kill()
		<-s.exit
		s.t.Errorf("stamp serve did not stop within 20s of SIGTERM")
	}
}

// kill9 kills the server as a crash would.
func (s *stampServer) kill9() {
	s.cmd.Process.Kill()
	<-s.exit
}

func (s *stampServer) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.lines, "\n")
}

// logged counts the log lines whose message is msg.
func (s *stampServer) logged(msg string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, line := range s.lines {
		var l struct{ Msg string }
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg {
			n++
		}
	}
	return n
}

// do sends a request with the test's token unless token is "-".
func (s *stampServer) do(method, path, token string, body io.Reader, hdr ...string) *http.Response {
	s.t.Helper()
	req, err := http.NewRequest(method, s.url+path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "-" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		// Errorf, not Fatalf: the load test calls this on goroutines of
		// its own.
		s.t.Errorf("%s %s: %v", method, path, err)
		return &http.Response{StatusCode: 599, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(""))}
	}
	return resp
}

var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// read is a response's status and body.
func read(t *testing.T, resp *http.Response) (int, []byte) {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Errorf("reading an answer: %v", err) // not Fatal: called on goroutines too
	}
	return resp.StatusCode, b
}

// post asks for a build and decodes the answer.
func (s *stampServer) post(recipe string, params map[string]string) (int, serve.Status, *http.Response) {
	s.t.Helper()
	body, _ := json.Marshal(serve.BuildRequest{Recipe: recipe, Params: params})
	resp := s.do("POST", "/v1/builds", serveToken, bytes.NewReader(body))
	code, b := read(s.t, resp)
	var st serve.Status
	if code == http.StatusOK || code == http.StatusAccepted {
		if err := json.Unmarshal(b, &st); err != nil {
			s.t.Errorf("POST %s: %v: %s", recipe, err, b)
		}
	} else if code != http.StatusTooManyRequests {
		s.t.Logf("POST %s: %d %s", recipe, code, b)
	}
	return code, st, resp
}

// apiError is an error answer's body.
func apiError(t *testing.T, b []byte) serve.APIError {
	t.Helper()
	var e struct{ Error serve.APIError }
	if err := json.Unmarshal(b, &e); err != nil || e.Error.Message == "" {
		t.Fatalf("not an error answer: %s", b)
	}
	return e.Error
}

func (s *stampServer) status(id string) (int, serve.Status) {
	s.t.Helper()
	code, b := read(s.t, s.do("GET", "/v1/builds/"+id, "-", nil))
	var st serve.Status
	if code == http.StatusOK {
		if err := json.Unmarshal(b, &st); err != nil {
			s.t.Fatalf("GET build %s: %v: %s", id, err, b)
		}
	}
	return code, st
}

// wait polls the build until it is no longer queued or running.
func (s *stampServer) wait(id string) serve.Status {
	s.t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		code, st := s.status(id)
		if code != http.StatusOK {
			s.t.Fatalf("GET build %s: %d", id, code)
		}
		if st.State != "queued" && st.State != "running" {
			return st
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("build %s still %s after 90s:\n%s", id, st.State, lastLines(s.log(), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mustBuild asks for a build and waits until it is done.
func (s *stampServer) mustBuild(recipe string, params map[string]string) serve.Status {
	s.t.Helper()
	code, st, _ := s.post(recipe, params)
	if code != http.StatusOK && code != http.StatusAccepted {
		s.t.Fatalf("POST %s: %d", recipe, code)
	}
	if st = s.wait(st.ID); st.State != "done" {
		s.t.Fatalf("build %s of %s: %s: %+v\n%s", st.ID, recipe, st.State, st.Error, lastLines(s.log(), 30))
	}
	return st
}

// fetch downloads a file of a build and checks it against the sha256 the
// build lists for it.
func (s *stampServer) fetch(st serve.Status, name string) []byte {
	s.t.Helper()
	for _, f := range st.Outputs {
		if f.Name != name {
			continue
		}
		code, b := read(s.t, s.do("GET", f.URL, "-", nil))
		if code != http.StatusOK {
			s.t.Fatalf("GET %s: %d: %s", f.URL, code, b)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != f.SHA256 || int64(len(b)) != f.Size {
			s.t.Fatalf("GET %s: %d bytes hashing to %x, not the %d bytes of %s listed", f.URL, len(b), sum, f.Size, f.SHA256)
		}
		return b
	}
	s.t.Fatalf("build %s has no file %s: %+v", st.ID, name, st.Outputs)
	return nil
}

// metric is the value of a metric of the server's /metrics: the line that
// starts with series (a name, with its labels when it has them).
func (s *stampServer) metric(series string) float64 {
	s.t.Helper()
	_, b := read(s.t, s.do("GET", "/metrics", "-", nil))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				s.t.Fatalf("metric %s: %v", series, err)
			}
			return f
		}
	}
	return 0
}

// procStatus is a field of the server's /proc/PID/status, in KiB.
func (s *stampServer) procStatus(field string) int64 {
	s.t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		s.t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^` + field + `:\s+(\d+) kB`).FindSubmatch(b)
	if m == nil {
		s.t.Fatalf("no %s in /proc/PID/status", field)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// fds counts the server's open file descriptors.
func (s *stampServer) fds() int {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", s.cmd.Process.Pid))
	if err != nil {
		s.t.Fatal(err)
	}
	return len(ents)
}

// TestServeAPI walks the API as a client does: the recipes, a build asked
// for and followed as events, its files with their checksums, ranges and
// validators, the same request answered from the cache, and a raw image
// fetched by curl and checked against its checksum URL, as Metal3 fetches
// one. The bytes are those `stamp build` writes for the same recipe.
func TestServeAPI(t *testing.T) {
	harness.RequireTools(t, "curl", "sha256sum")
	dir := serveDir(t)
	s := startServe(t, dir, filepath.Join(dir, "cache"))

	code, b := read(t, s.do("GET", "/v1/recipes", "-", nil))
	var list struct{ Recipes []serve.RecipeInfo }
	if code != http.StatusOK || json.Unmarshal(b, &list) != nil {
		t.Fatalf("GET /v1/recipes: %d %s", code, b)
	}
	var names []string
	for _, r := range list.Recipes {
		names = append(names, r.Recipe)
	}
	if strings.Join(names, " ") != "from.yaml live.yaml slow.yaml tars.yaml tiny.yaml" {
		t.Fatalf("recipes %q (a YAML file that is no recipe is left out)", names)
	}
	tiny := list.Recipes[4]
	if tiny.Name != "tiny" || len(tiny.Params) != 1 || tiny.Params[0].Name != "motd" || *tiny.Params[0].Default != "hello\n" ||
		tiny.Params[0].Required || len(tiny.Outputs) != 2 || tiny.Outputs[1].Format != "raw" {
		t.Fatalf("tiny: %+v", tiny)
	}

	params := map[string]string{"motd": "served\n"}
	code, st, resp := s.post("tiny.yaml", params)
	if code != http.StatusAccepted || len(st.ID) != 64 || resp.Header.Get("Location") != "/v1/builds/"+st.ID {
		t.Fatalf("POST: %d %+v %v", code, st, resp.Header)
	}
	// The build followed as Server-Sent Events, to its end.
	events := s.do("GET", "/v1/builds/"+st.ID+"/events", "-", nil)
	if ct := events.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("events: %s", ct)
	}
	var states []string
	sc := bufio.NewScanner(events.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev serve.Status
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			t.Fatalf("event %s: %v", data, err)
		}
		if len(states) == 0 || states[len(states)-1] != ev.State+"/"+ev.Phase {
			states = append(states, ev.State+"/"+ev.Phase)
		}
	}
	events.Body.Close()
	if len(states) < 2 || states[len(states)-1] != "done/" {
		t.Fatalf("events ended at %q", states)
	}
	done := s.wait(st.ID)
	if strings.Join(done.Phases, " ") != "base customize provision" || done.Attempts != 1 {
		t.Fatalf("done: %+v", done)
	}
	var files []string
	for _, f := range done.Outputs {
		files = append(files, f.Name)
	}
	if strings.Join(files, " ") != "SHA256SUMS manifest.txt provenance.json sbom.spdx.json tiny.raw tiny.tar" {
		t.Fatalf("files %q", files)
	}

	// The same bytes as stamp build writes, every file.
	cli := filepath.Join(dir, "cli")
	stamp(t, filepath.Join(dir, "recipes"), nil, "build", "tiny.yaml", "--set", "motd=served\n", "-o", cli,
		"--cache-dir", filepath.Join(dir, "cli-cache")).mustSucceed(t)
	for _, f := range files {
		if !bytes.Equal(s.fetch(done, f), mustReadFile(t, filepath.Join(cli, f))) {
			t.Errorf("%s served differs from stamp build's", f)
		}
	}

	// Range, ETag and If-None-Match.
	tarURL := "/v1/images/" + st.ID + "/tiny.tar"
	whole := s.fetch(done, "tiny.tar")
	resp = s.do("GET", tarURL, "-", nil, "Range", "bytes=512-1023")
	code, part := read(t, resp)
	if code != http.StatusPartialContent || !bytes.Equal(part, whole[512:1024]) || resp.Header.Get("Content-Range") != fmt.Sprintf("bytes 512-1023/%d", len(whole)) {
		t.Fatalf("range: %d %v", code, resp.Header)
	}
	etag := resp.Header.Get("ETag")
	if sum := sha256.Sum256(whole); etag != `"`+hex.EncodeToString(sum[:])+`"` {
		t.Fatalf("ETag %s", etag)
	}
	if code, _ := read(t, s.do("GET", tarURL, "-", nil, "If-None-Match", etag)); code != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d", code)
	}
	// The log is the build's own.
	code, logb := read(t, s.do("GET", "/v1/builds/"+st.ID+"/log", "-", nil))
	if code != http.StatusOK || !strings.Contains(string(logb), `"msg":"phase customize"`) {
		t.Fatalf("log: %d\n%s", code, logb)
	}

	// Asked again: the build is done and in the cache, at once.
	code, again, _ := s.post("tiny.yaml", params)
	if code != http.StatusOK || again.ID != st.ID || again.State != "done" {
		t.Fatalf("POST again: %d %+v", code, again)
	}
	// The default given and left out are one build, another than that one.
	if code, same, _ := s.post("tiny.yaml", map[string]string{"motd": "hello\n"}); code != http.StatusAccepted || same.ID == st.ID {
		t.Fatalf("POST with the default: %d %s", code, same.ID)
	} else if code, again, _ := s.post("tiny.yaml", nil); again.ID != same.ID || code/100 != 2 {
		t.Fatalf("the default given and left out: %s and %s", same.ID, again.ID)
	}

	// A real consumer: curl fetches the raw image and checks it against its
	// checksum URL, as Ironic does for Metal3.
	img := filepath.Join(dir, "consumer")
	os.MkdirAll(img, 0o755)
	for _, f := range []string{"tiny.raw", "tiny.raw.sha256sum"} {
		out, err := exec.Command("curl", "-fsS", "-o", filepath.Join(img, f), s.url+"/v1/images/"+st.ID+"/"+f).CombinedOutput()
		if err != nil {
			t.Fatalf("curl %s: %v\n%s", f, err, out)
		}
	}
	check := exec.Command("sha256sum", "-c", "tiny.raw.sha256sum")
	check.Dir = img
	if out, err := check.CombinedOutput(); err != nil || !strings.Contains(string(out), "tiny.raw: OK") {
		t.Fatalf("sha256sum -c: %v\n%s", err, out)
	}
	if out, err := exec.Command("sgdisk", "-v", filepath.Join(img, "tiny.raw")).CombinedOutput(); err != nil || !strings.Contains(string(out), "No problems found") {
		t.Fatalf("sgdisk -v: %v\n%s", err, out)
	}

	// The metrics say what happened.
	if n := s.metric("stamp_serve_builds_started_total"); n != 2 {
		t.Errorf("builds started: %v", n)
	}
	if n := s.metric(`stamp_serve_build_requests_total{outcome="cached"}`); n < 1 {
		t.Errorf("cached requests: %v", n)
	}
	if n := s.metric("stamp_serve_bytes_served_total"); n < float64(len(whole)) {
		t.Errorf("bytes served: %v", n)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _ := read(t, s.do("GET", p, "-", nil)); code != http.StatusOK {
			t.Errorf("%s: %d", p, code)
		}
	}
}

// TestServeLoad sends 200 identical requests at once: they make one build,
// and every client gets the same bytes. Then 50 distinct requests at once
// to a server that runs 2 builds and queues 8: no more run at once, the
// rest are told 429 with a Retry-After, and asking again as told, all are
// built, with the server's memory bounded throughout.
func TestServeLoad(t *testing.T) {
	dir := serveDir(t)
	s := startServe(t, dir, filepath.Join(dir, "cache"), "--max-builds", "2", "--queue", "8", "--max-builds-per-token", "100")

	const clients = 200
	ids := make([]string, clients)
	codes := make([]int, clients)
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			code, st, _ := s.post("tars.yaml", map[string]string{"motd": "one build\n"})
			ids[i], codes[i] = st.ID, code
		})
	}
	wg.Wait()
	for i := range clients {
		if ids[i] != ids[0] || (codes[i] != http.StatusAccepted && codes[i] != http.StatusOK) {
			t.Fatalf("client %d: %d %s, client 0: %d %s", i, codes[i], ids[i], codes[0], ids[0])
		}
	}
	st := s.wait(ids[0])
	if st.State != "done" {
		t.Fatalf("build: %+v", st)
	}
	if n := s.metric("stamp_serve_builds_started_total"); n != 1 || s.logged("build started") != 1 {
		t.Fatalf("%d identical requests started %v builds", clients, n)
	}
	var url, want string
	for _, f := range st.Outputs {
		if f.Name == "tars.tar" {
			url, want = f.URL, f.SHA256
		}
	}
	sums := make([]string, clients)
	for i := range clients {
		wg.Go(func() {
			resp, err := http.Get(s.url + url)
			if err != nil {
				sums[i] = err.Error()
				return
			}
			h := sha256.New()
			io.Copy(h, resp.Body)
			resp.Body.Close()
			sums[i] = fmt.Sprintf("%d %x", resp.StatusCode, h.Sum(nil))
		})
	}
	wg.Wait()
	for i, sum := range sums {
		if sum != "200 "+want {
			t.Fatalf("client %d got %s, want 200 %s", i, sum, want)
		}
	}

	// 50 distinct requests at once.
	const distinct = 50
	type answer struct {
		code       int
		id         string
		retryAfter string
	}
	answers := make([]answer, distinct)
	for i := range distinct {
		wg.Go(func() {
			code, st, resp := s.post("tars.yaml", map[string]string{"motd": fmt.Sprintf("build %d\n", i)})
			answers[i] = answer{code, st.ID, resp.Header.Get("Retry-After")}
		})
	}
	wg.Wait()
	accepted := 0
	for i, a := range answers {
		switch a.code {
		case http.StatusAccepted:
			accepted++
		case http.StatusTooManyRequests:
			if n, err := strconv.Atoi(a.retryAfter); err != nil || n < 1 {
				t.Fatalf("request %d: 429 with Retry-After %q", i, a.retryAfter)
			}
		default:
			t.Fatalf("request %d: %d", i, a.code)
		}
	}
	// Two run and eight wait; a build that ends while the requests still
	// arrive makes room for one more.
	if accepted < 10 || accepted == distinct {
		t.Fatalf("%d of %d distinct requests accepted by a server that runs 2 and queues 8", accepted, distinct)
	}
	// Those refused ask again, after the time they were told (capped, so
	// the test does not wait on an estimate).
	for i := range answers {
		wg.Go(func() {
			for answers[i].code == http.StatusTooManyRequests {
				wait, _ := strconv.Atoi(answers[i].retryAfter)
				time.Sleep(time.Duration(min(wait, 1)) * time.Second)
				code, st, resp := s.post("tars.yaml", map[string]string{"motd": fmt.Sprintf("build %d\n", i)})
				answers[i] = answer{code, st.ID, resp.Header.Get("Retry-After")}
			}
		})
	}
	wg.Wait()
	for i, a := range answers {
		if st := s.wait(a.id); st.State != "done" {
			t.Fatalf("request %d: %+v", i, st)
		}
	}
	// Never more than two at once: the log says when each started and ended.
	running, most := 0, 0
	s.mu.Lock()
	for _, line := range s.lines {
		var l struct{ Msg string }
		json.Unmarshal([]byte(line), &l)
		switch l.Msg {
		case "build started":
			running++
			most = max(most, running)
		case "build done", "build failed":
			running--
		}
	}
	s.mu.Unlock()
	if most != 2 {
		t.Fatalf("at most %d builds ran at once, want 2", most)
	}
	if n := s.metric("stamp_serve_builds_started_total"); n != 1+distinct {
		t.Fatalf("%v builds started, want %d", n, 1+distinct)
	}
	// Memory: the peak of the whole test, builds and 200 downloads included.
	if hwm := s.procStatus("VmHWM"); hwm > 100<<10 {
		t.Fatalf("the server's peak RSS was %d MiB", hwm>>10)
	} else {
		t.Logf("peak RSS %d MiB, now %d MiB", hwm>>10, s.procStatus("VmRSS")>>10)
	}
}

// waitPhase polls the build until it is running in phase.
func (s *stampServer) waitPhase(id, phase string) {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, st := s.status(id)
		if st.State == "running" && st.Phase == phase {
			return
		}
		if st.State != "queued" && st.State != "running" || time.Now().After(deadline) {
			s.t.Fatalf("build %s never ran phase %s: %+v", id, phase, st)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestServeKilled kills the server with SIGKILL in the middle of a build.
// Nothing of the build is served, or filed in the cache; the next start
// runs it again, and it is served once done. Killed a second time in the
// same build, the next start reports it failed instead of running it a
// third time.
func TestServeKilled(t *testing.T) {
	dir := serveDir(t)
	cache := filepath.Join(dir, "cache")
	s := startServe(t, dir, cache)
	code, st, _ := s.post("slow.yaml", nil)
	if code != http.StatusAccepted {
		t.Fatalf("POST: %d", code)
	}
	s.waitPhase(st.ID, "customize")
	s.kill9()
	if recs, _ := filepath.Glob(filepath.Join(cache, "records", "serve", "*")); len(recs) != 0 {
		t.Fatalf("a killed build filed %v", recs)
	}

	s = startServe(t, dir, cache)
	code, again := s.status(st.ID)
	if code != http.StatusOK || (again.State != "queued" && again.State != "running") {
		t.Fatalf("after the restart the build is %d %+v", code, again)
	}
	// Not served while it runs again.
	if code, _ := read(t, s.do("GET", "/v1/images/"+st.ID+"/slow.tar", "-", nil)); code != http.StatusConflict {
		t.Fatalf("a build running again: GET its file: %d", code)
	}
	done := s.wait(st.ID)
	if done.State != "done" || done.Attempts != 2 {
		t.Fatalf("the build run again: %+v", done)
	}
	s.fetch(done, "slow.tar")
	if !strings.Contains(s.log(), "build was interrupted by a restart; running it again") {
		t.Fatalf("the restart did not say it took the build up:\n%s", s.log())
	}

	// Interrupted twice: failed, and said so.
	code, st2, _ := s.post("slow.yaml", nil) // done: answered from the cache
	if code != http.StatusOK || st2.ID != st.ID {
		t.Fatalf("POST a done build: %d", code)
	}
	writeFiles(t, dir, map[string]string{"recipes/slow.sh": "#!/bin/sh\nsleep 4\n"}) // a new build
	code, st2, _ = s.post("slow.yaml", nil)
	if code != http.StatusAccepted || st2.ID == st.ID {
		t.Fatalf("a changed hook: %d, same ID %v", code, st2.ID == st.ID)
	}
	for range 2 {
		s.waitPhase(st2.ID, "customize")
		s.kill9()
		s = startServe(t, dir, cache)
	}
	failed := s.wait(st2.ID)
	if failed.State != "failed" || failed.Error == nil || !strings.Contains(failed.Error.Message, "interrupted") {
		t.Fatalf("a build interrupted twice: %+v", failed)
	}
	if code, _ := read(t, s.do("GET", "/v1/images/"+st2.ID+"/slow.tar", "-", nil)); code != http.StatusNotFound {
		t.Fatalf("GET a file of a failed build: %d", code)
	}
	// The finished build survived every restart.
	if _, st := s.status(st.ID); st.State != "done" {
		t.Fatalf("the finished build after restarts: %+v", st)
	}
	s.fetch(done, "slow.tar")
}

// TestServeHostile sends what a hostile client would: names that leave the
// build's files or the recipe directory, parameters the recipe does not
// take or too big, a parameter naming a host file outside the recipe
// directory, a slowloris, a body of a gigabyte, and no token or a wrong
// one. Each is refused with its status, and nothing leaks: no file outside,
// no token in the log, no server path in an answer.
func TestServeHostile(t *testing.T) {
	dir := serveDir(t)
	if err := os.Symlink("../outside/r.yaml", filepath.Join(dir, "recipes", "escape.yaml")); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, dir, filepath.Join(dir, "cache"))
	st := s.mustBuild("tars.yaml", nil)

	refused := func(what string, want int, field string, resp *http.Response) {
		t.Helper()
		code, b := read(t, resp)
		if code != want {
			t.Fatalf("%s: %d, want %d: %s", what, code, want, b)
		}
		e := apiError(t, b)
		if field != "" && e.Field != field {
			t.Fatalf("%s: field %q, want %q: %s", what, e.Field, field, e.Message)
		}
		if strings.Contains(string(b), dir) || strings.Contains(string(b), "root:") {
			t.Fatalf("%s: the answer shows the server's files: %s", what, b)
		}
	}
	postRaw := func(body string) *http.Response {
		return s.do("POST", "/v1/builds", serveToken, strings.NewReader(body))
	}
	post := func(recipe string, params map[string]string) *http.Response {
		b, _ := json.Marshal(serve.BuildRequest{Recipe: recipe, Params: params})
		return postRaw(string(b))
	}

	// Names that leave the build's files.
	for _, name := range []string{"..%2f..%2f..%2fetc%2fpasswd", "%2fetc%2fpasswd", "a%2f..%2f..%2fSHA256SUMS"} {
		refused("GET "+name, http.StatusBadRequest, "", s.do("GET", "/v1/images/"+st.ID+"/"+name, "-", nil))
	}
	// A literal ../ is cleaned by the router into a path outside the API.
	code, b := read(t, s.do("GET", "/v1/images/"+st.ID+"/../../../../etc/passwd", "-", nil))
	if code == http.StatusOK || strings.Contains(string(b), "root:") {
		t.Fatalf("GET ../: %d %s", code, b)
	}
	refused("a file the build does not have", http.StatusNotFound, "", s.do("GET", "/v1/images/"+st.ID+"/passwd", "-", nil))
	refused("a build that is not", http.StatusNotFound, "", s.do("GET", "/v1/images/"+strings.Repeat("0", 64)+"/tars.tar", "-", nil))

	// Recipes outside the directory.
	refused("recipe ../", http.StatusBadRequest, "recipe", post("../outside/r.yaml", nil))
	refused("recipe /", http.StatusBadRequest, "recipe", post("/etc/passwd", nil))
	refused("recipe symlink out", http.StatusBadRequest, "recipe", post("escape.yaml", nil))
	refused("recipe hidden", http.StatusBadRequest, "recipe", post(".x/tars.yaml", nil))
	refused("not a recipe file", http.StatusBadRequest, "recipe", post("base.tar", nil))
	refused("no such recipe", http.StatusNotFound, "recipe", post("nope.yaml", nil))

	// Parameters.
	refused("unknown parameter", http.StatusBadRequest, "params.nope", post("tars.yaml", map[string]string{"nope": "x"}))
	refused("oversized value", http.StatusBadRequest, "params.motd", post("tars.yaml", map[string]string{"motd": strings.Repeat("x", 2000)}))
	many := map[string]string{}
	for i := range 40 {
		many[fmt.Sprintf("p%d", i)] = "x"
	}
	refused("40 parameters", http.StatusBadRequest, "params", post("tars.yaml", many))
	refused("a bad name", http.StatusBadRequest, "params", post("tars.yaml", map[string]string{"a-b": "x"}))
	refused("a control character", http.StatusBadRequest, "params.motd", post("tars.yaml", map[string]string{"motd": "a\x1b[2Jb"}))
	for _, src := range []string{"/etc/passwd", "../outside/r.yaml", "./../../../../etc/shadow"} {
		refused("host path "+src, http.StatusBadRequest, "customize.layers[0].files[0].from", post("from.yaml", map[string]string{"src": src}))
	}
	refused("a default's path given", http.StatusBadRequest, "customize.layers[0].files[1].from", post("from.yaml", map[string]string{"release": "/etc/passwd"}))
	refused("a second JSON value", http.StatusBadRequest, "", postRaw(`{"recipe":"tars.yaml"} {}`))
	refused("an unknown field", http.StatusBadRequest, "", postRaw(`{"recipe":"tars.yaml","run":"rm -rf /"}`))
	if st := s.mustBuild("from.yaml", map[string]string{"src": "./motd.txt"}); st.State != "done" {
		t.Fatalf("a host path inside: %+v", st)
	}

	// Tokens.
	resp := s.do("POST", "/v1/builds", "-", strings.NewReader(`{"recipe":"tars.yaml"}`))
	if resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatal("401 without WWW-Authenticate")
	}
	refused("no token", http.StatusUnauthorized, "", resp)
	refused("wrong token", http.StatusUnauthorized, "", s.do("POST", "/v1/builds", "wrong-token-0123456789", strings.NewReader(`{"recipe":"tars.yaml"}`)))
	refused("a token's prefix", http.StatusUnauthorized, "", s.do("POST", "/v1/builds", serveToken[:20], strings.NewReader(`{"recipe":"tars.yaml"}`)))

	// A gigabyte body: refused from its length, or once 64 KiB are read,
	// in a moment and without the server holding it.
	rss := s.procStatus("VmRSS")
	for _, length := range []int64{1 << 30, -1} {
		start := time.Now()
		// A JSON string that never ends: the decoder reads until the limit.
		body := io.MultiReader(strings.NewReader(`{"recipe": "`), io.LimitReader(endless('a'), 1<<30-12))
		req, _ := http.NewRequest("POST", s.url+"/v1/builds", body)
		req.ContentLength = length
		req.Header.Set("Authorization", "Bearer "+serveToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("a gigabyte body of length %d: %v", length, err)
		}
		refused(fmt.Sprintf("a gigabyte body of length %d", length), http.StatusRequestEntityTooLarge, "", resp)
		if took := time.Since(start); took > 5*time.Second {
			t.Fatalf("a gigabyte body took %s to refuse", took)
		}
	}
	if now := s.procStatus("VmRSS"); now > rss+32<<10 {
		t.Fatalf("the server's RSS went from %d to %d MiB taking a gigabyte body", rss>>10, now>>10)
	}

	// A slowloris: headers a byte a second. The server drops it after its
	// header timeout, and answers others meanwhile.
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	closed := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		io.Copy(io.Discard, conn)
		closed <- time.Since(start)
	}()
	go func() {
		for _, c := range []byte("GET /v1/recipes HTTP/1.1\r\nHost: x\r\nX-Slow: " + strings.Repeat("a", 60)) {
			if _, err := conn.Write([]byte{c}); err != nil {
				return
			}
			time.Sleep(time.Second)
		}
	}()
	for range 3 {
		time.Sleep(time.Second)
		t0 := time.Now()
		if code, _ := read(t, s.do("GET", "/healthz", "-", nil)); code != http.StatusOK || time.Since(t0) > time.Second {
			t.Fatalf("healthz beside a slowloris: %d in %s", code, time.Since(t0))
		}
	}
	select {
	case took := <-closed:
		if took > 8*time.Second {
			t.Fatalf("the slowloris was dropped after %s", took)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the slowloris still holds its connection after 15s")
	}

	// No token in the log, no file written outside the server's.
	if strings.Contains(s.log(), serveToken) || strings.Contains(s.log(), "wrong-token") {
		t.Fatal("a token is in the server's log")
	}
	if ents, _ := os.ReadDir(filepath.Join(dir, "outside")); len(ents) != 1 {
		t.Fatalf("outside/ holds %v", ents)
	}
}

// endless reads as an endless run of one byte.
type endless byte

func (e endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(e)
	}
	return len(p), nil
}

// TestServeDisconnect drops a download after its first MiB: the server
// lets go of its file and connection and serves everyone else as before.
func TestServeDisconnect(t *testing.T) {
	dir := serveDir(t)
	s := startServe(t, dir, filepath.Join(dir, "cache"))
	st := s.mustBuild("tiny.yaml", nil)
	s.fetch(st, "tiny.raw")
	time.Sleep(200 * time.Millisecond)
	fds, goroutines := s.fds(), s.metric("go_goroutines")
	for range 5 {
		conn, err := net.Dial("tcp", strings.TrimPrefix(s.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "GET /v1/images/%s/tiny.raw HTTP/1.1\r\nHost: x\r\n\r\n", st.ID)
		if _, err := io.ReadFull(conn, make([]byte, 1<<20)); err != nil {
			t.Fatal(err)
		}
		conn.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.fds() > fds || s.metric("go_goroutines") > goroutines {
		if time.Now().After(deadline) {
			t.Fatalf("after 5 dropped downloads: %d fds (were %d), %v goroutines (were %v)", s.fds(), fds, s.metric("go_goroutines"), goroutines)
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.fetch(st, "tiny.raw")
}

// TestServeFullDisk runs the server with its cache on a file system of 32
// MiB (a tmpfs in a mount namespace of its own) and asks for a build that
// needs more: the build fails with the error and the recipe field, the
// server stays up, and a build that fits succeeds after it.
func TestServeFullDisk(t *testing.T) {
	harness.RequireTools(t, "unshare", "mount")
	dir := serveDir(t)
	big := make([]byte, 40<<20)
	for i := range big {
		big[i] = byte(i*7 + i>>11) // no run a file system could keep as a hole
	}
	if err := os.WriteFile(filepath.Join(dir, "recipes", "big.bin"), big, 0o644); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"recipes/full.yaml": strings.Replace(serveTar, "        - {path: /etc/motd, content: \"${motd}\"}\n",
		"        - {path: /etc/motd, content: \"${motd}\"}\n        - {path: /usr/share/big.bin, from: ./big.bin}\n", 1)})
	cache := filepath.Join(dir, "cache")
	os.MkdirAll(cache, 0o700)
	// Mounting needs root, or a user namespace of one's own to be it in.
	ns := []string{"unshare", "--mount", "--propagation", "private"}
	if os.Geteuid() != 0 {
		ns = append(ns, "--user", "--map-root-user")
	}
	wrapper := append(ns, "sh", "-c", `mount -t tmpfs -o size=32m stamp-full "$0" && exec "$@"`, cache)
	s := startServeWith(t, wrapper, dir, cache)

	code, st, _ := s.post("full.yaml", nil)
	if code != http.StatusAccepted {
		t.Fatalf("POST: %d", code)
	}
	failed := s.wait(st.ID)
	if failed.State != "failed" || failed.Error == nil || !strings.Contains(failed.Error.Message, "no space left on device") ||
		!strings.HasPrefix(failed.Error.Field, "customize.layers[0].files") {
		t.Fatalf("a build that fills the disk: %+v %+v", failed, failed.Error)
	}
	t.Logf("%s: %s", failed.Error.Field, failed.Error.Message)
	if code, _ := read(t, s.do("GET", "/healthz", "-", nil)); code != http.StatusOK {
		t.Fatalf("healthz after a full disk: %d", code)
	}
	if code, _ := read(t, s.do("GET", "/v1/images/"+st.ID+"/full.tar", "-", nil)); code != http.StatusNotFound {
		t.Fatalf("GET a file of the failed build: %d", code)
	}
	ok := s.mustBuild("tars.yaml", nil)
	s.fetch(ok, "tars.tar")
}

// TestServeReplicas runs two servers with caches of their own, sharing one
// registry, as two replicas behind a Service, signing what they push and
// trusting only their key: the second serves a build the first made, with
// no phase run, and the same bytes. A server that trusts another key does
// not take it, and builds it itself.
func TestServeReplicas(t *testing.T) {
	reg := harness.StartRegistry(t)
	ref := reg.Addr + "/stamp-serve-cache"
	dir := serveDir(t)
	key, other := harness.NewSigningKey(t, dir, "replicas"), harness.NewSigningKey(t, dir, "other")
	shared := []string{"--cache-from", ref, "--cache-to", ref, "--cache-sign", key.Private, "--cache-trust", key.Public}
	a := startServe(t, dir, filepath.Join(dir, "cache-a"), shared...)
	b := startServe(t, dir, filepath.Join(dir, "cache-b"), shared...)
	params := map[string]string{"motd": "replicated\n"}
	first := a.mustBuild("tiny.yaml", params)
	if len(first.Phases) == 0 {
		t.Fatalf("the first replica ran no phase: %+v", first)
	}
	second := b.mustBuild("tiny.yaml", params)
	if second.ID != first.ID || len(second.Phases) != 0 {
		t.Fatalf("the second replica: ID %s (first %s), phases %q", second.ID, first.ID, second.Phases)
	}
	_, log := read(t, b.do("GET", "/v1/builds/"+second.ID+"/log", "-", nil))
	if !strings.Contains(string(log), "no phase runs") || !strings.Contains(string(log), "from "+ref) {
		t.Fatalf("the second replica's build did not come from the shared cache:\n%s", log)
	}
	for _, f := range first.Outputs {
		if !bytes.Equal(a.fetch(first, f.Name), b.fetch(second, f.Name)) {
			t.Errorf("%s differs between the replicas", f.Name)
		}
	}
	c := startServe(t, dir, filepath.Join(dir, "cache-c"), "--cache-from", ref, "--cache-trust", other.Public)
	if third := c.mustBuild("tiny.yaml", params); third.ID != first.ID || len(third.Phases) == 0 {
		t.Fatalf("a server trusting another key: ID %s (first %s), phases %q", third.ID, first.ID, third.Phases)
	}
}

// TestServePrune runs stamp cache prune beside the server. Idle, the server
// holds no lock, so the prune runs at once; what it keeps is served, and a
// build whose files it took is answered 410 and built again when asked.
// During a build the prune waits for it, and the build is served.
func TestServePrune(t *testing.T) {
	dir := serveDir(t)
	cache := filepath.Join(dir, "cache")
	s := startServe(t, dir, cache)
	st := s.mustBuild("tars.yaml", nil)
	prune := func(keep string) (result, time.Duration) {
		t.Helper()
		start := time.Now()
		r := stamp(t, dir, nil, "cache", "prune", "--cache-dir", cache, "--keep-for", keep)
		return r.mustSucceed(t), time.Since(start)
	}
	if _, took := prune("1h"); took > 10*time.Second {
		t.Fatalf("a prune beside an idle server took %s", took)
	}
	s.fetch(st, "tars.tar")
	prune("0")
	if code, _ := read(t, s.do("GET", "/v1/images/"+st.ID+"/tars.tar", "-", nil)); code != http.StatusGone {
		t.Fatalf("GET a pruned build's file: %d", code)
	}
	if _, now := s.status(st.ID); now.State != "pruned" {
		t.Fatalf("a pruned build: %+v", now)
	}
	again := s.mustBuild("tars.yaml", nil)
	if again.ID != st.ID {
		t.Fatal("the build asked again has another ID")
	}
	s.fetch(again, "tars.tar")

	// A prune during a build waits for it.
	code, slow, _ := s.post("slow.yaml", nil)
	if code != http.StatusAccepted {
		t.Fatalf("POST slow: %d", code)
	}
	s.waitPhase(slow.ID, "customize")
	r, _ := prune("1h")
	if !strings.Contains(r.stderr, "waiting for the builds using the cache to finish") {
		t.Fatalf("the prune did not wait for the build:\n%s", r.stderr)
	}
	if _, now := s.status(slow.ID); now.State != "done" {
		t.Fatalf("the prune ended before the build: %+v", now)
	}
	s.fetch(s.wait(slow.ID), "slow.tar")
}

// TestServeLiveOutput asks for boot.ipxe of a build with a live output, and
// follows it as iPXE does: the redirect to the script inside the output,
// and the script's kernel and initrd by names relative to where it is.
func TestServeLiveOutput(t *testing.T) {
	dir := serveDir(t)
	s := startServe(t, dir, filepath.Join(dir, "cache"))
	st := s.mustBuild("live.yaml", nil)
	resp := s.do("GET", "/v1/images/"+st.ID+"/boot.ipxe", "-", nil)
	read(t, resp)
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusTemporaryRedirect || !strings.HasSuffix(loc, "/boot.ipxe") || loc == "/v1/images/"+st.ID+"/boot.ipxe" {
		t.Fatalf("boot.ipxe: %d to %q", resp.StatusCode, loc)
	}
	script, err := url.Parse(s.url + loc)
	if err != nil {
		t.Fatal(err)
	}
	code, body := read(t, s.do("GET", script.Path, "-", nil))
	if code != http.StatusOK || !strings.HasPrefix(string(body), "#!ipxe\n") {
		t.Fatalf("the script: %d %s", code, body)
	}
	sums := map[string]string{}
	for _, f := range st.Outputs {
		sums[f.URL] = f.SHA256
	}
	fetched := 0
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || (f[0] != "kernel" && f[0] != "initrd") {
			continue
		}
		ref, err := url.Parse(f[1])
		if err != nil {
			t.Fatal(err)
		}
		u := script.ResolveReference(ref)
		code, b := read(t, s.do("GET", u.Path, "-", nil))
		if sum := sha256.Sum256(b); code != http.StatusOK || hex.EncodeToString(sum[:]) != sums[u.Path] {
			t.Fatalf("%s %s from the script: %d, sha256 %x, listed %s", f[0], u.Path, code, sum, sums[u.Path])
		}
		fetched++
	}
	if fetched != 2 {
		t.Fatalf("the script names %d files, not a kernel and an initrd:\n%s", fetched, body)
	}
	// A build without a live output has no boot.ipxe.
	tars := s.mustBuild("tars.yaml", nil)
	if code, _ := read(t, s.do("GET", "/v1/images/"+tars.ID+"/boot.ipxe", "-", nil)); code != http.StatusNotFound {
		t.Fatalf("boot.ipxe of a tar: %d", code)
	}
}

// TestServeIPXEBoot is the acceptance's real consumer: qemu's iPXE ROM is
// handed the server's boot.ipxe URL by DHCP, follows its redirect to the
// live output's script, fetches the kernel and initramfs beside it over
// HTTP, and the live system boots and checks itself from inside.
func TestServeIPXEBoot(t *testing.T) {
	t.Parallel()
	k := harness.BootParts(t)
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"recipes/base.tar":  liveBaseTar(t, k),
		"recipes/live.yaml": liveRecipe,
		"tokens":            "e2e " + serveToken + "\n",
	})
	s := startServe(t, dir, filepath.Join(dir, "cache"))
	st := s.mustBuild("live.yaml", nil)
	// qemu's user network reaches the host's 127.0.0.1 as 10.0.2.2.
	_, port, err := net.SplitHostPort(strings.TrimPrefix(s.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	bootURL := fmt.Sprintf("http://10.0.2.2:%s/v1/images/%s/boot.ipxe", port, st.ID)
	log := harness.RunQEMU(t, []string{
		"-netdev", "user,id=n,bootfile=" + bootURL,
		"-device", "virtio-net-pci,netdev=n", "-boot", "n",
	}, liveMarker, bootTimeout)
	if !strings.Contains(log, "iPXE") || !strings.Contains(log, "/boot.ipxe") {
		t.Errorf("the log shows no iPXE fetching the script")
	}
	checkLiveLog(t, log)
	// The kernel and initramfs were the server's to send, whole: nothing
	// else was downloaded.
	var bundle int64
	for _, f := range st.Outputs {
		if f.Name == "live.pxe/vmlinuz" || f.Name == "live.pxe/initrd.img" {
			bundle += f.Size
		}
	}
	if n := s.metric("stamp_serve_bytes_served_total"); bundle == 0 || n < float64(bundle) {
		t.Errorf("%v bytes served, the kernel and initramfs are %d", n, bundle)
	}
}

// TestServePerToken gives each token one build at a time: a second
// distinct build of the same token is told 429 with a Retry-After while
// its first runs, joining its own build in flight is not a second one,
// another token builds meanwhile, and once the first ends the token may
// build again.
func TestServePerToken(t *testing.T) {
	dir := serveDir(t)
	const other = "e2e-other-token-0123456789"
	writeFiles(t, dir, map[string]string{"tokens": "e2e " + serveToken + "\nother " + other + "\n"})
	s := startServe(t, dir, filepath.Join(dir, "cache"), "--max-builds-per-token", "1", "--max-builds", "2")
	code, slow, _ := s.post("slow.yaml", nil)
	if code != http.StatusAccepted {
		t.Fatalf("POST slow: %d", code)
	}
	if code, joined, _ := s.post("slow.yaml", nil); code != http.StatusAccepted || joined.ID != slow.ID {
		t.Fatalf("the same request again: %d %s", code, joined.ID)
	}
	resp := s.do("POST", "/v1/builds", serveToken, strings.NewReader(`{"recipe":"tars.yaml"}`))
	code, b := read(t, resp)
	if e := apiError(t, b); code != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(e.Message, "this token has 1 builds queued or running; at most 1") {
		t.Fatalf("a second build of the token: %d %v %s", code, resp.Header, b)
	}
	code, b = read(t, s.do("POST", "/v1/builds", other, strings.NewReader(`{"recipe":"tars.yaml"}`)))
	var st serve.Status
	if code != http.StatusAccepted || json.Unmarshal(b, &st) != nil {
		t.Fatalf("another token's build: %d %s", code, b)
	}
	if st := s.wait(st.ID); st.State != "done" {
		t.Fatalf("another token's build: %+v", st)
	}
	if st := s.wait(slow.ID); st.State != "done" {
		t.Fatalf("the slow build: %+v", st)
	}
	if st := s.mustBuild("tars.yaml", map[string]string{"motd": "after\n"}); st.State != "done" {
		t.Fatalf("the token's next build: %+v", st)
	}
}
